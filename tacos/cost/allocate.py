"""Split a per-NPU bandwidth budget across the dimensions of a hierarchical topology
(seed 000, §IV: EqualBW, MessageBW, SmartBW).

The workload is a list of operations (:class:`Op`: a collective, its size, its process groups
and a repeat count) run one after another.  A cost model (the hierarchical one by default)
prices each on the topology; since every hop runs in one dimension, its time is
``Σ_steps max_i (A_i + W_i · (1/b))`` in the per-dimension link bandwidths ``b``
(:mod:`tacos.cost.terms`), convex in ``b``.  :func:`allocate` minimizes it subject to
``Σ_k b_k = budget`` and ``b_k ≥ minimum``:

* **exact** when every step has a single term (``T = A + Σ_k C_k / b_k``): the Lagrange
  condition gives ``b_k ∝ √C_k`` (the seed's SmartBW, generalized to any number of
  dimensions, with bounds by water-filling); for one pipelined operation
  (``T = max_k (A_k + C_k / b_k)``) all dimensions finish together, ``b_k = C_k / (τ − A_k)``
  with τ found by root bracketing (MessageBW plus latency);
* otherwise **scipy.optimize.minimize (SLSQP)** on the epigraph form (one variable per step
  bounding its terms: a smooth convex program, so its optimum is global); for the
  time × cost objective, which is not convex, SLSQP from several starts.

The result is checked against an exhaustive grid (``grid_step``, 10 GB/s by default) of the
same model, and the best candidates can be confirmed by simulation (:func:`confirm`).
"""

from __future__ import annotations

import math
import time as _time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from itertools import combinations

import numpy as np

from tacos.cost.models import Context, canonical, plan
from tacos.cost.terms import Terms, plan_terms
from tacos.errors import TacosError
from tacos.model.topology import Topology

GB = 1e9


@dataclass(frozen=True)
class Op:
    """A collective of ``size`` bytes on process groups, repeated ``count`` times.

    ``inner=K``: groups of K consecutive NPUs (model parallelism over the first dimensions);
    ``outer=K``: K NPUs at stride N/K (data parallelism across them); neither: all NPUs.
    """

    kind: str
    size: int
    inner: int | None = None
    outer: int | None = None
    count: int = 1

    def groups(self, npus: Sequence[int]) -> list[list[int]]:
        """The concurrent process groups of this operation among ``npus``."""
        n = len(npus)
        k = self.inner or self.outer or n
        if k < 1 or n % k:
            raise TacosError(f"cannot cut {n} NPUs into groups of {k}",
                             hint="the group size must divide the NPU count")
        if self.outer:
            stride = n // k
            return [[npus[s + stride * i] for i in range(k)] for s in range(stride)]
        return [list(npus[i:i + k]) for i in range(0, n, k)]

    def label(self) -> str:
        """E.g. ``allreduce 64 MiB (inner 16) x3``."""
        from tacos.model.units import format_size

        scope = (f" (inner {self.inner})" if self.inner else
                 f" (outer {self.outer})" if self.outer else "")
        return f"{self.kind} {format_size(self.size)}{scope}" + (
            f" x{self.count}" if self.count > 1 else "")


def parse_op(text: str) -> Op:
    """``KIND:SIZE[:inner=K|outer=K][:xCOUNT]``, e.g. ``allreduce:1GiB:outer=64:x2``."""
    from tacos.model.units import parse_quantity

    parts = text.split(":")
    hint = "write KIND:SIZE[:inner=K|outer=K][:xCOUNT], e.g. allreduce:64MiB:inner=16"
    if len(parts) < 2:
        raise TacosError(f"cannot read workload operation {text!r}", hint=hint)
    try:
        size = int(parse_quantity(parts[1], "size", default_unit="B"))
    except ValueError as exc:
        raise TacosError(f"{text!r}: {exc}", hint=hint) from None
    op = Op(parts[0], size)
    for p in parts[2:]:
        key, _, val = p.partition("=")
        try:
            if key in ("inner", "outer"):
                op = replace(op, **{key: int(val)})
            elif p.startswith("x"):
                op = replace(op, count=int(p[1:]))
            else:
                raise ValueError
        except ValueError:
            raise TacosError(f"{text!r}: cannot read {p!r}", hint=hint) from None
    from tacos.limits import MAX_INTEGER, check_number

    problem = check_number("size", op.size)
    if problem is not None:
        raise TacosError(f"{text!r}: {problem}", hint=hint)
    for what, value in (("inner", op.inner), ("outer", op.outer), ("count", op.count)):
        if value is not None and not 1 <= value <= MAX_INTEGER:
            raise TacosError(f"{text!r}: {what} must be a whole number from 1 to 2^53, "
                             f"not {value}", hint=hint)
    return op


