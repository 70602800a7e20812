"""TACOS-Greedy solver: many seeded trials of randomized link-chunk matching, keep the best.

The greedy works on the physical machine model (``native_switches``): a switch port is one link
that serves any peer of its fabric at full rate, one transfer per lane at a time, and a
transfer through switches holds every link of its route (:mod:`tacos.solvers.greedy.ports`).
It knows the topology's scarce cuts (:mod:`tacos.solvers.islands`): a chunk crosses into an
island (a node behind its NICs, a leaf behind its uplinks) once and spreads inside from there.

Options (``Problem.options``):

``seed`` (int, default 0)
    Trial ``i`` draws its random numbers from ``(seed, i)`` only, so the result does not
    depend on how trials are spread over processes.
``trials`` (int, default :func:`default_trials`)
    Independent randomized trials; the schedule with the smallest (makespan, trial, cap) wins.
    The default is :data:`DEFAULT_TRIALS`, scaled down on big problems (at least 2).
``workers`` (int, default ``os.cpu_count()``)
    Processes running trials in parallel; 1, a single trial, or a tiny problem run in-process.
``cluster`` (str or ``distributed.Client``, optional)
    Run the trials as tasks on this Dask cluster instead (:mod:`tacos.engines`); the same
    schedule as on one process.
``max_merge`` (int, None or ``'auto'``, default ``'auto'``)
    Most chunks one transfer may carry (paying α once).  1 reproduces TACOS's chunk-granular
    behaviour; None means unlimited; ``'auto'`` tries a ladder of caps derived from α and the
    chunk's wire time (see :func:`tacos.solvers.greedy.merge.merge_caps`) and, unless a merged
    schedule already beats every possible chunk-granular one, also the ``max_merge=1`` trials,
    so it is never slower than ``max_merge=1`` with the same seed and trials.
``speculate`` (bool, default True)
    Allow resending a chunk already in flight on a slower transfer (with causal replacement).
``progress`` (callable ``(done, total)``, optional)
    Called after each finished trial.
``time_limit`` (seconds, optional)
    No trial starts after this much time (at least one always runs); the best so far wins.
    Results then depend on machine speed, like any time-limited search.
``jit`` (bool, default True)
    Run the trials the compiled cores cover in compiled code (:mod:`tacos.solvers.greedy.jit`:
    switch-free, uniform chunks, no relays; :mod:`tacos.solvers.greedy.jit_ports`: the
    physical model, no relays); same schedules either way.
    ``TACOS_JIT=0`` in the environment also turns it off; without numba it is off.
``model`` (``'physical'`` or ``'unwound'``, default ``'physical'``)
    ``'unwound'`` is the seed paper's model: the greedy runs on the switch-unwound view
    (:func:`tacos.passes.unwind.unwind`, each switch's unwinding policy) without islands, and
    its schedule is mapped back to physical routes and retimed there.  On a switch-free
    topology both models are the same.
``islands`` (bool, default True)
    Use the islands of :func:`tacos.solvers.islands.find_islands`.  False reproduces the
    island-blind matching (on a switch-free topology: TACOS's greedy as before).
``relays`` (``'members'`` or ``'all'``, default ``'members'``) and ``relay_npus``
    Where a chunk may be relayed (stored and forwarded): at the collective's members only, or
    at any live NPU (:meth:`tacos.model.collective.Collective.relay_npus`).
    :func:`tacos.synthesize` passes ``relay_npus`` (the whole collective's rule) to the two
    phases of a reduction, so a process group never borrows a non-member's ports or memory
    unless asked to.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np

from tacos.engines import Engine, SerialEngine, engine_for
from tacos.model.collective import Collective
from tacos.model.columns import TransferColumns, csr_take, unit_ptr
from tacos.model.schedule import Schedule
from tacos.model.transfer import transfers_from_columns
from tacos.passes.unwind import to_physical, unwind
from tacos.solvers.greedy.core import Stuck, TrialResult
from tacos.solvers.greedy.instance import TICK, Instance, build_instance
from tacos.solvers.greedy.merge import UNLIMITED, merge_caps, unmerged_lower_bound
from tacos.solvers.greedy.ports import build_port_instance
from tacos.solvers.greedy.trial import run_trial
from tacos.solvers.islands import find_islands
from tacos.solvers.options import MAX_MERGE, Option, boolean, int_or_text
from tacos.solvers.registry import Capabilities, Problem, SolverBase, SolveResult

DEFAULT_TRIALS = 16
"""Default number of trials on small problems: enough to cycle the merge ladder several times
and smooth the randomness on the benchmark topologies while staying well under a second."""

TRIAL_BUDGET = 2_000_000
"""Default trials are cut so that trials × (chunk, NPU) deliveries stays about this size."""

IN_PROCESS_WORK = 100_000
"""Below this many (chunk, NPU) deliveries × trials, trials run in-process (no pool start-up)."""

COMPILED_SPEEDUP = 10
"""About how much faster a compiled trial runs than a Python one (9-20x measured on 16-256
GPUs, ``docs/benchmarks/greedy-ports.md``): compiled runs stay in-process up to this many times
:data:`IN_PROCESS_WORK`."""

_Key = tuple[int, int, int]
MODELS = ("physical", "unwound")


def _key(r: TrialResult) -> _Key:
    return (r.makespan, r.trial, r.cap)


def default_trials(total_need: int) -> int:
    """:data:`DEFAULT_TRIALS`, fewer (down to 2) when each trial moves many chunks."""
    if total_need <= 0:
        return 1
    return max(2, min(DEFAULT_TRIALS, TRIAL_BUDGET // total_need))


class GreedySolver(SolverBase):
    """Randomized event-driven link-chunk matching (TACOS-Greedy) with multi-chunk transfers."""

    name = "greedy"
    options = {
        "max_merge": Option("most chunks one transfer may carry: an integer, 'auto' (try a "
                            "ladder of caps, never slower than 1) or None (unlimited)",
                            int_or_text("auto"), default="auto", range=(1, MAX_MERGE)),
        "speculate": Option("allow resending a chunk already in flight on a slower transfer",
                            boolean, (True, False), True),
        "model": Option("'physical' (switch ports shared in time, islands behind scarce cuts) "
                        "or 'unwound' (the TACOS paper's switch unwinding)",
                        str, ("physical", "unwound"), "physical"),
        "islands": Option("let chunks cross the scarce cuts of the topology only once",
                          boolean, (True, False), True),
        "jit": Option("run the trials the compiled (numba) core covers there; the same "
                      "schedules as the pure-Python trial", boolean, (True, False), True),
    }
    capabilities = Capabilities(native_switches=True)

    def solve(self, problem: Problem) -> SolveResult:
        """Run the trials and return the best schedule (status ``feasible``)."""
        t0 = time.perf_counter()
        opts = problem.options
        seed = int(opts.get("seed", 0))
        trials_opt = opts.get("trials")
        workers = int(opts.get("workers") or os.cpu_count() or 1)
        max_merge = opts.get("max_merge", "auto")
        if isinstance(max_merge, str) and max_merge.strip().isdigit():
            max_merge = int(max_merge)
        speculate = bool(opts.get("speculate", True))
        jit = bool(opts.get("jit", True))
        progress: Callable[[int, int], None] | None = opts.get("progress")
        topo, coll = problem.topology, problem.collective
        model = str(opts.get("model", "physical"))
        if model not in MODELS:
            raise ValueError(f"model must be one of {', '.join(MODELS)}, not {model!r}")
        if coll.combining:
            raise ValueError("the greedy solver takes non-combining collectives "
                             "(tacos.synthesize inverts reductions)")
        view = None
        allowed = relay_npus(topo, coll, opts)
        if model == "unwound" and has_switch_links(topo):
            free = len(allowed) == len(topo.live_npus)
            view = unwind(topo, allowed, relays=free)
            topo = view.topology
        use_islands = bool(opts.get("islands", True)) and view is None
        islands = find_islands(topo, allowed) if use_islands else []
        if islands or has_switch_links(topo):
            inst = build_port_instance(topo, coll, allowed, islands)
        else:
            inst = build_instance(topo, coll, allowed, islands)
        trials = max(1, int(trials_opt) if trials_opt else default_trials(inst.total_need))
        caps = merge_caps(inst, max_merge, trials)
        jobs = list(enumerate(caps))
        extra: list[tuple[int, int]] = []
        if max_merge == "auto" and any(c != 1 for c in caps):
            extra = [(i, 1) for i, c in enumerate(caps) if c != 1]
        total = len(jobs) + len(extra)
        limit = opts.get("time_limit")
        deadline = t0 + float(limit) if limit is not None else None
        runner = _Runner(inst, seed, speculate, workers, progress, total, deadline, jit,
                         opts.get("cluster"), compiled=jit and _preload(inst, total))
        try:
            best = runner.run(jobs)
            if extra and best.makespan > unmerged_lower_bound(inst):
                best = min(best, runner.run(extra), key=_key)
            elif extra and progress is not None:
                progress(total, total)
        except Stuck as exc:
            return SolveResult("infeasible", None, stats={"reason": str(exc)})
        schedule = to_schedule(Problem(topo, coll, opts), inst, best, release=True)
        if view is not None:
            schedule = to_physical(schedule, view)
        elapsed = time.perf_counter() - t0
        schedule.meta.update(
            model=model, islands=[list(c) for c in islands],
            solver=self.name, seed=seed, trials=trials, status="feasible",
            max_merge=max_merge if not isinstance(max_merge, int) else int(max_merge),
            best_trial=best.trial, best_cap=None if best.cap >= UNLIMITED else best.cap,
            trials_run=runner.done, synthesis_time=elapsed,
        )
        stats = dict(best.stats, trials_run=runner.done, synthesis_time=elapsed)
        return SolveResult("feasible", schedule, stats=stats)


def _preload(inst: Instance, trials: int) -> bool:
    """Whether the ``trials`` trials of ``inst`` will run compiled; loads the compiled core
    first when they pay for its loading together (each trial alone may be too small to)."""
    from tacos.solvers.greedy import jit as greedy_jit
    from tacos.solvers.greedy import jit_ports

    if inst.physical:
        jit_ports.prepare(inst, trials)
        return jit_ports.supported(inst) and jit_ports.available() and jit_ports.worth_it(inst)
    if not (greedy_jit.supported(inst) and greedy_jit.available()):
        return False
    if inst.total_need * trials >= greedy_jit.MIN_WORK:
        greedy_jit.kernels()
    return greedy_jit.worth_it(inst)


def has_switch_links(topology) -> bool:
    """True when some link of ``topology`` joins a switch."""
    return bool(topology.switches) and any(
        topology.is_switch(lk.src) or topology.is_switch(lk.dst) for lk in topology.links)


def relay_npus(topology, collective: Collective, options: dict) -> list[int]:
    """The live NPUs a chunk may pass through under ``options`` (``relay_npus`` if given,
    else the collective's rule for ``relays``); every live NPU when that is None."""
    if "relay_npus" in options:
        keep = options["relay_npus"]
    else:
        keep = collective.relay_npus(str(options.get("relays", "members")))
    live = topology.live_npus
    if keep is None:
        return list(live)
    keep = set(keep) | collective.npus
    return [v for v in live if v in keep]


def to_schedule(problem: Problem, inst: Instance, res: TrialResult, *,
                release: bool = False) -> Schedule:
    """Turn a trial's tick-based transfer columns into a :class:`Schedule` (seconds, chunk
    ids, each transfer on its physical route: the link itself on a switch-free topology),
    ordered by (start, end, source, destination, channel, route).

    The schedule is column-backed (:class:`~tacos.model.columns.TransferColumns`): no
    ``Transfer`` object is built here.  ``release`` empties ``res``'s transfer columns as
    they are used (the caller no longer needs them; at thousands of NPUs they are hundreds of
    MiB).
    """
    n = len(res.link)
    if not (hasattr(res.end, "dtype") or max(res.end, default=0) < 1 << 62):
        return _to_schedule_tuples(problem, inst, res)
    start = np.asarray(res.start, dtype=np.int64)
    end = np.asarray(res.end, dtype=np.int64)
    link = np.asarray(res.link, dtype=np.int64)
    route = np.asarray(res.route, dtype=np.int64) if len(res.route) else None
    cptr, cids, bits = res.chunk_ptr, res.chunk_ids, res.bits
    if release:
        res.start, res.end, res.link, res.route = [], [], [], []
        res.chunk_ptr = res.chunk_ids = None
        res.bits = []
    order = _order(inst, start, end, link, route)
    link = link[order]
    src = np.asarray(inst.src, dtype=np.int32)[link]
    dst = np.asarray(inst.dst, dtype=np.int32)[link]
    starts = np.multiply(start[order], TICK)
    del start
    ends = np.multiply(end[order], TICK)
    del end
    if route is None or bool((route < 0).all()):  # every transfer on its channel's one link
        route_ptr, route_links = None, link.astype(np.int32)
    else:  # a table of every path: the routes, then one-link paths of the channels
        table = list(inst.route_links) + [(i,) for i in range(len(inst.src))]
        tptr, tdata = _table(table)
        route = route[order]
        route_ptr, route_links = csr_take(
            tptr, tdata, np.where(route >= 0, route, len(inst.route_links) + link))
    del link, route
    if cptr is not None:
        cptr = np.asarray(cptr, dtype=np.int64)
        cids = np.asarray(cids)
        if len(cids) == n and unit_ptr(cptr):
            cptr = None
    else:
        res_bits = TrialResult(0, 0, 0, [], [], [], bits)
        cptr, cids = _table(list(res_bits.chunk_tuples()))
    chunk_ptr, chunk_ids = csr_take(cptr, cids, order)
    del cptr, cids, order
    ids = [c.id for c in problem.collective.chunks]
    if ids != list(range(len(ids))):
        chunk_ids = np.asarray(ids, dtype=np.int64)[chunk_ids]
    transfers = TransferColumns(starts, ends, src, dst, route_ptr, route_links, chunk_ptr,
                                chunk_ids)
    return Schedule(problem.topology, problem.collective, transfers, {})


def _order(inst: Instance, start: np.ndarray, end: np.ndarray, link: np.ndarray,
           route: np.ndarray | None) -> np.ndarray:
    """The permutation sorting transfers by (start, end, source, destination, channel, route),
    stable.  A channel fixes its source and destination, so they are one key: the channel's
    rank in (source, destination, channel) order; and (end, rank) is one integer when it fits
    in 62 bits."""
    n_links = len(inst.src)
    by = np.lexsort((np.arange(n_links), np.asarray(inst.dst, dtype=np.int64),
                     np.asarray(inst.src, dtype=np.int64)))
    rank = np.empty(n_links, dtype=np.int64)
    rank[by] = np.arange(n_links, dtype=np.int64)
    key = rank[link]
    if route is not None:
        return np.lexsort((route, key, end, start))
    if len(end):
        lo = int(end.min())
        if (int(end.max()) - lo + 1) * n_links < 1 << 62:
            key += (end - lo) * n_links
            return np.lexsort((key, start))
    return np.lexsort((key, end, start))


def _table(rows: list[tuple[int, ...]]) -> tuple[np.ndarray, np.ndarray]:
    """CSR ``(ptr, data)`` of integer tuples."""
    ptr = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows)),
              out=ptr[1:])
    data = np.fromiter((x for r in rows for x in r), dtype=np.int64, count=int(ptr[-1]))
    return ptr, data


