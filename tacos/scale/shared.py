"""Shared late digits: the parts of an all-reduce that ride the late rail digits together.

A part of a multi-rail Clos all-reduce pays the route α of every rail transfer it makes: with
one lane per NIC link (``docs/machine-model.md``) the NIC is held for that α, so the rails are
busy for the bandwidth term plus every part's α.  Parts exist to pipeline the NVSwitch with the
rails (a short fill and drain), and only the **early** rail digits need them: those carry most
of the bytes (a binary digit halves the held range, a radix-5 digit keeps a fifth), so while
the rails reduce-scatter one part's early digits the NVSwitch has time to reduce-scatter the
next part.  The **late** digits carry little, so a **group** of parts can take them together,
as joint phases (:class:`~tacos.model.symmetric_plan.Phase`, ``joint``) whose template moves
the group's held ranges at once and pays each α once for the group:

    per part of the group:  NVSwitch RS, early rail RS digits
    the group together:     late rail RS digits, fused digits, late rail AG digits
    per part of the group:  early rail AG digits, NVSwitch AG

A part's rail α falls from every digit twice to its early digits twice, plus its group's late
digits shared by the group.  :func:`candidates` picks group shapes and part weights on an
affine model of the stages (fitted to template solves, :func:`stage_model`) with a small
simulation of the two link classes (:func:`model_end`); :func:`build` makes the plan with the
real templates and the list scheduler :func:`~tacos.scale.pipeline.schedule_tasks`, and
:func:`tacos.scale.synthesize.synthesize_symmetric` keeps it when it is faster.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from tacos.model.schedule import Schedule
from tacos.model.symmetric_plan import Phase, SymmetricPlan
from tacos.model.symmetry import SymmetricSystem
from tacos.model.topology import Topology
from tacos.scale.pipeline import schedule_tasks

Solve = Callable[[Topology, str, int], Schedule]
MAX_FUSED = 6  # as tacos.scale.synthesize.MAX_FUSED


def applies(system: SymmetricSystem, kind: str) -> bool:
    """True for an all-reduce on a system whose first axis has a link class of its own and
    whose other axes (at least two) share one: a multi-rail Clos (NVSwitch, rail digits)."""
    if kind != "allreduce" or len(system.axes) < 3:
        return False
    res = [system.resource(a) for a in range(len(system.axes))]
    return res[0] not in res[1:] and len(set(res[1:])) == 1


@dataclass(frozen=True)
class SharedLayout:
    """``groups``: integer weights of the parts, group by group (a part's share of the buffer
    is its weight over the sum); ``early``: per group, the rail digits each of its parts runs
    alone."""

    groups: tuple[tuple[int, ...], ...]
    early: tuple[int, ...]


def _joint_steps(system: SymmetricSystem, late: Sequence[int], region: int, solve: Solve,
                 fuse: bool) -> list[tuple[int, str, Schedule]]:
    """The group's late phases on ``region`` bytes held (the group's ranges together): the
    reduce-scatters, as many fused digits (trailing binary axes) as make them shortest, the
    all-gathers back."""
    k = 0
    while fuse and k < min(len(late), MAX_FUSED) and system.axes[late[-1 - k]].size == 2:
        k += 1
    best: list[tuple[int, str, Schedule]] | None = None
    worse = 0
    for fused in range(k + 1):
        cut = len(late) - fused
        out, r = [], region
        for a in late[:cut]:
            out.append((a, "reducescatter", solve(system.template(a), "reducescatter", r)))
            r //= system.axes[a].size
        for a in late[cut:]:
            out.append((a, "allreduce", solve(system.template(a), "allreduce", r)))
        for a in reversed(late[:cut]):
            r *= system.axes[a].size
            out.append((a, "allgather", solve(system.template(a), "allgather", r)))
        if best is None or _busy(out) < _busy(best):
            best, worse = out, 0
        else:
            worse += 1
            if worse == 2:
                break
    assert best is not None
    return best


def _busy(steps: list[tuple[int, str, Schedule]]) -> float:
    return sum(t.makespan for _, _, t in steps)


def build(system: SymmetricSystem, kind: str, size: int, layout: SharedLayout, solve: Solve,
          fuse: bool = True) -> SymmetricPlan | None:
    """The plan of ``layout`` (None when a part would hold less than a byte per NPU or the
    layout leaves no late digit)."""
    from tacos.scale.synthesize import axis_order, split

    n = system.n_npus
    flat = [w for g in layout.groups for w in g]
    sizes = split(size, flat, n)
    order = axis_order(system, kind, 0)
    first, rails = order[0], order[1:]
    if min(sizes) < n or len(layout.early) != len(layout.groups) \
            or not all(0 <= j < len(rails) for j in layout.early):
        return None
    rail = system.resource(rails[0])
    specs: list[tuple[int, int, str, Schedule, tuple[int, ...]]] = []
    preds: list[list[int]] = []
    rail_chain: list[list[int]] = []  # the rails in layout order (a variant of the schedule)
    last: dict[int, int] = {}
    chain = [-1]

    def add(part: int, axis: int, k: str, t: Schedule, joint: tuple[int, ...] = ()) -> None:
        i = len(specs)
        ps = {last[q] for q in (part, *joint) if q in last}
        extra = []
        if system.resource(axis) == rail:
            if chain[0] >= 0:
                extra.append(chain[0])
            chain[0] = i
        specs.append((part, axis, k, t, joint))
        preds.append(sorted(ps))
        rail_chain.append(extra)
        for q in (part, *joint):
            last[q] = i

    region = list(sizes)
    q0 = 0
    fused_counts = []
    for group, j in zip(layout.groups, layout.early, strict=True):
        early, late = rails[:j], rails[j:]
        qs = list(range(q0, q0 + len(group)))
        q0 += len(group)
        for q in qs:
            for a in (first, *early):
                add(q, a, "reducescatter", solve(system.template(a), "reducescatter", region[q]))
                region[q] //= system.axes[a].size
        steps = _joint_steps(system, late, sum(region[q] for q in qs), solve, fuse)
        fused_counts.append(sum(k == "allreduce" for _, k, _ in steps))
        for a, k, t in steps:
            add(qs[0], a, k, t, tuple(qs[1:]))
        for q in qs:
            for a in (*reversed(early), first):
                region[q] *= system.axes[a].size
                add(q, a, "allgather", solve(system.template(a), "allgather", region[q]))
    resources = [system.resource(a) for _, a, _, _, _ in specs]
    durations = [t.makespan for _, _, _, t, _ in specs]
    best = None
    chained = [sorted({*p, *c}) for p, c in zip(preds, rail_chain, strict=True)]
    for ag_first, deps in ((True, chained), (False, chained), (True, preds), (False, preds)):
        ranks = [int((k == "allgather") != ag_first) for _, _, k, _, _ in specs]
        starts = schedule_tasks(resources, durations, deps, ranks)
        end = max(s + d for s, d in zip(starts, durations, strict=True))
        if best is None or end < best[0]:
            best = (end, starts)
    assert best is not None
    phases = tuple(Phase(q, a, k, t, st, joint)
                   for (q, a, k, t, joint), st in zip(specs, best[1], strict=True))
    meta = {"parts": len(sizes), "fused_digits": ",".join(map(str, fused_counts)),
            "shared": " ".join(f"{','.join(map(str, g))}:{j}"
                               for g, j in zip(layout.groups, layout.early, strict=True))}
    return SymmetricPlan(system, kind, sum(sizes), sizes, phases, meta)


# -- choosing layouts on an affine model ---------------------------------------------------------

@dataclass(frozen=True)
class StageModel:
    """Stage times ``a + b w`` of a part of share ``w`` (the group's late stage: of the group's
    share): NVSwitch reduce-scatter, early rail reduce-scatters, the late stage, early rail
    all-gathers, NVSwitch all-gather."""

    nvs_rs: tuple[float, float]
    early_rs: tuple[float, float]
    late: tuple[float, float]
    early_ag: tuple[float, float]
    nvs_ag: tuple[float, float]


def stage_model(system: SymmetricSystem, kind: str, size: int, early: int, solve: Solve,
                fuse: bool = True) -> StageModel | None:
    """The stages of :func:`build`'s plans, fitted through template solves (cached by
    ``solve``) of a part of a quarter and a thirty-second of ``size``, and of a group of the
    whole and an eighth of it; None when the layout leaves no late digit."""
    from tacos.scale.synthesize import axis_order

    n = system.n_npus
    order = axis_order(system, kind, 0)
    first, rails = order[0], order[1:]
    early_axes, late = rails[:early], rails[early:]
    if not late:
        return None
    shrink = int(np.prod([system.axes[a].size for a in (first, *early_axes)]))

    def part(w: float) -> list[float]:
        r = max(n, int(size * w) // n * n)
        out = [0.0] * 4
        for a in (first, *early_axes):
            out[0 if a == first else 1] += solve(system.template(a), "reducescatter",
                                                 r).makespan
            r //= system.axes[a].size
        for a in (*reversed(early_axes), first):
            r *= system.axes[a].size
            out[3 if a == first else 2] += solve(system.template(a), "allgather", r).makespan
        return out

    def group(w: float) -> float:
        r = max(n, int(size * w) // n * n) // shrink
        return _busy(_joint_steps(system, late, r, solve, fuse))

    def fit(w1: float, t1: float, w2: float, t2: float) -> tuple[float, float]:
        b = max((t1 - t2) / (w1 - w2), 0.0)
        return max(t1 - b * w1, 0.0), b

    p1, p2 = part(1 / 4), part(1 / 32)
    f = [fit(1 / 4, x, 1 / 32, y) for x, y in zip(p1, p2, strict=True)]
    return StageModel(f[0], f[1], fit(1.0, group(1.0), 1 / 8, group(1 / 8)), f[2], f[3])


def model_end(model: StageModel | Sequence[StageModel], groups: Sequence[Sequence[float]]
              ) -> float:
    """The end of a layout with shares ``groups`` on the affine ``model`` (one, or one per
    group): the rails take the stages in layout order (each part's early reduce-scatters, the
    group's late stage, each part's early all-gathers); the NVSwitch takes a ready all-gather
    first, else the next reduce-scatter."""
    models = [model] * len(groups) if isinstance(model, StageModel) else list(model)
    rail: list[tuple[float, float]] = []   # (a, b) of each rail stage, in order
    rs: list[tuple[float, float, float]] = []   # (a, b, w) of each NVSwitch reduce-scatter
    ag_ab: list[tuple[float, float]] = []  # (a, b) of the NVSwitch all-gather after a stage
    kinds: list[int] = []
    for m, ws in zip(models, groups, strict=True):
        for w in ws:
            rail.append((m.early_rs[0] + m.early_rs[1] * w, w))
            kinds.append(0)
            ag_ab.append((0.0, 0.0))
            rs.append((m.nvs_rs[0], m.nvs_rs[1], w))
        rail.append((m.late[0] + m.late[1] * sum(ws), sum(ws)))
        kinds.append(1)
        ag_ab.append((0.0, 0.0))
        for w in ws:
            rail.append((m.early_ag[0] + m.early_ag[1] * w, w))
            kinds.append(2)
            ag_ab.append(m.nvs_ag)
    rs_done: list[float] = []
    ag: list[tuple[float, float]] = []
    nvs = t = end = 0.0
    ri = e = 0
    inf = float("inf")
    while ri < len(rail) or ag or len(rs_done) < len(rs):
        rt = inf
        if ri < len(rail):
            if kinds[ri] != 0:
                rt = t
            elif e < len(rs_done):
                rt = max(t, rs_done[e])
        nt = nvs if (ag or len(rs_done) < len(rs)) else inf
        if rt < inf and (rt <= nt or (not (ag and ag[0][0] <= nvs)
                                      and len(rs_done) == len(rs) and rt < ag[0][0])):
            t = max(t, rt) + rail[ri][0]
            if kinds[ri] == 0:
                e += 1
            elif kinds[ri] == 2:
                a, b = ag_ab[ri]
                ag.append((t, a + b * rail[ri][1]))
            ri += 1
            continue
        if ag and ag[0][0] <= nvs:
            nvs += ag.pop(0)[1]
            end = max(end, nvs)
        elif len(rs_done) < len(rs):
            a, b, w = rs[len(rs_done)]
            nvs += a + b * w
            rs_done.append(nvs)
        else:
            r, d = ag.pop(0)
            nvs = max(nvs, r) + d
            end = max(end, nvs)
    return max(end, t)


SHAPES = ((3, 6, 3), (4, 8, 4), (5, 10, 5), (4, 6, 4), (3, 8, 3), (5, 5, 5), (4, 4, 4, 4))
MAX_EARLY = 4


def best_shares(model: StageModel | Sequence[StageModel], shape: Sequence[int],
                seed: int = 0, restarts: int = 4) -> tuple[float, list[list[float]]]:
    """Shares for groups of ``shape`` parts minimizing :func:`model_end`: Nelder-Mead from a
    ramp (small parts in the first and last group), restarted ``restarts`` times from the best
    point perturbed (``seed`` draws the perturbations)."""
    from scipy.optimize import minimize

    n = sum(shape)

    def cut(x: np.ndarray) -> list[list[float]]:
        w = np.abs(x) / np.abs(x).sum()
        it = iter(w.tolist())
        return [[next(it) for _ in range(k)] for k in shape]

    rng = np.random.default_rng(seed)
    x = np.ones(n)
    x[:shape[0]] = 0.2
    x[n - shape[-1]:] = 0.2
    best = None
    for _ in range(restarts):
        x0 = x * np.exp(0.3 * rng.standard_normal(n))
        res = minimize(lambda v: model_end(model, cut(v)), x0, method="Nelder-Mead",
                       options={"maxiter": 300 * n, "adaptive": True, "xatol": 1e-8,
                                "fatol": 1e-12})
        if best is None or res.fun < best[0]:
            best = (float(res.fun), res.x)
            x = np.abs(res.x)
    assert best is not None
    return best[0], cut(best[1])


def candidates(system: SymmetricSystem, kind: str, size: int, solve: Solve, fuse: bool = True,
               seed: int = 0, keep: int = 3) -> list[SharedLayout]:
    """The ``keep`` layouts :func:`model_end` finds fastest: for the two early-digit counts
    (up to :data:`MAX_EARLY`) best on the shape (4, 8, 4), every shape of :data:`SHAPES`,
    shares by :func:`best_shares`, as integer weights."""
    if not applies(system, kind):
        return []
    n_rails = len(system.axes) - 1
    models = {}
    for j in range(1, min(MAX_EARLY, n_rails - 1) + 1):
        m = stage_model(system, kind, size, j, solve, fuse)
        if m is not None:
            models[j] = m
    if not models:
        return []
    probe = sorted((best_shares(m, (4, 8, 4), seed, restarts=1)[0], j) for j, m in models.items())
    found = []
    for _, j in probe[:2]:
        for shape in SHAPES:
            end, shares = best_shares(models[j], shape, seed)
            weights = tuple(tuple(max(1, round(x * 10000)) for x in g) for g in shares)
            found.append((end, SharedLayout(weights, (j,) * len(shape))))
    found.sort(key=lambda x: x[0])
    return [lay for _, lay in found[:keep]]
