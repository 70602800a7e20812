"""Step-timed trees over physical links built by a list construction and a small repair,
instead of solving :mod:`~tacos.solvers.forest.timed_links`' whole program.

The whole program (2x MI250 at k = 2: 10,920 variables at the capacity bound of 10 steps) costs
CP-SAT 4-5 s of CPU to find its first packing.  This module builds a packing of the same program
(the same representatives, automorphism images, capacities, lanes, islands and step count) in
two parts:

1. **A list construction** (:func:`_attempt`), step by step: at step t every representative's
   tree may extend from an NPU it holds by step t - 1 along an arc whose duration ends by the
   last step; the extensions are taken in order of urgency (the latest arrival, over the NPUs
   the tree still lacks, of a shortest path in steps through the arc) while every image of the
   edge fits the physical lanes of every step it holds and the integer capacities, and a tight
   island is entered once.  Arcs through a switch (the NIC hops between boxes) follow three
   rules: never into the root's own box; at most ``ceil(switch capacity / trees)`` of them per
   tree (2x MI250: 96 / 64 -> 2); a second one only once every tree has one, and none that
   would leave a tree without one no switch capacity.  Tries repeat with the trees and NPUs that
   were left out weighted up (a squeaky-wheel restart: :data:`TRIES`, a fixed seed), and the
   try that leaves the fewest NPUs out is kept.
2. **A repair** (:func:`_repair`): the kept try's tree edges that start by step t0 are fixed,
   and CP-SAT places the rest (one worker, :data:`REPAIR_TIME` deterministic seconds) in the
   same program over the NPUs not yet fixed (an edge into one may start at any step its parent
   allows), with what the fixed edges hold subtracted from every lane and capacity; t0 goes
   down through :data:`WINDOWS` until one is solved.  2x MI250: the best of 30 tries leaves 6
   of the 248 arrivals (8 trees x 31 NPUs) out, and the first window (t0 = 6) is solved;
   0.5-0.6 s of CPU in all, against 4-5 s for the whole program.

The answer is checked (:func:`violations`: every constraint of the program) before it is
returned; None when no window is solved, and the caller solves the whole program as before.
Everything is deterministic: one seed, one worker, deterministic time limits.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from tacos.solvers.forest.rate import Edge

Arc = tuple[int, int]
Found = dict[tuple[int, int], dict[int, tuple[int, int]]]
"""For each (representative, tree), every other NPU's (parent, start step)."""

TRIES = 30
"""Construction tries (2x MI250: about 10 ms each; with 5 or 10 tries seeds 0 and 3 still
build, seed 1 no longer does)."""
NOISE = 0.5
"""Random share of an extension's urgency (in steps) that breaks ties between tries."""
SEED = 0
"""The construction's seed.  2x MI250 all-gather, % of the optimum at 64 MiB / 1 GiB: seed 0
82.47 / 94.03 (the whole program's too), seed 1 82.49 / 94.25, seed 3 81.78 / 94.03; with seeds
2 and 4-7 no repair window is solved and the whole program runs."""
WINDOWS = (6, 4, 2)
"""The last start step whose constructed edges the repair keeps, tried in order."""
REPAIR_TIME = 0.5
"""Deterministic seconds CP-SAT has for one repair window."""


@dataclass
class _Shape:
    """What every try reads: the program's inputs pre-digested."""

    group: tuple[int, ...]
    trees: list[tuple[int, int]]
    arcs: dict[Arc, tuple[tuple[Edge, ...], int]]
    caps: dict[Edge, int]
    lanes: dict[Edge, int]
    steps: int
    held: dict[tuple[int, Arc], list[tuple[Edge, int]]]
    """(representative, arc) -> the physical hops its images hold, with how many images."""
    out: dict[int, list[tuple[int, int]]]
    dist: dict[int, dict[int, int]]
    island: dict[int, int]
    box: dict[int, int]
    units: dict[int, int]
    """Images per representative (switch hops one of its crossing edges takes)."""
    budget: int
    """Switch-hop capacity: the sum of the capacities of the hops into switches."""
    most: int
    """Crossing edges allowed per tree."""
    far: set[Arc] = field(default_factory=set)


