"""A multi-rail Clos seen as its nodes and its rails: the axes of plans that reduce in the rails.

:class:`~tacos.model.clos.ClosFabric` splits the node index into prime digits, one small
template per digit, because without in-network reduction every rail all-reduce is a sequence
of reduce-scatters and all-gathers over small groups.  With SHARP the rail switches combine a
whole rail's contributions in one tree (one transfer up and one down per NIC), so the group of
the rail axis is the **whole rail**: :class:`RailAxes` has two axes,

* ``gpu`` (size ``gpus``): a node's GPUs on its NVSwitch (the fabric's tier-0 template; the
  NVSwitch declares NVLS when the fabric is ``sharp``);
* ``rail`` (size ``nodes``): GPU g of every node, its NICs and the rail's leaf, tier-2 and core
  switches: ``gpus`` copies, one per rail, each a fat-tree of its own (the rails share no link).

NPU ids, link ids and the link table are the fabric's (GPU g of node n is ``8n + g``: the
``gpu`` coordinate g, the ``rail`` coordinate n).  The rail template numbers the rail's GPUs
``0..nodes-1`` in node order, then its leaves, tier-2 switches and cores in the fabric's id
order; its links are the NIC links (GPU by GPU, up then down), then the leaf to tier-2 links,
then the tier-2 to core links, each pair up then down.  Template switches declare what the
fabric's switches declare.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from tacos.errors import TacosError
from tacos.model.clos import IN_NETWORK, ClosFabric
from tacos.model.symmetry import Axis, Embedding, LinkTable, SymmetricSystem
from tacos.model.topology import Link, Npu, Switch, Topology


@dataclass(frozen=True, eq=False)
class RailAxes(SymmetricSystem):
    """``fabric`` with the axes ``gpu`` and ``rail`` (see the module docstring)."""

    fabric: ClosFabric

    def __post_init__(self) -> None:
        if not isinstance(self.fabric, ClosFabric):
            raise TacosError("RailAxes needs a ClosFabric")

    @property
    def name(self) -> str:  # type: ignore[override]
        return self.fabric.name

    @cached_property
    def axes(self) -> tuple[Axis, ...]:  # type: ignore[override]
        """``gpu`` (a node's GPUs), ``rail`` (every node's GPU of one rail)."""
        return (Axis("gpu", self.fabric.gpus), Axis("rail", self.fabric.nodes))

    @property
    def sharp(self) -> bool:
        """True when every switch reduces and multicasts (the fabric's ``sharp``)."""
        return self.fabric.sharp

    @property
    def n_nodes(self) -> int:
        return self.fabric.n_nodes

    @property
    def n_links(self) -> int:
        return self.fabric.n_links

    def link_table(self, ids: np.ndarray) -> LinkTable:
        """The fabric's links."""
        return self.fabric.link_table(ids)

    def topology(self) -> Topology:
        """The fabric's topology (capabilities included)."""
        return self.fabric.topology()

    def resource(self, axis: int) -> str:
        """``nvlink`` for ``gpu``, ``fabric`` for ``rail``."""
        return "nvlink" if axis == 0 else "fabric"

    def _caps(self) -> frozenset[str]:
        return frozenset(IN_NETWORK) if self.fabric.sharp else frozenset()

    def template(self, axis: int) -> Topology:
        """The group of ``axis`` (cached: the rail template of 5,000 nodes is not small)."""
        return self._templates[int(axis)]

    @cached_property
    def _templates(self) -> tuple[Topology, Topology]:
        base = self.fabric.template(0)
        caps = self._caps()
        node = replace(base, switches=tuple(replace(s, capabilities=caps)
                                            for s in base.switches))
        return node, self._rail_template()

    def _rail_template(self) -> Topology:
        emb = self.embed(1)
        nodes, links = emb.nodes[0], emb.links[0]
        local = {int(g): k for k, g in enumerate(nodes.tolist())}
        t = self.fabric.link_table(links)
        r = self.fabric.nodes
        npus = tuple(Npu(j, f"member[{j}]") for j in range(r))
        caps = self._caps()
        switches = tuple(Switch(r + k, f"switch[{k}]", capabilities=caps)
                         for k in range(len(nodes) - r))
        kept = tuple(Link(local[int(s)], local[int(d)], float(a), float(b))
                     for s, d, a, b in zip(t.src.tolist(), t.dst.tolist(), t.alpha.tolist(),
                                           t.bandwidth.tolist(), strict=True))
        return Topology(npus, switches, kept, f"rail of {r}")

    def embed(self, axis: int) -> Embedding:
        """Global ids of every copy of ``axis``'s template: the fabric's node groups for
        ``gpu``; one copy per rail for ``rail``."""
        f = self.fabric
        if int(axis) == 0:
            e = f.embed(0)
            return Embedding(e.nodes, e.links, self.copy_coords(0))
        g = np.arange(f.gpus, dtype=np.int64)[:, None]
        members = self.members(1)                                   # rails x nodes
        lg = np.arange(f.n_leaves, dtype=np.int64)[None, :]
        leaves = f._leaf(g, lg)
        pod = np.arange(f.pods, dtype=np.int64)
        pos = np.arange(f.hosts_per_leaf, dtype=np.int64)
        pp, ss = np.meshgrid(pod, pos, indexing="ij")
        tops = f._top(g[:, :, None], pp.ravel()[None, :], ss.ravel()[None, :]).reshape(
            f.gpus, -1)
        cols_nodes = [members, leaves, tops]
        lk = np.arange(f.n_leaves, dtype=np.int64)
        ll, ss2 = np.meshgrid(lk, pos, indexing="ij")
        up = f._up_link(g, ll.ravel()[None, :], ss2.ravel()[None, :])
        nic = 2 * f.nodes * f.gpus + 2 * members
        cols_links = [nic, up]
        if f.tiers == 3:
            lip = np.arange(f.leaves_per_pod, dtype=np.int64)
            a, c = np.meshgrid(pos, lip, indexing="ij")
            cols_nodes.append(f._core(g, a.ravel()[None, :], c.ravel()[None, :]))
            q, a2, c2 = np.meshgrid(pod, pos, lip, indexing="ij")
            cols_links.append(f._core_link(g, q.ravel()[None, :], a2.ravel()[None, :],
                                           c2.ravel()[None, :]))
        nodes = np.concatenate(cols_nodes, axis=1)
        links = np.concatenate([np.stack([x, x + 1], axis=2).reshape(f.gpus, -1)
                                for x in cols_links], axis=1)
        return Embedding(nodes, links, self.copy_coords(1))
