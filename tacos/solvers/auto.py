"""``auto``: a portfolio that keeps the fastest verified plan, never slower than NCCL's models.

For one collective and size, ``auto`` runs

* the synthesizers -- ``greedy`` (choosing its chunks per NPU with ``greedy_chunks``),
  ``forest`` (when this build has it; for all-reduce on a switch that multicasts and reduces it
  also tries its in-switch star), ``hierarchical`` (on multi-dimensional topologies), ``a2a``
  (all-to-all) -- through :func:`tacos.synthesize.solve`, each also with its
  transfers joined into in-switch groups where the switches allow
  (:func:`tacos.passes.in_switch.fuse_in_switch`);
* the NCCL-faithful baselines NCCL itself would choose from on this topology
  (:func:`tacos.solvers.nccl.nccl_algorithms`: rings, trees, NVLS, CollNet, PAT, send/recv),

verifies every plan, and returns the fastest.  Because NCCL's models are candidates, the plan
is never slower than the best of them on the user's own topology; ``meta['auto']`` says which
plan won, every candidate's time, the best NCCL model and the speedup over it, and why a
candidate was skipped.

Options: ``candidates`` (names to try, default all of :data:`SYNTHESIZERS` and ``nccl``),
``fuse`` (try in-switch groups on synthesized plans, default True), ``max_merge`` (for greedy);
the common options (``seed``, ``trials``, ``workers``, ``time_limit``, ``relays``) go to every
synthesizer.
"""

from __future__ import annotations

import time
from typing import Any

from tacos.collective import Collective
from tacos.errors import ClusterError, TacosError
from tacos.schedule import Schedule
from tacos.solvers.options import MAX_MERGE, Option, boolean, int_or_text
from tacos.solvers.registry import SOLVERS, Problem, SolveResult
from tacos.topology import Topology
from tacos.verify import verify_schedule

SYNTHESIZERS = ("greedy", "forest", "hierarchical", "a2a")
FOREST_MAX_GROUP = 64
"""Largest group the default portfolio packs trees for.  Packing grows with N² max-flows
(docs/forest.md, Limits): on this project's 2-core machine a 64 MiB all-reduce took forest
7.7 s on an 8x8 mesh, 45.6 s on 8x16 and more than 7 minutes on 16x16, which kept the default
solver busy for as long.  Naming ``forest`` (``--solver forest``
or ``-O candidates=...``) runs it at any size."""


def _synthesized(topology: Topology, collective: Collective, name: str,
                 options: dict[str, Any], greedy_chunks: bool = False) -> Schedule:
    """Run one synthesizer with the common options and those of its own it declares;
    with ``greedy_chunks`` the greedy also chooses its chunks per NPU
    (:func:`tacos.solvers.greedy_chunks.synthesize_chunked`)."""
    from tacos.solvers.options import COMMON_OPTIONS, declared
    from tacos.solvers.registry import solver_class
    from tacos.synthesize import solve

    own = declared(solver_class(name))
    opts = {k: v for k, v in options.items()
            if k in own or (k in COMMON_OPTIONS and k != "progress")}
    if name == "greedy" and greedy_chunks:
        from tacos.solvers.greedy_chunks import synthesize_chunked

        return synthesize_chunked(topology, collective, solver=name, bound=False,
                                  **opts)
    res = solve(topology, collective, solver=name, bound=False, **opts)
    if res.schedule is None:
        raise TacosError(f"{name} found no schedule ({res.status})")
    return res.schedule


