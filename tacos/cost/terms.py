"""A plan's time as a function of the per-dimension bandwidths.

On a multi-dimensional topology every hop runs in one dimension, so each quantity a step
takes the maximum of (a send's rounds, a pipeline path, a shared link's busy time) is affine
in ``y_k = 1/b_k``:  ``A + Σ_k W_k · y_k``.  A step's time is the maximum of such terms and a
plan's time their sum over steps,

    T(b) = Σ_steps max_i ( A_i + W_i · (1/b) )

which is convex in ``b`` (and the constraints in ``y`` are linear).  :func:`step_terms`
expands a routed step into its (deduplicated, undominated) terms; :class:`Terms` evaluates a
whole workload for many bandwidth vectors at once with numpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import product

import numpy as np

from tacos.cost.steps import Plan, StepCost

_MAX_TERMS = 4096


def _send_vec(cost, size: float, dims: Sequence[int]) -> tuple[float, np.ndarray]:
    if cost.by_dim is None:
        raise ValueError("a send crosses links without a single dimension")
    w = np.zeros(len(dims))
    for k, hops in cost.by_dim:
        w[dims.index(k)] += cost.send.frac * size * hops
    return cost.alpha, w


def _hop_vecs(cost, size: float, dims: Sequence[int]) -> list[tuple[float, np.ndarray]]:
    """Each hop of a send as a term (a one-hop send: the send itself)."""
    if len(cost.legs) <= 1:
        return [_send_vec(cost, size, dims)]
    out = []
    for a, _, k in cost.legs:
        w = np.zeros(len(dims))
        w[dims.index(k)] = cost.send.frac * size
        out.append((a, w))
    return out


def _prune(rows: list[tuple[float, np.ndarray]]) -> list[tuple[float, np.ndarray]]:
    """Drop duplicates and terms no larger than another term in every coordinate."""
    uniq: dict[tuple, tuple[float, np.ndarray]] = {}
    for a, w in rows:
        uniq.setdefault((round(a, 18),) + tuple(np.round(w, 18)), (a, w))
    items = list(uniq.values())
    keep = []
    for i, (a, w) in enumerate(items):
        dominated = any(j != i and b >= a and np.all(v >= w) and (b > a or np.any(v > w) or j < i)
                        for j, (b, v) in enumerate(items))
        if not dominated:
            keep.append((a, w))
    return keep


def _sum_sets(sets: Sequence[list[tuple[float, np.ndarray]]]) -> list[tuple[float, np.ndarray]]:
    """All sums of one term from each set (max of sums = sum of maxes), pruned as it goes."""
    out = [(0.0, None)]
    for terms in sets:
        nxt = [(a + b, w if v is None else v + w) for (a, v), (b, w) in product(out, terms)]
        out = _prune(nxt)
        if len(out) > _MAX_TERMS:
            raise ValueError("too many pipeline paths to expand")
    return out


def step_terms(step: StepCost, size: float, dims: Sequence[int]
               ) -> list[tuple[float, np.ndarray]]:
    """The affine terms whose maximum is the step's time (see module doc)."""
    vecs = [_send_vec(s, size, dims) for s in step.sends]
    hops = [_hop_vecs(s, size, dims) for s in step.sends]
    loads = [s.send.load for s in step.sends]
    # rounds of a send: t_s + (load - 1) · (its slowest hop), a max over its hops
    rows = [(a + (load - 1) * ha, w + (load - 1) * hw)
            for load, (a, w), hs in zip(loads, vecs, hops, strict=True) for ha, hw in hs]
    mode, segs = step.step.mode, step.step.segments
    for cycle in step.step.cycles:  # chains of consecutive rounds around each ring
        rounds = max(loads[i] for i in cycle)
        n = len(cycle)
        full, rem = divmod(rounds, n)
        total_a = full * sum(vecs[i][0] for i in cycle)
        total_w = full * sum(vecs[i][1] for i in cycle)
        for start in range(n if rem else 1):
            win = [cycle[(start + j) % n] for j in range(rem)]
            rows.append((total_a + sum(vecs[i][0] for i in win),
                         total_w + sum((vecs[i][1] for i in win), np.zeros(len(dims)))))
    if mode != "rounds":
        segments = segs or (tuple((i,) for i in range(len(vecs))),)
        fill_sets = [[(sum(vecs[i][0] for i in path), sum(vecs[i][1] for i in path))
                      for path in seg] for seg in segments if seg]
        fill = _sum_sets(fill_sets)
        if mode == "pipeline":
            steady = [((load - 1) * ha, (load - 1) * hw)
                      for load, hs in zip(loads, hops, strict=True) for ha, hw in hs]
            rows = _sum_sets([fill, _prune(steady)])
        else:
            rows = rows + fill
    for lk in step.links:
        if lk.dim is None:
            raise ValueError("a shared link has no dimension")
        w = np.zeros(len(dims))
        w[dims.index(lk.dim)] = size * lk.volume / lk.multiplicity
        rows.append((lk.alpha / lk.multiplicity, w))
    return _prune(rows)


@dataclass(frozen=True)
class StepTerms:
    """One step's terms: ``a`` (n,) seconds, ``w`` (n, D) byte-seconds per B/s, and the
    dimensions it uses."""

    a: np.ndarray
    w: np.ndarray
    dims: frozenset[int]

    def time(self, y: np.ndarray) -> np.ndarray:
        """Step time for inverse bandwidths ``y`` (G, D) -> (G,)."""
        return (self.a[None, :] + y @ self.w.T).max(axis=1)


@dataclass(frozen=True)
class Terms:
    """A workload: operations run one after another, each ``count`` times, each a list of
    steps; ``pipelined`` operations overlap their dimensions (time = the busiest
    dimension's share) instead of running stage after stage."""

    dims: tuple[int, ...]
    ops: tuple[tuple[int, tuple[StepTerms, ...]], ...]
    pipelined: bool = False

    def time(self, b: np.ndarray) -> np.ndarray:
        """Predicted workload time for bandwidth vectors ``b`` ((G, D) or (D,), B/s)."""
        b = np.atleast_2d(np.asarray(b, dtype=float))
        y = 1.0 / b
        total = np.zeros(len(b))
        for count, steps in self.ops:
            if not self.pipelined:
                for st in steps:
                    total += count * st.time(y)
                continue
            per_dim = np.zeros((len(b), len(self.dims)))
            for st in steps:
                (k,) = st.dims
                per_dim[:, self.dims.index(k)] += st.time(y)
            total += count * per_dim.max(axis=1)
        return total


def plan_terms(plan: Plan, size: float, dims: Sequence[int]) -> tuple[StepTerms, ...]:
    """Every step of ``plan`` as :class:`StepTerms` for a collective of ``size`` bytes."""
    out = []
    for st in plan.steps:
        rows = step_terms(st, size, dims)
        used = frozenset(k for s in st.sends for k, _ in (s.by_dim or ()))
        a = np.array([r[0] for r in rows])
        w = np.array([r[1] for r in rows]).reshape(len(rows), len(dims))
        out.append(StepTerms(a, w, used))
    return tuple(out)
