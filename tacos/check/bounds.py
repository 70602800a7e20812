"""Lower bounds on the collective time.

Every bound here is in seconds.  Two kinds, kept apart in :class:`Bound`:

* **physical** bounds hold for any way of moving the data over the machine (data cut as finely as
  one likes, cut-through or pipelined): the min-cut bandwidth bound, the ingress/egress bound and
  the hop latency (Σ α of the fastest path).  ``Bound.value`` is their maximum, and the gap every
  report shows is time / this value: the distance to the machine, not to a choice of ours.
* **model** bounds hold only for schedules of the tacos IR with the collective's own chunks: a
  chunk crosses each hop whole (store-and-forward at NPUs) and, for the chunk-granular bound, one
  chunk per transfer.  They say how far a schedule is from the best one *with these chunks*.

The functions:

* :func:`hop_latency_bound` — physical: the farthest needed pair's fastest path in Σ α.
* :func:`latency_bound` — model: the slowest chunk's fastest path (edge weight α + size/bw) with
  whole chunks store-and-forward; both on array graphs (:mod:`tacos.model.distances`, scipy's C
  shortest paths, many sources per call).
* :func:`ingress_egress_bound` — bytes an NPU must receive (send) over its ingress (egress)
  bandwidth.
* :func:`cut_bound` — ForestColl's min-cut bound for all-gather (every group NPU sources a shard
  that every other one needs), computed with networkx max-flows on the super-source
  construction; reduce-scatter uses the reversed topology; all-reduce adds the two (the
  *composition* bound: valid for reduce-scatter followed by all-gather, the shape every tacos
  all-reduce has) -- unless a switch declares ``reduce``: in-network reduction pipelines the
  two halves against each other, and the all-reduce cut is then the buffer over the smallest
  cut between group NPUs (:func:`in_network_allreduce_cut`); broadcast/reduce use the root's
  max-flow to every NPU.
* :func:`chunk_granular_bound` — on homogeneous links, the number of whole-chunk steps
  ``max(ceil(recv/in_degree), ceil(send/out_degree), hops)`` × (α + chunk/B).  It holds for
  schedules that move one chunk per transfer (the TACOS model); a transfer carrying several
  chunks pays α once and can beat it, so :func:`lower_bound` reports it but does not use it.
* :func:`tacos.check.bounds_groups.group_cut_bound` — for collectives without a min-cut formula
  (custom, all-to-all, scatter, gather, multi-tenant), bytes that must cross into or out of a
  group of nodes of the bandwidth hierarchy (a host behind its NIC, ...).
* :func:`lower_bound` combines them into a :class:`Bound`.
"""

from __future__ import annotations

import importlib.util
import math
from collections import defaultdict
from dataclasses import dataclass, field
from fractions import Fraction

import networkx as nx
import numpy as np
from networkx.algorithms.flow import build_residual_network, preflow_push

from tacos.check.bounds_groups import group_cut_bound
from tacos.model.collective import Collective
from tacos.model.distances import Distances
from tacos.model.topology import Topology

_SIGMA = "sigma"
_FLOW_RTOL = 1e-9


MODEL_ASSUMPTIONS = {
    "chunk_latency": "whole chunks of the collective, store-and-forward at every NPU",
    "chunk_granular": "whole chunks, one chunk per transfer, identical links",
}
"""What each model-specific bound assumes (reports print it next to the value)."""


@dataclass(frozen=True)
class Bound:
    """The physical lower bound ``value = max(latency, bandwidth)`` (hop latency; the larger of
    the min-cut and ingress/egress bounds); ``kind`` names the binding term.

    ``parts`` holds the physical terms (``latency``, ``ingress_egress``, ``cut``; None when not
    applicable); ``model`` the model-specific ones (``chunk_latency``, ``chunk_granular``, see
    :data:`MODEL_ASSUMPTIONS`), which only schedules with the collective's own chunks obey.
    """

    latency: float
    bandwidth: float
    value: float
    kind: str
    parts: dict[str, float | None] = field(default_factory=dict, compare=False)
    model: dict[str, float | None] = field(default_factory=dict, compare=False)

    @property
    def model_value(self) -> float:
        """The largest bound, model-specific ones included (valid for the tacos IR with the
        collective's own chunks only)."""
        return max([self.value, *(v for v in self.model.values() if v is not None)])


