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

from tacos.check.verify_once import verified
from tacos.errors import ClusterError, TacosError
from tacos.model.collective import Collective
from tacos.model.schedule import Schedule
from tacos.model.topology import Topology
from tacos.solvers.options import MAX_MERGE, Option, boolean, int_or_text
from tacos.solvers.registry import SOLVERS, Capabilities, Problem, SolverBase, SolveResult
from tacos.solvers.scale_gate import scale_gate

SYNTHESIZERS = ("greedy", "forest", "hierarchical", "a2a")
FOREST_MAX_GROUP = 64
"""Largest group the default portfolio packs trees for.  Packing grows with N² max-flows
(docs/forest.md, Limits): on this project's 2-core machine a 64 MiB all-reduce took forest
7.7 s on an 8x8 mesh, 45.6 s on 8x16 and more than 7 minutes on 16x16, which kept the default
solver busy for as long.  Naming ``forest`` (``--solver forest``
or ``-O candidates=...``) runs it at any size."""


GC_PAUSE_MAX_GROUP = 64
"""Largest group whose portfolio runs with Python's cyclic garbage collector paused.  The
candidates' plans, lowerings and timings are millions of small objects that live until the
portfolio ends; each full collection walked all of them again, and there were 8-10 of them:
1.2 s of the 5.3 s of a 4x4x4 torus all-gather's compile, 2.2 of 8.7 s on the TPU-v4-like
cube (``gc.callbacks``, one run each).  Reference counting still frees everything that forms no
cycle; what does is freed after the run: 27 000 objects on the torus, 52 000 on the cube, for
8-13 MiB more peak memory (``docs/benchmarks/everyday.md``).  Larger groups keep the collector
on: their memory is the limit there, not this CPU."""


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
        from tacos.solvers.greedy.chunks import synthesize_chunked

        return synthesize_chunked(topology, collective, solver=name, bound=False,
                                  **opts)
    res = solve(topology, collective, solver=name, bound=False, **opts)
    if res.schedule is None:
        raise TacosError(f"{name} found no schedule ({res.status})")
    return res.schedule


def run_portfolio(topology: Topology, collective: Collective, *,
                  candidates: tuple[str, ...] | None = None, fuse: bool = True,
                  nccl_system=None, keep_plans: bool = False, greedy_chunks: bool = False,
                  in_switch: bool = True, emit: str = "", build_nccl: bool = False,
                  **options: Any) -> tuple[str, Schedule, dict[str, Any]]:
    """Run the portfolio; ``(winner, schedule, facts)`` (see module doc).

    ``greedy_chunks``: the greedy candidate picks its own chunks per NPU (``tacosc`` sets it
    when neither the command line nor the file fixes the chunk count).  ``max_merge`` is
    checked first, so a bad value is a user error, not a skipped greedy.

    ``in_switch=False`` keeps only plans without in-switch groups (what MSCCL XML can express):
    no fusion, forest without its in-switch star, NCCL's NVLS/CollNet plans skipped.

    ``emit="xml"``: the plan is written as MSCCL XML, so every candidate is ranked by the
    runtime time of its XML lowering (NCCL's algorithms too); ``emit="shaped"``: by the
    runtime time of its runtime-shaped XML lowering (what ``tacosc -o plan.xml`` writes;
    the fixed lowering when no plan can be shaped); otherwise NCCL's algorithms are
    timed as NCCL runs them.  NCCL's own choice, as NCCL runs it, is the reference of
    ``speedup_vs_nccl`` (``facts['ranked_by']`` says which model ranked).

    ``nccl_system`` reuses a :class:`~tacos.solvers.nccl_system.System` (sweeps build it once);
    ``keep_plans`` puts every verified plan in ``facts['plans']``.  Raises
    :class:`TacosError` when no candidate gives a verified plan.

    When NCCL's algorithms are timed as NCCL runs them (no ``emit``, no ``keep_plans``, small
    groups), only the winner's link-level NCCL schedule is built
    (:mod:`tacos.solvers.auto_nccl`; ``facts['link_times']`` then lists the plans built);
    ``build_nccl`` builds them all.

    On groups of at most :data:`GC_PAUSE_MAX_GROUP` NPUs the run pauses Python's cyclic
    garbage collector (:func:`tacos.nogc.paused_gc`; see that constant).
    """
    if len(collective.group) > GC_PAUSE_MAX_GROUP:
        return _run_portfolio(topology, collective, candidates=candidates, fuse=fuse,
                              nccl_system=nccl_system, keep_plans=keep_plans,
                              greedy_chunks=greedy_chunks, in_switch=in_switch, emit=emit,
                              build_nccl=build_nccl, **options)
    from tacos.nogc import paused_gc

    with paused_gc(aged=True):
        return _run_portfolio(topology, collective, candidates=candidates, fuse=fuse,
                              nccl_system=nccl_system, keep_plans=keep_plans,
                              greedy_chunks=greedy_chunks, in_switch=in_switch, emit=emit,
                              build_nccl=build_nccl, **options)


