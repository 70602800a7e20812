"""Symmetric synthesis: solve each group shape once, run the solution on every copy.

:func:`synthesize_symmetric` builds a :class:`~tacos.model.symmetric_plan.SymmetricPlan` for an
all-gather, reduce-scatter or all-reduce on a system of isomorphic groups
(:class:`~tacos.model.clos.ClosFabric`, :class:`~tacos.model.torus_axes.TorusAxes`):

* the collective is cut along the axes (hierarchically: an all-reduce on a multi-rail Clos is
  a reduce-scatter inside every node over its NVSwitch, reduce-scatters along the rail digits,
  then the all-gathers back; a torus all-gather gathers along x, y and z);
* every distinct (template topology, collective, size) is synthesized **once** with the given
  solvers (:func:`tacos.synthesize`, the fastest verified result kept), so 5,000 nodes cost what
  a handful of groups of 2 to 8 NPUs cost;
* the buffer is cut into parts that run pipelined (:mod:`tacos.scale.pipeline`); the number of
  parts is chosen among ``parts`` by the resulting time.
* an all-reduce part may end its reduce-scatters with **fused digits** (an all-reduce exchange
  of a binary group instead of its reduce-scatter and all-gather, :mod:`tacos.scale.exchange`),
  as many as make the part shortest (:func:`part_phases`).
* on a multi-rail Clos all-reduce, groups of parts may take the late rail digits together
  (joint phases: **shared late digits**, :mod:`tacos.scale.shared`), each α paid once per
  group; those layouts are tried after the others and kept when faster.

``symmetric=False`` is the reference: it solves the template of every copy separately (cut out
of the whole topology and renumbered) and keeps the plan only if every copy's solution has the
same time as the template's, which is what the tests compare on small systems.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from tacos.errors import TacosError
from tacos.model.patterns import build
from tacos.model.schedule import Schedule
from tacos.model.symmetric_plan import PLAN_KINDS, Phase, SymmetricPlan
from tacos.model.symmetry import SymmetricSystem, subtopology
from tacos.model.topology import Topology
from tacos.scale.mixed import mixed_template
from tacos.scale.parts import axis_order, least_busy, rotates, split
from tacos.scale.pipeline import schedule_parts

DEFAULT_SOLVERS = ("forest", "greedy", "direct")
DEFAULT_PARTS = (1, 2, 4, 8, 16, 32)
MAX_FUSED = 6  # fused digits tried per part: beyond this the extra bytes outweigh the α saved


def part_steps(system: SymmetricSystem, kind: str, part: int, fused: int = 0
               ) -> list[tuple[int, str]]:
    """(axis, phase kind) of one part, in order.  ``fused``: in an all-reduce, the last that
    many reduce-scatter axes are all-reduces instead (fused digits,
    :mod:`tacos.scale.exchange`) and have no all-gather back."""
    order = axis_order(system, kind, part)
    if kind == "allgather":
        return [(a, "allgather") for a in order]
    if kind == "reducescatter":
        return [(a, "reducescatter") for a in order]
    cut = len(order) - fused
    return ([(a, "reducescatter") for a in order[:cut]] + [(a, "allreduce") for a in order[cut:]]
            + [(a, "allgather") for a in reversed(order[:cut])])


def fusable(system: SymmetricSystem, kind: str) -> int:
    """How many innermost reduce-scatter axes of an all-reduce may be fused: the trailing run
    of binary axes (:func:`tacos.scale.exchange.exchange_allreduce`), at most
    :data:`MAX_FUSED`."""
    if kind != "allreduce":
        return 0
    order = axis_order(system, kind, 0)
    k = 0
    while k < min(len(order) - 1, MAX_FUSED) and system.axes[order[-1 - k]].size == 2:
        k += 1
    return k


def template_sizes(system: SymmetricSystem, kind: str, part_size: int,
                   steps: list[tuple[int, str]]) -> list[int]:
    """The template collective's size (nccl-tests convention) of every step of a part."""
    region = part_size // system.n_npus if kind == "allgather" else part_size
    out = []
    for axis, k in steps:
        r = system.axes[axis].size
        if k == "reducescatter":
            out.append(region)
            region //= r
        elif k == "allreduce":
            out.append(region)
        else:
            region *= r
            out.append(region)
    return out


