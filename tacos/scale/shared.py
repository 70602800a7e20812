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
digits shared by the group.  Groups may nest (:class:`SharedLayout`: pairs of parts taking
middle digits together inside a group, and so on); :func:`layout_end` times any layout on
fitted template times (:class:`AffineTemplates`) with the real scheduler.  :func:`candidates`
picks group shapes and part weights on an affine model of the stages (fitted to template
solves, :func:`stage_model`) with a small simulation of the two link classes
(:func:`model_end`); :func:`build` makes the plan with the real templates and the list
scheduler :func:`~tacos.scale.pipeline.schedule_tasks`, and
:func:`tacos.scale.synthesize.synthesize_symmetric` keeps it when it is faster.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tacos.model.schedule import Schedule
from tacos.model.symmetric_plan import Phase, SymmetricPlan
from tacos.model.symmetry import SymmetricSystem
from tacos.model.topology import Topology
from tacos.scale.parts import axis_order, busy, least_busy, split
from tacos.scale.pipeline import schedule_tasks

Solve = Callable[[Topology, str, int], Schedule]
Mix = Callable[[Topology, int, int], Schedule | None]
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
    """``groups``: the parts' integer weights (a part's share of the buffer is its weight over
    the sum), grouped: a group is a tuple of parts (ints) or, nested, of subgroups of one depth.
    ``early``: per group, its cuts, one per level: a part runs the rail digits before
    ``cuts[0]`` alone, a subgroup of depth d (a tuple of parts: d = 1) runs the digits from
    ``cuts[d - 1]`` to ``cuts[d]`` together, the group itself from its last cut to the end
    (an int: one cut, a group of parts).  ``mixed``: chosen for mixed phases (:func:`pairs`;
    :func:`tacos.scale.synthesize.synthesize_symmetric` builds it with them)."""

    groups: tuple[Any, ...]
    early: tuple[Any, ...]
    mixed: bool = False

    def cuts(self, g: int) -> tuple[int, ...]:
        """Group g's cuts as a tuple."""
        e = self.early[g]
        return (e,) if isinstance(e, int) else tuple(e)


def _joint_steps(system: SymmetricSystem, late: Sequence[int], region: int, solve: Solve,
                 fuse: bool) -> list[tuple[int, str, Schedule]]:
    """The group's late phases on ``region`` bytes held (the group's ranges together): the
    reduce-scatters, as many fused digits (trailing binary axes) as make them shortest, the
    all-gathers back."""
    k = 0
    while fuse and k < min(len(late), MAX_FUSED) and system.axes[late[-1 - k]].size == 2:
        k += 1
    def phases(fused: int) -> list[tuple[int, str, Schedule]]:
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
        return out

    return least_busy(phases(fused) for fused in range(k + 1))


def _leaves(node: Any) -> list[int]:
    return [node] if isinstance(node, int) else [w for c in node for w in _leaves(c)]


def _depth(node: Any) -> int | None:
    """Nesting depth of a group (parts: 0), None when its subgroups differ in depth."""
    if isinstance(node, int):
        return 0
    if not node:
        return None
    ds = {_depth(c) for c in node}
    return None if len(ds) != 1 or None in ds else 1 + ds.pop()  # type: ignore[operator]


class _Tasks:
    """The phases of a layout as tasks for :func:`~tacos.scale.pipeline.schedule_tasks`."""

    def __init__(self, system: SymmetricSystem, rail: str) -> None:
        self.system, self.rail = system, rail
        self.specs: list[tuple[int, int, str, Any, tuple[int, ...], tuple[int, ...]]] = []
        self.preds: list[list[int]] = []
        self.chain: list[list[int]] = []  # the rails in layout order (a schedule variant)
        self.last: dict[int, int] = {}
        self.rail_last = -1

    def add(self, parts: Sequence[int], axis: int, k: str, t: Any,
            scatter: Sequence[int] = ()) -> None:
        i = len(self.specs)
        every = (*parts, *scatter)
        self.preds.append(sorted({self.last[q] for q in every if q in self.last}))
        extra = []
        if self.system.resource(axis) == self.rail:
            if self.rail_last >= 0:
                extra.append(self.rail_last)
            self.rail_last = i
        self.chain.append(extra)
        self.specs.append((parts[0], axis, k, t, tuple(parts[1:]), tuple(scatter)))
        for q in every:
            self.last[q] = i

    def schedule(self, variants: int = 4) -> tuple[float, list[float]]:
        """(end, starts) of the best of the scheduler variants (all-gathers or
        reduce-scatters first on a tie; rails in layout order or free)."""
        resources = [self.system.resource(a) for _, a, _, _, _, _ in self.specs]
        durations = [t.makespan for _, _, _, t, _, _ in self.specs]
        chained = [sorted({*p, *c}) for p, c in zip(self.preds, self.chain, strict=True)]
        best: tuple[float, list[float]] | None = None
        for ag_first, deps in ((True, chained), (False, chained), (True, self.preds),
                               (False, self.preds))[:variants]:
            ranks = [int((k == "allgather") != ag_first) for _, _, k, _, _, _ in self.specs]
            starts = schedule_tasks(resources, durations, deps, ranks)
            end = max((s + d for s, d in zip(starts, durations, strict=True)), default=0.0)
            if best is None or end < best[0]:
                best = (end, starts)
        assert best is not None
        return best