def _run_portfolio(topology: Topology, collective: Collective, *,
                   candidates: tuple[str, ...] | None, fuse: bool, nccl_system: Any,
                   keep_plans: bool, greedy_chunks: bool, in_switch: bool, emit: str,
                   build_nccl: bool, **options: Any) -> tuple[str, Schedule, dict[str, Any]]:
    """:func:`run_portfolio`, run."""
    again = dict(candidates=candidates, fuse=fuse, nccl_system=nccl_system,
                 keep_plans=keep_plans, greedy_chunks=greedy_chunks, in_switch=in_switch,
                 emit=emit, build_nccl=True, **options)
    if "max_merge" in options:
        from tacos.solvers.greedy.merge import check_max_merge

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
    unbeatable = None  # NCCL's modelled time under every synthesized plan's bound
    gate = scale_gate(topology, collective, candidates=candidates, emit=emit)  # large groups
    # NCCL timed by its own model (auto_nccl) ranks by the runtime model, where a plan with
    # in-switch groups has no time: fusing waits until that is known
    quick_nccl = not (gate or emit or keep_plans or build_nccl) and in_switch \
        and "nccl" in wanted
    to_fuse: list[str] = []
    if candidates is None and emit != "xml" and "nccl" in wanted:
        from tacos.solvers.auto_prune import unbeatable_reference

        unbeatable = unbeatable_reference(topology, collective)
    for name in wanted:
        if name == "nccl":
            continue
        if unbeatable is not None:
            skipped[name] = unbeatable.reason()
            continue
        if name not in SOLVERS:
            skipped[name] = "not in this build" if name in SYNTHESIZERS else "no such solver"
            continue
        n = len(collective.group)
        if name == "forest" and candidates is None and n > FOREST_MAX_GROUP:
            skipped[name] = (f"not tried on a group of {n} NPUs (more than "
                             f"{FOREST_MAX_GROUP}): its tree packing would take minutes; "
                             "--solver forest runs it")
            continue
        why = gate.skip(name, topology, collective, plans, options.get("relays") or "members") \
            if gate else ""  # large groups: a plan that cannot win is not built
        if why:
            skipped[name] = why
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
        if fuse and name in plans and quick_nccl and limit is None:
            to_fuse.append(name)
        elif fuse and name in plans:
            fused = fuse_in_switch_safe(plans[name])
            if fused is not None:
                plans[f"{name}+in-switch"] = fused
    nccl_best = None
    nccl_ref: float | None = None
    timed = None  # NCCL's algorithms timed by NCCL's model, built only when one wins
    if "nccl" in wanted and limit is not None and plans and time.perf_counter() - start > limit:
        skipped["nccl"] = (f"not tried: the time limit of {limit:g} s was reached (the plan "
                           "may be slower than NCCL's models)")
    elif "nccl" in wanted:
        t0 = time.perf_counter()
        try:
            from tacos.solvers.nccl.solver import nccl_best as run_nccl

            if quick_nccl:
                from tacos.solvers.auto_nccl import timed_nccl

                timed = timed_nccl(topology, collective, nccl_system)
            lazy = gate.nccl(topology, collective, plans, skipped, sys_=nccl_system) \
                if gate else None  # large groups: only what can beat the synthesized plans
            if timed is not None:
                nccl_best, results = timed.names[0], {}
            else:
                nccl_best, _, results = lazy or run_nccl(topology, collective,
                                                         sys_=nccl_system)
            for algo, sched in results.items():
                if in_switch or all(t.group is None for t in sched.transfers):
                    plans[f"nccl-{algo}"] = sched
                else:
                    skipped[f"nccl-{algo}"] = "uses in-switch operations (in_switch=false)"
            if nccl_best in results and f"nccl-{nccl_best}" not in plans \
                    and verified(results[nccl_best]).ok:
                nccl_ref = results[nccl_best].makespan  # NCCL's best still sets the reference
        except TacosError as exc:
            skipped["nccl"] = exc.message
        seconds["nccl"] = time.perf_counter() - t0
    if to_fuse:
        plans = _fuse_deferred(plans, to_fuse, skipped, ranked=timed is not None)
    # large groups ranked by shaped XML: each plan is verified once it can be ranked
    lazy = gate is not None and emit == "shaped"
    link_times = {k: v.makespan for k, v in plans.items()} if lazy else \
        _verified_times(plans, skipped, gate.verify if gate else verified)
    if not link_times and timed is None:
        raise _no_plan(skipped)
    floors: dict[str, float] = {}  # candidates that cannot win: their runtime floor
    shaped = (gate.shaped_times if gate else _shaped_times)(  # large groups: one at a time
        topology, collective, plans, link_times, skipped) if emit == "shaped" else None
    if lazy:  # only the plans verified so far (all of them when the shaped ranking failed)
        if shaped is None:
            gate.build_deferred(plans, skipped)
        link_times = gate.verified_times(plans, link_times, skipped, all_=shaped is None)
        if not link_times:
            raise _no_plan(skipped)
    if shaped is not None:
        times, runtime, ranked_by = shaped
    else:
        times, runtime, ranked_by = _runtime_times(topology, collective, plans, link_times,
                                                   skipped, as_xml=emit in ("xml", "shaped"),
                                                   prune=not keep_plans, floors=floors,
                                                   timer=gate.runtime_of if gate else None,
                                                   pretimed=timed and timed.by_label(),
                                                   floor_of=gate.floor_of if gate else None)
    winner = min(times, key=lambda k: (times[k], k))
    if timed is not None and winner not in plans:  # NCCL won: build its schedule
        try:
            built = timed.build(winner)
        except TacosError:
            built = None
        if built is None or not verified(built).ok:
            return run_portfolio(topology, collective, **again)  # as if all were built
        plans[winner] = built
        link_times[winner] = built.makespan
    if gate:
        gate.remember(plans[winner])
    facts: dict[str, Any] = {"winner": winner, "times": times, "skipped": skipped,
                             "seconds": seconds, "ranked_by": ranked_by,
                             "link_times": link_times, "runtime": runtime}
    others = [t for k, t in times.items() if k != winner]
    if others:
        facts["runner_up"] = min((k for k in times if k != winner), key=times.__getitem__)
        facts["margin"] = min(others) / times[winner] if times[winner] > 0 else None
    if floors and (not others or min(floors.values()) < min(others)) and times[winner] > 0:
        # a candidate not timed to the end may be the runner-up: say how far it is at least
        facts["runner_up"] = min((k for k in link_times if k in floors),
                                 key=floors.__getitem__)  # ties: the candidates' order
        facts["margin"] = floors[facts["runner_up"]] / times[winner]
        facts["margin_at_least"] = True
    if gate:
        gate.runner_up(facts, times)  # a plan not built may be the runner-up: how far at least
    ref_label, ref = _nccl_reference(topology, collective, nccl_best, times, nccl_ref,
                                     ranked_by)
    if ref_label is not None and ref is not None:
        facts["nccl_best"] = ref_label
        facts["nccl_time"] = ref
        facts["speedup_vs_nccl"] = ref / times[winner] if times[winner] > 0 else None
    if keep_plans:
        facts["plans"] = {k: plans[k] for k in times}
    return winner, plans[winner], facts