# -- chunk classes ---------------------------------------------------------------------------
_LAST_CLASSES: list = []  # (collective, classes) of the last call: the bounds ask 4 times


def _classes(collective: Collective) -> dict[tuple, int]:
    """Distinct (pre, post, reduce, size) → how many chunks share it."""
    if _LAST_CLASSES and _LAST_CLASSES[0][0] is collective:
        return _LAST_CLASSES[0][1]
    out: dict[tuple, int] = defaultdict(int)
    for c in collective.chunks:
        out[(c.pre, c.post, c.reduce, c.size)] += 1
    _LAST_CLASSES[:] = [(collective, out)]
    return out


def _needs(pre: frozenset[int], post: frozenset[int], reduce: bool) -> tuple[set, set]:
    """(NPUs that must receive the chunk, NPUs that must send it)."""
    if reduce:
        recv = {v for v in post if pre - {v}}
        send = {u for u in pre if post - {u}}
    else:
        recv = set(post - pre)
        send = set(pre) if len(pre) == 1 and recv else set()
    return recv, send


# -- latency ---------------------------------------------------------------------------------
def _distances(topology: Topology, size: float, *, hops: bool, cache: dict
               ) -> tuple[Distances, float]:
    """``(distances, scale)``: fastest times for one chunk of ``size`` (hop counts when
    ``hops``) are ``distances × scale``.

    A hop costs α + size/bw of the best parallel link; a hop into a switch costs only α (a
    switch cuts through, the bytes are paid leaving it).  When every hop costs the same, one
    unweighted graph serves every size and the hop bound (``scale`` = that cost).
    """
    def cost(lk) -> float:
        if topology.is_switch(lk.dst):
            return 0.0 if hops else lk.alpha
        return 1.0 if hops else lk.alpha + size / lk.bandwidth

    costs = {cost(lk) for lk in topology.links}
    if len(costs) == 1 and not topology.switches:
        if "unit" not in cache:
            cache["unit"] = Distances(topology, lambda lk: 1.0)
        return cache["unit"], costs.pop()
    key = ("distances", size, hops)
    if key not in cache:
        cache[key] = Distances(topology, cost)
    return cache[key], 1.0


def _index(nodes: frozenset[int], cache: dict) -> np.ndarray:
    """``nodes`` as an index array, cached per set object (patterns share their sets)."""
    hit = cache.get(("index", id(nodes)))
    if hit is None or hit[0] is not nodes:
        hit = cache[("index", id(nodes))] = (nodes, np.fromiter(sorted(nodes), dtype=np.int64,
                                                               count=len(nodes)))
    return hit[1]


def _latency(topology: Topology, collective: Collective, *, hops: bool,
             cache: dict | None = None, zero_size: bool = False) -> float:
    cache = {} if cache is None else cache
    best = 0.0
    by_size: dict[float, list[tuple]] = defaultdict(list)
    for key in _classes(collective):
        by_size[0.0 if zero_size else key[3]].append(key)
    for size, keys in sorted(by_size.items()):
        dist, scale = _distances(topology, size, hops=hops, cache=cache)
        memo = ("farthest", id(dist), tuple(keys))
        if memo not in cache:
            cache[memo] = _farthest(dist, keys, cache)
        best = max(best, scale * cache[memo])
    return best


def _farthest(dist: Distances, keys: list[tuple], cache: dict) -> float:
    """The largest distance any chunk class in ``keys`` must cover."""
    best = 0.0
    single: dict[int, list[frozenset[int]]] = defaultdict(list)  # source -> targets
    into: dict[int, list[frozenset[int]]] = defaultdict(list)  # output -> contributors
    for pre, post, reduce, _ in keys:
        if not reduce:
            if not post - pre or not pre:
                continue
            if len(pre) == 1:  # batched below; a source is 0 from itself
                single[next(iter(pre))].append(post)
            else:
                best = max(best, float(dist.nearest(pre)[_index(post, cache)].max()))
            continue
        for v in post:
            if pre - {v}:
                into[v].append(pre)
    for table, reverse in ((single, False), (into, True)):
        sources = sorted(table)
        for k, row in dist.rows(sources, reverse=reverse):
            for nodes in table[sources[k]]:
                best = max(best, float(row[_index(nodes, cache)].max()))
    return best


