"""Tori as symmetric systems: every row along an axis is a copy of one ring.

:class:`TorusAxes` numbers NPUs as :mod:`tacos.model.symmetry` does (the first axis fastest) and
its links arithmetically: the link from NPU v to its ``+1`` neighbour along axis a is
``2 (a N + v)``, to its ``-1`` neighbour ``2 (a N + v) + 1``.  Every axis needs at least 3 NPUs
(with 2 the two neighbours coincide).  The template of an axis is a bidirectional ring of its
size with the same local numbering, so one all-gather on a 34-NPU ring serves the 3 x 34² rows
of a 34x34x34 torus.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from tacos.errors import TacosError
from tacos.model.symmetry import Axis, Embedding, LinkTable, SymmetricSystem
from tacos.model.topology import Link, Npu, Topology


@dataclass(frozen=True, eq=False)
class TorusAxes(SymmetricSystem):
    """A torus of ``shape`` with ``bandwidth`` (B/s) and ``alpha`` (s) on every link."""

    shape: tuple[int, ...]
    bandwidth: float = 50 * 2**30
    alpha: float = 0.5e-6
    name: str = field(default="")

    def __post_init__(self) -> None:
        if not self.shape or any(n < 3 for n in self.shape):
            raise TacosError(f"a symmetric torus needs every dimension >= 3, not {self.shape}")
        if not self.name:
            object.__setattr__(self, "name", "x".join(map(str, self.shape)) + " torus")

    @cached_property
    def axes(self) -> tuple[Axis, ...]:  # type: ignore[override]
        """``x``, ``y``, ``z`` ... of the shape."""
        return tuple(Axis("xyzuvw"[k], n) for k, n in enumerate(self.shape))

    @property
    def n_nodes(self) -> int:
        return self.n_npus

    @property
    def n_links(self) -> int:
        return 2 * len(self.shape) * self.n_npus

    def _step(self, v: np.ndarray, axis: np.ndarray, sign: np.ndarray) -> np.ndarray:
        r, s = self.radices[axis], self.strides[axis]
        c = (v // s) % r
        return v + (((c + sign) % r) - c) * s

    def link_table(self, ids: np.ndarray) -> LinkTable:
        """Ends and rates of global links, decoded from their ids alone."""
        ids = np.asarray(ids, dtype=np.int64)
        d, k = ids % 2, ids // 2
        axis, v = k // self.n_npus, k % self.n_npus
        dst = self._step(v, axis, np.where(d == 0, 1, -1))
        n = len(ids)
        return LinkTable(v, dst, np.full(n, self.alpha), np.full(n, float(self.bandwidth)),
                         np.ones(n, dtype=np.int64))

    def topology(self) -> Topology:
        """The whole torus as a :class:`Topology` (links in id order; for small systems)."""
        t = self.link_table(np.arange(self.n_links))
        npus = tuple(Npu(i, f"npu[{i}]") for i in range(self.n_npus))
        links = tuple(Link(int(s), int(d), self.alpha, float(self.bandwidth), 1,
                           int(i // 2 // self.n_npus), "xyzuvw"[i // 2 // self.n_npus])
                      for i, (s, d) in enumerate(zip(t.src.tolist(), t.dst.tolist(),
                                                     strict=True)))
        return Topology(npus, (), links, self.name)

    def resource(self, axis: int) -> str:
        """Each axis has links of its own."""
        return self.axes[axis].name

    def template(self, axis: int) -> Topology:
        """A bidirectional ring of the axis's size: link ``2j`` is j -> j+1, ``2j+1`` j -> j-1."""
        r = self.axes[axis].size
        links = []
        for j in range(r):
            links.append(Link(j, (j + 1) % r, self.alpha, float(self.bandwidth)))
            links.append(Link(j, (j - 1) % r, self.alpha, float(self.bandwidth)))
        return Topology(tuple(Npu(j, f"member[{j}]") for j in range(r)), (), tuple(links),
                        f"ring of {r}")

    def embed(self, axis: int) -> Embedding:
        """Global ids of every row along ``axis``."""
        m = self.members(axis)
        base = 2 * (axis * self.n_npus + m)
        links = np.stack([base, base + 1], axis=2).reshape(len(m), -1)
        return Embedding(m, links, self.copy_coords(axis))