def dimensions(topology: Topology) -> tuple[int, ...]:
    """The dimensions the links of ``topology`` carry (every link must carry one)."""
    dims = sorted({lk.dim for lk in topology.links if lk.dim is not None})
    if not dims or any(lk.dim is None for lk in topology.links):
        raise TacosError("bandwidth allocation needs a multi-dimensional topology (every link "
                         "with a dimension)",
                         hint="describe it with 'dims npu Ring(4)_FC(2)_Switch(8) ...'")
    return tuple(dims)


def with_bandwidths(topology: Topology, bandwidth: dict[int, float]) -> Topology:
    """A copy whose dimension-k links run at ``bandwidth[k]`` B/s."""
    return topology.with_links(replace(lk, bandwidth=bandwidth[lk.dim])
                               for lk in topology.links)


def workload_terms(topology: Topology, ops: Sequence[Op], *, model: str = "hierarchical",
                   pipelined: bool = False, ctx: Context | None = None) -> Terms:
    """The workload's time as :class:`~tacos.cost.terms.Terms` of the per-dim bandwidths."""
    dims = dimensions(topology)
    ctx = ctx or Context(topology)
    model = canonical(model)
    if model in ("nccl", "axonn"):
        raise TacosError(f"the {model} model cannot be split per dimension",
                         hint="use hierarchical, ring, direct, halving-doubling or tree")
    npus = list(topology.live_npus)
    out = []
    for op in ops:
        p = plan(ctx, model, op.kind, op.groups(npus))
        try:
            out.append((op.count, plan_terms(p, op.size, dims)))
        except ValueError as exc:
            raise TacosError(f"cannot price {op.label()} per dimension: {exc}") from None
    terms = Terms(dims, tuple(out), pipelined)
    if pipelined and any(len(st.dims) != 1 for _, steps in terms.ops for st in steps):
        raise TacosError("pipelined allocation needs every step inside one dimension")
    return terms


@dataclass
class Allocation:
    """The answer: the split, its predicted time/cost, how it was found and the grid check."""

    dims: tuple[int, ...]
    budget: float
    bandwidth: np.ndarray
    time: float
    cost: float | None
    objective: str
    method: str
    search_seconds: float
    grid_step: float | None = None
    grid_best: np.ndarray | None = None
    grid_time: float | None = None
    grid_points: int = 0
    references: dict[str, tuple[np.ndarray, float]] = field(default_factory=dict)
    candidates: list[dict] = field(default_factory=list)

    @property
    def grid_value(self) -> float | None:
        """The objective at the grid's best point."""
        return self.grid_time


def _value(terms: Terms, b: np.ndarray, prices: np.ndarray | None) -> np.ndarray:
    t = terms.time(b)
    if prices is None:
        return t
    return t * (np.atleast_2d(b) @ prices / GB)


def _single_terms(terms: Terms) -> list[tuple[float, np.ndarray]] | None:
    """Every step's only term ``(count·A, count·W)``, or None when some step has several."""
    if terms.pipelined and len(terms.ops) != 1:
        return None
    out = []
    for count, steps in terms.ops:
        for st in steps:
            if len(st.a) != 1:
                return None
            out.append((count * st.a[0], count * st.w[0]))
    return out


def _water_fill(c: np.ndarray, budget: float, lo: float) -> np.ndarray:
    """argmin Σ c_k / b_k s.t. Σ b = budget, b ≥ lo: b_k ∝ √c_k on the unclamped set."""
    free = np.ones(len(c), dtype=bool)
    b = np.full(len(c), lo)
    for _ in range(len(c) + 1):
        root = np.sqrt(np.maximum(c, 0.0))
        left = budget - lo * (~free).sum()
        total = root[free].sum()
        if total <= 0:
            b[free] = left / free.sum()
            return b
        b[free] = left * root[free] / total
        low = free & (b < lo)
        if not low.any():
            return b
        free &= ~low
        b[~free] = lo
    return b


def _equalize(steps: list, dims: int, budget: float, lo: float) -> np.ndarray | None:
    """One pipelined op, one term per step: min max_k (A_k + C_k / b_k), Σ b = budget."""
    from scipy.optimize import brentq

    a = np.zeros(dims)
    c = np.zeros(dims)
    for ak, wk in steps:
        k = int(np.argmax(wk))
        a[k] += ak
        c[k] += wk[k]

    def need(tau: float) -> float:
        with np.errstate(divide="ignore"):
            b = np.where(c > 0, c / np.maximum(tau - a, 1e-300), 0.0)
        return np.maximum(b, lo).sum() - budget

    lo_tau = a.max() * (1 + 1e-12) + 1e-18
    hi_tau = lo_tau + (c.sum() / max(lo, 1e-9)) + 1.0
    if need(hi_tau) > 0:
        return None
    tau = brentq(need, lo_tau, hi_tau, xtol=1e-15, rtol=1e-13, maxiter=500)
    b = np.maximum(np.where(c > 0, c / (tau - a), 0.0), lo)
    return b * budget / b.sum()


