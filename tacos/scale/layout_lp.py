"""Part sizes from a linear program over the pipeline's critical paths.

A part of a symmetric plan goes through **stages**: runs of consecutive phases on one link class
(on a multi-rail Clos all-reduce: the NVSwitch reduce-scatter, the rail digits, the NVSwitch
all-gather).  A stage's time is close to affine in the part's share ``w`` of the buffer,
``a + b w`` (``a``: the α of its transfers, ``b w``: its bytes).  If every stage had a link
class of its own and took the parts in order (a flow shop), the plan would end at the longest
monotone path through the (part, stage) grid: stage 0 for parts 1..q1, stage 1 for parts
q1..q2, and so on.  That is linear in the weights, so the weights that minimize it are a
linear program (:func:`lp_weights`): small first parts (a short fill), small last parts (a
short drain), and as few parts as the α of every part allows.  Stages that share a link class
(the NVSwitch's two) only make the real plan longer, so the optimum is an estimate from below
for plans of this shape; :func:`tacos.scale.synthesize.synthesize_symmetric` tries its
weights, rounded, among its layouts and keeps what the real pipeline makes fastest.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations_with_replacement

import numpy as np

from tacos.model.symmetric_plan import SymmetricPlan


def stage_times(plan: SymmetricPlan, part: int = 0) -> list[float]:
    """Durations of ``part``'s stages (runs of phases on one link class), in order."""
    system = plan.system
    mine = sorted((p for p in plan.phases if p.part == part), key=lambda p: p.start)
    out: list[float] = []
    last = None
    for ph in mine:
        res = system.resource(ph.axis)
        if res != last:
            out.append(0.0)
            last = res
        out[-1] += ph.template.makespan
    return out


def affine(whole: Sequence[float], piece: Sequence[float], k: int) -> list[tuple[float, float]]:
    """``(a, b)`` per stage from the stage times of the whole buffer (``whole``) and of one of
    ``k`` equal parts (``piece``): ``t(w) = a + b w`` through both points."""
    out = []
    for t1, tk in zip(whole, piece, strict=True):
        b = (t1 - tk) * k / (k - 1)
        out.append((max(t1 - b, 0.0), max(b, 0.0)))
    return out


def lp_weights(stages: Sequence[tuple[float, float]], n_parts: int
               ) -> tuple[float, tuple[float, ...]]:
    """``(end, weights)``: the part weights (summing to 1) that minimize the flow-shop end of
    ``n_parts`` parts through ``stages`` (``(a, b)`` each), and that end."""
    from scipy.optimize import linprog

    s, p = len(stages), n_parts
    a = np.array([x for x, _ in stages])
    b = np.array([y for _, y in stages])
    rows, rhs = [], []
    # a monotone path: stage j covers parts cuts[j]..cuts[j+1] (inclusive), cuts nondecreasing
    for inner in combinations_with_replacement(range(p), s - 1):
        cuts = (0, *inner, p - 1)
        row = np.zeros(p + 1)
        const = 0.0
        for j in range(s):
            lo, hi = cuts[j], cuts[j + 1]
            row[lo:hi + 1] += b[j]
            const += a[j] * (hi - lo + 1)
        row[p] = -1.0                      # path <= z
        rows.append(row)
        rhs.append(-const)
    cost = np.zeros(p + 1)
    cost[p] = 1.0
    res = linprog(cost, A_ub=np.array(rows), b_ub=np.array(rhs),
                  A_eq=np.r_[np.ones(p), 0.0][None, :], b_eq=[1.0],
                  bounds=[(0, None)] * (p + 1), method="highs")
    if not res.success:
        return float("inf"), ()
    return float(res.fun), tuple(float(x) for x in res.x[:p])


def lp_layouts(stages: Sequence[tuple[float, float]], counts: Sequence[int],
               scale: int = 1000) -> list[tuple[int, ...]]:
    """The LP's weights for each part count in ``counts``, as integer weights (parts the LP
    leaves empty dropped), best LP end first."""
    found = []
    for n in counts:
        end, w = lp_weights(stages, n)
        ints = tuple(max(1, round(x * scale)) for x in w if x * scale >= 0.5)
        if ints:
            found.append((end, ints))
    found.sort()
    return list(dict.fromkeys(w for _, w in found))