def _to_schedule_tuples(problem: Problem, inst: Instance, res: TrialResult) -> Schedule:
    """:func:`to_schedule` for ticks beyond 64 bits (hours of latency): Python integers all
    the way, a tuple of ``Transfer`` objects."""
    ids = [c.id for c in problem.collective.chunks]
    n = len(res.link)
    rs = res.route or [-1] * n
    order = sorted(range(n), key=lambda i: (res.start[i], res.end[i], inst.src[res.link[i]],
                                            inst.dst[res.link[i]], res.link[i], rs[i]))
    starts = [res.start[i] * TICK for i in order]
    ends = [res.end[i] * TICK for i in order]
    links, routes = [res.link[i] for i in order], [rs[i] for i in order]
    srcs, dsts = [inst.src[lk] for lk in links], [inst.dst[lk] for lk in links]
    chunks = list(res.chunk_tuples())
    if ids != list(range(len(ids))):
        chunks = [tuple(ids[i] for i in cs) for cs in chunks]
    paths = [inst.route_links[r] if r >= 0 else (lk,)
             for lk, r in zip(links, routes, strict=True)]
    transfers = transfers_from_columns(starts, ends, srcs, dsts, paths,
                                       [chunks[i] for i in order])
    return Schedule(problem.topology, problem.collective, transfers, {})