def run_portfolio(topology: Topology, collective: Collective, *,
                  candidates: tuple[str, ...] | None = None, fuse: bool = True,
                  nccl_system=None, keep_plans: bool = False, greedy_chunks: bool = False,
                  in_switch: bool = True, **options: Any) -> tuple[str, Schedule, dict[str, Any]]:
    """Run the portfolio; ``(winner, schedule, facts)`` (see module doc).

    ``greedy_chunks``: the greedy candidate picks its own chunks per NPU (``tacosc`` sets it
    when neither the command line nor the file fixes the chunk count).  ``max_merge`` is
    checked first, so a bad value is a user error, not a skipped greedy.

    ``in_switch=False`` keeps only plans without in-switch groups (what MSCCL XML can express):
    no fusion, forest without its in-switch star, NCCL's NVLS/CollNet plans skipped.

    ``nccl_system`` reuses a :class:`~tacos.solvers.nccl_system.System` (sweeps build it once);
    ``keep_plans`` puts every verified plan in ``facts['plans']``.  Raises
    :class:`TacosError` when no candidate gives a verified plan.
    """
    if "max_merge" in options:
        from tacos.solvers.merge import check_max_merge

        check_max_merge(options["max_merge"])
    wanted = candidates or SYNTHESIZERS + ("nccl",)
    if not in_switch:
        fuse = False
        options = {**options, "in_switch": False}
    plans: dict[str, Schedule] = {}
    skipped: dict[str, str] = {}
    seconds: dict[str, float] = {}
    start = time.perf_counter()
    limit = options.get("time_limit")
    for name in wanted:
        if name == "nccl" or name not in SYNTHESIZERS and name not in SOLVERS:
            continue
        if name not in SOLVERS:
            skipped[name] = "not in this build"
            continue
        n = len(collective.group)
        if name == "forest" and candidates is None and n > FOREST_MAX_GROUP:
            skipped[name] = (f"not tried on a group of {n} NPUs (more than "
                             f"{FOREST_MAX_GROUP}): its tree packing would take minutes; "
                             "--solver forest runs it")
            continue
        left = None if limit is None else limit - (time.perf_counter() - start)
        if left is not None and left <= 0 and plans:  # keep the best plan found so far
            skipped[name] = f"not tried: the time limit of {limit:g} s was reached"
            continue
        t0 = time.perf_counter()
        try:
            opts = options if left is None else {**options, "time_limit": max(left, 1e-3)}
            plans[name] = _synthesized(topology, collective, name, opts, greedy_chunks)
        except ClusterError:
            raise  # the cluster the user named: fix it, not a candidate to skip
        except TacosError as exc:
            skipped[name] = exc.message
        seconds[name] = time.perf_counter() - t0
        if fuse and name in plans:
            fused = fuse_in_switch_safe(plans[name])
            if fused is not None:
                plans[f"{name}+in-switch"] = fused
    nccl_best = None
    nccl_ref: float | None = None
    if "nccl" in wanted and limit is not None and plans and time.perf_counter() - start > limit:
        skipped["nccl"] = (f"not tried: the time limit of {limit:g} s was reached (the plan "
                           "may be slower than NCCL's models)")
    elif "nccl" in wanted:
        t0 = time.perf_counter()
        try:
            from tacos.solvers.nccl import nccl_best as run_nccl

            nccl_best, _, results = run_nccl(topology, collective, sys_=nccl_system)
            for algo, sched in results.items():
                if in_switch or all(t.group is None for t in sched.transfers):
                    plans[f"nccl-{algo}"] = sched
                else:
                    skipped[f"nccl-{algo}"] = "uses in-switch operations (in_switch=false)"
            if f"nccl-{nccl_best}" not in plans and verify_schedule(results[nccl_best]).ok:
                nccl_ref = results[nccl_best].makespan  # NCCL's best still sets the reference
        except TacosError as exc:
            skipped["nccl"] = exc.message
        seconds["nccl"] = time.perf_counter() - t0
    times: dict[str, float] = {}
    for label, sched in plans.items():
        rep = verify_schedule(sched)
        if rep.ok:
            times[label] = sched.makespan
        else:
            skipped[label] = "did not verify: " + rep.violations[0].text()
    if not times:
        raise TacosError("no candidate of the portfolio gave a verified plan: "
                         + "; ".join(f"{k}: {v}" for k, v in skipped.items()),
                         hint="name a solver with --solver")
    winner = min(times, key=lambda k: (times[k], k))
    facts: dict[str, Any] = {"winner": winner, "times": times, "skipped": skipped,
                             "seconds": seconds}
    others = [t for k, t in times.items() if k != winner]
    if others:
        facts["runner_up"] = min((k for k in times if k != winner), key=times.__getitem__)
        facts["margin"] = min(others) / times[winner] if times[winner] > 0 else None
    if nccl_best is not None and (f"nccl-{nccl_best}" in times or nccl_ref is not None):
        ref = times.get(f"nccl-{nccl_best}", nccl_ref)
        facts["nccl_best"] = f"nccl-{nccl_best}"
        facts["nccl_time"] = ref
        facts["speedup_vs_nccl"] = ref / times[winner] if times[winner] > 0 else None
    if keep_plans:
        facts["plans"] = {k: plans[k] for k in times}
    return winner, plans[winner], facts


