"""Step-timed trees over physical links: boxes of directly linked NPUs joined by NIC switches.

:mod:`~tacos.solvers.forest.timed` times tree edges on direct NPU links, one part per lane and
step.  Where the boxes are joined by NIC ports on a switch (2x MI250: 32 GCDs, 50 GB/s xGMI lanes
inside each box, a 16 GB/s NIC per GCD), a NIC hop is a switch path u → sw → v and is slower.
:func:`timed_link_trees` builds the same time-indexed program over *physical* links:

* the arcs are the links of the switch-unwound view (:func:`~tacos.passes.unwind.unwind`, the
  switch's own unwinding policy: rail rings for 2x MI250), each with the physical links of its
  route;
* an arc whose slowest link has a fraction 1/d of the fastest link's bandwidth takes d
  consecutive steps: a tree edge started at step s holds every link of its route for steps
  s … s + d − 1, and the receiver has the data after step s + d − 1 (:data:`ROUND_STEPS`
  rounds d = 50/16 = 3.125 to 3);
* at every step a physical link carries at most its multiplicity of tree edges, summed over all
  arcs whose route uses it, and over all steps at most its integer capacity ``caps`` (the
  rate's, for the tree count k the caller chose: the exact rate's k is often too large here,
  2x MI250's is 83);
* every tree enters each *tight* island (whose in-capacity is exactly the k entries per outside
  root it needs: 2x MI250's packages, not its boxes) once, as in
  :mod:`~tacos.solvers.forest.timed`.

The program is built for one root per orbit of the automorphisms of the view's arcs labelled
with their physical lanes and durations (2x MI250: 8 automorphisms, 4 representatives); each
image is checked against the physical capacities before use (every per-step row sums the
images).  One CP-SAT worker with deterministic time limits: the same input gives the same trees.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from tacos.model.topology import Topology
from tacos.solvers.forest import shallow as forest_shallow
from tacos.solvers.forest.pack import Tree, checked
from tacos.solvers.forest.rate import Edge
from tacos.solvers.forest.shallow import automorphisms, representatives

MAX_BINARIES = 40000
"""Largest program (tree × arc × start step variables) attempted."""
EXTRA_STEPS = 3
"""Step counts tried above the first, the busiest hop's capacity × duration / lanes (2x MI250
at k = 2: 10, found at once; 9 is not found in 30 deterministic seconds)."""
FIND_TIME = 8.0
"""Deterministic seconds to find a packing with a given step count (2x MI250: about 6 s)."""
IMPROVE_TIME = 0.0
"""Deterministic seconds to move tree edges to earlier steps (sum of arrivals minimized from the
packing found; 0: not tried).  On 2x MI250 2 s (~9 s wall) gave the same fractions as the
packing found (94.0% / 82.5% at 1 GiB / 64 MiB), 8 s a worse one at 64 MiB (81.9%)."""
ROUND_STEPS = True
"""Round an arc's duration (fastest / its bandwidth) to the nearest step instead of up."""
BUILD = True
"""At every step count, build the packing by a list construction and a small repair
(:func:`~tacos.solvers.forest.timed_build.built_packing`) before solving the whole program
(2x MI250: about 0.5 s of CPU instead of 4-5 s); off, or when it builds nothing: the whole
program at that step count, as before."""


Arc = tuple[int, int]


def link_arcs(topology: Topology, group: tuple[int, ...]
              ) -> tuple[dict[Arc, tuple[tuple[Edge, ...], int]], dict[Edge, int]] | None:
    """The arcs of the switch-unwound view of ``topology`` over ``group``: for each, the
    physical hops (node pairs) of its route and its duration in steps (the fastest link's
    bandwidth over the arc's slowest, rounded per :data:`ROUND_STEPS`, at least 1); and the
    lanes (multiplicity) of every physical hop.  None when the view has two links on one NPU pair
    (parallel lanes are one link with a multiplicity here)."""
    from tacos.passes.unwind import unwind

    view = unwind(topology, group)
    lanes: dict[Edge, int] = defaultdict(int)
    bw: dict[Edge, float] = {}
    for lk in topology.links:
        lanes[lk.src, lk.dst] += lk.multiplicity
        bw[lk.src, lk.dst] = min(bw.get((lk.src, lk.dst), math.inf), lk.bandwidth)
    members = set(group)
    arcs: dict[Arc, tuple[tuple[Edge, ...], int]] = {}
    slowest: dict[Arc, float] = {}
    for lk, route in zip(view.topology.links, view.routes, strict=True):
        if lk.src not in members or lk.dst not in members or lk.src == lk.dst:
            continue
        if (lk.src, lk.dst) in arcs:
            return None
        hops = tuple((topology.links[i].src, topology.links[i].dst) for i in route)
        arcs[lk.src, lk.dst] = (hops, 0)
        slowest[lk.src, lk.dst] = min(bw[h] for h in hops)
    if not arcs:
        return None
    fastest = max(slowest.values())
    for a, (hops, _) in arcs.items():
        ratio = fastest / slowest[a]
        arcs[a] = (hops, max(1, round(ratio) if ROUND_STEPS else math.ceil(ratio - 1e-9)))
    return arcs, dict(lanes)