class TemplateSolver:
    """Solves (template, kind, size) once each, keeping the fastest verified schedule of the
    solvers and, on switched groups, of Bruck's algorithm (:mod:`tacos.scale.bruck`) or, for
    an all-reduce of two members, the exchange (:mod:`tacos.scale.exchange`)."""

    def __init__(self, solvers: Sequence[str], seed: int, bruck: bool = True) -> None:
        self.solvers = tuple(solvers)
        self.seed = seed
        self.bruck = bruck  # also try Bruck's schedule / the exchange on switched groups
        self.cache: dict[tuple[Topology, str, int], Schedule] = {}
        self.solves = 0

    def __call__(self, topology: Topology, kind: str, size: int) -> Schedule:
        """The template schedule of ``kind`` of ``size`` bytes among NPUs ``0..r-1``."""
        key = (topology, kind, size)
        hit = self.cache.get(key)
        if hit is None:
            hit = self.cache[key] = self.solve(topology, kind, size)
        return hit

    def solve(self, topology: Topology, kind: str, size: int) -> Schedule:
        """Run every solver on the template; the fastest schedule that keeps the collective's
        chunks and passes the verifier wins."""
        from tacos.check.verify import verify_schedule
        from tacos.synthesize import synthesize

        coll = build(kind, range(topology.n_npus), size=size)
        best: Schedule | None = None
        reasons = []
        for name in self.solvers:
            self.solves += 1
            try:
                s = synthesize(topology, coll, solver=name, seed=self.seed, bound=False,
                               workers=1)
            except TacosError as exc:
                reasons.append(f"{name}: {exc}")
                continue
            if s.collective.chunks != coll.chunks or s.topology != topology:
                reasons.append(f"{name}: refines the chunks")
                continue
            if not verify_schedule(s).ok:
                reasons.append(f"{name}: not verified")
                continue
            if best is None or s.makespan < best.makespan:
                best = s
        if self.bruck:
            from tacos.scale.bruck import bruck
            from tacos.scale.exchange import exchange_allreduce

            s = bruck(topology, kind, size) if kind != "allreduce" else \
                exchange_allreduce(topology, size)
            if s is not None and (best is None or s.makespan < best.makespan) \
                    and verify_schedule(s).ok:
                best = s
        if best is None:
            raise TacosError(f"no solver found a {kind} on {topology.name}: "
                             + "; ".join(reasons))
        return Schedule(best.topology, best.collective, tuple(best.transfers),
                        {"solver": best.meta.get("solver"), "template": topology.name})