def latency_bound(topology: Topology, collective: Collective) -> float:
    """Max over chunks and NPUs that need them of the fastest path time (α + size/bw per hop).

    A model bound: it assumes each chunk crosses every hop whole.  A copy chunk may come from
    the nearest ``pre`` NPU; a reduction chunk needs every contribution, so the farthest ``pre``
    NPU counts.  ``inf`` when some NPU is unreachable.
    """
    return _latency(topology, collective, hops=False)


def hop_latency_bound(topology: Topology, collective: Collective) -> float:
    """Max over needed (source, destination) pairs of the fastest path's Σ α (physical: no data
    can arrive sooner, however finely it is cut).  ``inf`` when some NPU is unreachable."""
    return _latency(topology, collective, hops=False, zero_size=True)


# -- ingress / egress ------------------------------------------------------------------------
def _per_npu(collective: Collective, weight) -> tuple[dict[int, int], dict[int, int]]:
    """``weight(size, count)`` summed per NPU over the chunk classes it must receive (send),
    as :func:`_needs` says, without walking a shared set once per class: a set many classes
    share (``everyone``) is added once per set object with the classes' total, and the few
    NPUs :func:`_needs` leaves out are subtracted (linear in the collective, not NPUs × chunks).
    Entries that end at 0 are dropped."""
    recv: dict[int, int] = defaultdict(int)
    send: dict[int, int] = defaultdict(int)
    whole: tuple[dict[int, list], dict[int, list]] = ({}, {})

    def add_all(side: int, nodes: frozenset[int], w: int) -> None:
        entry = whole[side].get(id(nodes))
        if entry is None:
            whole[side][id(nodes)] = [nodes, w]
        else:
            entry[1] += w

    for (pre, post, reduce, size), count in _classes(collective).items():
        w = weight(size, count)
        if not reduce:
            if len(post) <= len(pre & post):  # nothing to deliver
                continue
            add_all(0, post, w)
            for v in pre & post:
                recv[v] -= w
            if len(pre) == 1:
                send[next(iter(pre))] += w
            continue
        if pre:  # v in post receives unless it is the only contributor
            add_all(0, post, w)
            if len(pre) == 1 and (p := next(iter(pre))) in post:
                recv[p] -= w
        if post:  # u in pre sends unless it is the only output
            add_all(1, pre, w)
            if len(post) == 1 and (q := next(iter(post))) in pre:
                send[q] -= w
    for side, table in ((0, recv), (1, send)):
        for nodes, w in whole[side].values():
            for v in nodes:
                table[v] += w
    return ({v: b for v, b in recv.items() if b}, {u: b for u, b in send.items() if b})


def _ingress_egress(topology: Topology, collective: Collective) -> tuple[float, float]:
    recv_bytes, send_bytes = _per_npu(collective, lambda size, count: size * count)
    ing = max((_div(b, topology.ingress_bandwidth(v)) for v, b in recv_bytes.items()),
              default=0.0)
    egr = max((_div(b, topology.egress_bandwidth(u)) for u, b in send_bytes.items()),
              default=0.0)
    return ing, egr


def _div(nbytes: float, bw: float) -> float:
    if nbytes <= 0:
        return 0.0
    return nbytes / bw if bw > 0 else math.inf


def ingress_egress_bound(topology: Topology, collective: Collective) -> float:
    """Max over NPUs of bytes to receive / ingress bw and bytes to send / egress bw.

    An NPU must receive every copy chunk it needs but lacks, and every reduction chunk it must
    hold unless it is the only contributor; it must send every copy chunk only it holds that
    others need, and its contribution to every reduction chunk some other NPU must hold.
    """
    return max(_ingress_egress(topology, collective))