def link_program(topology: Topology, group: tuple[int, ...]) -> tuple | None:
    """What :func:`timed_link_trees`' program over ``group`` depends on besides the roots, k
    and capacities, in a canonical order: the arcs with their hops and durations and the lanes
    of every hop (:func:`link_arcs`), sorted.  Two topologies with the same key have the same
    program, so trees found for one are trees of the other (a symmetric topology and its
    reversal: all-reduce's two phases); None when :func:`link_arcs` is."""
    built = link_arcs(topology, group)
    if built is None:
        return None
    arcs, lanes = built
    return tuple(sorted(arcs.items())), tuple(sorted(lanes.items()))


Found = dict[tuple[int, int], dict[int, tuple[int, int]]]
"""A program's answer: for each (representative, tree), every other NPU's (parent, start step)."""


def _solve(group: tuple[int, ...], reps: list[int], k: int,
           arcs: dict[Arc, tuple[tuple[Edge, ...], int]], caps: dict[Edge, int],
           lanes: dict[Edge, int], images: list[tuple[int, dict[int, int]]],
           islands: list[tuple[int, ...]], steps: int, find: float = FIND_TIME,
           improve: float = IMPROVE_TIME) -> Found | None:
    """The program of the module docstring for the k trees of every root in ``reps``: for each
    (representative, tree) the arc and start step bringing the tree to every other NPU, within
    ``find`` deterministic seconds, then ``improve`` more to move edges to earlier steps (also
    :mod:`~tacos.solvers.forest.timed`'s program: arcs of one hop and one step).  The answer
    (None too: nothing found within the limit) is remembered on disk under the inputs in
    their order (:mod:`~tacos.solvers.forest.disk_cache`): a second compile of the same shape
    reads it back instead of solving (and importing CP-SAT) again."""
    from tacos.solvers.forest.disk_cache import remembered

    inputs = {"group": list(group), "reps": list(reps), "k": k,
              "arcs": [[u, v, [list(h) for h in hops], d]
                       for (u, v), (hops, d) in arcs.items()],
              "caps": [[x, z, c] for (x, z), c in caps.items()],
              "lanes": [[x, z, c] for (x, z), c in lanes.items()],
              "images": [[rep, [[a, b] for a, b in m.items()]] for rep, m in images],
              "islands": [list(i) for i in islands], "steps": steps, "find": find,
              "improve": improve}
    return remembered("timed", inputs,
                      lambda: _solved(group, reps, k, arcs, caps, lanes, images, islands,
                                      steps, find, improve),
                      _encode, lambda data: _decode(data, group, reps, k))


def _encode(found: Found | None) -> list | None:
    """``found`` as JSON-able data: [representative, tree, [[NPU, parent, step], ...]]."""
    if found is None:
        return None
    return [[r, i, [[v, u, s] for v, (u, s) in parent.items()]]
            for (r, i), parent in found.items()]


def _decode(data: list | None, group: tuple[int, ...], reps: list[int], k: int
            ) -> Found | None:
    """:func:`_encode`'s data back; ValueError unless every (representative, tree) of
    ``reps`` x k brings every other NPU of ``group`` once."""
    if data is None:
        return None
    from tacos.solvers.forest.disk_cache import ints

    out: Found = {}
    members = set(group)
    for entry in data:
        r, i, rows = entry
        parent = {}
        for row in rows:
            v, u, s = ints(row, 3)
            parent[v] = (u, s)
        if type(r) is not int or type(i) is not int or set(parent) != members - {r} \
                or not members.issuperset(u for u, _ in parent.values()):
            raise ValueError("not a program's answer")
        out[r, i] = parent
    if set(out) != {(r, i) for r in reps for i in range(k)}:
        raise ValueError("not a program's answer")
    return out