def _slsqp(terms: Terms, budget: float, lo: float, prices: np.ndarray | None,
           starts: list[np.ndarray]) -> np.ndarray:
    """Epigraph program: min Σ count·s_j with s_j ≥ A_ij + W_ij / b (sequential) or
    min Σ t_o with t_o ≥ count_o Σ_{j of o in dim k} s_j (pipelined), Σ b = budget.

    Variables are scaled to order one: u = b / budget, σ = s / T_ref, τ = t / T_ref.
    """
    from scipy.optimize import minimize

    d = len(terms.dims)
    steps = [(count, st) for count, sts in terms.ops for st in sts]
    nj = len(steps)
    n_ops = len(terms.ops) if terms.pipelined else 0
    ref = float(terms.time(np.full(d, budget / d))[0]) or 1.0
    counts = np.array([c for c, _ in steps], dtype=float)
    p_scale = None if prices is None else prices * budget / GB

    nx = d + nj + n_ops
    sel = np.zeros(nx)
    if terms.pipelined:
        sel[d + nj:] = 1.0
    else:
        sel[d:d + nj] = counts

    def objective(x):
        val = sel @ x
        return val * (x[:d] @ p_scale) if p_scale is not None else val

    def gradient(x):
        if p_scale is None:
            return sel
        g = sel * (x[:d] @ p_scale)
        g[:d] += (sel @ x) * p_scale
        return g

    def eq_jac(x):
        g = np.zeros(nx)
        g[:d] = 1.0
        return g

    cons = [{"type": "eq", "fun": lambda x: x[:d].sum() - 1.0, "jac": eq_jac}]
    for j, (_, st) in enumerate(steps):
        a, w = st.a / ref, st.w / (budget * ref)

        def g(x, j=j, a=a, w=w):
            return x[d + j] - (a + w @ (1.0 / x[:d]))

        def g_jac(x, j=j, w=w):
            jac = np.zeros((len(w), nx))
            jac[:, :d] = w / x[:d] ** 2
            jac[:, d + j] = 1.0
            return jac
        cons.append({"type": "ineq", "fun": g, "jac": g_jac})
    if terms.pipelined:
        j = 0
        for o, (count, sts) in enumerate(terms.ops):
            idx: dict[int, list[int]] = {k: [] for k in terms.dims}
            for st in sts:
                (k,) = st.dims
                idx[k].append(d + j)
                j += 1
            for js in idx.values():
                row = np.zeros(nx)
                row[d + nj + o] = 1.0
                row[js] = -count

                def h(x, row=row):
                    return row @ x
                cons.append({"type": "ineq", "fun": h, "jac": lambda x, row=row: row})
    bounds = [(lo / budget, 1.0)] * d + [(0.0, None)] * (nj + n_ops)
    best = None
    for b0 in starts:
        u0 = b0 / budget
        s0 = [st.time(1.0 / b0[None, :])[0] / ref for _, st in steps]
        t0 = []
        if terms.pipelined:
            t0 = [2 * count * terms.time(b0)[0] / ref for count, _ in terms.ops]
        res = minimize(objective, np.concatenate([u0, s0, t0]), jac=gradient, method="SLSQP",
                       bounds=bounds, constraints=cons, options={"maxiter": 500, "ftol": 1e-13})
        b = np.clip(res.x[:d], lo / budget, 1.0)
        b = budget * b / b.sum()
        val = _value(terms, b, prices)[0]
        if best is None or val < best[0]:
            best = (val, b)
    return best[1]


MAX_GRID_POINTS = 2_000_000
"""Most splits the exhaustive grid check may enumerate (a finer step is refused up front)."""


def grid_size(d: int, budget: float, step: float, lo: float) -> int:
    """How many splits :func:`grid` would enumerate, without enumerating them."""
    units = int(round(budget / step))
    first = max(1, math.ceil(lo / step - 1e-9))
    free = units - first * d
    return 0 if free < 0 else math.comb(free + d - 1, d - 1)


def _check_grid(d: int, budget: float, step: float, lo: float) -> None:
    count = grid_size(d, budget, step, lo)
    if count > MAX_GRID_POINTS:
        raise TacosError(f"a grid of {step / GB:g} GB/s steps over {d} dimensions has "
                         f"{count:,} splits, more than {MAX_GRID_POINTS:,}",
                         hint="use a larger grid step (--grid-step), or 0 for no grid check")