def _verified_times(plans: dict[str, Schedule], skipped: dict[str, str], verify: Any
                    ) -> dict[str, float]:
    """The link-model time of every plan of ``plans`` that ``verify`` passes; the others are
    in ``skipped`` with their first violation."""
    out: dict[str, float] = {}
    for label, sched in plans.items():
        rep = verify(sched)
        if rep.ok:
            out[label] = sched.makespan
        else:
            skipped[label] = "did not verify: " + rep.violations[0].text()
    return out


def _no_plan(skipped: dict[str, str]) -> TacosError:
    """The error when no candidate gave a verified plan."""
    return TacosError("no candidate of the portfolio gave a verified plan: "
                      + "; ".join(f"{k}: {v}" for k, v in skipped.items()),
                      hint="name a solver with --solver")


def _runtime_times(topology: Topology, collective: Collective, plans: dict[str, Schedule],
                   link_times: dict[str, float], skipped: dict[str, str], *,
                   as_xml: bool = False, prune: bool = True,
                   floors: dict[str, float] | None = None, timer: Any = None,
                   pretimed: dict[str, tuple[Any, str]] | None = None,
                   floor_of: Any = None) -> tuple[dict[str, float], dict[str, Any], str]:
    """Rank by the runtime model (docs/runtime-model.md): every verified plan timed as it is
    executed (NCCL's algorithms by NCCL, the others as their MSCCL XML lowering).  Plans with
    no executable form (in-switch groups outside NCCL) leave the ranking, with the reason.
    When no plan can be timed (a collective the runtime model lacks), the link model ranks.
    ``as_xml``: every plan, NCCL's included, is timed as the MSCCL XML tacos would write.

    ``prune``: plans timed by NCCL's model come first (they need no lowering), then the others
    by link-model time; a lowered plan whose :func:`~tacos.solvers.auto_floor.runtime_floor`
    is above the best time so far cannot win and is not timed further (``skipped`` says so,
    with both figures; ``floors`` gets its floor).

    ``timer``: what times a plan (default :func:`tacos.runtime.plans.runtime_of`).
    ``pretimed``: candidates timed without a schedule (label -> ``(estimate, note)``: NCCL's
    algorithms as NCCL runs them), ranked after the plans of ``link_times``.
    ``floor_of(schedule, topology)``: a plan's runtime floor, when already known."""
    from tacos.runtime.plans import runtime_of

    times: dict[str, float] = {}
    runtime: dict[str, Any] = {}
    reasons: dict[str, str] = {}
    pretimed = pretimed or {}
    labels = [*link_times, *(k for k in pretimed if k not in link_times)]
    order = sorted(labels, key=lambda k: (k not in pretimed and not _nccl_timed(plans[k], as_xml),
                                          link_times.get(k, 0.0), k))
    for label in order:
        if label in pretimed:
            times[label] = pretimed[label][0].time
            runtime[label] = {**pretimed[label][0].to_json(), "of": pretimed[label][1]}
            continue
        if prune and times and not _nccl_timed(plans[label], as_xml):
            floor, why = _floor_prune(plans[label], topology, times, floor_of)
            if why:
                skipped[label] = why
                if floors is not None:
                    floors[label] = floor
                continue
        est, note = (timer or runtime_of)(plans[label], topology, as_xml=as_xml)
        if est is None:
            reasons[label] = note
            continue
        times[label] = est.time
        runtime[label] = {**est.to_json(), "of": note}
    if not times:
        return dict(link_times), runtime, "link model"
    times = {k: times[k] for k in labels if k in times}  # the candidates' order
    runtime = {k: runtime[k] for k in labels if k in runtime}
    for label, why in reasons.items():
        skipped[label] = f"{why} (link-model time {link_times[label]:.4g} s)"
    return times, runtime, "runtime model"


