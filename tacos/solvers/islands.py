"""Islands: groups of NPUs behind a scarce cut, found from the physical topology alone.

A node's GPUs behind their NICs, the hosts of an oversubscribed leaf behind its uplinks, the two
GCDs of an MI250 package behind their few xGMI links to the rest: inside such a group
bandwidth is plentiful, across its boundary it is scarce.  A collective that fetches the same
chunk over the boundary once per member wastes exactly the bandwidth that bounds it; the greedy
(:mod:`tacos.solvers.greedy.core`) uses the islands found here to let a chunk cross into an
island only while no member holds it or has it on the way, and spreads it inside from there.

How islands are found (no tags, names or presets are read):

1. **Candidates.**  (a) Bandwidth tiers: for every pair of NPUs, the capacity of the best way
   between them (all direct links together, or the best route through switches times its
   lanes); for every capacity level, the groups of NPUs joined by pairs at least that fast
   (single-linkage clustering: a node's NVSwitch or its xGMI links give one level, the NICs a
   lower one).  (b) Switch tiers: the NPUs attached to one switch (a leaf's hosts), which
   per-pair capacities cannot see when uplinks are as fast as host links but fewer.
2. **Scarcity.**  For a candidate ``S`` of ``N`` NPUs taking part, the all-gather cut bound
   of ``S`` -- the ``N - |S|`` shards from outside over ``cut(S)``, the max-flow from the other
   NPUs into ``S`` (switches on either side, :func:`networkx.maximum_flow_value`) -- is
   compared with the bound of its worst member alone (``N - 1`` shards over its own
   ingress).  ``S`` is an island when the ratio ``tightness(S)`` is at least
   :data:`MIN_TIGHTNESS`: its boundary binds at least half as hard as a member's own ports,
   so wasting it costs time.  Uniform grids and tori give no candidate at all (every pair and
   every switch is alike), so their schedules do not change.
3. **Cohesion.**  Entering once must not move the bottleneck inside: every part ``P`` of ``S``
   (each member, and each smaller candidate inside ``S``) still has to get from the rest of
   ``S`` the shards of ``S \\ P`` and the outside shards that entered elsewhere (the share of
   ``cut(S)`` that ``P``'s own links to the outside do not provide); over the max-flow from
   ``S \\ P`` into ``P`` inside ``S`` (through ``S``'s members and its *inner switches*,
   those whose every attached NPU is in ``S``) that must take at most :data:`COHESION_SLACK` times
   the topology's cut bound (the largest bound of any candidate or single NPU).  This keeps a
   pair of GCDs joined by four xGMI links and drops the quad of two such pairs joined by
   three, whose inner links would then bind.
4. **Nesting.**  Islands form a laminar family (two islands are disjoint or nested): the
   tightest candidates are taken first and a candidate that straddles a kept one is dropped.

The result lists each island as a sorted tuple of NPU ids, innermost (smallest) first.
Traffic between two members of an island stays inside it: a route between them through a
switch that is not inner to the island (an intra-node transfer over two NICs and the scale-out
switch) spends the scarce cut twice, so the greedy does not use it (:func:`inner_route`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import networkx as nx
from networkx.algorithms.flow import dinitz

from tacos.model.topology import Topology

MIN_TIGHTNESS = 0.5
"""An island's cut bound must be at least this fraction of its worst member's own bound."""

COHESION_SLACK = 1.05
"""Spreading inside an island may take at most this times the topology's cut bound."""

MAX_PAIR_NPUS = 1024
"""Above this many NPUs the all-pairs capacity tiers are skipped (switch tiers still count)."""


def pair_capacities(topology: Topology, npus: Sequence[int]) -> dict[tuple[int, int], float]:
    """Capacity (B/s) of the best way from ``u`` to ``v`` for every ordered pair of ``npus``
    one route apart: all direct links together, or the best switch route × its lanes."""
    allowed = set(npus)
    out: dict[tuple[int, int], float] = {}
    routing = topology.routing
    links = topology.links
    for u in npus:
        for v, routes in routing.from_npu(u).items():
            if v not in allowed:
                continue
            direct = sum(links[r.links[0]].total_bandwidth for r in routes if not r.switched)
            switched = max((r.bandwidth * r.lanes for r in routes if r.switched), default=0.0)
            out[(u, v)] = max(direct, switched)
    return out


def _tier_candidates(npus: Sequence[int], cap: dict[tuple[int, int], float]
                     ) -> list[frozenset[int]]:
    """Groups joined by two-way capacity >= each level (single linkage, nested)."""
    both: dict[tuple[int, int], float] = {}
    for (u, v), c in cap.items():
        if u < v and (v, u) in cap:
            both[(u, v)] = min(c, cap[(v, u)])
    out: list[frozenset[int]] = []
    g = nx.Graph()
    g.add_nodes_from(npus)
    for level in sorted(set(both.values()), reverse=True):
        g.add_edges_from(e for e, c in both.items() if c >= level)
        out.extend(frozenset(c) for c in nx.connected_components(g))
    return out


