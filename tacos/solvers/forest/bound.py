"""What a packing could gain: lower bounds on the time of any schedule of one phase's trees.

forest times many packings (tree counts, island orders, candidates) and keeps the fastest
schedule.  A packing whose lower bound is not below the best schedule timed so far cannot win,
so the solver neither times it nor, for the integer-program candidates, builds it
(:mod:`~tacos.solvers.forest.candidates`, ``costly``).

* :func:`load_bound` -- of a built packing: every tree carries its share ``data · mult / k``
  over every physical link of its edges' routes; a pair of nodes joined by parallel links
  carries at most Σ bandwidth × multiplicity bytes per second, so no schedule of these trees
  ends before the busiest pair's bytes / that capacity.
* :func:`rate_floor` -- of any packing with k trees per root (equal shares) on the same
  capacities, before building it: the rate's ``slowdown`` × x* · data.  For the exact rate it is
  the min-cut optimum; for a fixed k, the capacities ⌊U·b_e⌋ at the smallest feasible U
  (:func:`~tacos.solvers.forest.rate.fixed_k_rate`) carry every k-tree packing, so that
  packing's busiest link needs at least max_e caps_e / b_e tree units of time.

Both ignore α (every byte's latency), so they are exact at large sizes and loose at small
ones; they only ever skip work that cannot pay off.
"""

from __future__ import annotations

from collections import defaultdict

from tacos.solvers.forest.packing import Forest
from tacos.solvers.forest.view import RouteView

SLACK = 1e-9
"""Relative margin below which a bound counts as reaching the best time (float noise)."""


def load_bound(forest: Forest, data_per_root: float, view: RouteView) -> float:
    """Seconds no schedule of ``forest``'s trees can beat: the busiest node pair's bytes over
    its capacity (see the module docstring)."""
    links = view.topology.links
    load: dict[tuple[int, ...], float] = defaultdict(float)
    for tree in forest.trees:
        share = data_per_root * tree.mult / forest.rate.k
        for path in tree.paths:
            for choices in view.hop(path, forest.reverse).links:
                load[choices] += share
    best = 0.0
    for choices, nbytes in load.items():
        cap = sum(links[i].bandwidth * links[i].multiplicity for i in choices)
        if cap > 0:
            best = max(best, nbytes / cap)
    return best


def rate_floor(forest: Forest, data_per_root: float) -> float:
    """Seconds no packing of ``forest.rate.k`` equal trees per root on the same capacities can
    beat (see the module docstring)."""
    return forest.rate.slowdown * forest.optimal_time(data_per_root)


def cannot_win(bound: float, best: float | None) -> bool:
    """Whether a packing bounded below by ``bound`` seconds cannot beat ``best``."""
    return best is not None and bound >= best * (1 - SLACK)