def _shape(group: tuple[int, ...], reps: list[int], k: int,
           arcs: dict[Arc, tuple[tuple[Edge, ...], int]], caps: dict[Edge, int],
           lanes: dict[Edge, int], images: list[tuple[int, dict[int, int]]],
           islands: list[tuple[int, ...]], steps: int) -> _Shape:
    maps: dict[int, list[dict[int, int]]] = defaultdict(list)
    for rep, m in images:
        maps[rep].append(m)
    held: dict[tuple[int, Arc], list[tuple[Edge, int]]] = {}
    for r in reps:
        for a, (hops, _) in arcs.items():
            count: dict[Edge, int] = defaultdict(int)
            for m in maps[r]:
                for x, z in hops:
                    count[m.get(x, x), m.get(z, z)] += 1
            held[r, a] = list(count.items())
    out: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for (u, v), (_, d) in arcs.items():
        out[u].append((v, d))
    dist = {}
    for s in group:  # shortest arrivals in steps (Dijkstra over durations)
        best = {s: 0}
        heap = [(0, s)]
        while heap:
            t, x = heapq.heappop(heap)
            if t > best[x]:
                continue
            for y, d in out[x]:
                if t + d < best.get(y, math.inf):
                    best[y] = t + d
                    heapq.heappush(heap, (t + d, y))
        dist[s] = best
    island = {v: j for j, members in enumerate(islands) for v in members}
    far = {a for a, (hops, _) in arcs.items() if len(hops) > 1}
    box: dict[int, int] = {}
    for x in group:  # boxes: what direct (one-hop) arcs join
        if x in box:
            continue
        box[x] = x
        stack = [x]
        while stack:
            y = stack.pop()
            for z, _ in out[y]:
                if (y, z) not in far and z not in box:
                    box[z] = x
                    stack.append(z)
    members = set(group)
    budget = sum(c for (x, z), c in caps.items() if x in members and z not in members)
    units = {r: len(maps[r]) for r in reps}
    trees = [(r, i) for r in reps for i in range(k)]
    total = sum(units[r] for r, _ in trees)
    most = max(1, math.ceil(budget / total)) if total else 1
    return _Shape(group, trees, arcs, caps, lanes, steps, held, dict(out), dist, island, box,
                  units, budget, most, far)


def _attempt(sh: _Shape, weight: dict[Any, float], rng: random.Random) -> Found:
    """One list construction (module docstring, part 1); trees may lack NPUs."""
    use_t: dict[tuple[Edge, int], int] = defaultdict(int)
    use: dict[Edge, int] = defaultdict(int)
    arrival = {tr: {tr[0]: 0} for tr in sh.trees}
    parent: Found = {tr: {} for tr in sh.trees}
    entered = {tr: ({sh.island[tr[0]]} if tr[0] in sh.island else set()) for tr in sh.trees}
    crossed = dict.fromkeys(sh.trees, 0)
    budget = sh.budget
    for t in range(1, sh.steps + 1):
        cands = []
        for tr in sh.trees:
            have = arrival[tr]
            lack = [x for x in sh.group if x not in have]
            if not lack:
                continue
            soonest = {x: min(sh.dist[y].get(x, math.inf) + max(have[y], t - 1) for y in have)
                       for x in lack}
            for u, at in have.items():
                if at > t - 1:
                    continue
                for v, d in sh.out.get(u, ()):
                    if v in have or t + d - 1 > sh.steps:
                        continue
                    iv = sh.island.get(v)
                    if iv is not None and sh.island.get(u) != iv and iv in entered[tr]:
                        continue
                    urgency = 0
                    for x in lack:
                        via = t - 1 + d + sh.dist[v].get(x, math.inf)
                        if via <= soonest[x]:
                            urgency = max(urgency, via)
                    key = urgency + weight.get(tr, 0.0) + weight.get((tr, v), 0.0) \
                        + NOISE * rng.random()
                    cands.append((-key, -d, tr, u, v, d))
        cands.sort(key=lambda c: (c[0], c[1]))
        for _, _, tr, u, v, d in cands:
            have = arrival[tr]
            if v in have:
                continue
            iv = sh.island.get(v)
            into = iv is not None and sh.island.get(u) != iv
            if into and iv in entered[tr]:
                continue
            far = (u, v) in sh.far
            if far:
                if sh.box[v] == sh.box[tr[0]] or crossed[tr] >= sh.most:
                    continue
                if crossed[tr] and any(c == 0 for c in crossed.values()):
                    continue
                owed = sum(sh.units[x[0]] for x, c in crossed.items() if c == 0 and x != tr)
                if budget - sh.units[tr[0]] < owed:
                    continue
            hops = sh.held[tr[0], (u, v)]
            if any(use[h] + c > sh.caps.get(h, 0)
                   or any(use_t[h, s] + c > sh.lanes[h] for s in range(t, t + d))
                   for h, c in hops):
                continue
            for h, c in hops:
                use[h] += c
                for s in range(t, t + d):
                    use_t[h, s] += c
            have[v] = t + d - 1
            parent[tr][v] = (u, t)
            if into:
                entered[tr].add(iv)
            if far:
                crossed[tr] += 1
                budget -= sh.units[tr[0]]
    return parent