def pairs(layout: SharedLayout) -> dict[int, int]:
    """Part ids of a mixed layout: the i-th part of a group (of parts, not nested) -> the i-th
    part of the next group, when both cut their early digits at the same place."""
    out: dict[int, int] = {}
    start = 0
    firsts = []
    for g in layout.groups:
        firsts.append(start)
        start += len(_leaves(g))
    for g in range(len(layout.groups) - 1):
        a, b = layout.groups[g], layout.groups[g + 1]
        if _depth(a) != 1 or _depth(b) != 1 or layout.cuts(g) != layout.cuts(g + 1) \
                or layout.cuts(g)[0] < 1:
            continue
        for i in range(min(len(a), len(b))):
            out[firsts[g] + i] = firsts[g + 1] + i
    return out


def _emit(system: SymmetricSystem, kind: str, sizes: Sequence[int], layout: SharedLayout,
          solve: Solve, fuse: bool, mix: Mix | None = None) -> tuple[_Tasks, list[int]] | None:
    """The tasks of ``layout`` with templates from ``solve`` (anything with a ``makespan``),
    and the fused digits of each group; None when the layout is malformed for ``system``.
    ``mix`` (a mixed-template maker, :func:`tacos.scale.mixed.mixed_template`): the early
    all-gathers of a group's i-th part ride with the early reduce-scatters of the next group's
    i-th part (:func:`pairs`), digit by digit, wherever the mixed template is shorter than
    the two apart."""
    order = axis_order(system, kind, 0)
    first, rails = order[0], order[1:]
    if len(layout.early) != len(layout.groups):
        return None
    tasks = _Tasks(system, system.resource(rails[0]))
    region = list(sizes)
    fused_counts: list[int] = []
    paired = pairs(layout) if mix is not None else {}
    started: set[int] = set()    # parts whose NVSwitch reduce-scatter is already emitted
    carried: set[int] = set()    # parts whose early reduce-scatters rode a mixed phase

    def ride(p: int, q: int, axes: Sequence[int]) -> None:
        """Part p's all-gathers along ``axes`` with part q's reduce-scatters along them."""
        assert mix is not None
        if q not in started:
            run([q], (first,), "reducescatter")
            started.add(q)
        for a in axes:
            r = system.axes[a].size
            topo = system.template(a)
            region[p] *= r
            ag = solve(topo, "allgather", region[p])
            rs = solve(topo, "reducescatter", region[q])
            both = mix(topo, region[p], region[q])
            if both is not None and both.makespan < ag.makespan + rs.makespan:
                tasks.add([p], a, "allgather", both, (q,))
            else:
                tasks.add([p], a, "allgather", ag)
                tasks.add([q], a, "reducescatter", rs)
            region[q] //= r
        carried.add(q)

    def run(parts: list[int], axes: Sequence[int], k: str) -> None:
        for a in axes:
            r = system.axes[a].size
            if k == "allgather":
                for q in parts:
                    region[q] *= r
            tasks.add(parts, a, k, solve(system.template(a), k, sum(region[q] for q in parts)))
            if k == "reducescatter":
                for q in parts:
                    region[q] //= r

    def down(node: Any, cuts: tuple[int, ...], top: bool) -> list[int]:
        """Reduce-scatters of ``node`` (part ids, nested as the group) up to its joint
        phases; the parts it holds."""
        if isinstance(node, int):
            if node in carried:
                return [node]
            run([node], (first,) if node in started else (first, *rails[:cuts[0]]),
                "reducescatter")
            return [node]
        qs = [q for c in node for q in down(c, cuts, False)]
        d = _depth(node)
        assert d is not None
        lo = cuts[d - 1]
        if top:
            steps = _joint_steps(system, rails[lo:], sum(region[q] for q in qs), solve, fuse)
            fused_counts.append(sum(k == "allreduce" for _, k, _ in steps))
            for a, k, t in steps:
                tasks.add(qs, a, k, t)
                if k != "allreduce":
                    r = system.axes[a].size
                    for q in qs:
                        region[q] = region[q] // r if k == "reducescatter" else region[q] * r
        else:
            run(qs, rails[lo:cuts[d]], "reducescatter")
        return qs

    def up(node: Any, cuts: tuple[int, ...], top: bool) -> None:
        """The all-gathers of ``node`` after its parent's."""
        if isinstance(node, int):
            if node in paired:
                ride(node, paired[node], rails[:cuts[0]])
                run([node], (first,), "allgather")
            else:
                run([node], (*reversed(rails[:cuts[0]]), first), "allgather")
            return
        if not top:
            d = _depth(node)
            assert d is not None
            run(_leaves(node), tuple(reversed(rails[cuts[d - 1]:cuts[d]])), "allgather")
        for c in node:
            up(c, cuts, False)

    def number(node: Any, ids: Any) -> Any:
        """``node`` with its parts replaced by their ids, in order."""
        return next(ids) if isinstance(node, int) else tuple(number(c, ids) for c in node)

    ids = iter(range(len(sizes)))
    for g, group in enumerate(layout.groups):
        cuts = layout.cuts(g)
        d = _depth(group)
        if d is None or d < 1 or len(cuts) != d or list(cuts) != sorted(set(cuts)) \
                or cuts[0] < 0 or cuts[-1] >= len(rails):
            return None
        numbered = number(group, ids)
        down(numbered, cuts, True)
        up(numbered, cuts, True)
    return tasks, fused_counts


