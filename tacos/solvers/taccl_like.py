"""TACCL-like baseline: routes chosen ignoring congestion, then serialized by the simulator.

This is the seed paper's proxy for TACCL (§VII): the TEN ILP with the congestion constraint
dropped, whose optimum is simply an earliest-arrival (α-β shortest path) tree per chunk.  Every
chunk is routed along such a tree from its holders to its destinations as if it had the network
to itself; ties between equally short routes are broken by a seeded random choice, so ``seed``
spreads load the way TACCL's routing MILP is free to.  The resulting overlapping transfers are
then retimed by :func:`tacos.check.simulate.simulate`, which serializes transfers sharing a link.
"""

from __future__ import annotations

import heapq
import random
from typing import Any

from tacos.model.collective import Chunk
from tacos.model.schedule import Schedule, Transfer
from tacos.model.topology import Topology
from tacos.solvers.registry import Problem, SolverBase, SolveResult


def _route(topology: Topology, chunk: Chunk, rng: random.Random) -> list[tuple[int, float]]:
    """Links of an earliest-arrival tree for ``chunk`` with the uncongested arrival times.

    Returns ``(link index, start time)`` for every tree link that leads to a destination.
    """
    best: dict[int, tuple[float, float]] = {v: (0.0, 0.0) for v in chunk.pre}
    via: dict[int, int] = {}
    heap = [(0.0, rng.random(), v) for v in sorted(chunk.pre)]
    heapq.heapify(heap)
    done: set[int] = set()
    while heap:
        t, _tie, u = heapq.heappop(heap)
        if u in done:
            continue
        done.add(u)
        for li in topology.out_links[u]:
            lk = topology.links[li]
            arrive = t + lk.time(chunk.size)
            tie = rng.random()
            old = best.get(lk.dst)
            if old is None or (arrive, tie) < old:
                best[lk.dst] = (arrive, tie)
                via[lk.dst] = li
                heapq.heappush(heap, (arrive, tie, lk.dst))
    used: set[int] = set()
    for d in chunk.post - chunk.pre:
        v = d
        while v in via and via[v] not in used:
            used.add(via[v])
            v = topology.links[via[v]].src
    return sorted((li, best[topology.links[li].src][0]) for li in used)


class TacclLikeSolver(SolverBase):
    """Congestion-oblivious routing + simulator serialization (seed's TACCL proxy)."""

    name = "taccl"
    options: dict = {}  # only the common seed (ties between equally short routes)

    def solve(self, problem: Problem) -> SolveResult:
        """Route each chunk on a shortest-path tree, then let the simulator serialize links."""
        from tacos.check.simulate import simulate

        topo, coll = problem.topology, problem.collective
        seed = int(problem.options.get("seed", 0) or 0)
        rng = random.Random(seed)
        transfers: list[Transfer] = []
        for ch in coll.chunks:
            route = _route(topo, ch, rng)
            routed = {topo.links[li].dst for li, _ in route} | set(ch.pre)
            lost = sorted(ch.post - routed)
            if lost:
                reason = f"NPU {topo.node_name(lost[0])} cannot receive chunk {ch.id}"
                return SolveResult("infeasible", None, None, {"reason": reason})
            for li, start in route:
                lk = topo.links[li]
                transfers.append(Transfer(start, start + lk.time(ch.size), lk.src, lk.dst, (li,),
                                          (ch.id,)))
        meta: dict[str, Any] = {"solver": "taccl", "seed": seed, "status": "feasible"}
        naive = Schedule(topo, coll, tuple(sorted(transfers)), meta)
        serialized = simulate(naive).schedule
        schedule = Schedule(topo, coll, tuple(serialized.transfers), meta)
        stats = {"uncongested_makespan": naive.makespan, "transfers": len(transfers)}
        return SolveResult("feasible", schedule, None, stats)