def _repair(sh: _Shape, built: Found, t0: int, islands: list[tuple[int, ...]],
            limit: float) -> Found | None:
    """The program of :mod:`~tacos.solvers.forest.timed_links` with ``built``'s edges that
    start by step ``t0`` fixed (module docstring, part 2); None when CP-SAT finds nothing
    within ``limit`` deterministic seconds."""
    from tacos.solvers.forest import sat

    fixed = {tr: {v: (u, s) for v, (u, s) in built[tr].items() if s <= t0} for tr in sh.trees}
    use_t: dict[tuple[Edge, int], int] = defaultdict(int)
    use: dict[Edge, int] = defaultdict(int)
    for tr, edges in fixed.items():
        for v, (u, s) in edges.items():
            for h, c in sh.held[tr[0], (u, v)]:
                use[h] += c
                for t in range(s, s + sh.arcs[u, v][1]):
                    use_t[h, t] += c
    model = sat.Model()
    steps = sh.steps
    y: dict[tuple[tuple[int, int], Arc, int], Any] = {}
    for tr in sh.trees:
        r = tr[0]
        done = fixed[tr]
        when = {v: s + sh.arcs[u, v][1] - 1 for v, (u, s) in done.items()}
        when[r] = 0
        free = [v for v in sh.group if v not in when]
        arrival = {v: model.new_int_var(1, steps, "") for v in free}
        into: dict[int, list] = defaultdict(list)
        by_arc: dict[Arc, list] = defaultdict(list)
        for (u, v), (_, d) in sh.arcs.items():
            if v not in arrival:
                continue
            for s in range(when.get(u, 0) + 1, steps - d + 2):
                var = y[tr, (u, v), s] = model.new_bool_var("")
                if u in arrival:
                    model.add(arrival[u] <= s - 1).only_enforce_if(var)
                into[v].append((s + d - 1, var))
                by_arc[u, v].append(var)
        for v in free:
            if not into[v]:
                return None
            model.add_exactly_one(var for _, var in into[v])
            model.add(arrival[v] == sum(t * var for t, var in into[v]))
        for members in islands:
            inside = set(members)
            before = sum(1 for v, (u, _) in done.items() if v in inside and u not in inside)
            entries = [var for (u, v), vs in by_arc.items()
                       if v in inside and u not in inside for var in vs]
            need = (0 if r in inside else 1) - before
            if not entries:
                if need:
                    return None
                continue
            model.add(sum(entries) == need)
    per_step: dict[tuple[Edge, int], list] = defaultdict(list)
    total: dict[Edge, list] = defaultdict(list)
    for (tr, (u, v), s), var in y.items():
        d = sh.arcs[u, v][1]
        for h, c in sh.held[tr[0], (u, v)]:
            total[h] += [var] * c
            for t in range(s, s + d):
                per_step[h, t] += [var] * c
    for (h, t), terms in per_step.items():
        if len(terms) > sh.lanes[h] - use_t[h, t]:
            model.add(sum(terms) <= sh.lanes[h] - use_t[h, t])
    for h, terms in total.items():
        if len(terms) > sh.caps.get(h, 0) - use[h]:
            model.add(sum(terms) <= sh.caps.get(h, 0) - use[h])
    solver = sat.Solver()
    solver.parameters.num_workers = 1  # deterministic (with a deterministic time limit)
    solver.parameters.max_deterministic_time = limit
    if solver.solve(model) not in (sat.OPTIMAL, sat.FEASIBLE):
        return None
    out: Found = {tr: dict(fixed[tr]) for tr in sh.trees}
    for (tr, (u, v), s), var in y.items():
        if solver.value(var):
            out[tr][v] = (u, s)
    return out