def build(system: SymmetricSystem, kind: str, size: int, layout: SharedLayout, solve: Solve,
          fuse: bool = True, mix: Mix | None = None) -> SymmetricPlan | None:
    """The plan of ``layout`` (None when a part would hold less than a byte per NPU or the
    layout is malformed: subgroups of one group of different depths, cuts that do not rise or
    leave the group no late digit); ``mix``: with mixed phases (:func:`_emit`)."""
    n = system.n_npus
    flat = [w for g in layout.groups for w in _leaves(g)]
    sizes = split(size, flat, n)
    if min(sizes) < n:
        return None
    made = _emit(system, kind, sizes, layout, solve, fuse, mix)
    if made is None:
        return None
    tasks, fused_counts = made
    _, starts = tasks.schedule()
    phases = tuple(Phase(q, a, k, t, st, joint, scatter)
                   for (q, a, k, t, joint, scatter), st in zip(tasks.specs, starts, strict=True))
    meta = {"parts": len(sizes), "fused_digits": ",".join(map(str, fused_counts)),
            "shared": " ".join(f"{_text(g)}:{','.join(map(str, layout.cuts(i)))}"
                               for i, g in enumerate(layout.groups))}
    if mix is not None:
        meta["mixed_phases"] = sum(bool(p.scatter) for p in phases)
    return SymmetricPlan(system, kind, sum(sizes), sizes, phases, meta)


def _text(node: Any) -> str:
    return str(node) if isinstance(node, int) else "(" + ",".join(map(_text, node)) + ")"


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
        return busy(_joint_steps(system, late, r, solve, fuse))

    def fit(w1: float, t1: float, w2: float, t2: float) -> tuple[float, float]:
        b = max((t1 - t2) / (w1 - w2), 0.0)
        return max(t1 - b * w1, 0.0), b

    p1, p2 = part(1 / 4), part(1 / 32)
    f = [fit(1 / 4, x, 1 / 32, y) for x, y in zip(p1, p2, strict=True)]
    return StageModel(f[0], f[1], fit(1.0, group(1.0), 1 / 8, group(1 / 8)), f[2], f[3])