def _solved(group: tuple[int, ...], reps: list[int], k: int,
            arcs: dict[Arc, tuple[tuple[Edge, ...], int]], caps: dict[Edge, int],
            lanes: dict[Edge, int], images: list[tuple[int, dict[int, int]]],
            islands: list[tuple[int, ...]], steps: int, find: float, improve: float,
            ) -> Found | None:
    """:func:`_solve`'s answer, solved by CP-SAT (through :mod:`~tacos.solvers.forest.sat`,
    which loads without pandas)."""
    from tacos.solvers.forest import sat

    model = sat.Model()
    y = _program(model, group, reps, k, arcs, caps, lanes, images, islands, steps)
    solver = sat.Solver()
    solver.parameters.num_workers = 1  # deterministic (with a deterministic time limit)
    solver.parameters.max_deterministic_time = find
    if solver.solve(model) not in (sat.OPTIMAL, sat.FEASIBLE):
        return None
    first = {key: solver.value(var) for key, var in y.items()}
    if improve > 0:
        _earliest(model, y, arcs, first)
        solver.parameters.max_deterministic_time = improve
        if solver.solve(model) in (sat.OPTIMAL, sat.FEASIBLE):
            first = {key: solver.value(var) for key, var in y.items()}
        # (else the packing found stands: the improvement ran out of time before its hint)
    out: Found = defaultdict(dict)
    for (r, i, (u, v), s), on in first.items():
        if on:
            out[r, i][v] = (u, s)
    return dict(out)


def _program(model: Any, group: tuple[int, ...], reps: list[int], k: int,
             arcs: dict[Arc, tuple[tuple[Edge, ...], int]], caps: dict[Edge, int],
             lanes: dict[Edge, int], images: list[tuple[int, dict[int, int]]],
             islands: list[tuple[int, ...]], steps: int) -> dict[tuple, Any]:
    """Builds :func:`_solve`'s program in ``model`` (a :class:`~tacos.solvers.forest.sat.Model`
    or a ``cp_model.CpModel``: the same calls); the Boolean of every (representative, tree,
    arc, start step)."""
    y: dict[tuple[int, int, Arc, int], Any] = {}
    for r in reps:
        for i in range(k):
            arrival = {v: model.new_int_var(0 if v == r else 1, 0 if v == r else steps, "")
                       for v in group}
            into: dict[int, list] = defaultdict(list)
            by_arc: dict[Arc, list] = defaultdict(list)
            for (u, v), (_, d) in arcs.items():
                if v == r:
                    continue
                for s in range(1, steps - d + 2):
                    var = y[r, i, (u, v), s] = model.new_bool_var("")
                    model.add(arrival[u] <= s - 1).only_enforce_if(var)
                    into[v].append((s + d - 1, var))
                    by_arc[u, v].append(var)
            for v in group:
                if v != r:
                    model.add_exactly_one(var for _, var in into[v])
                    model.add(arrival[v] == sum(t * var for t, var in into[v]))
            for island in islands:
                inside = set(island)
                entries = [var for (u, v), vs in by_arc.items()
                           if v in inside and u not in inside for var in vs]
                model.add(sum(entries) == (0 if r in inside else 1))
    per_step: dict[tuple[Edge, int], list] = defaultdict(list)
    total: dict[Edge, list] = defaultdict(list)
    for rep, m in images:
        for (r, _i, (u, v), s), var in y.items():
            if r != rep:
                continue
            hops, d = arcs[u, v]
            for x, z in hops:
                h = (m.get(x, x), m.get(z, z))
                total[h].append(var)
                for t in range(s, s + d):
                    per_step[h, t].append(var)
    for (h, _t), terms in per_step.items():
        if len(terms) > lanes[h]:
            model.add(sum(terms) <= lanes[h])
    for h, terms in total.items():
        if len(terms) > caps.get(h, 0):
            model.add(sum(terms) <= caps.get(h, 0))
    return y


def _earliest(model: Any, y: dict[tuple, Any], arcs: dict[Arc, tuple[tuple[Edge, ...], int]],
              first: dict[tuple, int]) -> None:
    """Turns :func:`_program`'s model into the improvement: the packing ``first`` as its hint,
    the sum of arrivals minimized."""
    for key, var in y.items():
        model.add_hint(var, first[key])
    model.minimize(sum((s + arcs[a][1] - 1) * var for (_r, _i, a, s), var in y.items()))