def violations(found: Found, group: tuple[int, ...], reps: list[int], k: int,
               arcs: dict[Arc, tuple[tuple[Edge, ...], int]], caps: dict[Edge, int],
               lanes: dict[Edge, int], images: list[tuple[int, dict[int, int]]],
               islands: list[tuple[int, ...]], steps: int) -> list[str]:
    """Every constraint of :mod:`~tacos.solvers.forest.timed_links`' program that ``found``
    breaks (empty: a packing of the program): every (representative, tree) brings every other
    NPU once along an arc, after its parent has it and by the last step; every image of every
    edge within each physical hop's lanes at every step it holds it and within the hop's
    capacity in all; every tight island of ``islands`` entered once by a tree rooted outside
    it, never by one rooted inside."""
    bad: list[str] = []
    members = set(group)
    want = {(r, i) for r in reps for i in range(k)}
    if set(found) != want:
        return [f"trees {sorted(set(found) ^ want)} missing or extra"]
    maps: dict[int, list[dict[int, int]]] = defaultdict(list)
    for rep, m in images:
        maps[rep].append(m)
    use_t: dict[tuple[Edge, int], int] = defaultdict(int)
    use: dict[Edge, int] = defaultdict(int)
    for (r, i), edges in sorted(found.items()):
        if set(edges) != members - {r}:
            bad.append(f"tree {(r, i)} does not reach every NPU once")
            continue
        when = {r: 0}
        for v, (u, s) in sorted(edges.items(), key=lambda e: e[1][1]):
            if (u, v) not in arcs:
                bad.append(f"tree {(r, i)}: {u}->{v} is not an arc")
                continue
            hops, d = arcs[u, v]
            if u not in when or when[u] > s - 1 or s < 1 or s + d - 1 > steps:
                bad.append(f"tree {(r, i)}: {u}->{v} at step {s} out of order")
            when[v] = s + d - 1
            for m in maps[r]:
                for x, z in hops:
                    h = (m.get(x, x), m.get(z, z))
                    use[h] += 1
                    for t in range(s, s + d):
                        use_t[h, t] += 1
        for island in islands:
            inside = set(island)
            entries = sum(1 for v, (u, _) in edges.items() if v in inside and u not in inside)
            if entries != (0 if r in inside else 1):
                bad.append(f"tree {(r, i)} enters island {island} {entries} times")
    bad += [f"hop {h} at step {t}: {n} > {lanes.get(h, 0)} lanes"
            for (h, t), n in sorted(use_t.items()) if n > lanes.get(h, 0)]
    bad += [f"hop {h}: {n} > capacity {caps.get(h, 0)}"
            for h, n in sorted(use.items()) if n > caps.get(h, 0)]
    return bad


def built_packing(group: tuple[int, ...], reps: list[int], k: int,
                  arcs: dict[Arc, tuple[tuple[Edge, ...], int]], caps: dict[Edge, int],
                  lanes: dict[Edge, int], images: list[tuple[int, dict[int, int]]],
                  islands: list[tuple[int, ...]], steps: int, seed: int = SEED
                  ) -> Found | None:
    """A packing of :mod:`~tacos.solvers.forest.timed_links`' program with these inputs (the
    module docstring: a list construction, then a repair of its last steps), checked by
    :func:`violations`; None when no repair window is solved (the caller then solves the
    whole program).  The same inputs and seed give the same packing."""
    sh = _shape(group, reps, k, arcs, caps, lanes, images, islands, steps)
    rng = random.Random(seed)
    weight: dict[Any, float] = defaultdict(float)
    best: tuple[int, Found] | None = None
    for _ in range(TRIES):
        built = _attempt(sh, weight, rng)
        lacking = {tr: [x for x in group if x != tr[0] and x not in built[tr]]
                   for tr in sh.trees}
        left = sum(map(len, lacking.values()))
        if best is None or left < best[0]:
            best = (left, built)
        if left == 0:
            break
        for tr, xs in lacking.items():  # the squeaky wheel: what was left out goes first
            if xs:
                weight[tr] += 1.0
                for x in xs:
                    weight[tr, x] += 1.0
    assert best is not None
    left, built = best
    found: Found | None = built if left == 0 else None
    for t0 in WINDOWS if found is None else ():
        found = _repair(sh, built, t0, islands, REPAIR_TIME)
        if found is not None:
            break
    if found is None or violations(found, group, reps, k, arcs, caps, lanes, images,
                                   islands, steps):
        return None
    return found