def model_end(model: StageModel | Sequence[StageModel], groups: Sequence[Sequence[float]],
              saved: float | None = None) -> float:
    """The end of a layout with shares ``groups`` on the affine ``model`` (one, or one per
    group): the rails take the stages in layout order (each part's early reduce-scatters, the
    group's late stage, each part's early all-gathers); the NVSwitch takes a ready all-gather
    first, else the next reduce-scatter.  ``saved`` (mixed layouts, :func:`pairs`): the i-th
    part's early all-gathers ride with the next group's i-th part's early reduce-scatters, one
    rail stage ``saved`` seconds shorter than the two apart."""
    models = [model] * len(groups) if isinstance(model, StageModel) else list(model)
    k = len(groups)
    out_pairs = [min(len(groups[g]), len(groups[g + 1])) if saved is not None and g + 1 < k
                 else 0 for g in range(k)]
    in_pairs = [0, *out_pairs[:-1]]
    rail: list[tuple[float, float]] = []   # (time, all-gathered share) of each rail stage
    rs: list[tuple[float, float, float]] = []   # (a, b, w) of each NVSwitch reduce-scatter
    ag_ab: list[tuple[float, float]] = []  # (a, b) of the NVSwitch all-gather after a stage
    kinds: list[int] = []   # 0 early RS, 1 late, 2 early AG, 3 mixed (AG + the next RS)
    for g, (m, ws) in enumerate(zip(models, groups, strict=True)):
        for i, w in enumerate(ws):
            rs.append((m.nvs_rs[0], m.nvs_rs[1], w))
            if i >= in_pairs[g]:
                rail.append((m.early_rs[0] + m.early_rs[1] * w, w))
                kinds.append(0)
                ag_ab.append((0.0, 0.0))
        rail.append((m.late[0] + m.late[1] * sum(ws), sum(ws)))
        kinds.append(1)
        ag_ab.append((0.0, 0.0))
        for i, w in enumerate(ws):
            t_ag = m.early_ag[0] + m.early_ag[1] * w
            if i < out_pairs[g]:
                n_ = models[g + 1]
                wq = groups[g + 1][i]
                rail.append((t_ag + n_.early_rs[0] + n_.early_rs[1] * wq - (saved or 0.0), w))
                kinds.append(3)
            else:
                rail.append((t_ag, w))
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
            if kinds[ri] in (1, 2):
                rt = t
            elif e < len(rs_done):
                rt = max(t, rs_done[e])
        nt = nvs if (ag or len(rs_done) < len(rs)) else inf
        if rt < inf and (rt <= nt or (not (ag and ag[0][0] <= nvs)
                                      and len(rs_done) == len(rs) and rt < ag[0][0])):
            t = max(t, rt) + rail[ri][0]
            if kinds[ri] in (0, 3):
                e += 1
            if kinds[ri] in (2, 3):
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


SHAPES = ((3, 6, 3), (4, 8, 4), (4, 6, 4), (3, 8, 3), (5, 5, 5))
# mixed layouts pair the i-th parts of neighbouring groups: groups of like sizes pair most
MIXED_SHAPES = ((3, 8, 3), (4, 8, 4), (3, 6, 6, 3), (4, 6, 6, 4), (4, 4, 4, 4))
MAX_EARLY = 4
# fabrics smaller than this are not searched (the search costs about 3 s CPU, more than the
# whole synthesis of a 4-node fabric, and the plans there are short anyway);
# ``parts=SharedLayout(...)`` still builds a layout at any size
MIN_NPUS = 256


def best_shares(model: StageModel | Sequence[StageModel], shape: Sequence[int],
                seed: int = 0, restarts: int = 4,
                saved: float | None = None) -> tuple[float, list[list[float]]]:
    """Shares for groups of ``shape`` parts minimizing :func:`model_end`: Nelder-Mead from a
    ramp (small parts in the first and last group), restarted ``restarts`` times from the best
    point perturbed (``seed`` draws the perturbations); ``saved``: of a mixed layout (see
    :func:`model_end`)."""
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
        res = minimize(lambda v: model_end(model, cut(v), saved), x0, method="Nelder-Mead",
                       options={"maxiter": 300 * n, "adaptive": True, "xatol": 1e-8,
                                "fatol": 1e-12})
        if best is None or res.fun < best[0]:
            best = (float(res.fun), res.x)
            x = np.abs(res.x)
    assert best is not None
    return best[0], cut(best[1])


