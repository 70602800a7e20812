"""The public entry point: from a topology and a collective to a verified-shape schedule.

Pipeline: feasibility → (reductions by inversion) → solver → one schedule of the original
collective (chunk ids preserved) on the physical topology, each transfer on a physical route.
Solvers that model switch ports themselves (``native_switches``) work on the physical topology;
the others work on the switch-unwound view (:mod:`tacos.passes.unwind`) and their schedule is
mapped back to physical routes and retimed on the physical links.

>>> from tacos.topology import Link, Npu, Topology
>>> from tacos.patterns import build
>>> ring = Topology(tuple(Npu(i, f"n{i}") for i in range(4)),
...                 links=tuple(Link(i, (i + 1) % 4, 1e-6, 1e9) for i in range(4)))
>>> s = synthesize(ring, build("allgather", range(4), size=4096), trials=2, workers=1)
>>> round(s.makespan * 1e6, 3)   # N-1 = 3 steps of 1 µs + 1024 B / 1 GB/s
6.072
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tacos.collective import Collective
from tacos.errors import InfeasibleError, UsageError
from tacos.passes.feasibility import check_feasible
from tacos.passes.inversion import assemble, plan_inversion
from tacos.passes.unwind import to_physical, unwind
from tacos.schedule import Schedule
from tacos.solvers.registry import Problem, SolveResult, get_solver
from tacos.topology import Topology


def _phase_progress(progress: Callable[[int, int], None] | None, phase: int, phases: int
                    ) -> Callable[[int, int], None] | None:
    if progress is None or phases == 1:
        return progress

    def report(done: int, total: int) -> None:
        progress(phase * total + done, phases * total)

    return report


def _combine_status(statuses: list[str]) -> str:
    if "infeasible" in statuses:
        return "infeasible"
    if "time_limit" in statuses:
        return "time_limit"
    if len(statuses) == 1:
        return statuses[0]
    return "feasible"  # optimal phases need not compose into an optimal whole


def _lower_bound(topology: Topology, collective: Collective) -> float | None:
    try:
        from tacos.bounds import lower_bound
    except ImportError:  # pragma: no cover - bounds module is optional
        return None
    return lower_bound(topology, collective).value


def solve(topology: Topology, collective: Collective, *, solver: str = "greedy",
          **options: Any) -> SolveResult:
    """Synthesize and return the :class:`~tacos.solvers.registry.SolveResult` (with status).

    ``options`` go to the solver (``seed``, ``trials``, ``workers``, ``max_merge``,
    ``progress``, ...).  ``relays`` (``'members'``, the default, or ``'all'``) says whether
    data may be relayed through NPUs outside the collective's group; the view given to
    solvers without ``native_switches`` attaches only group members to switches.
    ``bound=False`` skips the lower-bound computation.  Raises
    :class:`~tacos.errors.InfeasibleError` when some postcondition cannot be met.
    """
    t0 = time.perf_counter()
    want_bound = bool(options.pop("bound", True))
    options.setdefault("relays", "members")
    try:
        relay_npus = collective.relay_npus(options["relays"])
    except ValueError as exc:
        raise UsageError(str(exc), hint="relays='members' (default) or relays='all'") from None
    impl = get_solver(solver)
    check_feasible(topology, collective, relay_npus)
    # solvers that model switch ports themselves get the real topology, the others a view of
    # it that attaches only the group's members to switches
    native = getattr(impl, "native_switches", False)
    view = None if native else unwind(topology, collective.members,
                                      relays=relay_npus is None)
    unwound = topology if view is None else view.topology
    check_feasible(unwound, collective)
    progress = options.get("progress")
    if not collective.combining or getattr(impl, "supports_combining", False):
        res = impl.solve(Problem(unwound, collective, dict(options)))
        results = [res]
        schedule = res.schedule
        if schedule is not None and schedule.collective is not collective:
            schedule = Schedule(schedule.topology, collective, schedule.transfers,
                                dict(schedule.meta))
    else:
        plan = plan_inversion(collective)
        phases = [p for p in (plan.dual, plan.forward) if p is not None]
        results = []
        parts: list[Schedule | None] = []
        for sub, topo in ((plan.dual, unwound.reversed()), (plan.forward, unwound)):
            if sub is None:
                parts.append(None)
                continue
            opts = dict(options)
            opts["progress"] = _phase_progress(progress, len(results), len(phases))
            if options.get("time_limit") is not None:  # one budget for all phases
                left = float(options["time_limit"]) - (time.perf_counter() - t0)
                opts["time_limit"] = max(0.1, left / (len(phases) - len(results)))
            r = impl.solve(Problem(topo, sub, opts))
            results.append(r)
            parts.append(r.schedule)
            if r.schedule is None:
                break
        schedule = None
        if all(r.schedule is not None for r in results):
            schedule = assemble(unwound, collective, plan, parts[0], parts[1])
            names = [n for n, p in (("reduce", plan.dual), ("copy", plan.forward)) if p]
            schedule.meta["phases"] = {n: r.schedule.makespan
                                       for n, r in zip(names, results, strict=True)}
            schedule.meta["owners"] = dict(plan.owner)
    status = _combine_status([r.status for r in results])
    stats = {k: v for r in results for k, v in r.stats.items()}
    if schedule is None:
        reason = next((r.stats.get("reason") for r in results if r.stats.get("reason")), "")
        return SolveResult(status if status != "feasible" else "infeasible", None, None,
                           dict(stats, reason=reason))
    if view is not None:
        schedule = to_physical(schedule, view)
    bound = _lower_bound(topology, collective) if want_bound else None
    first = results[0].schedule.meta if results and results[0].schedule is not None else {}
    schedule.meta.update(
        solver=solver,
        seed=first.get("seed", options.get("seed", 0)),
        trials=first.get("trials", options.get("trials")),
        status=status,
        synthesis_time=time.perf_counter() - t0,
    )
    for key in ("max_merge", "best_trial", "best_cap"):
        if key in first:
            schedule.meta[key] = first[key]
    if bound is not None:
        schedule.meta["lower_bound"] = bound
        if bound > 0:
            schedule.meta["gap"] = schedule.makespan / bound
    return SolveResult(status, schedule, bound, stats)


def synthesize(topology: Topology, collective: Collective, *, solver: str = "greedy",
               **options: Any) -> Schedule:
    """Synthesize a schedule for ``collective`` on ``topology``.

    Returns a :class:`~tacos.schedule.Schedule` whose ``collective`` is the one given (chunk ids
    preserved) and whose ``topology`` is ``topology`` itself (transfers on physical routes,
    timed on the physical links); ``meta`` holds ``solver``,
    ``seed``, ``trials``, ``status``, ``synthesis_time`` (s) and ``lower_bound``/``gap``.
    Raises :class:`~tacos.errors.InfeasibleError` if no schedule exists.
    """
    res = solve(topology, collective, solver=solver, **options)
    if res.schedule is None:
        raise InfeasibleError(
            f"solver {solver!r} found no schedule ({res.status})"
            + (f": {res.stats['reason']}" if res.stats.get("reason") else ""),
            hint="try another solver, more trials, or a longer time limit",
        )
    return res.schedule