def _tree(root: int, parent: dict[int, tuple[int, int]], m: dict[int, int],
          arcs: dict[Arc, tuple[tuple[Edge, ...], int]]) -> Tree:
    """The tree of a (parent, start step) map under automorphism ``m``: edges in start order
    (parents before children), physical paths through the switches, ``order`` = start steps."""
    edges = sorted((s, u, v) for v, (u, s) in parent.items())

    def path(u: int, v: int) -> tuple[int, ...]:
        hops = arcs[u, v][0]
        return tuple(m.get(x, x) for x in (hops[0][0], *(z for _, z in hops)))

    return Tree(m[root], 1, [(m[u], m[v]) for _, u, v in edges],
                [path(u, v) for _, u, v in edges], order=[s for s, _, _ in edges])


def _symmetries(group: tuple[int, ...], arcs: dict[Arc, tuple[tuple[Edge, ...], int]],
                lanes: dict[Edge, int], caps: dict[Edge, int]) -> list[dict[int, int]]:
    """Automorphisms of the arcs labelled (lanes, duration, capacity of their hops), extended
    to the switches on their routes; only those mapping every hop onto a hop of equal lanes and
    capacity are kept (the identity first)."""
    label = {a: (tuple(sorted((lanes[h], caps.get(h, 0)) for h in hops)), d)
             for a, (hops, d) in arcs.items()}
    codes = {c: i + 1 for i, c in enumerate(sorted(set(label.values())))}
    out = []
    for m in automorphisms(group, {a: codes[c] for a, c in label.items()}):
        full = dict(m)
        ok = True
        for (u, v), (hops, _) in arcs.items():
            image = arcs.get((m[u], m[v]))
            if image is None or len(image[0]) != len(hops):
                ok = False
                break
            for (x, z), (x2, z2) in zip(hops, image[0], strict=True):
                for p, q in ((x, x2), (z, z2)):
                    if full.setdefault(p, q) != q:
                        ok = False
        if ok and all(lanes[h] == lanes.get((full[h[0]], full[h[1]]), 0)
                      and caps.get(h, 0) == caps.get((full[h[0]], full[h[1]]), 0)
                      for hops, _ in arcs.values() for h in hops):
            out.append(full)
    return out


def _tight(island: tuple[int, ...], roots: tuple[int, ...], k: int,
           caps: dict[Edge, int]) -> bool:
    """Whether the physical capacity into ``island`` is exactly what its entries need (k per
    root outside it): then every tree enters it once.  A looser cut (2x MI250's boxes at
    k = 2: the package cuts make the NICs carry 1.5 entries per tree) is left free."""
    inside = set(island)
    into = sum(c for (x, z), c in caps.items() if z in inside and x not in inside)
    return into == k * sum(r not in inside for r in roots)


def timed_link_trees(topology: Topology, group: tuple[int, ...], roots: tuple[int, ...],
                     k: int, caps: dict[Edge, int], islands: list[tuple[int, ...]] = ()
                     ) -> list[Tree] | None:
    """k step-timed trees per root over the physical links of ``topology`` (module docstring),
    checked against the physical capacities ``caps`` (the rate's for k trees per root); None
    when the view has no switch route, the program is too large or finds nothing within
    :data:`EXTRA_STEPS` extra steps, or OR-Tools (the ``ilp`` extra) is not installed."""
    if not forest_shallow.have_cp_sat():
        return None
    built = link_arcs(topology, group)
    if built is None:
        return None
    arcs, lanes = built
    if all(len(hops) == 1 for hops, _ in arcs.values()):
        return None  # no switch path: forest_timed's program
    orbits = representatives(roots, _symmetries(group, arcs, lanes, caps))
    if orbits is None:
        return None
    images, reps = orbits
    busy: dict[Edge, int] = defaultdict(int)
    for hops, d in arcs.values():
        for h in hops:
            busy[h] = max(busy[h], d)
    low = max(math.ceil(caps.get(h, 0) * d / lanes[h]) for h, d in busy.items())
    kept = [tuple(i) for i in islands if len(i) > 1 and _tight(i, roots, k, caps)]
    for steps in range(low, low + EXTRA_STEPS + 1):
        size = len(reps) * k * sum(max(0, steps - d + 1) for _, d in arcs.values())
        if size > MAX_BINARIES:
            return None
        found = None
        if BUILD:
            from tacos.solvers.forest.timed_build import built_packing

            found = built_packing(group, reps, k, arcs, caps, lanes, list(images.values()),
                                  kept, steps)
        if found is None:
            found = _solve(group, reps, k, arcs, caps, lanes, list(images.values()), kept,
                           steps)
        if found is not None:
            break
    else:
        return None
    out = [_tree(rep, found[rep, i], m, arcs) for v in sorted(roots)
           for rep, m in (images[v],) for i in range(k)]
    return checked(group, roots, out, k, caps)