# -- min-cut ---------------------------------------------------------------------------------
def min_cut_ratio(topology: Topology, group: tuple[int, ...] | list[int]
                  ) -> tuple[float, frozenset[int]]:
    """ForestColl's ``x* = max_S |S ∩ group| / B⁺(S)`` over cuts ``S`` missing a group NPU.

    ``B⁺(S)`` is the total bandwidth (bytes/s) of links leaving ``S``; switches and NPUs outside
    ``group`` are relay nodes.  An all-gather in which every group NPU sources ``shard`` bytes
    takes at least ``shard · x*`` seconds.  Returns ``(x*, S)`` for a binding cut.

    Computed on the super-source graph (σ → v capacity 1 for v in ``group``, link capacity
    x · bandwidth): x is feasible iff every max-flow σ → v reaches |group|.  The max-flows run
    on networkx (preflow-push), or on OR-Tools' C++ max-flow when it is installed (about 80x
    faster, which matters from a few hundred nodes on).  Instead of bisecting
    on x, each failed check yields its min cut S whose ratio is strictly larger, and x jumps to
    it (Dinkelbach's method); it stops at an exact cut ratio once all N max-flows pass.
    """
    vc = list(dict.fromkeys(group))
    n = len(vc)
    if n <= 1:
        return 0.0, frozenset()
    base = topology.to_digraph()
    nodes = set(base.nodes)

    def ratio(s: frozenset[int]) -> float:
        out_bw = sum(d["bandwidth"] for u, w, d in base.edges(data=True)
                     if u in s and w not in s)
        inside = sum(1 for v in vc if v in s)
        return math.inf if out_bw <= 0 else inside / out_bw

    best_s = frozenset()
    x = 0.0
    for v in vc:  # S = everything but v: N-1 shards enter v
        in_bw = base.in_degree(v, weight="bandwidth")
        r = math.inf if in_bw <= 0 else (n - 1) / in_bw
        if r > x:
            x, best_s = r, frozenset(nodes - {v})
    if math.isinf(x):
        return x, best_s
    oracle = _oracle(base, vc)
    oracle.set_x(x)
    i, passed = 0, 0
    while passed < n:
        side = oracle.violating_cut(vc[i % n])
        r = ratio(side) if side is not None else 0.0
        if not r > x * (1 + _FLOW_RTOL):  # feasible (or numerical noise): next sink
            passed += 1
            i += 1
            continue
        x, best_s, passed = r, side, 0
        if math.isinf(x):
            break
        oracle.set_x(x)
    return x, best_s


def _oracle(base: nx.DiGraph, vc: list[int]) -> _NetworkxOracle | _OrToolsOracle:
    """OR-Tools max-flows when they load, else networkx.

    OR-Tools fails to load (ImportError/OSError on a clashing ``libhighs``) in a process that
    already loaded highspy; the networkx oracle gives the same answer, only slower.
    """
    if _has_ortools():
        try:
            return _OrToolsOracle(base, vc)
        except (ImportError, OSError):
            pass
    return _NetworkxOracle(base, vc)


def _has_ortools() -> bool:
    try:
        return importlib.util.find_spec("ortools.graph.python.max_flow") is not None
    except ModuleNotFoundError:
        return False


class _NetworkxOracle:
    """Super-source max-flows with networkx (preflow-push, residual network reused)."""

    def __init__(self, base: nx.DiGraph, vc: list[int]) -> None:
        self.base, self.vc, self.n = base, vc, len(vc)

    def set_x(self, x: float) -> None:
        h = nx.DiGraph()
        for u, w, d in self.base.edges(data=True):
            h.add_edge(u, w, capacity=x * d["bandwidth"])
        for u in self.vc:
            h.add_edge(_SIGMA, u, capacity=1.0)
        self.h = h
        self.residual = build_residual_network(h, "capacity")

    def violating_cut(self, v: int) -> frozenset[int] | None:
        value = nx.maximum_flow_value(self.h, _SIGMA, v, flow_func=preflow_push,
                                      residual=self.residual)
        if value >= self.n * (1 - _FLOW_RTOL):
            return None
        _, (side, _) = nx.minimum_cut(self.h, _SIGMA, v, flow_func=preflow_push)
        return frozenset(side - {_SIGMA})


