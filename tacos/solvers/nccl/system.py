"""What NCCL's topology detection sees in a tacos topology: nodes, NICs, rails, NVLS, SHARP.

NCCL (``src/graph/topo.cc``, ``paths.cc``) builds a system graph per node -- GPUs, NVLink or
NVSwitch, PCIe, NICs -- and treats everything between nodes as the network.  The NCCL-faithful
baselines need the same picture of a tacos topology:

* **nodes** (scale-up domains): the group's NPUs joined by links faster (per lane) than the
  topology's slowest class of link; when every link is of one class the whole group is one node
  (a DGX-1 or an MI250 box on its own).  NVLink/xGMI/NVSwitch are inside a node, NICs and the
  scale-out fabric between nodes.
* **NICs** of a node: its members with a one-hop route (a link, or a path through switches) to
  a member of another node.  Several NICs per node whose k-th members meet on the same scale-out
  switch are **rails** (DGX-A100/H100: NIC g of every node on leaf ``rail[g]``).
* **NVLS**: a switch inside a node that declares ``multicast`` (and ``reduce`` for reductions)
  and that every member of the node is attached to -- the NVSwitch of an H100 node.
* **SHARP / CollNet**: a scale-out switch that declares ``reduce``, reached by NICs of every
  node.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

from tacos.model.topology import Topology
from tacos.solvers.lowering.hops import NpuGraph


@dataclass
class System:
    """The NCCL view of ``topology`` for the process group ``group`` (see module doc)."""

    topology: Topology
    group: tuple[int, ...]
    graph: NpuGraph = field(repr=False)
    nodes: tuple[tuple[int, ...], ...]

    @cached_property
    def node_of(self) -> dict[int, int]:
        """NPU -> index of its node."""
        return {v: i for i, node in enumerate(self.nodes) for v in node}

    @property
    def multi_node(self) -> bool:
        """More than one node."""
        return len(self.nodes) > 1

    @property
    def one_per_node(self) -> bool:
        """Every node holds one member (where NCCL enables PAT)."""
        return self.multi_node and all(len(n) == 1 for n in self.nodes)

    @cached_property
    def slow(self) -> float:
        """Per-lane bandwidth of the scale-out class (links between nodes); 0 on one node."""
        if not self.multi_node:
            return 0.0
        return min(lk.bandwidth for lk in self.topology.links)

    def intra_hop(self, hop) -> bool:
        """True when a hop stays inside a node (none of its links is of the scale-out class):
        NVLink, xGMI or NVSwitch, never a detour through the network."""
        links = self.topology.links
        return all(links[li].bandwidth > self.slow for li in hop.links)

    @cached_property
    def nics(self) -> tuple[tuple[int, ...], ...]:
        """Per node, its members with a one-hop route to another node (sorted)."""
        out = []
        for node in self.nodes:
            here = set(node)
            out.append(tuple(v for v in node
                             if any(w not in here and w in self.node_of
                                    for w in self.graph.hops(v))))
        return tuple(out)

    @cached_property
    def rails(self) -> int:
        """Rails: the NIC count every node has (0 on a single node)."""
        if not self.multi_node:
            return 0
        return min(len(n) for n in self.nics)

    def route_switches(self, u: int, v: int) -> set[int]:
        """Switches on the one-hop routes ``u -> v`` (empty when there is none)."""
        links = self.topology.links
        return {links[li].dst for h in self.graph.hops(u).get(v, ()) for li in h.links[:-1]}

    def nvls_switch(self, node: int, *, reduce: bool) -> int | None:
        """A switch every member of ``node`` is attached to (one link each way) that declares
        ``multicast`` (and ``reduce`` when asked), or None."""
        need = {"multicast", "reduce"} if reduce else {"multicast"}
        return capable_switch(self.topology, self.nodes[node], need)


def capable_switch(topology: Topology, members: Sequence[int], need: set[str]) -> int | None:
    """A switch every one of ``members`` is attached to (one link each way) that declares every
    capability of ``need``, or None."""
    topo = topology
    for sw in topo.switches:
        if not need <= sw.capabilities:
            continue
        ups = {topo.links[i].src for i in topo.in_links[sw.id]}
        downs = {topo.links[i].dst for i in topo.out_links[sw.id]}
        if all(v in ups and v in downs for v in members):
            return sw.id
    return None


def find_nodes(topology: Topology, group: Sequence[int]) -> tuple[tuple[int, ...], ...]:
    """The group's nodes (:meth:`tacos.model.topology.Topology.scale_up_nodes`)."""
    return topology.scale_up_nodes(group)


class NcclGraph(NpuGraph):
    """:class:`~tacos.solvers.lowering.hops.NpuGraph` that keeps NCCL's traffic classes apart:
    two GPUs of one node talk over the node's own links (NVLink, xGMI, NVSwitch), never through
    the network, even where a scale-out switch joins them too (one IB switch for every GCD of an
    MI250 pair of boxes); relay chains between them stay inside the node."""

    def __init__(self, topology: Topology, members=None) -> None:
        super().__init__(topology, members)
        self.node_of: dict[int, int] = {}
        self.slow = 0.0
        self._inside: dict[int, dict[int, int]] = {}
        self._kept: dict[int, dict] = {}

    def hops(self, u: int) -> dict:
        """Candidate routes of one hop from ``u``; to a GPU of its own node only routes that
        stay inside the node."""
        got = self._kept.get(u)
        if got is None:
            base = super().hops(u)
            node = self.node_of.get(u)
            if node is None or not self.slow:
                got = base
            else:
                links = self.topology.links
                got = {}
                for v, routes in base.items():
                    if self.node_of.get(v) == node:
                        routes = tuple(r for r in routes
                                       if all(links[li].bandwidth > self.slow for li in r.links))
                    if routes:
                        got[v] = routes
            self._kept[u] = got
        return got

    def route(self, u: int, v: int) -> list[int] | None:
        """Fewest-hop route ``u .. v``; inside the node when both are in one."""
        node = self.node_of.get(u)
        if u == v or v in self.hops(u) or node is None or node != self.node_of.get(v):
            return super().route(u, v)
        parent = self._inside.get(u)
        if parent is None:
            parent = self._inside[u] = self._node_parents(u, node)
        if v not in parent:
            return super().route(u, v)
        path = [v]
        while path[-1] != u:
            path.append(parent[path[-1]])
        return path[::-1]

    def _node_parents(self, u: int, node: int) -> dict[int, int]:
        parent: dict[int, int] = {}
        seen = {u}
        layer = [u]
        while layer:
            nxt = []
            for x in layer:
                for y in sorted(self.hops(x)):
                    if y in seen or self.node_of.get(y) != node:
                        continue
                    seen.add(y)
                    parent[y] = x
                    nxt.append(y)
            layer = nxt
        return parent


def system(topology: Topology, group: Sequence[int]) -> System:
    """The :class:`System` of ``group`` on ``topology`` (relays through group members only,
    as every tacos plan of a process group)."""
    graph = NcclGraph(topology, group)
    out = System(topology, tuple(group), graph, find_nodes(topology, group))
    if out.multi_node:
        graph.node_of = out.node_of
        graph.slow = out.slow
    return out