def _nccl_timed(schedule: Schedule, as_xml: bool) -> bool:
    """Whether :func:`~tacos.runtime.plans.runtime_of` times ``schedule`` as NCCL runs it
    (no lowering)."""
    return not as_xml and ("nccl" in schedule.meta or "nccl_models" in schedule.meta)


def _floor_prune(schedule: Schedule, topology: Topology, times: dict[str, float],
                 floor_of: Any = None) -> tuple[float, str]:
    """``(floor, why)``: why ``schedule`` cannot win, when the runtime floor of its MSCCL XML
    lowering is above the best of ``times`` ('' otherwise, and when it has no lowering: its
    timing says why).
    The lowering is kept for the timing that follows (:func:`~tacos.runtime.plans.lowering_of`),
    unless its floor taken before the program is built already exceeds the best time
    (:func:`~tacos.solvers.auto_floor_early.lowered_or_floor`: the lowering stops there)."""
    from tacos.model.units import format_time
    from tacos.solvers.auto_floor import runtime_floor
    from tacos.solvers.auto_floor_early import lowered_or_floor

    if any(t.group is not None for t in schedule.transfers):
        return 0.0, ""
    coll = schedule.collective
    best = min(times, key=lambda k: (times[k], k))
    try:
        if floor_of:
            floor = floor_of(schedule, topology)
        else:
            program, floor = lowered_or_floor(schedule, topology, times[best])
            if program is not None:
                floor = runtime_floor(program, topology, int(coll.size), coll.group,
                                      above=times[best])
    except TacosError:
        return 0.0, ""
    if not floor > times[best]:
        return floor, ""
    return floor, (f"cannot win: its MSCCL XML lowering takes at least {format_time(floor)} in the "
            f"runtime model (every connection at its full rate, or its busiest thread block at "
            f"the CTA rate), more than {best}'s "
            f"{format_time(times[best])}")