class _OrToolsOracle:
    """The same max-flows with OR-Tools' SimpleMaxFlow (integer capacities, scaled by 2^30).

    Capacities are rounded down, so a cut may look violated by rounding; the caller keeps the
    exact ratio of each cut found, so the result is always the ratio of a real cut.
    """

    SCALE = 1 << 30

    def __init__(self, base: nx.DiGraph, vc: list[int]) -> None:
        from ortools.graph.python import max_flow

        self.smf = max_flow.SimpleMaxFlow()
        self.edges = [(u, w, d["bandwidth"]) for u, w, d in base.edges(data=True)]
        self.sigma = max(base.nodes, default=-1) + 1
        self.n = len(vc)
        self.fallback = _NetworkxOracle(base, vc)
        for u, w, _ in self.edges:
            self.smf.add_arc_with_capacity(u, w, 0)
        for u in vc:
            self.smf.add_arc_with_capacity(self.sigma, u, self.SCALE)

    def set_x(self, x: float) -> None:
        self.x = x
        for arc, (_, _, bw) in enumerate(self.edges):
            self.smf.set_arc_capacity(arc, min(int(x * bw * self.SCALE), 1 << 62))

    def violating_cut(self, v: int) -> frozenset[int] | None:
        if self.smf.solve(self.sigma, v) != self.smf.OPTIMAL:  # e.g. capacity overflow
            self.fallback.set_x(self.x)
            return self.fallback.violating_cut(v)
        need = self.n * self.SCALE - len(self.edges) - 1
        if self.smf.optimal_flow() >= need:
            return None
        side = set(self.smf.get_source_side_min_cut())
        side.discard(self.sigma)
        return frozenset(side)


def _shard(collective: Collective, key) -> float:
    totals: dict[int, float] = defaultdict(float)
    for c in collective.chunks:
        v = key(c)
        if v is not None:
            totals[v] += c.size
    return min((totals.get(v, 0.0) for v in collective.group), default=0.0)


def _single(s: frozenset[int]) -> int | None:
    return next(iter(s)) if len(s) == 1 else None


def _ag_cut(topology: Topology, collective: Collective, shard_of) -> float:
    shard = _shard(collective, shard_of)
    if shard <= 0:
        return 0.0
    x, _ = min_cut_ratio(topology, collective.group)
    return shard * x


def _broadcast_cut(topology: Topology, root: int, targets, total: float) -> float:
    g = topology.to_digraph()
    worst = 0.0
    for v in targets:
        if v == root:
            continue
        flow = nx.maximum_flow_value(g, root, v, capacity="bandwidth")
        worst = max(worst, math.inf if flow <= 0 else total / flow)
    return worst


def in_network_allreduce_cut(topology: Topology, collective: Collective) -> float:
    """All-reduce bound that holds when switches reduce in the network: every element's result
    depends on every NPU, so any cut with group NPUs on both sides carries the whole buffer
    out of each side.  ``buffer / λ`` with λ the smallest such cut, found as the smallest
    max-flow between the first group NPU and any other, both ways."""
    group = list(dict.fromkeys(collective.group))
    total = float(sum(c.size for c in collective.chunks))
    if len(group) < 2 or total <= 0:
        return 0.0
    g = topology.to_digraph()
    u = group[0]
    lam = math.inf
    for v in group[1:]:
        for a, b in ((u, v), (v, u)):
            lam = min(lam, nx.maximum_flow_value(g, a, b, capacity="bandwidth",
                                                 flow_func=preflow_push))
    return math.inf if lam <= 0 else total / lam


def reduces_in_network(topology: Topology) -> bool:
    """True when some switch declares the ``reduce`` capability."""
    return any("reduce" in s.capabilities for s in topology.switches)


def cut_bound(topology: Topology, collective: Collective) -> float | None:
    """ForestColl min-cut bandwidth bound, or None for collectives it does not cover.

    all-gather: shard × x* (:func:`min_cut_ratio`); reduce-scatter: the same on the reversed
    topology; all-reduce: reduce-scatter bound + all-gather bound (composition bound, valid for
    schedules that reduce-scatter then all-gather); broadcast (reduce): buffer / max-flow from
    (to) the root, minimized over NPUs; all-to-all, scatter, gather and custom copy patterns:
    the fabric cuts of :func:`tacos.check.bounds_cuts.pair_cut_bound` (nodes, switch groups,
    bisections).
    """
    kind = collective.kind
    if kind == "allgather":
        return _ag_cut(topology, collective, lambda c: _single(c.pre))
    if kind == "reducescatter":
        return _ag_cut(topology.reversed(), collective, lambda c: _single(c.post))
    if kind == "allreduce":
        n = len(collective.group)
        share = sum(c.size for c in collective.chunks) / max(1, n)
        if share <= 0 or n <= 1:
            return 0.0
        if reduces_in_network(topology):
            return in_network_allreduce_cut(topology, collective)
        rs, _ = min_cut_ratio(topology.reversed(), collective.group)
        ag, _ = min_cut_ratio(topology, collective.group)
        return share * (rs + ag)
    if kind in ("broadcast", "reduce") and collective.root is not None:
        total = float(sum(c.size for c in collective.chunks))
        topo = topology if kind == "broadcast" else topology.reversed()
        return _broadcast_cut(topo, collective.root, collective.group, total)
    from tacos.check.bounds_cuts import pair_cut_bound

    return pair_cut_bound(topology, collective)


