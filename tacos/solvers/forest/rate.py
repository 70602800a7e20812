"""The optimal all-gather rate as an exact rational, and integer tree capacities for it.

ForestColl (Zhao et al., arXiv 2402.06787; reference.md §2.6): with a super-source σ joined to
every group NPU by an arc of capacity k and every link of capacity U·b_e, Edmonds' branching
theorem says k capacity-respecting out-trees per NPU exist iff every max-flow σ → v reaches N·k.
The smallest feasible U/k is ``x* = max_S |S ∩ group| / B⁺(S)``.

* :func:`link_capacities` merges parallel links and writes bandwidths as small integers (ratios to
  the slowest link, limited to denominators of 1000 so that real systems stay exact).
* :func:`optimal_rate` takes x* and its binding cut from :func:`tacos.check.bounds.min_cut_ratio`
  (the cut bound's own max-flow oracle), makes it exact with Fractions, picks the smallest k with
  k·x*·b_e integral for every link (the exact (U, k)), and confirms feasibility with integer
  max-flows; a violated check (float noise) raises x* to the violated cut's ratio and repeats.
* :func:`fixed_k_rate` is the ``fixed k`` variant: k trees per root and the smallest U such that
  the capacities ⌊U·b_e⌋ stay feasible (each violated cut raises U to the next value at which
  that cut's integer capacity suffices).  Simpler plans, at a rate at most a few % off.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

from tacos.check.bounds import min_cut_ratio
from tacos.model.topology import Topology
from tacos.solvers.forest.flow import FlowNetwork

Edge = tuple[int, int]
MAX_DENOMINATOR = 1000
AUTO_MAX_K = 16


@dataclass(frozen=True)
class CapGraph:
    """A topology as integer bandwidths: ``bw[(u, v)]`` in units of ``unit`` bytes/s.

    ``compute`` are the NPUs every tree must span, ``roots`` those that root k trees each (the
    whole group for all-gather, one NPU for broadcast).
    """

    n_nodes: int
    compute: tuple[int, ...]
    bw: dict[Edge, int]
    unit: float
    roots: tuple[int, ...] = ()

    @property
    def sources(self) -> tuple[int, ...]:
        """The tree roots (``compute`` when ``roots`` is empty)."""
        return self.roots or self.compute


@dataclass(frozen=True)
class Rate:
    """Tree capacities for k trees per root.

    ``x`` is the optimal x* in units of 1/``unit`` (seconds per byte of one root's data is
    ``x / unit``); ``caps[e]`` ≤ U·b_e is the number of tree units edge e may carry (U = ``u``);
    ``slowdown`` = (max_e caps[e]/b_e) / (k·x) ≥ 1 is how far these capacities are from the
    optimum (1 for the exact (U, k)).
    """

    x: Fraction
    k: int
    u: Fraction
    caps: dict[Edge, int]
    cut: frozenset[int]
    exact: bool
    slowdown: float
    checks: int = field(default=0, compare=False)


def link_capacities(topology: Topology, group: tuple[int, ...],
                    roots: tuple[int, ...] = ()) -> CapGraph:
    """Merged directed links as small integer bandwidths (see the module docstring)."""
    g = topology.to_digraph()
    raw = {(u, v): d["bandwidth"] for u, v, d in g.edges(data=True) if d["bandwidth"] > 0}
    if not raw:
        return CapGraph(topology.n_nodes, tuple(group), {}, 1.0, tuple(roots))
    base = min(raw.values())
    ratios = {e: Fraction(b / base).limit_denominator(MAX_DENOMINATOR) for e, b in raw.items()}
    scale = math.lcm(*(r.denominator for r in ratios.values()))
    ints = {e: int(r * scale) for e, r in ratios.items()}
    common = math.gcd(*ints.values())
    bw = {e: b // common for e, b in ints.items()}
    unit = base * common / scale
    return CapGraph(topology.n_nodes, tuple(group), bw, unit, tuple(roots))


class _SigmaChecker:
    """Integer max-flows σ → v on one network whose link capacities change."""

    def __init__(self, graph: CapGraph) -> None:
        self.graph = graph
        self.net = FlowNetwork(graph.n_nodes + 1)
        self.sigma = graph.n_nodes
        self.arcs = {e: self.net.add_arc(e[0], e[1], 0) for e in graph.bw}
        self.src = [self.net.add_arc(self.sigma, v, 0) for v in graph.sources]
        self.checks = 0

    def violated(self, caps: dict[Edge, int], k: int) -> frozenset[int] | None:
        """A cut S (σ's side of a min σ–v cut, without σ) with caps out of S < k·|S ∩ group|,
        i.e. a set whose NPUs cannot push k tree units each out of it, or None."""
        for e, a in self.arcs.items():
            self.net.set_cap(a, caps.get(e, 0))
        for a in self.src:
            self.net.set_cap(a, k)
        need = len(self.graph.sources) * k
        for v in self.graph.compute:
            self.checks += 1
            value, side = self.net.max_flow(self.sigma, v, min_cut=True)
            if value < need:
                return frozenset(side - {self.sigma})
        return None


def _exact_k(graph: CapGraph, x: Fraction) -> int:
    return math.lcm(*((x * b).denominator for b in graph.bw.values())) if graph.bw else 1


def optimal_rate(topology: Topology, graph: CapGraph) -> Rate:
    """The exact optimum x* and (U, k) with integral capacities U·b_e (module docstring)."""
    n = len(graph.compute)
    if n <= 1:
        return Rate(Fraction(0), 1, Fraction(0), {}, frozenset(), True, 1.0)
    checker = _SigmaChecker(graph)
    if graph.roots and set(graph.roots) != set(graph.compute):
        s = _single_root_cut(graph, checker)
    else:
        _, s = min_cut_ratio(topology, graph.compute)
    x = _ratio_of(graph, s)
    while True:
        k = _exact_k(graph, x)
        caps = {e: int(k * x * b) for e, b in graph.bw.items()}
        side = checker.violated(caps, k)
        if side is None:
            return Rate(x, k, k * x, caps, s, True, 1.0, checker.checks)
        s = side
        better = _ratio_of(graph, s)
        if better <= x:  # cannot happen with exact arithmetic; guard against a loop
            raise RuntimeError(f"cut ratio did not grow ({better} <= {x})")
        x = better


def _single_root_cut(graph: CapGraph, checker: _SigmaChecker) -> frozenset[int]:
    """The root side of the smallest root → v cut (broadcast: x* = 1 / min_v λ(root, v))."""
    best: tuple[int, frozenset[int]] | None = None
    net = checker.net
    for e, a in checker.arcs.items():
        net.set_cap(a, graph.bw[e])
    for a in checker.src:
        net.set_cap(a, 1 << 40)
    for v in graph.compute:
        if v in graph.sources:
            continue
        value, side = net.max_flow(checker.sigma, v, min_cut=True)
        if best is None or value < best[0]:
            best = (value, side - {checker.sigma})
    return best[1] if best else frozenset(graph.sources)


def _ratio_of(graph: CapGraph, s: frozenset[int]) -> Fraction:
    """Exact ratio of the cut S = set whose roots push their data out of it."""
    out_bw = sum(b for (u, v), b in graph.bw.items() if u in s and v not in s)
    count = sum(1 for v in graph.sources if v in s)
    if out_bw <= 0:
        raise ValueError("a group NPU cannot reach the others")
    return Fraction(count, out_bw)


def fixed_k_rate(graph: CapGraph, x: Fraction, k: int,
                 checker: _SigmaChecker | None = None) -> Rate:
    """k trees per root with capacities ⌊U·b_e⌋ for the smallest feasible U ≥ k·x*."""
    checker = checker or _SigmaChecker(graph)
    u = k * x
    while True:
        caps = {e: math.floor(u * b) for e, b in graph.bw.items()}
        side = checker.violated(caps, k)
        if side is None:
            break
        s = side
        out = [b for (a, c), b in graph.bw.items() if a in s and c not in s]
        need = k * sum(1 for v in graph.sources if v in s)
        while sum(math.floor(u * b) for b in out) < need:  # next breakpoint of the step sum
            u = min(Fraction(math.floor(u * b) + 1, b) for b in out)
    used = max(Fraction(c, graph.bw[e]) for e, c in caps.items() if c > 0)
    slowdown = float(used / (k * x))
    return Rate(x, k, u, {e: c for e, c in caps.items() if c > 0}, frozenset(), slowdown <= 1,
                max(1.0, slowdown), checker.checks)


def choose_rate(topology: Topology, graph: CapGraph, trees: int | str = "auto") -> Rate:
    """The capacities to pack: exact (U, k), a fixed k, or ``auto``.

    ``auto`` takes the exact (U, k) when k ≤ 16; otherwise the smallest fixed k ≤ 16 whose rate
    is within 0.5% of the best fixed k tried.
    """
    best = optimal_rate(topology, graph)
    if trees == "exact" or (trees == "auto" and best.k <= AUTO_MAX_K) or len(graph.compute) < 2:
        return best
    if isinstance(trees, int) and trees == best.k:
        return best
    checker = _SigmaChecker(graph)
    if isinstance(trees, int):
        return fixed_k_rate(graph, best.x, trees, checker)
    tried = [fixed_k_rate(graph, best.x, k, checker) for k in range(1, AUTO_MAX_K + 1)]
    top = min(r.slowdown for r in tried)
    return next(r for r in tried if r.slowdown <= top * 1.005)