def fuse_in_switch_safe(schedule: Schedule) -> Schedule | None:
    """:func:`~tacos.passes.in_switch.fuse_in_switch`, None on any failure."""
    from tacos.passes.in_switch import fuse_in_switch

    try:
        return fuse_in_switch(schedule)
    except TacosError:
        return None


def describe(facts: dict[str, Any]) -> str:
    """One line: which plan won and by how much."""
    text = f"auto: {facts['winner']} won"
    speedup = facts.get("speedup_vs_nccl")
    if speedup is not None and facts["nccl_best"] in facts.get("skipped", {}):
        text += (f", {1 / speedup:.2f}x slower than {facts['nccl_best']} (not a candidate: "
                 f"{facts['skipped'][facts['nccl_best']]})" if speedup < 1 else
                 f", {speedup:.2f}x faster than {facts['nccl_best']}")
    elif speedup is not None and not facts["winner"].startswith("nccl-"):
        text += f", {speedup:.2f}x faster than {facts['nccl_best']}"
    elif facts.get("nccl_best"):
        text += f" (NCCL's own best model: {facts['nccl_best']})"
    if facts.get("runner_up") and facts.get("margin"):
        text += f"; runner-up {facts['runner_up']} {facts['margin']:.2f}x slower"
    return text


class AutoSolver:
    """The portfolio as a :class:`~tacos.solvers.registry.Solver` (see module doc)."""

    name = "auto"
    supports_combining = True
    native_switches = True
    refines_chunks = True
    options = {
        "candidates": Option("solvers to try (default: greedy, forest, hierarchical, a2a "
                             "and NCCL's models, 'nccl')",
                             lambda text: tuple(x.strip() for x in text.split(",") if x)),
        "fuse": Option("also try every synthesized plan with in-switch multicast/reduce "
                       "groups where switches declare them", boolean, (True, False), True),
        "max_merge": Option("greedy: most chunks one transfer may carry",
                            int_or_text("auto"), default="auto", range=(1, MAX_MERGE)),
        "in_switch": Option("keep plans with in-switch multicast/reduce groups (false: only "
                            "plans MSCCL XML can express)", boolean, (True, False), True),
        "greedy_chunks": Option("let the greedy candidate choose its chunks per NPU "
                                "(1, 2, 4, ... kept while it pays)", boolean, (True, False),
                                False),
    }

    def solve(self, problem: Problem) -> SolveResult:
        """Run the portfolio on the physical topology."""
        t0 = time.perf_counter()
        opts = dict(problem.options)
        opts.pop("progress", None)
        cands = opts.pop("candidates", None)
        fuse = bool(opts.pop("fuse", True))
        greedy_chunks = bool(opts.pop("greedy_chunks", False))
        in_switch = bool(opts.pop("in_switch", True))
        winner, sched, facts = run_portfolio(problem.topology, problem.collective,
                                             candidates=tuple(cands) if cands else None,
                                             fuse=fuse, greedy_chunks=greedy_chunks,
                                             in_switch=in_switch, **opts)
        meta = dict(sched.meta)
        meta["auto_seconds"] = facts.pop("seconds", {})  # wall clock: report only, not output
        meta["auto"] = facts
        meta["algorithm"] = f"{winner} ({meta.get('algorithm', winner)})"
        out = Schedule(sched.topology, sched.collective, sched.transfers, meta)
        stats = {"synthesis_time": time.perf_counter() - t0, "winner": winner}
        return SolveResult("feasible", out, None, stats)