# -- chunk-granular --------------------------------------------------------------------------
def chunk_granular_bound(topology: Topology, collective: Collective, *,
                         _cache: dict | None = None) -> float | None:
    """Whole-chunk step bound on homogeneous topologies, None when links or chunks differ.

    ``max(max_v ceil(recv_v / in_degree_v), max_v ceil(send_v / out_degree_v), hops)`` steps of
    ``α + chunk/B``; for an all-gather that is ``max(ceil((N-1)k/d_min), diameter)``.  Valid for
    schedules moving one chunk per transfer.
    """
    cache = {} if _cache is None else _cache
    links = topology.links
    if not links or topology.switches or not collective.chunks:
        return None
    if len({(lk.alpha, lk.bandwidth) for lk in links}) != 1:
        return None
    sizes = {c.size for c in collective.chunks}
    if len(sizes) != 1:
        return None
    step = links[0].time(sizes.pop())
    recv, send = _per_npu(collective, lambda size, count: count)
    steps = 0.0
    for v, cnt in recv.items():
        deg = topology.in_degree(v)
        steps = max(steps, math.inf if deg == 0 else math.ceil(Fraction(cnt, deg)))
    for u, cnt in send.items():
        deg = topology.out_degree(u)
        steps = max(steps, math.inf if deg == 0 else math.ceil(Fraction(cnt, deg)))
    steps = max(steps, _latency(topology, collective, hops=True, cache=cache))
    return steps * step


# -- combined --------------------------------------------------------------------------------
_KEPT: list[tuple[Topology, Collective, Bound]] = []
"""The last few bounds with the (immutable) topology and collective they are of: one compile
asks three times (the portfolio's pruning, the synthesis result, the report), and on a
4,096-NPU torus each computation took 10-20 s of CPU (its min-cuts and farthest pairs)."""


def lower_bound(topology: Topology, collective: Collective) -> Bound:
    """All bounds together: ``value = max(hop latency, max(ingress_egress, cut))`` (physical);
    the model-specific ones in ``model``.  Computed once for the same topology and collective
    objects (of the last few asked)."""
    for topo, coll, got in _KEPT:
        if topo is topology and coll is collective:
            return got
    got = _lower_bound(topology, collective)
    _KEPT.append((topology, collective, got))
    del _KEPT[:-2]
    return got


def _lower_bound(topology: Topology, collective: Collective) -> Bound:
    """:func:`lower_bound`, computed."""
    cache: dict = {}
    lat = _latency(topology, collective, hops=False, cache=cache, zero_size=True)
    chunk_lat = _latency(topology, collective, hops=False, cache=cache)
    ie = ingress_egress_bound(topology, collective)
    cut = cut_bound(topology, collective)
    cg = chunk_granular_bound(topology, collective, _cache=cache)
    # collectives without a min-cut formula (custom, all-to-all, ...): cuts around groups
    groups = group_cut_bound(topology, collective) if cut is None else None
    bw = max(ie, cut if cut is not None else 0.0, groups or 0.0)
    value = max(lat, bw)
    if value <= 0:
        kind = "none"
    elif lat >= bw:
        kind = "latency"
    elif cut is not None and cut >= ie:
        composed = collective.kind == "allreduce" and not reduces_in_network(topology)
        kind = "composition" if composed and cut > ie else "cut"
    elif groups is not None and groups > ie:
        kind = "group_cut"
    else:
        kind = "ingress_egress"
    parts = {"latency": lat, "ingress_egress": ie, "cut": cut, "group_cut": groups}
    model = {"chunk_latency": chunk_lat, "chunk_granular": cg}
    return Bound(lat, bw, value, kind, parts, model)


__all__ = [
    "Bound",
    "chunk_granular_bound",
    "cut_bound",
    "hop_latency_bound",
    "in_network_allreduce_cut",
    "ingress_egress_bound",
    "latency_bound",
    "lower_bound",
    "min_cut_ratio",
]