def layouts(kind: str, n_axes: int, counts: Sequence[int], rotate: bool = False
            ) -> list[tuple[int, ...]]:
    """Part weights to try: equal parts (``counts``), and for reductions ramps that start and
    end with small parts (the first part's reduce-scatter inside the node and the last part's
    all-gather are the pipeline's fill and drain): weights 1, 2, 4 ... up to 2^k, ``m`` parts
    of 2^k, and back down, and the same with ratios 2.5 and 2.75.  Rotated all-gathers
    (``rotate``) take equal parts, a multiple of the axis count."""
    if kind == "allgather" and rotate:
        return [(1,) * c for c in sorted({max(1, c // n_axes) * n_axes for c in counts})]
    out = [(1,) * c for c in counts]
    for k in (1, 2, 3, 4, 5, 6):
        ramp = [2**i for i in range(k)]
        for m in (1, 2, 4, 8):
            out.append(tuple(ramp + [2**k] * m + ramp[::-1]))
    # steeper ramps (ratio 2.5 to 2.75): fewer parts for the same small first and last part;
    # the NVSwitch of a DGX node reduces a part in about 0.39 of its rail time, so a part up
    # to about 2.6 times the previous one is ready when the rails are free for it
    for ratio in (2.5, 2.75):
        for k in (2, 3, 4, 5):
            ramp = [round(2 * ratio**i) for i in range(k)]
            for m in (1, 2):
                out.append(tuple(ramp + [round(2 * ratio**k)] * m + ramp[::-1]))
    return list(dict.fromkeys(out))


def part_phases(system: SymmetricSystem, kind: str, q: int, part_size: int,
                solve: TemplateSolver, fuse: bool = True
                ) -> list[tuple[int, str, Schedule]]:
    """Part q's phases as (axis, kind, template).  With ``fuse``, the number of fused digits
    (:func:`part_steps`) is the one that makes the part's phases the shortest in sum (the
    rails carry most of them, and the pipeline is as long as the rails are busy): each digit
    fused saves a route α and costs bytes that grow with the held range."""
    def phases(fused: int) -> list[tuple[int, str, Schedule]]:
        steps = part_steps(system, kind, q, fused)
        sizes = template_sizes(system, kind, part_size, steps)
        return [(a, k, solve(system.template(a), k, s))
                for (a, k), s in zip(steps, sizes, strict=True)]

    return least_busy(phases(f) for f in range(fusable(system, kind) + 1 if fuse else 1))


def _plan(system: SymmetricSystem, kind: str, parts: tuple[int, ...],
          solve: TemplateSolver, fuse: bool = True) -> SymmetricPlan:
    per_part = [part_phases(system, kind, q, part_size, solve, fuse)
                for q, part_size in enumerate(parts)]
    steps = [[(system.resource(a), k, t.makespan) for a, k, t in seq] for seq in per_part]
    resources = sorted({r for seq in steps for r, _, _ in seq})
    best = None
    for feed in [()] + [(r,) for r in resources] + [tuple(resources)]:
        starts = schedule_parts(steps, feed)
        end = max(st + d for seq, sq in zip(steps, starts, strict=True)
                  for (_, _, d), st in zip(seq, sq, strict=True))
        if best is None or end < best[0]:
            best = (end, starts)
    starts = best[1]
    phases = tuple(Phase(q, a, k, t, st)
                   for q, seq in enumerate(per_part)
                   for (a, k, t), st in zip(seq, starts[q], strict=True))
    fused = [sum(k == "allreduce" for _, k, _ in seq) for seq in per_part]
    return SymmetricPlan(system, kind, sum(parts), parts, phases,
                         {"parts": len(parts), "fused_digits": ",".join(map(str, fused))})


LP_COUNTS = tuple(range(3, 11))


def _lp_candidates(equal: dict[int, SymmetricPlan]) -> list[tuple[int, ...]]:
    """Layouts from the critical-path LP (:mod:`tacos.scale.layout_lp`), its stage times fitted
    through the plans of one part and of the most equal parts tried."""
    from tacos.scale.layout_lp import affine, lp_layouts, stage_times

    k = max(equal, default=1)
    if 1 not in equal or k == 1:
        return []
    whole, piece = stage_times(equal[1]), stage_times(equal[k])
    if len(whole) != len(piece) or len(whole) > 4:
        return []
    return lp_layouts(affine(whole, piece, k), LP_COUNTS)


def system_of(topology: Topology) -> SymmetricSystem:
    """The symmetric system a loaded topology is: a multi-rail Clos built as
    ``use clos_h100(...)`` builds it (:func:`tacos.model.clos.recognize`); otherwise a
    :class:`~tacos.errors.TacosError`."""
    from tacos.model.clos import recognize

    found = recognize(topology)
    if found is None:
        raise TacosError(f"{topology.name or 'this topology'} is not a system of isomorphic "
                         "groups that symmetric synthesis knows",
                         hint="use clos_h100(nodes=..., tiers=...), or build a "
                              "tacos.model.clos.ClosFabric / tacos.model.torus_axes.TorusAxes")
    return found


def synthesize_symmetric(system: SymmetricSystem | Topology, kind: str, size: int, *,
                         parts: Sequence[int] | int | Any | None = None,
                         solvers: Sequence[str] = DEFAULT_SOLVERS, seed: int = 0,
                         symmetric: bool = True, fuse: bool = True,
                         share: bool = True, mixed: bool = True,
                         in_network: bool = True) -> SymmetricPlan:
    """A plan for ``kind`` (all-gather, reduce-scatter, all-reduce) of ``size`` bytes (the
    nccl-tests convention) on ``system`` (a :class:`Topology` is first recognized by
    :func:`system_of`; the plan's ids are the topology's).

    ``parts``: None tries the layouts of :func:`layouts` (equal parts, counts
    :data:`DEFAULT_PARTS`, and ramps), then the part sizes of the critical-path LP
    (:mod:`tacos.scale.layout_lp`, fitted to the equal layouts' stage times), and keeps the
    fastest plan; an int cuts the buffer in that many equal parts; a sequence gives part
    weights; a :class:`tacos.scale.shared.SharedLayout` builds that layout of shared late
    digits.  Every part is a multiple of the NPU count (whole bytes per piece), so ``size``
    is rounded down to one (``meta['size_requested']`` keeps the asked size).
    ``solvers``: tried on every template, fastest verified kept.
    ``symmetric=False`` also solves every copy of every template on its own (see the module
    docstring) and raises :class:`~tacos.errors.TacosError` if any copy would differ.
    ``fuse``: an all-reduce part may end its reduce-scatters with fused digits (all-reduce
    exchanges of binary groups, :mod:`tacos.scale.exchange`), as many as make the part
    shortest (:func:`part_phases`); False keeps the reduce-scatter/all-gather pairs.
    ``share`` (with ``parts=None``): also try layouts whose groups of parts share the late
    rail digits (:mod:`tacos.scale.shared`), chosen on an affine model of their stages and
    built with the real templates; False leaves them out.
    ``mixed``: also try shared layouts with mixed phases (a group's early all-gathers riding
    with the next group's early reduce-scatters as joint transfers, :mod:`tacos.scale.mixed`;
    a :class:`~tacos.scale.shared.SharedLayout` with ``mixed=True`` is built with them);
    False leaves them out.
    ``in_network``: an all-reduce on a Clos whose switches reduce (``ClosFabric(sharp=True)``,
    ``use clos_h100(..., sharp=1)``) reduces in them (:func:`tacos.scale.sharp.synthesize_sharp`:
    NVLS in the node, SHARP in the rails; ``parts`` may give its weights); False builds the
    plan of a fabric without in-network reduction on it.
    """
    if kind not in PLAN_KINDS:
        raise TacosError(f"symmetric synthesis does {', '.join(PLAN_KINDS)}, not {kind!r}")
    if isinstance(system, Topology):
        system = system_of(system)
    from tacos.model.clos import ClosFabric

    if in_network and kind == "allreduce" and isinstance(system, ClosFabric) and system.sharp:
        from tacos.scale.sharp import synthesize_sharp

        weights = None if parts is None else \
            ((1,) * parts if isinstance(parts, int) else tuple(parts))
        return synthesize_sharp(system, size, parts=weights, symmetric=symmetric)
    n_axes, n = len(system.axes), system.n_npus
    from tacos.scale import shared

    if isinstance(parts, shared.SharedLayout):
        candidates = []
    elif parts is None:
        candidates = layouts(kind, n_axes, DEFAULT_PARTS, rotates(system))
    elif isinstance(parts, int):
        candidates = layouts(kind, n_axes, [parts], rotates(system))[:1]
    else:
        candidates = [tuple(parts)]
    t0 = time.process_time()
    solve = TemplateSolver(solvers, seed)
    best: SymmetricPlan | None = None
    tried: dict[str, float] = {}
    equal: dict[int, SymmetricPlan] = {}

    def attempt(weights: tuple[int, ...]) -> None:
        nonlocal best
        key = ",".join(map(str, weights))
        sizes = split(size, weights, n)
        if key in tried or min(sizes) < n:
            return
        plan = _plan(system, kind, sizes, solve, fuse)
        tried[key] = plan.makespan
        if len(set(weights)) == 1:
            equal[len(weights)] = plan
        if best is None or plan.makespan < best.makespan:
            best = plan

    for weights in candidates:
        attempt(weights)
    if parts is None and not (kind == "allgather" and rotates(system)):
        for weights in _lp_candidates(equal):
            attempt(weights)
    if isinstance(parts, shared.SharedLayout) or (parts is None and share):
        chosen = [parts] if isinstance(parts, shared.SharedLayout) else \
            shared.candidates(system, kind, size, solve, fuse, seed,
                              mix=mixed_template if mixed else None)
        for layout in chosen:
            mix = mixed_template if mixed and layout.mixed else None
            plan = shared.build(system, kind, size, layout, solve, fuse, mix)
            if plan is None:
                continue
            tag = " mixed" if mix is not None else ""
            tried["shared " + plan.meta["shared"] + tag] = plan.makespan
            if best is None or plan.makespan < best.makespan:
                best = plan
    if best is None:
        raise TacosError(f"{size} bytes is less than one byte per NPU and part",
                         hint=f"use at least {n} bytes")
    if not symmetric:
        _solve_every_copy(best, solve)
    meta: dict[str, Any] = {"solver": "symmetric", "size_requested": size, "tried": tried,
                            "template_solves": solve.solves, "templates": len(solve.cache),
                            "synthesis_cpu": time.process_time() - t0, "seed": seed,
                            **best.meta}
    return SymmetricPlan(best.system, best.kind, best.size, best.parts, best.phases, meta)


def _solve_every_copy(plan: SymmetricPlan, solve: TemplateSolver) -> None:
    """The full reference: every copy's group cut out of the whole topology and solved."""
    whole = plan.system.topology()
    seen = set()
    for ph in plan.phases:
        r = plan.system.axes[ph.axis].size
        gather = sum(c.size for c in ph.template.collective.chunks[:r]) if ph.scatter else 0
        key = (ph.axis, ph.kind, ph.template.collective.size, gather)
        if key in seen:
            continue
        seen.add(key)
        emb = plan.system.embed(ph.axis)
        for c in range(len(emb.nodes)):
            sub = subtopology(whole, emb.nodes[c].tolist(), emb.links[c].tolist())
            mixed = (mixed_template(sub, gather, ph.template.collective.size - gather)
                     if ph.scatter else None)
            if ph.scatter and mixed is None:
                raise TacosError(f"copy {c} of axis {plan.system.axes[ph.axis].name}: no "
                                 "mixed template")
            own = mixed if mixed is not None else \
                solve.solve(sub, ph.kind, ph.template.collective.size)
            if abs(own.makespan - ph.template.makespan) > 1e-12 * ph.template.makespan:
                raise TacosError(f"copy {c} of axis {plan.system.axes[ph.axis].name}: "
                                 f"{own.makespan} s alone against {ph.template.makespan} s")