#: the instance counts the shaped ranking tries (the file written then tries up to 32): a
#: plan's time changes little past 8 while the cost of timing it grows with the count
RANK_INSTANCES = (1, 2, 4, 8)


def _shaped_times(topology: Topology, collective: Collective, plans: dict[str, Schedule],
                  link_times: dict[str, float], skipped: dict[str, str]
                  ) -> tuple[dict[str, float], dict[str, Any], str] | None:
    """Rank by the runtime time of each plan's runtime-shaped MSCCL XML program
    (:func:`tacos.msccl.shape_choose.choose_shape` over all of them at once, its quick search:
    one pairing climbed per protocol, no port-order variants, at most
    :data:`RANK_INSTANCES` instances; a plan whose lower bound cannot
    beat the best shape found is not lowered further and leaves the ranking, with the
    reason).  The file written is then shaped with the full search.  None when no plan can
    be shaped (the caller then ranks the fixed lowering)."""
    from tacos.msccl.lower import IN_PLACE_KINDS, MscclOptions
    from tacos.msccl.shape import shapes
    from tacos.msccl.shape_choose import choose_shape

    inplace = collective.kind in IN_PLACE_KINDS  # as the file is written: its programs are reused
    plain = {k: plans[k] for k in link_times
             if not any(t.group is not None for t in plans[k].transfers)}
    if not plain:
        return None
    try:
        choice = choose_shape(plain, topology, max(1, int(collective.size)), quick=True,
                              base=MscclOptions(inplace=inplace, outofplace=not inplace),
                              candidates=shapes(instances=RANK_INSTANCES, port_orders=(False,)))
    except (TacosError, ImportError):
        return None
    times: dict[str, float] = {}
    runtime: dict[str, Any] = {}
    for c in choice.considered:
        if c.time is not None and (c.plan not in times or c.time < times[c.plan]):
            times[c.plan] = c.time
            runtime[c.plan] = {"time": c.time, "of": "its runtime-shaped MSCCL XML lowering "
                               f"({c.shape.label()})", "instances": c.shape.instances,
                               "proto": c.shape.proto}
    times[choice.plan] = choice.time  # the chosen shape (fewest thread blocks when near)
    runtime[choice.plan] = {"time": choice.time, "of": "its runtime-shaped MSCCL XML lowering "
                            f"({choice.shape.label()})", "instances": choice.shape.instances,
                            "proto": choice.shape.proto, "bound": choice.bound}
    for label in link_times:
        if label in times:
            continue
        why = next((c.problems[0] for c in choice.considered if c.plan == label and c.problems),
                   "in-switch groups: MSCCL XML cannot express them")
        skipped[label] = (f"not ranked: runtime-shaped XML {why} (link-model time "
                          f"{link_times[label]:.4g} s)")
    return times, runtime, "runtime model (shaped MSCCL XML)"


