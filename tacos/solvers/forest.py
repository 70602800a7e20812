"""``forest``: throughput-optimal synthesis by spanning-tree packing (ForestColl's method).

For all-gather, reduce-scatter, all-reduce, broadcast and reduce on any topology (switches and
process groups included):

1. **Rate** (:mod:`~tacos.solvers.forest_rate`): the min-cut optimum x* as an exact rational and
   integer capacities for k trees per root: the exact (U, k), or a fixed k (option ``trees``).
2. **Switches** (:mod:`~tacos.solvers.forest_split`): edge splitting removes switches (and NPUs
   outside the group) without losing rate; every split arc remembers its physical path.
3. **Packing** (:mod:`~tacos.solvers.forest_pack`): k capacity-respecting out-arborescences
   per root (Edmonds/Lovász), checked against the capacities.
4. **Pipelining** (:mod:`~tacos.solvers.forest_pipeline`): chunks of every root are spread over
   its trees and sent in s rounds; s from α and β (formula in that module), then s is doubled or
   halved while the list schedule's makespan improves, with and without merging a round's slices
   on a route into one transfer (at most 10 schedules, 250000 transfers in all, are timed).

Reductions use reversed trees: reduce-scatter and reduce pack trees on the reversed topology and
the dual (copy) schedule is inverted in time and direction (:mod:`tacos.passes.inversion`);
all-reduce is reduce-scatter then all-gather.  The schedule's collective is the user's refined to
``q·K·s`` chunks per NPU (q the user's, K the lcm of the phases' k); ``meta['pipeline']`` says so,
and the MSCCL back end lowers one round (:func:`~tacos.solvers.forest_pipeline.first_round`).

Options: ``trees`` (``"auto"``, ``"exact"`` or k), ``slices`` (``"auto"`` or s),
``max_transfers`` (bound on the schedule size used to cap s, default 300000).
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from tacos import patterns
from tacos.collective import Collective
from tacos.errors import UsageError
from tacos.passes.inversion import assemble, plan_inversion
from tacos.schedule import Schedule, Transfer
from tacos.solvers.forest_pack import Tree, check_packing, pack_trees
from tacos.solvers.forest_pipeline import emit, slice_count
from tacos.solvers.forest_rate import Rate, choose_rate, link_capacities
from tacos.solvers.forest_split import SplitGraph, split_switches
from tacos.solvers.forest_view import RouteView
from tacos.solvers.registry import Problem, SolveResult
from tacos.topology import Topology

PHASES: dict[str, tuple[tuple[str, bool, str], ...]] = {
    "allgather": (("copy", False, "group"),),
    "broadcast": (("copy", False, "root"),),
    "reducescatter": (("reduce", True, "group"),),
    "reduce": (("reduce", True, "root"),),
    "allreduce": (("reduce", True, "group"), ("copy", False, "group")),
}
MAX_TRANSFERS = 300_000
INTERLEAVE_MAX = 128
"""Largest group whose trees grow together (larger ones grow one by one, see pack_trees)."""
MAX_SLICE_TRIALS = 10
SEARCH_TRANSFERS = 250_000
"""The slice search stops once the schedules it timed hold this many transfers."""
MODES = ((True, True), (False, True))
"""(merge a round's slices on a route, equal rounds per tree) pairs the slice search tries."""


@dataclass
class Forest:
    """One phase's packing: trees on the topology (reversed for a reduction phase)."""

    phase: str
    reverse: bool
    roots: tuple[int, ...]
    rate: Rate
    unit: float
    split: SplitGraph
    trees: list[Tree]
    tests: int
    seconds: dict[str, float] = field(default_factory=dict)

    def optimal_time(self, data_per_root: float) -> float:
        """Bandwidth-optimal time for ``data_per_root`` bytes from every root (x* · data)."""
        return float(self.rate.x) / self.unit * data_per_root

    def facts(self, data_per_root: float) -> dict[str, Any]:
        """JSON-safe summary for ``meta``."""
        return {"phase": self.phase, "k": self.rate.k, "U": str(self.rate.u),
                "exact": self.rate.exact, "rate_loss": self.rate.slowdown - 1,
                "trees": len(self.trees), "depth": max((t.depth() for t in self.trees),
                                                       default=0),
                "optimal_time": self.optimal_time(data_per_root),
                "max_flows": self.rate.checks + self.split.flows + self.tests}


def _order(t: Transfer) -> tuple:
    return (t.start, t.end, t.src, t.dst, t.route, t.chunks, t.op)


def group_topology(topology: Topology, group: tuple[int, ...]) -> Topology:
    """The topology without links touching NPUs outside ``group`` (trees relay only through
    group members and switches)."""
    members = set(group)

    def keep(v: int) -> bool:
        return topology.is_switch(v) or v in members

    return topology.with_links(lk for lk in topology.links if keep(lk.src) and keep(lk.dst))


def plan_forest(topology: Topology, group: tuple[int, ...], roots: tuple[int, ...],
                phase: str, reverse: bool, trees: int | str = "auto") -> Forest:
    """Rate, switch splitting and tree packing for one phase."""
    clock = time.perf_counter()
    topo = group_topology(topology, group)
    if reverse:
        topo = topo.reversed()
    graph = link_capacities(topo, group, roots)
    rate = choose_rate(topo, graph, trees)
    t_rate = time.perf_counter()
    split = split_switches(graph.n_nodes, group, graph.sources, rate.caps, rate.k)
    t_split = time.perf_counter()
    packed, tests = pack_trees(group, graph.sources, split, rate.k,
                               interleave=len(group) <= INTERLEAVE_MAX)
    check_packing(group, graph.sources, packed, rate.k, rate.caps)
    t_pack = time.perf_counter()
    return Forest(phase, reverse, graph.sources, rate, graph.unit, split, packed, tests,
                  {"rate": t_rate - clock, "split": t_split - t_rate, "pack": t_pack - t_split})


def _check_collective(coll: Collective) -> None:
    if coll.kind not in PHASES:
        raise UsageError(f"solver 'forest' does not handle {coll.label()}",
                         hint="it synthesizes allgather, reducescatter, allreduce, broadcast "
                              "and reduce; use greedy for the others")
    std = patterns.build(coll.kind, coll.group, size=coll.size,
                         chunks_per_npu=coll.chunks_per_npu, root=coll.root)
    if [(c.pre, c.post, c.reduce) for c in std.chunks] != [
            (c.pre, c.post, c.reduce) for c in coll.chunks]:
        raise UsageError(f"solver 'forest' needs the standard layout of {coll.kind}",
                         hint="declare the collective with its standard name (no custom chunks)")


def _rounds(forest: Forest, sub: Collective, ids: tuple[int, ...], refined: Collective,
            per: int, s: int, base: int, even: bool = True) -> list[list[tuple[int, ...]]]:
    """Chunk ids (of ``sub``) each tree sends in each of its rounds.

    ``even``: every tree sends slice j of all its base chunks in round j (s rounds each).
    Otherwise a tree sends in rounds of about the same bytes as the largest tree's: a tree
    carrying less data has fewer rounds, so it pays α fewer times.
    """
    slot: dict[int, dict[int, dict[int, int]]] = defaultdict(lambda: defaultdict(dict))
    for c in sub.chunks:
        (root,) = tuple(c.pre)
        i = refined.chunks[ids[c.id]].index % per
        slot[root][i // s][i % s] = c.id
    out: list[list[tuple[int, ...]]] = []
    taken: dict[int, int] = defaultdict(int)
    k = forest.rate.k
    top = max((t.mult for t in forest.trees), default=1)
    for tree in forest.trees:
        n = base * tree.mult // k
        first = taken[tree.root]
        taken[tree.root] += n
        mine = range(first, first + n)
        if not n:
            out.append([])
        elif even:
            out.append([tuple(sorted(slot[tree.root][b][j] for b in mine)) for j in range(s)])
        else:
            order = [slot[tree.root][b][j] for j in range(s) for b in mine]
            r = max(1, min(len(order), -(-s * tree.mult // top)))
            cuts = [len(order) * q // r for q in range(r + 1)]
            out.append([tuple(sorted(order[a:b])) for a, b in zip(cuts, cuts[1:], strict=False)])
    return out


class ForestSolver:
    """Spanning-tree packing (see the module docstring)."""

    name = "forest"
    supports_combining = True
    native_switches = True
    refines_chunks = True

    def solve(self, problem: Problem) -> SolveResult:
        """Pack, pipeline and time a schedule for ``problem``."""
        clock = time.perf_counter()
        coll, topo, opts = problem.collective, problem.topology, problem.options
        _check_collective(coll)
        trees_opt = opts.get("trees", "auto")
        group = tuple(coll.group)
        forests = []
        for phase, reverse, who in PHASES[coll.kind]:
            roots = group if who == "group" else (int(coll.root),)
            forests.append(plan_forest(topo, group, roots, phase, reverse, trees_opt))
        view = RouteView(topo)
        big_k = math.lcm(*(f.rate.k for f in forests))
        q = max(1, coll.chunks_per_npu)
        tried: dict[tuple[int, bool, bool], Schedule] = {}
        for batch, even in MODES:
            s0, cap = self._slices(coll, forests, view, big_k, q, opts, batch)

            def run(s: float, batch: bool = batch, even: bool = even, cap: int = cap) -> float:
                key = (max(1, min(cap, int(s))), batch, even)
                if key not in tried:
                    tried[key] = self._schedule(coll, view, forests, big_k, q, key[0], batch,
                                                even)
                return tried[key].makespan

            run(s0)
            if opts.get("slices", "auto") != "auto":
                continue
            for step in (2, 0.5):  # walk by factors of 2 while it improves
                s = s0
                while (len(tried) < MAX_SLICE_TRIALS and 1 <= s * step <= cap
                       and sum(len(t.transfers) for t in tried.values()) < SEARCH_TRANSFERS
                       and run(s * step) < run(s)):
                    s = int(s * step)
        best = min(tried.values(), key=lambda sc: sc.makespan)
        candidates = sorted(tried)
        data = coll.size / len(group) if len(forests[0].roots) > 1 else coll.size
        optimal = sum(f.optimal_time(data) for f in forests)
        best.meta.update(
            solver=self.name, status="feasible",
            forest={"phases": [f.facts(data) for f in forests],
                    "trees": sum(len(f.trees) for f in forests),
                    "optimal_time": optimal,
                    "optimal_algbw": coll.size / optimal if optimal > 0 else None,
                    "slices_tried": list(candidates)},
            synthesis_time=time.perf_counter() - clock)
        stats = {"trees": best.meta["forest"]["trees"],
                 "seconds": [dict(f.seconds) for f in forests]}
        return SolveResult("feasible", best, None, stats)

    def _slices(self, coll: Collective, forests: list[Forest], view: RouteView, big_k: int,
                q: int, opts: dict[str, Any], batch: bool) -> tuple[int, int]:
        """The slice count s* of the formula and the largest s allowed."""
        n_edges = sum(len(t.edges) for f in forests for t in f.trees)
        per_root = coll.size / len(coll.group) if len(forests[0].roots) > 1 else coll.size
        by_size = max(1, int(per_root // (q * big_k)))  # chunks of at least one byte
        cap = max(1, min(by_size, int(opts.get("max_transfers", MAX_TRANSFERS))
                         // max(1, n_edges)))
        if opts.get("slices", "auto") != "auto":
            return max(1, min(cap, int(opts["slices"]))), cap
        best = 1
        for f in forests:
            nbytes = [per_root * t.mult / f.rate.k for t in f.trees]
            best = max(best, slice_count(f.trees, nbytes,
                                         lambda p, f=f: view.hop(p, f.reverse), cap, batch))
        return best, cap

    def _schedule(self, coll: Collective, view: RouteView, forests: list[Forest], big_k: int,
                  q: int, s: int, batch: bool, even: bool = True) -> Schedule:
        per = q * big_k * s
        refined = patterns.build(coll.kind, coll.group, size=coll.size, chunks_per_npu=per,
                                 root=coll.root, name=coll.name)
        if refined.combining:
            plan = plan_inversion(refined)
            parts = {"reduce": (plan.dual, plan.dual_ids), "copy": (plan.forward, plan.forward_ids)}
        else:
            plan = None
            parts = {"copy": (refined, tuple(range(refined.n_chunks)))}
        scheds: dict[str, Schedule] = {}
        lanes = [lk.multiplicity for lk in view.topology.links]
        for f in forests:
            sub, ids = parts[f.phase]
            if sub is None:
                continue
            rounds = _rounds(f, sub, ids, refined, per, s, q * big_k, even)
            sizes = [c.size for c in sub.chunks]
            transfers = emit(f.trees, rounds, sizes, lambda p, f=f: view.hop(p, f.reverse),
                             lanes, batch=batch)
            transfers.sort(key=_order)
            scheds[f.phase] = Schedule(view.topology, sub, tuple(transfers))
        topo = view.topology
        meta = {"pipeline": {"slices": s, "chunks_per_npu": per, "base_chunks_per_npu": q * big_k,
                             "batched": batch, "equal_rounds": even}}
        if plan is not None:
            out = assemble(topo, refined, plan, scheds.get("reduce"), scheds.get("copy"))
            return Schedule(topo, refined, out.transfers, meta)
        return Schedule(topo, refined, scheds["copy"].transfers, meta)