def attached(topology: Topology, switch: int) -> set[int]:
    """NPUs with a link to or from ``switch``."""
    out = {topology.links[i].src for i in topology.in_links[switch]}
    out |= {topology.links[i].dst for i in topology.out_links[switch]}
    return {v for v in out if not topology.is_switch(v)}


def inner_switches(topology: Topology, members: Iterable[int],
                   npus: Iterable[int] | None = None) -> frozenset[int]:
    """Switches whose attached NPUs (among ``npus``, default all) are all in ``members``."""
    inside = set(members)
    keep = None if npus is None else set(npus)
    out = set()
    for s in topology.switches:
        att = attached(topology, s.id)
        if keep is not None:
            att &= keep
        if att and att <= inside:
            out.add(s.id)
    return frozenset(out)


def inner_route(topology: Topology, route_links: Sequence[int], islands: Sequence[set[int]],
                inner: Sequence[frozenset[int]], u: int, v: int) -> bool:
    """Whether a route ``u -> v`` stays inside the smallest island holding both ends (True
    when no island holds both)."""
    for members, sws in zip(islands, inner, strict=True):
        if u in members and v in members:
            return all(topology.links[li].dst in sws for li in route_links[:-1])
    return True


def _switch_candidates(topology: Topology, npus: Sequence[int]) -> list[frozenset[int]]:
    allowed = set(npus)
    return [frozenset(attached(topology, s.id) & allowed) for s in topology.switches]


def _flow_graph(topology: Topology, npus: Sequence[int]) -> nx.DiGraph:
    """Capacities of the physical links among switches and the given NPUs."""
    keep = set(npus)
    g = nx.DiGraph()
    for lk in topology.links:
        if (topology.is_switch(lk.src) or lk.src in keep) and \
                (topology.is_switch(lk.dst) or lk.dst in keep):
            if g.has_edge(lk.src, lk.dst):
                g.edges[lk.src, lk.dst]["capacity"] += lk.total_bandwidth
            else:
                g.add_edge(lk.src, lk.dst, capacity=lk.total_bandwidth)
    return g


def cut_into(g: nx.DiGraph, inside: Iterable[int], outside: Iterable[int],
             drop: Iterable[int] = ()) -> float:
    """Max-flow (B/s) from the NPUs ``outside`` into the NPUs ``inside`` over ``g`` without
    the nodes ``drop``.  Where every capacity is a whole number of B/s (as the presets' and
    TDL's rates are), OR-Tools' integer max-flow answers, exactly as networkx would."""
    arcs = _integer_arcs(g)
    if arcs is not None:
        return _ortools_cut(arcs, set(inside), set(outside), set(drop))
    h = g.copy()
    h.remove_nodes_from(drop)
    src, dst = "_outside", "_inside"
    for v in outside:
        h.add_edge(src, v)  # no capacity attribute: unbounded
    for v in inside:
        h.add_edge(v, dst)
    return float(nx.maximum_flow_value(h, src, dst, flow_func=dinitz))


def _integer_arcs(g: nx.DiGraph) -> tuple[list[int], list[int], list[int], int] | None:
    """``(tails, heads, capacities, total)`` of ``g`` when OR-Tools loads and every capacity
    is a whole number below 2^53 (then both max-flows are exact and equal), else None;
    computed once per graph."""
    got = g.graph.get("_integer_arcs", False)
    if got is not False:
        return got
    from tacos.check.bounds import _has_ortools

    got = None
    caps = [c for _, _, c in g.edges(data="capacity")]
    if _has_ortools() and all(float(c).is_integer() for c in caps) \
            and sum(caps) < 2**53:
        tails = [u for u, _ in g.edges()]
        heads = [v for _, v in g.edges()]
        got = (tails, heads, [int(c) for c in caps], int(sum(caps)))
    g.graph["_integer_arcs"] = got
    return got


def _ortools_cut(arcs: tuple[list[int], list[int], list[int], int], inside: set[int],
                 outside: set[int], drop: set[int]) -> float:
    """:func:`cut_into` on integer capacities with OR-Tools' ``SimpleMaxFlow``."""
    from ortools.graph.python import max_flow

    tails, heads, caps, total = arcs
    smf = max_flow.SimpleMaxFlow()
    ids: dict[int, int] = {}

    def node(v: int) -> int:
        i = ids.get(v)
        if i is None:
            i = ids[v] = len(ids) + 2  # 0: the outside's source, 1: the inside's sink
        return i

    for u, v, c in zip(tails, heads, caps, strict=True):
        if u not in drop and v not in drop:
            smf.add_arc_with_capacity(node(u), node(v), c)
    inf = total + 1  # unbounded: more than every capacity together
    sources = [node(v) for v in outside if v not in drop]
    sinks = [node(v) for v in inside if v not in drop]
    if not sources or not sinks:
        return 0.0
    for i in sources:
        smf.add_arc_with_capacity(0, i, inf)
    for i in sinks:
        smf.add_arc_with_capacity(i, 1, inf)
    if smf.solve(0, 1) != smf.OPTIMAL:
        raise RuntimeError("OR-Tools max-flow failed on a finite network")
    return float(smf.optimal_flow())


