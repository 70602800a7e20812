"""Step-timed tree packings by constraint programming, for small groups of directly linked NPUs.

A packing at the exact rate says how many tree edges every link carries over the whole
collective, not when.  On a box of directly linked NPUs (1x MI250: 16 GCDs, k = 3 trees per
root, every xGMI lane carrying exactly 7 tree edges at the optimum) the list schedule then has
to discover an order, and fill, drain and waits cost 5–20% of the optimal time.

:func:`timed_trees` decides the order with the trees: every tree edge gets a *step* 1 … S, and

* y[t, a, s] ∈ {0, 1}: arc a = (u, v) brings tree t's data to v at step s; every non-root NPU
  receives exactly once, the root never;
* the step of an arc is later than the step that brought the tree to u (u's *arrival*, 0 at the
  root): arrival(t, u) ≤ s − 1 whenever y[t, (u, v), s];
* at every step an arc carries at most as many tree edges as it has parallel lanes, and over
  all steps at most the packing's integer capacity U·b_e;
* behind a scarce cut (the islands of :func:`~tacos.solvers.islands.find_islands`, e.g. an
  MI250 package's two GCDs) every tree enters each island exactly once, and never the root's
  own island: at the exact rate the cut has no capacity to spare for a second entry.

With one round every step is one equal transfer per lane, so the pipeline takes about
S · (slice time + α): S = 8 on 1x MI250, where every external lane is busy 7 of the 8 steps (7
is proved infeasible: the last transfers into a package must still cross to its other GCD).
The list schedule (:func:`~tacos.solvers.forest.pipeline.emit`) sends a round's ready transfers
in step order (``Tree.order``), and rounds tapered at the end (2, 1; 16, 16, 8, 4, 2, 1)
shorten the drain.

The program is built for one root of every orbit of the capacity graph's automorphism group
(as :mod:`~tacos.solvers.forest.shallow` does: the other roots take the images of their
representative's trees, and every per-step capacity row sums those images).  S starts at the
larger of the roots' hop eccentricity and the busiest arc's capacity per lane, and is raised by
one while the program is proved infeasible or not solved within :data:`FIND_TIME`
deterministic seconds (CP-SAT on one worker: the same input gives the same trees).  The result
is checked with :func:`~tacos.solvers.forest.pack.check_packing`.  OR-Tools is optional (the
``ilp`` extra): without it there is no candidate.
"""

from __future__ import annotations

import math

from tacos.solvers.forest import shallow as forest_shallow
from tacos.solvers.forest.pack import Tree, checked
from tacos.solvers.forest.rate import Edge
from tacos.solvers.forest.shallow import automorphisms, representatives
from tacos.solvers.forest.split import SplitGraph, hop_distances, successors
from tacos.solvers.forest.timed_links import _solve

MAX_BINARIES = 6000
"""Largest program (tree × arc × step variables) attempted: 1x MI250's is 5376 (about a second
to find); two NDv2 chassis joined by one link (TE-CCL's model) would take 8448 and 5.5 s, for
trees that lose there."""
EXTRA_STEPS = 2
"""Step counts tried above the smallest possible one."""
FIND_TIME = 6.0
"""Deterministic seconds (CP-SAT's work measure) to find a packing with a given step count."""
IMPROVE_TIME = 1.5
"""Deterministic seconds to move tree edges to earlier steps (the sum of the steps minimized
from the packing found, which is the search's hint): slack before every transfer's deadline,
which the tapered rounds' drain uses (1x MI250 at 64 MiB: 85.0% of the optimum with rounds
2, 1 from the first packing found, 89.0% after)."""


def _island_steps(island: tuple[int, ...], arcs: list[Edge], lanes: dict[Edge, int],
                  need: int) -> int:
    """Fewest steps for ``need`` trees to enter ``island`` once each, one per lane and step,
    none at the last step (a tree entering then could not reach the island's other NPUs)."""
    inside = set(island)
    slots = sum(lanes[a] for a in arcs if a[1] in inside and a[0] not in inside)
    return math.ceil(need / slots) + 1 if slots else 0


def _tree(root: int, parent: dict[int, tuple[int, int]], m: dict[int, int]) -> Tree:
    """The tree of a (parent, step) map under automorphism ``m``: edges in step order (parents
    before children), ``order`` = each edge's step."""
    edges = sorted(((s, m[u], m[v]) for v, (u, s) in parent.items()))
    return Tree(m[root], 1, [(u, v) for _, u, v in edges], [(u, v) for _, u, v in edges],
                order=[s for s, _, _ in edges])


def timed_trees(group: tuple[int, ...], roots: tuple[int, ...], k: int, split: SplitGraph,
                caps: dict[Edge, int], lanes: dict[Edge, int],
                islands: list[tuple[int, ...]] = ()) -> list[Tree] | None:
    """k step-timed trees per root (module docstring) on the direct links of ``split``
    (``lanes[a]`` = parallel lanes of arc a), every tree entering each of ``islands`` once;
    None when a split arc stands for a switch path, the program is too large or finds nothing
    within :data:`EXTRA_STEPS` extra steps, the result does not check against ``caps``, or
    OR-Tools (the ``ilp`` extra) is not installed."""
    if not forest_shallow.have_cp_sat():  # (looked up here, so tests can switch it off)
        return None
    arcs = sorted(a for a, c in split.caps.items() if c > 0)
    if not arcs or any(x not in group or y not in group or lanes.get((x, y), 0) < 1
                       for x, y in arcs):
        return None
    if any(len(p) != 2 for a in arcs for p, _ in split.paths.get(a, [((a[0], a[1]), 1)])):
        return None
    orbits = representatives(roots, automorphisms(group, split.caps))
    if orbits is None:
        return None
    images, reps = orbits
    succ = successors(split.caps)
    low = max(max(max(hop_distances(succ, r).values()) for r in reps),
              max(math.ceil(split.caps[a] / lanes[a]) for a in arcs))
    kept = [tuple(i) for i in islands if len(i) > 1]
    outside = {i: k * sum(r not in i for r in roots) for i in kept}
    low = max([low, *(_island_steps(i, arcs, lanes, outside[i]) for i in kept)])
    for steps in range(low, low + EXTRA_STEPS + 1):
        if len(reps) * k * len(arcs) * steps > MAX_BINARIES:
            return None
        found = _solve(group, reps, k, {a: ((a,), 1) for a in arcs}, split.caps, lanes,
                       list(images.values()), kept, steps, FIND_TIME, IMPROVE_TIME)
        if found is not None:
            break
    else:
        return None
    out = [_tree(rep, found[rep, i], m) for v in sorted(roots)
           for rep, m in (images[v],) for i in range(k)]
    return checked(group, roots, out, k, caps)
