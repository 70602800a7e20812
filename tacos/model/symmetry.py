"""Systems made of isomorphic groups: NPUs on a grid of axes, one small template per axis.

A :class:`SymmetricSystem` numbers its NPUs by coordinates on a tuple of :class:`Axis` (mixed
radix, the first axis fastest).  Along an axis, the NPUs that share every other coordinate form
a *group*; all groups of an axis are copies of one small **template** topology (a DGX node's 8
GPUs on their NVSwitch, GPU g of 32 nodes on their rail's leaf switch, a row of a torus), whose
NPUs ``0..r-1`` are the group's members in coordinate order.  :meth:`SymmetricSystem.embed`
returns, for every copy, the global ids of the template's nodes and links, as arrays; a plan
made on the template runs on every copy at once (:mod:`tacos.model.symmetric_plan`).

Link ids are arithmetic (``link_table`` computes any link's ends and rates without building the
topology), so plans and checks on 40,000 NPUs never hold a per-NPU object;
:meth:`SymmetricSystem.topology` builds the same links as a :class:`Topology` for small systems
(tests compare the two).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from math import prod

import numpy as np

from tacos.model.topology import Topology


@dataclass(frozen=True)
class Axis:
    """One coordinate of a symmetric system: its name and size (radix)."""

    name: str
    size: int


@dataclass(frozen=True)
class Embedding:
    """Where every copy of an axis's template lives: ``nodes[c, k]`` is the global id of
    template node k (NPUs then switches, template numbering) in copy c, ``links[c, j]`` the
    global link id of template link j.  ``coords[c]`` are the copy's coordinates on every axis
    (the axis's own coordinate is 0)."""

    nodes: np.ndarray
    links: np.ndarray
    coords: np.ndarray


@dataclass(frozen=True)
class LinkTable:
    """Ends and rates of some global links (one row per asked id), as arrays."""

    src: np.ndarray
    dst: np.ndarray
    alpha: np.ndarray
    bandwidth: np.ndarray
    multiplicity: np.ndarray


class SymmetricSystem:
    """Base of the systems with isomorphic groups (:class:`tacos.model.clos.ClosFabric`,
    :class:`tacos.model.torus_axes.TorusAxes`).

    Subclasses define ``axes``, ``n_nodes``, ``n_links``, :meth:`template`, :meth:`embed`,
    :meth:`link_table`, :meth:`resource` and :meth:`topology`.
    """

    axes: tuple[Axis, ...] = ()
    name: str = ""

    # -- coordinates --------------------------------------------------------------------------
    @property
    def n_npus(self) -> int:
        """Number of NPUs: the product of the axis sizes."""
        return prod(a.size for a in self.axes)

    @property
    def radices(self) -> np.ndarray:
        """Axis sizes as an array."""
        return np.array([a.size for a in self.axes], dtype=np.int64)

    @property
    def strides(self) -> np.ndarray:
        """NPU id stride of each axis (the first axis fastest)."""
        r = self.radices
        return np.concatenate(([1], np.cumprod(r[:-1]))).astype(np.int64)

    def npu_of(self, coords: np.ndarray) -> np.ndarray:
        """Global NPU ids of coordinate rows (shape ``(..., n_axes)``)."""
        return (np.asarray(coords, dtype=np.int64) * self.strides).sum(axis=-1)

    def coords_of(self, npus: np.ndarray) -> np.ndarray:
        """Coordinates (shape ``(len, n_axes)``) of global NPU ids."""
        v = np.asarray(npus, dtype=np.int64)[:, None]
        return (v // self.strides) % self.radices

    def axis_index(self, axis: int | str) -> int:
        """The index of an axis given by index or name."""
        if isinstance(axis, str):
            for k, a in enumerate(self.axes):
                if a.name == axis:
                    return k
            raise KeyError(f"no axis {axis!r}")
        return int(axis)

    def copy_coords(self, axis: int) -> np.ndarray:
        """Coordinates of every copy of ``axis``'s group (the axis's own coordinate 0), in
        NPU-id order of their first member."""
        base = np.arange(self.n_npus, dtype=np.int64)
        coords = self.coords_of(base)
        return coords[coords[:, axis] == 0]

    def members(self, axis: int) -> np.ndarray:
        """``members[c, j]``: global NPU id of member j of copy c of ``axis``'s groups."""
        first = self.npu_of(self.copy_coords(axis))
        return first[:, None] + np.arange(self.axes[axis].size, dtype=np.int64) * \
            int(self.strides[axis])

    # -- to be defined by subclasses ----------------------------------------------------------
    @property
    def n_nodes(self) -> int:  # pragma: no cover - abstract
        """NPUs plus switches."""
        raise NotImplementedError

    @property
    def n_links(self) -> int:  # pragma: no cover - abstract
        """Directed links of the whole system."""
        raise NotImplementedError

    def template(self, axis: int) -> Topology:  # pragma: no cover - abstract
        """The small topology every group of ``axis`` is a copy of (members are NPUs
        ``0..r-1``)."""
        raise NotImplementedError

    def embed(self, axis: int) -> Embedding:  # pragma: no cover - abstract
        """Global node and link ids of every copy of ``axis``'s template."""
        raise NotImplementedError

    def link_table(self, ids: np.ndarray) -> LinkTable:  # pragma: no cover - abstract
        """Ends and rates of the global links ``ids``, computed from the system's definition."""
        raise NotImplementedError

    def resource(self, axis: int) -> str:  # pragma: no cover - abstract
        """A name for the class of links ``axis``'s groups use (axes with the same name
        share links; a scheduler runs their phases one at a time)."""
        raise NotImplementedError

    def topology(self) -> Topology:  # pragma: no cover - abstract
        """The whole system as a :class:`Topology`, links in global id order."""
        raise NotImplementedError


def subtopology(topology: Topology, nodes: Sequence[int], links: Sequence[int]) -> Topology:
    """The part of ``topology`` made of ``nodes`` (NPUs first, renumbered 0..) and ``links``:
    one copy of a group cut out of the whole system (the reference the tests compare the
    templates with)."""
    local = {g: k for k, g in enumerate(nodes)}
    n_npus = sum(1 for g in nodes if not topology.is_switch(g))
    npus = tuple(replace(topology.npus[g], id=local[g]) for g in nodes[:n_npus])
    switches = tuple(replace(topology.switches[g - topology.n_npus], id=local[g])
                     for g in nodes[n_npus:])
    kept = tuple(replace(topology.links[i], src=local[topology.links[i].src],
                         dst=local[topology.links[i].dst]) for i in links)
    return Topology(npus, switches, kept, topology.name)
