"""Where a process group sits: nodes, and the bandwidths AxoNN's model asks for.

AxoNN (seed 003, §V-B) describes a machine by three numbers: ``G_node`` GPUs per node,
``β_intra`` between two GPUs of a node and ``β_inter`` between two nodes.  :func:`nodes` finds
the nodes of a topology (the NPUs joined by its fastest class of hops; a single class makes
one node of everything) and :func:`machine` reads the three numbers off the physical links:

* ``β_intra``: the bandwidth of one intra-node hop (e.g. an NVSwitch port, 300 GB/s on a
  DGX-A100);
* ``β_inter``: what one node can send to the rest, all its off-node links together (8 NICs x
  25 GB/s = 200 GB/s on a DGX-A100), which is what the paper's "peer-to-peer bandwidth between
  two nodes" means when a node has several NICs.

The tacos models do not use these numbers: they route every send on the physical links and
count who shares what (:mod:`tacos.cost.steps`).  They exist so that AxoNN's equation 10 can be
evaluated on a tacos topology and set next to the placement-aware models.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import networkx as nx

from tacos.solvers.lowering.hops import NpuGraph


@dataclass(frozen=True)
class Machine:
    """AxoNN's view of a machine: nodes and the intra/inter-node bandwidths (B/s)."""

    nodes: tuple[tuple[int, ...], ...]
    beta_intra: float
    beta_inter: float

    @property
    def g_node(self) -> int:
        """GPUs per node (the largest node)."""
        return max(len(n) for n in self.nodes)

    def node_of(self) -> dict[int, int]:
        """NPU -> index of its node."""
        return {v: i for i, node in enumerate(self.nodes) for v in node}


def _hop_bandwidth(graph: NpuGraph, u: int, v: int) -> float:
    """What ``u`` can send to ``v`` over one route (all lanes of the best candidate)."""
    return max(r.bandwidth * r.lanes for r in graph.topology.routing.routes(u, v))


def nodes(graph: NpuGraph, members: Sequence[int] | None = None) -> tuple[tuple[int, ...], ...]:
    """The nodes among ``members`` (default: every live NPU), sorted by smallest NPU id.

    Two NPUs are in one node when a chain of hops of the fastest bandwidth class joins them
    (a class is every hop faster than the slowest hop); with a single class every member is in
    one node.
    """
    topo = graph.topology
    mem = sorted(topo.live_npus if members is None else members)
    inside = set(mem)
    routing = topo.routing
    bws = {(u, v): _hop_bandwidth(graph, u, v) for u in mem for v in routing.neighbours(u)
           if v in inside}
    slowest = min(bws.values(), default=0.0)
    g = nx.Graph()
    g.add_nodes_from(mem)
    fast = [e for e, bw in bws.items() if bw > slowest * (1 + 1e-9)]
    if not fast:
        return (tuple(mem),)
    g.add_edges_from(fast)
    return tuple(sorted((tuple(sorted(c)) for c in nx.connected_components(g)), key=min))


def machine(graph: NpuGraph, members: Sequence[int] | None = None) -> Machine:
    """Nodes, ``β_intra`` and ``β_inter`` of the topology under ``graph`` (see module doc)."""
    parts = nodes(graph, members)
    where = {v: i for i, node in enumerate(parts) for v in node}
    topo = graph.topology
    routing = topo.routing
    intra = [_hop_bandwidth(graph, u, v) for node in parts for u in node
             for v in routing.neighbours(u) if where.get(v) == where[u]]
    beta_intra = max(intra, default=0.0)
    inter = 0.0
    for node in parts:
        out = 0.0
        for u in node:
            # every physical link leaving u that does not lead straight to a node-mate
            for li in topo.out_links[u]:
                lk = topo.links[li]
                if lk.dst in where and where[lk.dst] == where[u]:
                    continue
                if topo.is_switch(lk.dst) and all(
                        where.get(v) == where[u] for v, rs in routing.from_npu(u).items()
                        for r in rs if r.links[0] == li):
                    continue
                out += lk.total_bandwidth
        inter = max(inter, out)
    if len(parts) == 1:
        inter = beta_intra
    if not beta_intra > 0 or not inter > 0:
        from tacos.errors import TacosError

        raise TacosError(f"{topo.name or 'the topology'}: its NPUs are not linked to each "
                         "other, so there is no bandwidth to model",
                         hint="add links (or a switch) between the NPUs")
    return Machine(parts, beta_intra, inter)