def grid(d: int, budget: float, step: float, lo: float) -> np.ndarray:
    """Every split of ``budget`` into ``d`` multiples of ``step`` that are at least ``lo``."""
    _check_grid(d, budget, step, lo)
    units = int(round(budget / step))
    first = max(1, math.ceil(lo / step - 1e-9))
    free = units - first * d
    if free < 0:
        return np.zeros((0, d))
    rows = []
    for bars in combinations(range(free + d - 1), d - 1):
        parts = np.diff(np.concatenate([[-1], bars, [free + d - 1]])) - 1
        rows.append(parts + first)
    return np.array(rows, dtype=float) * step


def message_split(terms: Terms, budget: float) -> np.ndarray:
    """The seed's MessageBW: bandwidth in proportion to the bytes each dimension carries."""
    c = np.zeros(len(terms.dims))
    for count, steps in terms.ops:
        for st in steps:
            c += count * st.w.max(axis=0)
    if c.sum() <= 0:
        return np.full(len(c), budget / len(c))
    return budget * c / c.sum()


def _check_inputs(budget: float, minimum: float | None, prices: Sequence[float] | None,
                  grid_step: float | None) -> None:
    """Numbers must be finite and in range before the search (a NaN price would never
    converge); bandwidths use the range of :data:`tacos.limits.RANGES`."""
    from tacos.limits import check_number

    for what, value in (("budget", budget), ("minimum", minimum), ("grid step", grid_step)):
        if value is None or (what != "budget" and value == 0):
            continue
        problem = check_number("bandwidth", value)
        if problem is not None:
            raise TacosError(f"{what}: {problem}")
    for p in prices if prices is not None else ():
        if isinstance(p, bool) or not isinstance(p, int | float) or not math.isfinite(p) or p < 0:
            raise TacosError(f"prices must be finite numbers >= 0, not {p!r}")


def allocate(terms: Terms, budget: float, *, minimum: float | None = None,
             prices: Sequence[float] | None = None, grid_step: float | None = 10 * GB
             ) -> Allocation:
    """The split of ``budget`` B/s per NPU minimizing the workload's predicted time (or time ×
    cost with ``prices`` in $ per GB/s per dimension); see the module doc for the method."""
    d = len(terms.dims)
    _check_inputs(budget, minimum, prices, grid_step)
    lo = minimum if minimum is not None else min(budget / (10 * d), 1 * GB)
    if lo * d > budget:
        raise TacosError("the budget is smaller than the minimum bandwidth of every dimension")
    if grid_step:
        _check_grid(d, budget, grid_step, lo)  # before the search, not after it
    price = None if prices is None else np.asarray(prices, dtype=float)
    if price is not None and len(price) != d:
        raise TacosError(f"give one price per dimension ({d})")
    t0 = _time.perf_counter()
    method = ""
    b = None
    single = _single_terms(terms) if price is None else None
    if single is not None and not terms.pipelined:
        b = _water_fill(sum(w for _, w in single), budget, lo)
        method = "exact: Lagrange condition, b_k ∝ √C_k (T = A + Σ C_k/b_k)"
    elif single is not None:
        b = _equalize(single, d, budget, lo)
        method = "exact: every dimension finishes together, b_k = C_k/(τ − A_k)"
    equal = np.full(d, budget / d)
    msg = message_split(terms, budget)
    if b is None:
        # the time objective is convex: one start reaches its optimum; time x cost is not
        starts = [equal] if price is None else [equal, np.maximum(msg, lo)]
        b = _slsqp(terms, budget, lo, price, starts)
        method = ("scipy.optimize.minimize (SLSQP) on the convex epigraph program"
                  if price is None else
                  "scipy.optimize.minimize (SLSQP), several starts (time x cost is not convex)")
    seconds = _time.perf_counter() - t0
    value = float(_value(terms, b, price)[0])
    out = Allocation(terms.dims, budget, b, float(terms.time(b)[0]),
                     None if price is None else float(b @ price / GB), "time" if price is None
                     else "time x cost", method, seconds)
    out.references = {"EqualBW": (equal, float(_value(terms, equal, price)[0])),
                      "MessageBW": (msg, float(_value(terms, np.maximum(msg, lo), price)[0]))}
    if grid_step:
        pts = grid(d, budget, grid_step, lo)
        if len(pts):
            vals = _value(terms, pts, price)
            i = int(np.argmin(vals))
            out.grid_step, out.grid_best, out.grid_time = grid_step, pts[i], float(vals[i])
            out.grid_points = len(pts)
            if vals[i] < value * (1 - 1e-9):  # the search lost to the grid: take the grid's
                out.bandwidth, out.time = pts[i], float(terms.time(pts[i])[0])
                out.method += " (beaten by the grid; grid point kept)"
    return out