def _ints(column) -> list[int]:
    """A column of a trial (a list, or numpy from the compiled trial) as Python ints."""
    return column.tolist() if hasattr(column, "tolist") else list(column)


class _Runner:
    """Runs (trial, cap) jobs on an engine (:mod:`tacos.engines`: this process, a process pool
    or a Dask cluster) and keeps the best."""

    def __init__(self, inst: Instance, seed: int, speculate: bool, workers: int,
                 progress: Callable[[int, int], None] | None, total: int,
                 deadline: float | None = None, jit: bool = True, cluster: Any = None,
                 compiled: bool = False) -> None:
        self.inst, self.seed, self.speculate, self.jit = inst, seed, speculate, jit
        self.compiled = compiled
        self.workers, self.progress, self.total = workers, progress, total
        self.deadline, self.cluster = deadline, cluster
        self.done = 0

    def _tick(self) -> None:
        self.done += 1
        if self.progress is not None:
            self.progress(self.done, self.total)

    def _engine(self, jobs: list[tuple[int, int]]) -> Engine:
        if self.cluster is not None and len(jobs) > 1:
            return engine_for(cluster=self.cluster)
        scale = COMPILED_SPEEDUP if self.compiled else 1
        if self.inst.total_need * len(jobs) < IN_PROCESS_WORK * scale:
            return SerialEngine()  # a pool would take longer to start than the trials
        return engine_for(self.workers, tasks=len(jobs))

    def run(self, jobs: list[tuple[int, int]]) -> TrialResult:
        """The best result of ``jobs``; after the deadline (if any) no further job starts, but
        at least one always finishes.  The best is the smallest (makespan, trial, cap), so it
        does not depend on the engine or on the order trials finish in."""
        engine = self._engine(jobs)
        if isinstance(engine, SerialEngine):
            shared: tuple = (None, self.inst, self.seed, self.speculate, self.jit)
        else:  # workers ship a trial's transfers only when it beats their best of this run
            shared = (uuid.uuid4().hex, self.inst, self.seed, self.speculate, self.jit)
        best: TrialResult | None = None
        keys: list[_Key] = []
        answers = engine.imap(_work, shared, jobs, self.deadline)
        try:
            for _, (key, payload) in answers:
                keys.append(key)
                if payload is not None and (best is None or key < _key(best)):
                    best = payload
                self._tick()
        finally:
            answers.close()
        assert best is not None and _key(best) == min(keys)
        return best


_BEST: dict[str, Any] = {"run": None, "key": None}


def _work(shared: tuple, job: tuple[int, int]) -> tuple[_Key, TrialResult | None]:
    """Run one trial; in a worker process, ship its transfers only if it beats this worker's
    best of the same run (``shared[0]``; None: always)."""
    run, inst, seed, speculate, jit = shared
    trial, cap = job
    r = run_trial(inst, seed, trial, cap, speculate, jit)
    key = _key(r)
    if run is None:
        return key, r
    if _BEST["run"] != run:
        _BEST.update(run=run, key=None)
    if _BEST["key"] is None or key < _BEST["key"]:
        _BEST["key"] = key
        return key, r
    return key, None
