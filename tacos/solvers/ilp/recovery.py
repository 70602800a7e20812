"""Recovery: complete a partial schedule with shortest-path deliveries (seed §V-B).

Given transfers that already run (e.g. an ILP incumbent stopped by its time limit), every
(chunk, destination) pair still missing is served along an α-β shortest path from the chunk's
nearest holder (a multi-source Dijkstra from every node holding it at the end).  The
new hops are list-scheduled: a hop starts once its chunk is at the sender and a lane of the link
is free, and no lane is reused before every existing transfer on it has ended, so the result is
causal and congestion-free by construction.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence

import networkx as nx

from tacos.model.collective import Collective
from tacos.model.schedule import Transfer
from tacos.model.topology import Topology

_SRC = "source"


def _arrivals(collective: Collective, transfers: Iterable[Transfer]) -> list[dict[int, float]]:
    """Per chunk, the earliest time each node holds it under ``transfers``."""
    have: list[dict[int, float]] = [dict.fromkeys(ch.pre, 0.0) for ch in collective.chunks]
    for tr in transfers:
        for c in tr.chunks:
            have[c][tr.dst] = min(have[c].get(tr.dst, float("inf")), tr.end)
    return have


def _weighted(topology: Topology, size: int) -> nx.DiGraph:
    """The topology with edge weight = α-β time of ``size`` bytes (fastest parallel link)."""
    g = nx.DiGraph()
    g.add_nodes_from(range(topology.n_nodes))
    for lk in topology.links:
        w = lk.time(size)
        if not g.has_edge(lk.src, lk.dst) or g.edges[lk.src, lk.dst]["weight"] > w:
            g.add_edge(lk.src, lk.dst, weight=w)
    return g


def _tree(g: nx.DiGraph, holders: dict[int, float],
          targets: Sequence[int]) -> list[tuple[int, int]]:
    """Tree edges ``(u, v)`` of shortest paths in ``g`` from the holders to ``targets``.

    Every holder counts as a source (seed §V-B: paths start from the last TEN layer), so a
    missing pair is served from its nearest holder, not from the one that got the chunk first.
    """
    g.add_weighted_edges_from((_SRC, v, 0.0) for v in holders)
    try:
        _dist, paths = nx.single_source_dijkstra(g, _SRC, weight="weight")
    finally:
        g.remove_node(_SRC)
    edges: list[tuple[int, int]] = []
    seen: set[tuple[int, int]] = set()
    for d in targets:
        path = paths.get(d)
        if path is None:
            continue
        for u, v in zip(path[1:], path[2:], strict=False):
            if (u, v) not in seen:
                seen.add((u, v))
                edges.append((u, v))
    return edges


def missing_pairs(collective: Collective, transfers: Iterable[Transfer]) -> list[tuple[int, int]]:
    """(chunk, NPU) postcondition pairs that ``transfers`` leave unserved."""
    have = _arrivals(collective, transfers)
    return [(ch.id, d) for ch in collective.chunks for d in sorted(ch.post)
            if d not in have[ch.id]]


def complete_schedule(topology: Topology, collective: Collective,
                      transfers: Sequence[Transfer] = ()) -> list[Transfer]:
    """``transfers`` plus shortest-path deliveries of every missing postcondition pair.

    Raises ``ValueError`` when a missing pair has no path from any holder (callers check
    reachability first and report infeasibility).
    """
    have = _arrivals(collective, transfers)
    lanes: dict[int, list[float]] = {}
    for tr in transfers:  # appended hops start after every existing transfer on the link
        free = lanes.setdefault(tr.link, [0.0] * topology.links[tr.link].multiplicity)
        free[:] = [max(max(free), tr.end)] * len(free)
    by_pair: dict[tuple[int, int], list[int]] = {}
    for li, lk in enumerate(topology.links):
        by_pair.setdefault((lk.src, lk.dst), []).append(li)
    children: dict[tuple[int, int], list[int]] = {}  # (chunk, node) -> next hops' nodes
    pending: list[tuple[float, int, int, int]] = []   # (ready time, chunk, u, v)
    graphs: dict[int, nx.DiGraph] = {}
    for ch in collective.chunks:
        holders = have[ch.id]
        targets = [d for d in sorted(ch.post) if d not in holders]
        if not targets:
            continue
        if ch.size not in graphs:
            graphs[ch.size] = _weighted(topology, ch.size)
        edges = _tree(graphs[ch.size], holders, targets)
        reached = {v for _u, v in edges} | set(holders)
        lost = [d for d in targets if d not in reached]
        if lost:
            raise ValueError(f"chunk {ch.id} cannot reach NPU {lost[0]} from any holder")
        for u, v in edges:
            children.setdefault((ch.id, u), []).append(v)
        for u in holders:
            for v in children.get((ch.id, u), ()):
                heapq.heappush(pending, (holders[u], ch.id, u, v))
    out = list(transfers)
    sizes = {ch.id: ch.size for ch in collective.chunks}
    while pending:
        ready, c, u, v = heapq.heappop(pending)
        best: tuple[float, float, int, int] = (float("inf"), 0.0, -1, 0)
        for li in by_pair[(u, v)]:
            lk = topology.links[li]
            free = lanes.setdefault(li, [0.0] * lk.multiplicity)
            lane = min(range(len(free)), key=free.__getitem__)
            start = max(ready, free[lane])
            end = start + lk.time(sizes[c])
            if end < best[0]:
                best = (end, start, li, lane)
        end, start, li, lane = best
        if start > ready:  # link busy: retry when it frees, so earlier-ready hops go first
            heapq.heappush(pending, (start, c, u, v))
            continue
        lanes[li][lane] = end
        out.append(Transfer(start, end, u, v, (li,), (c,)))
        for w in children.get((c, v), ()):
            heapq.heappush(pending, (end, c, v, w))
    return out
