"""The public entry point: from a topology and a collective to a verified-shape schedule.

Pipeline: feasibility → (reductions by inversion) → solver → one schedule of the original
collective (chunk ids preserved) on the physical topology, each transfer on a physical route.
Solvers that model switch ports themselves (``native_switches``) work on the physical topology;
the others work on the switch-unwound view (:mod:`tacos.passes.unwind`) and their schedule is
mapped back to physical routes and retimed on the physical links.

>>> from tacos.model.topology import Link, Npu, Topology
>>> from tacos.model.patterns import build
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

from tacos import limits
from tacos.errors import InfeasibleError, TacosError, UsageError
from tacos.model.collective import Collective
from tacos.model.schedule import Schedule
from tacos.model.topology import Topology
from tacos.model.validate import check_problem, check_topology
from tacos.passes.feasibility import check_feasible
from tacos.passes.inversion import assemble, plan_inversion
from tacos.passes.unwind import to_physical, unwind
from tacos.progress import as_reporter
from tacos.solvers.options import check_options
from tacos.solvers.registry import Problem, SolveResult, solver_class


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
        from tacos.check.bounds import lower_bound
    except ImportError:  # pragma: no cover - bounds module is optional
        return None
    return lower_bound(topology, collective).value


def _retime(schedule: Schedule) -> Schedule:
    from tacos.check.simulate import simulate

    out = simulate(schedule).schedule
    out.meta.pop("retimed", None)
    return out


def solve(topology: Topology, collective: Collective, *, solver: str = "auto",
          seed: int = 0, trials: int | None = None, workers: int | None = None,
          cluster: Any = None, time_limit: float | None = None, progress: Any = None,
          bound: bool = True, relays: str = "members", **solver_options: Any) -> SolveResult:
    """Synthesize and return the :class:`~tacos.solvers.registry.SolveResult` (with status).

    Takes the parameters of :func:`synthesize`.  Infeasibility is a status here
    (``status='infeasible'``, ``schedule=None``) when the solver finds no schedule; a spec
    that no schedule can serve raises :class:`~tacos.errors.InfeasibleError`.
    """
    impl_class = solver_class(solver)
    check_options(solver, impl_class, solver_options)
    _check_common(seed, trials, workers, time_limit)
    check_cluster(cluster)
    check_topology(topology)
    if not isinstance(collective, Collective):
        raise TacosError(f"expected a tacos.Collective, not {type(collective).__name__}",
                         hint="build one with tacos.collective('allgather', group, size=...)")
    check_problem(topology, collective)  # ranges and limits, before any work
    options: dict[str, Any] = {"seed": seed, "relays": relays, **solver_options}
    for key, value in (("trials", trials), ("workers", workers), ("cluster", cluster),
                       ("time_limit", time_limit)):
        if value is not None:
            options[key] = value
    reporter = as_reporter(progress)
    with reporter.phase(f"synthesizing ({solver})", unit="runs") as phase:
        options["progress"] = reporter.solver_callback(phase)
        result = _solve(topology, collective, solver, impl_class, options)
    if bound and result.schedule is not None:
        with reporter.phase("lower bound"):
            # of the collective the schedule serves: a solver that refines chunks (NCCL's
            # channels, pipelines) is bounded with its own pieces, which the latency term sees
            _attach_bound(result.schedule, topology, result.schedule.collective)
        return SolveResult(result.status, result.schedule,
                           result.schedule.meta.get("lower_bound"), result.stats)
    return result


def _check_common(seed: Any, trials: Any, workers: Any, time_limit: Any) -> None:
    """Raise a :class:`~tacos.errors.UsageError` for a common option of the wrong kind."""
    from tacos.solvers.options import COMMON_OPTIONS, range_text

    for key, value in (("seed", seed), ("trials", trials), ("workers", workers)):
        if value is None and key != "seed":
            continue
        lo, hi = COMMON_OPTIONS[key].range or (0, 0)
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise UsageError(f"{key} must be an integer from {range_text(COMMON_OPTIONS[key])},"
                             f" not {value!r}")
    if time_limit is not None and (isinstance(time_limit, bool)
                                   or limits.check_number("time_limit", time_limit)):
        raise UsageError(f"time_limit must be a positive number of seconds, not "
                         f"{time_limit!r}")


def check_request(topology: Topology, collective: Collective, *, solver: str = "auto",
                  seed: Any = 0, trials: Any = None, workers: Any = None,
                  time_limit: Any = None, **solver_options: Any) -> None:
    """The checks :func:`solve` makes before any work (options, their ranges, limits), for
    callers that do work of their own first (a bound, a chunk search)."""
    for key in ("cluster", "progress", "relays", "bound"):  # checked where they are used
        solver_options.pop(key, None)
    check_options(solver, solver_class(solver), solver_options)
    _check_common(seed, trials, workers, time_limit)
    check_topology(topology)
    if isinstance(collective, Collective):
        check_problem(topology, collective)


def check_cluster(cluster: Any) -> None:
    """Raise a :class:`~tacos.errors.UsageError` unless ``cluster`` is None, a
    ``distributed.Client`` or the address of a Dask scheduler that answers (connecting now,
    before any work: :func:`tacos.engines.connect`)."""
    if cluster is None or hasattr(cluster, "submit"):
        return
    if not isinstance(cluster, str) or not cluster.strip():
        raise UsageError(f"cluster must be a Dask scheduler address (tcp://HOST:8786) or a "
                         f"distributed.Client, not {cluster!r}")
    from tacos.engines import connect

    connect(cluster)


def _attach_bound(schedule: Schedule, topology: Topology, collective: Collective) -> None:
    bound = _lower_bound(topology, collective)
    if bound is not None:
        schedule.meta["lower_bound"] = bound
        if bound > 0:
            schedule.meta["gap"] = schedule.makespan / bound


def _solve(topology: Topology, collective: Collective, solver: str, impl_class: type,
           options: dict[str, Any]) -> SolveResult:
    """The pipeline below the option checks: the solver's own gate, feasibility, switch
    unwinding and inversion as its capabilities ask, the solver, and the way back."""
    t0 = time.perf_counter()
    options.setdefault("relays", "members")
    try:
        relay_npus = collective.relay_npus(options["relays"])
    except ValueError as exc:
        raise UsageError(str(exc), hint="relays='members' (default) or relays='all'") from None
    impl = impl_class()
    caps = impl.capabilities
    refusal = impl.accepts(Problem(topology, collective, dict(options)))
    if refusal:
        raise UsageError(refusal, hint="`tacosc solvers` lists the solvers; greedy and auto "
                                       "take every collective")
    options["relay_npus"] = relay_npus  # the whole collective's rule, also for its phases
    check_feasible(topology, collective, relay_npus)
    # solvers that model switch ports themselves get the real topology, the others a view of
    # it that attaches only the group's members to switches
    view = None if caps.native_switches else unwind(topology, collective.members,
                                      relays=relay_npus is None)
    unwound = topology if view is None else view.topology
    check_feasible(unwound, collective)
    progress = options.get("progress")
    if not collective.combining or caps.combining:
        res = impl.solve(Problem(unwound, collective, dict(options)))
        results = [res]
        schedule = res.schedule
        if (schedule is not None and schedule.collective is not collective
                and not caps.refines_chunks):
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
            if len(collective.tenants) > 1 and view is None:
                # tenants' phases no longer line up: settle shared links on the real ones
                schedule = _retime(schedule)
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
    first = results[0].schedule.meta if results and results[0].schedule is not None else {}
    schedule.meta.update(
        solver=solver,
        seed=first.get("seed", options.get("seed", 0)),
        trials=first.get("trials", options.get("trials")),
        status=status,
        synthesis_time=time.perf_counter() - t0,
    )
    for key in ("max_merge", "best_trial", "best_cap", "trials_run", "model", "islands"):
        if key in first:
            schedule.meta[key] = first[key]
    return SolveResult(status, schedule, None, stats)


def synthesize(topology: Topology, collective: Collective, *, solver: str = "auto",
               seed: int = 0, trials: int | None = None, workers: int | None = None,
               cluster: Any = None, time_limit: float | None = None, progress: Any = None,
               bound: bool = True, relays: str = "members", **solver_options: Any) -> Schedule:
    """Synthesize a schedule for ``collective`` on ``topology``.

    Parameters
    ----------
    topology, collective
        From :func:`tacos.load` / :func:`tacos.parse`, :mod:`tacos.builders`, an importer
        (:mod:`tacos.importers`) and :func:`tacos.collective`.
    solver
        ``auto`` (default, :mod:`tacos.solvers.auto`): the fastest verified plan of the
        synthesizers and of NCCL's own algorithms on this topology (``meta['auto']`` says which
        won and by how much).  Or one solver: ``greedy``, ``forest``, ``ilp``, ``taccl``,
        ``multicast``, ``a2a``; NCCL models ``nccl`` (NCCL's pick), ``nccl-ring``,
        ``nccl-tree``, ``nvls``, ``collnet``, ``pat``, ``nccl-p2p``; textbook baselines
        ``ring`` (one ring), ``biring``, ``direct``, ``rhd``, ``dbtree``, ``hierarchical``
        (options:
        :func:`tacos.solver_options`).
    seed
        Random seed; the same seed gives the same schedule.
    trials
        Randomized trials (greedy; the ILP's starting schedule).  Default: 16, fewer on big
        problems.
    workers
        Processes running trials in parallel (default: every core).
    cluster
        A Dask scheduler's address (``'tcp://10.0.0.5:8786'``) or a ``distributed.Client``:
        the trials run as tasks on that cluster's workers instead (:mod:`tacos.engines`;
        needs ``pip install 'tacos[cluster]'``).  The same seed gives the same schedule.
    time_limit
        Seconds the solver may spend (ILP; default 60).
    progress
        A callable ``(done, total)`` called as solver work completes, or a
        :class:`tacos.progress.Reporter` that also hears about the other phases.
    bound
        Compute the lower bound (``meta['lower_bound']``, ``meta['gap']``); False skips it.
    relays
        ``'members'`` (default): data is relayed only through NPUs of the collective's group
        (the view given to solvers without native switches attaches only members to
        switches); ``'all'``: through any NPU.
    **solver_options
        Options the chosen solver declares, checked: an unknown name raises
        :class:`~tacos.errors.UsageError` with the closest valid one.  greedy: ``max_merge``
        (int, ``'auto'`` or None), ``speculate``; ilp: ``backend`` (highs, cpsat, cbc,
        gurobi), ``mode`` (``'exact'`` or ``'cluster'`` for time clustering), ``threads``,
        ``cluster_steps``, ``window_time_limit``, ``discretization_factor``,
        ``upper_bound``, ``cluster_first``, ``max_merge``; baselines: ``ring_order``.

    Returns a :class:`~tacos.model.schedule.Schedule` whose ``collective`` is the one given (chunk
    ids preserved) -- or, from a solver that splits the buffer over channels or pipeline slices
    (the NCCL baselines, ``forest``, and ``auto`` when one of them wins), a refinement of it:
    the same buffer and layout with each chunk cut into equal consecutive pieces -- and whose
    ``topology`` is ``topology`` itself (transfers on physical routes,
    timed on the physical links); ``meta`` holds ``solver``,
    ``seed``, ``trials``, ``status``, ``synthesis_time`` (s) and ``lower_bound``/``gap``.
    Raises :class:`~tacos.errors.InfeasibleError` if no schedule exists.
    """
    res = solve(topology, collective, solver=solver, seed=seed, trials=trials, workers=workers,
                cluster=cluster, time_limit=time_limit, progress=progress, bound=bound,
                relays=relays, **solver_options)
    if res.schedule is None:
        raise InfeasibleError(
            f"solver {solver!r} found no schedule ({res.status})"
            + (f": {res.stats['reason']}" if res.stats.get("reason") else ""),
            hint="try another solver, more trials, or a longer time limit",
        )
    return res.schedule