def _nccl_reference(topology: Topology, collective: Collective, nccl_best: str | None,
                    times: dict[str, float], nccl_ref: float | None, ranked_by: str
                    ) -> tuple[str | None, float | None]:
    """The NCCL time a plan is held to: the fastest of NCCL's own choice (what NCCL runs by
    default) and every NCCL algorithm among the candidates (what ``NCCL_ALGO`` can force), in
    the runtime model; else the best NCCL model of the link model."""
    if nccl_best is None:
        return None, None
    if ranked_by.startswith("runtime model"):
        from tacos.runtime.plans import nccl_runtime

        try:
            est = nccl_runtime(topology, collective.kind, collective.size, collective.group,
                               None)
        except TacosError:
            est = None
        pool = {k: t for k, t in times.items() if k.startswith("nccl-")}
        if est is not None:
            algo = str(est.detail.get("algorithm", nccl_best))
            label = "nccl-" + {"nvls_tree": "nvls"}.get(algo, algo)
            pool[label] = min(est.time, pool.get(label, est.time))
        if pool:
            label = min(pool, key=lambda k: (pool[k], k))
            return label, pool[label]
    if f"nccl-{nccl_best}" in times or nccl_ref is not None:
        return f"nccl-{nccl_best}", times.get(f"nccl-{nccl_best}", nccl_ref)
    return None, None


NOT_FUSED = ("not tried: in-switch multicast/reduce groups would exist only in the link "
             "model (neither MSCCL XML nor the MSCCL++ plans tacos writes express them), and "
             "the runtime model ranks the candidates")


def _fuse_deferred(plans: dict[str, Schedule], names: list[str], skipped: dict[str, str], *,
                   ranked: bool) -> dict[str, Schedule]:
    """``plans`` with ``name+in-switch`` after each of ``names`` where its switches allow
    groups.  ``ranked``: the runtime model ranks (NCCL's algorithms have their times), which
    gives a plan with in-switch groups no time, so none is tried (``skipped`` says so)."""
    topology = plans[names[0]].topology
    if ranked:
        if any(s.capabilities for s in topology.switches):  # else nothing would be fused
            for name in names:
                skipped[f"{name}+in-switch"] = NOT_FUSED
        return plans
    out: dict[str, Schedule] = {}
    for label, sched in plans.items():
        out[label] = sched
        if label in names:
            fused = fuse_in_switch_safe(sched)
            if fused is not None:
                out[f"{label}+in-switch"] = fused
    return out


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
        least = "at least " if facts.get("margin_at_least") else ""
        text += f"; runner-up {facts['runner_up']} {least}{facts['margin']:.2f}x slower"
    return text


class AutoSolver(SolverBase):
    """The portfolio as a :class:`~tacos.solvers.registry.Solver` (see module doc)."""

    name = "auto"
    capabilities = Capabilities(combining=True, native_switches=True, refines_chunks=True)
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
        "emit": Option("the format the plan is written in: 'xml' ranks every candidate by "
                       "the runtime time of its MSCCL XML lowering, 'shaped' by that of its "
                       "runtime-shaped lowering (tacos.msccl.shape_choose)", str,
                       ("", "xml", "shaped"), ""),
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
        emit = str(opts.pop("emit", "") or "")
        winner, sched, facts = run_portfolio(problem.topology, problem.collective,
                                             candidates=tuple(cands) if cands else None,
                                             fuse=fuse, greedy_chunks=greedy_chunks,
                                             in_switch=in_switch, emit=emit, **opts)
        meta = dict(sched.meta)
        meta["auto_seconds"] = facts.pop("seconds", {})  # wall clock: report only, not output
        meta["auto"] = facts
        meta["algorithm"] = f"{winner} ({meta.get('algorithm', winner)})"
        out = Schedule(sched.topology, sched.collective, sched.transfers, meta)
        from tacos.msccl.busiest_memo import share

        share(sched, out)  # the file written asks for its busiest pair again
        stats = {"synthesis_time": time.perf_counter() - t0, "winner": winner}
        return SolveResult("feasible", out, None, stats)