def mixed_saving(system: SymmetricSystem, kind: str, size: int, early: int, solve: Solve,
                 mix: Mix) -> float | None:
    """How much shorter a part's early all-gathers and the next part's early reduce-scatters
    are as mixed phases than apart (template solves at a sixteenth of ``size`` each; the
    saving is route α, the bytes are the same); None when some early digit has no mixed
    template or it is not shorter."""
    n = system.n_npus
    order = axis_order(system, kind, 0)
    first, rails = order[0], order[1:]
    r = max(n, size // 16 // n * n) // system.axes[first].size
    saved = 0.0
    for a in rails[:early]:
        topo = system.template(a)
        k = system.axes[a].size
        both = mix(topo, r // k * k, r // k * k)
        if both is None:
            return None
        saved += (solve(topo, "allgather", r // k * k).makespan
                  + solve(topo, "reducescatter", r // k * k).makespan - both.makespan)
        r //= k
    return saved if saved > 0 else None


def candidates(system: SymmetricSystem, kind: str, size: int, solve: Solve, fuse: bool = True,
               seed: int = 0, keep: int = 3, mix: Mix | None = None) -> list[SharedLayout]:
    """The ``keep`` layouts :func:`model_end` finds fastest (and as many mixed ones): for the
    two early-digit counts
    (up to :data:`MAX_EARLY`) best on the shape (4, 8, 4), every shape of :data:`SHAPES`,
    shares by :func:`best_shares`, as integer weights; with ``mix`` also every shape of
    :data:`MIXED_SHAPES` as a mixed layout (``SharedLayout.mixed``, its saving from
    :func:`mixed_saving`); none on fabrics of fewer than :data:`MIN_NPUS` NPUs."""
    if not applies(system, kind) or system.n_npus < MIN_NPUS:
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
            end, shares = best_shares(models[j], shape, seed, restarts=3)
            weights = tuple(tuple(max(1, round(x * 10000)) for x in g) for g in shares)
            found.append((end, SharedLayout(weights, (j,) * len(shape))))
        saved = mixed_saving(system, kind, size, j, solve, mix) if mix is not None else None
        if saved is None:
            continue
        for shape in MIXED_SHAPES:
            end, shares = best_shares(models[j], shape, seed, restarts=3, saved=saved)
            weights = tuple(tuple(max(1, round(x * 10000)) for x in g) for g in shares)
            found.append((end, SharedLayout(weights, (j,) * len(shape), mixed=True)))
    found.sort(key=lambda x: x[0])
    plain = [lay for _, lay in found if not lay.mixed][:keep]
    return plain + [lay for _, lay in found if lay.mixed][:keep]


class AffineTemplates:
    """Template times ``a + b size`` per (template, kind), fitted through two solves of
    ``solve`` (a quarter and a 64th of ``size``, rounded to the template's members): a fast
    stand-in for ``solve`` when only the times matter (:func:`layout_end`)."""

    @dataclass(frozen=True)
    class Time:
        """A template's time (what the scheduler reads of a template)."""

        makespan: float

    def __init__(self, solve: Solve, size: int) -> None:
        self.solve, self.size = solve, size
        self.fits: dict[tuple[Topology, str], tuple[float, float]] = {}

    def __call__(self, topology: Topology, kind: str, size: int) -> AffineTemplates.Time:
        key = (topology, kind)
        fit = self.fits.get(key)
        if fit is None:
            r = topology.n_npus
            s1 = max(r, self.size // 4 // r * r)
            s2 = max(r, self.size // 64 // r * r)
            t1 = self.solve(topology, kind, s1).makespan
            t2 = self.solve(topology, kind, s2).makespan
            b = (t1 - t2) / (s1 - s2) if s1 != s2 else 0.0
            fit = self.fits[key] = (t1 - b * s1, b)
        return AffineTemplates.Time(fit[0] + fit[1] * size)


def layout_end(system: SymmetricSystem, kind: str, size: int, layout: SharedLayout,
               times: AffineTemplates, fuse: bool = True, variants: int = 4) -> float:
    """The end of ``layout`` on the template times ``times`` (the scheduler of :func:`build`,
    its first ``variants`` variants); inf when malformed."""
    flat = [w for g in layout.groups for w in _leaves(g)]
    sizes = split(size, flat, system.n_npus)
    if min(sizes) < system.n_npus:
        return float("inf")
    made = _emit(system, kind, sizes, layout, times, fuse)  # type: ignore[arg-type]
    return float("inf") if made is None else made[0].schedule(variants)[0]