class _Cuts:
    """Cut capacities into sets of NPUs, computed once each."""

    def __init__(self, topology: Topology, g: nx.DiGraph, npus: Sequence[int]) -> None:
        self.topology, self.g, self.npus = topology, g, list(npus)
        self._into: dict[frozenset[int], float] = {}

    def into(self, members: frozenset[int]) -> float:
        """Max-flow from every other NPU into ``members``."""
        got = self._into.get(members)
        if got is None:
            got = self._into[members] = cut_into(
                self.g, members, [v for v in self.npus if v not in members])
        return got

    def bound(self, members: frozenset[int]) -> float:
        """All-gather cut bound of ``members`` in shards per B/s (inf when cut off)."""
        cut = self.into(members)
        return (len(self.npus) - len(members)) / cut if cut > 0 else float("inf")

    def tightness(self, members: frozenset[int]) -> float:
        """Cut bound of ``members`` over the bound of its worst member alone."""
        worst = max(self.bound(frozenset((v,))) for v in members)
        return self.bound(members) / worst if worst > 0 else 0.0

    def cohesive(self, members: frozenset[int], parts: Iterable[frozenset[int]],
                 limit: float) -> bool:
        """Whether every part of ``members`` gets what it needs from the rest of the island
        within ``limit`` (shards per B/s) when outside shards enter the island once."""
        n_out = len(self.npus) - len(members)
        total = self.into(members)
        outside = [v for v in self.npus if v not in members]
        sws = inner_switches(self.topology, members, self.npus)
        away = outside + [s.id for s in self.topology.switches if s.id not in sws]
        for part in parts:
            rest = members - part
            direct = cut_into(self.g, part, outside, drop=rest) if n_out else 0.0
            share = min(1.0, direct / total) if total > 0 else 0.0
            need = len(rest) + n_out * (1.0 - share)
            inner = cut_into(self.g, part, rest, drop=away)
            if need > 0 and (inner <= 0 or need / inner > limit):
                return False
        return True


def tightness(g: nx.DiGraph, members: frozenset[int], npus: Sequence[int]) -> float:
    """Cut bound of ``members`` over the bound of its worst member alone (all-gather shape)."""
    return _Cuts(Topology(()), g, npus).tightness(members)


_CACHE: dict[tuple, list[tuple[int, ...]]] = {}
_CACHE_SIZE = 64


def find_islands(topology: Topology, npus: Sequence[int],
                 min_tightness: float = MIN_TIGHTNESS) -> list[tuple[int, ...]]:
    """The islands among ``npus`` (the NPUs a collective may use), innermost first.

    Results are cached by the topology's links and switches, so the phases of a reduction
    and repeated solves on one machine pay once."""
    npus = sorted(set(npus))
    key = (topology.n_npus, tuple((lk.src, lk.dst, lk.bandwidth, lk.multiplicity)
                                  for lk in topology.links), tuple(npus), min_tightness)
    got = _CACHE.get(key)
    if got is None:
        got = _find(topology, npus, min_tightness)
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = got
    return list(got)


def _find(topology: Topology, npus: list[int], min_tightness: float
          ) -> list[tuple[int, ...]]:
    if len(npus) < 3:
        return []
    cands: set[frozenset[int]] = set(_switch_candidates(topology, npus))
    if len(npus) <= MAX_PAIR_NPUS:
        cands.update(_tier_candidates(npus, pair_capacities(topology, npus)))
    cands = {c for c in cands if 2 <= len(c) < len(npus)}
    if not cands:
        return []
    cuts = _Cuts(topology, _flow_graph(topology, npus), npus)
    limit = COHESION_SLACK * max(cuts.bound(x) for x in
                                 list(cands) + [frozenset((v,)) for v in npus])
    scored = []
    for c in cands:
        t = cuts.tightness(c)
        if t >= min_tightness:
            scored.append((-t, len(c), sorted(c), c))
    scored.sort()
    kept: list[frozenset[int]] = []
    for _, _, _, c in scored:
        if all(c <= k or k <= c or not (c & k) for k in kept):
            parts = [frozenset((v,)) for v in sorted(c)] + [x for x in cands if x < c]
            if cuts.cohesive(c, parts, limit):
                kept.append(c)
    return sorted((tuple(sorted(c)) for c in kept), key=lambda c: (len(c), c))
