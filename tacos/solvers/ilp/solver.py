"""TACOS-ILP: provably optimal synthesis, on the links (default) or on the seed's
time-expanded network (seed §V).

``formulation="link"`` (the default when OR-Tools is installed and no other back end is asked
for) solves the problem at the greedy's own granularity -- the collective's chunks, every
transfer over one link for its exact α-β time, merged transfers paying α once -- as a CP-SAT
model warm-started from the greedy's schedule; it reports CP-SAT's proven lower bound and the
plan's optimality gap (:mod:`tacos.solvers.ilp.link`, options ``gap``, ``time_limit``,
``mode``, ``max_merge``, ``threads``).  The rest of this docstring is the TEN formulation
(``formulation="ten"``, and whenever ``backend`` names a MILP back end other than CP-SAT).

:class:`IlpSolver` discretizes the links (:func:`tacos.passes.discretize.discretize`, step =
fastest link's chunk time / ``discretization_factor``), takes a first complete schedule from the
greedy synthesizer (or shortest paths), and bisects the horizon ``T`` between a lower bound
(latency and link throughput in steps) and that schedule's length on the step grid.  Each probe
solves the TEN ILP of :mod:`tacos.solvers.ilp.model` with the postcondition fixed; the status is
``"optimal"`` once the smallest feasible ``T`` is proven.

Early termination (seed §V-B): probes may use ``1 - SOFT_SHARE`` of the budget.  When one is
cut short, the rest goes to the same horizon with the postcondition as objective (early
arrivals score more), warm-started from the best schedule so far; its incumbent, completed by
shortest-path recovery (:mod:`tacos.solvers.ilp.recovery`) if partial, competes with the other
schedules and the status is ``"time_limit"``.  ``mode="cluster"`` runs time clustering instead
(:mod:`tacos.solvers.ilp.clustering`, seed §V-C, status ``"feasible"``).  Whatever the mode, the
result is the shortest complete schedule found (the greedy one included), replayed by the
simulator to remove the slack of rounding link times up to whole steps.

Options (``Problem.options``): ``backend`` (``highs``, ``cpsat``, ``cbc``, ``gurobi``; default
the fastest installed, see :func:`tacos.solvers.ilp.backends.default_backend`), ``time_limit``
(seconds for the whole solve, default 60), ``seed``, ``threads`` (default 1), ``mode``
(``exact`` | ``cluster``), ``cluster_steps`` (window length in steps, default twice the slowest
link), ``window_time_limit`` (cap per clustering window), ``discretization_factor`` (default 1),
``trials`` (greedy trials for the first schedule, default 16), ``upper_bound`` (``greedy`` or
``shortest_path``), ``cluster_first`` (``auto``/True/False: in exact mode, first improve the
upper bound by time clustering, with at most ``CLUSTER_SHARE`` of the budget; ``auto`` does so
when whole-horizon models would be large).

"Optimal" is with respect to the TEN: whole chunks, store-and-forward, link times rounded up to
whole steps.  ``stats['discretization_exact']`` says whether the rounding was lossless, in which
case the TEN optimum is also the optimum in continuous time.  Solves that hit a time limit are
not reproducible run to run (the incumbent depends on timing); solves that finish are, for a
given ``seed``.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import time
from typing import Any

from tacos.errors import UsageError
from tacos.model.collective import Collective
from tacos.model.schedule import Schedule, Transfer
from tacos.model.topology import Topology
from tacos.solvers.ilp import backends as ilp_backends
from tacos.solvers.ilp.model import (
    INF,
    BuildTimeout,
    Send,
    build_ten_model,
    causal_sends,
    demands_met,
    prune_useless,
    schedule_steps,
    step_distances,
    transfers_to_sends,
)
from tacos.solvers.ilp.problem import TenProblem
from tacos.solvers.ilp.recovery import complete_schedule
from tacos.solvers.options import MAX_MERGE, Option, boolean, int_or_text
from tacos.solvers.registry import Problem, SolverBase, SolveResult

RESERVE = 0.15  # fraction of the time limit kept for recovery, replay and bookkeeping
GREEDY_SHARE = 0.25  # most of the time limit the greedy first schedules may take
POOL_MIN_SECONDS = 5.0  # greedy budgets below this run in-process (no worker start-up)
GREEDY, GREEDY_MERGED, SHORTEST = "greedy", "greedy_merged", "shortest_path"
BASELINES = (GREEDY, GREEDY_MERGED, SHORTEST)  # schedules the ILP starts from
SOFT_SHARE = 0.3  # fraction of the ILP time kept for early termination when probes run long
CLUSTER_SHARE = 0.3  # share of the budget exact mode may spend on clustering first
CLUSTER_FIRST_VARS = 200_000  # chunks × links × horizon above which clustering goes first


def unreachable(topology: Topology, collective: Collective) -> str | None:
    """A message naming a (chunk, NPU) pair no path can serve, or None."""
    steps = [1] * len(topology.links)
    for ch in collective.chunks:
        if not ch.pre:
            return f"chunk {ch.id} has no holder"
        dist = step_distances(topology, steps, ch.pre)
        for d in sorted(ch.post):
            if dist[d] >= INF:
                return (f"NPU {topology.node_name(d)} cannot receive chunk {ch.id} "
                        f"(no path from {sorted(ch.pre)})")
    return None


def ten_lower_bound(tp: TenProblem) -> int:
    """Steps no schedule can beat: latency (step distance) and in/out-link throughput."""
    topo, steps = tp.topology, tp.steps
    best = 0
    need_in = [0] * topo.n_nodes
    need_out = [0] * topo.n_nodes
    for have, want in zip(tp.pre, tp.post, strict=True):
        targets = want - have
        if not targets:
            continue
        dist = step_distances(topo, steps, have)
        best = max(best, max(dist[d] for d in targets))
        for d in targets:
            need_in[d] += 1
        if len(have) == 1:
            need_out[next(iter(have))] += 1

    def throughput(lis: tuple[int, ...], need: int) -> int:
        if need == 0:
            return 0
        t = 0
        while sum(topo.links[i].multiplicity * (t // steps[i]) for i in lis) < need:
            t += 1
        return t

    for v in range(topo.n_nodes):
        best = max(best, throughput(topo.in_links[v], need_in[v]),
                   throughput(topo.out_links[v], need_out[v]))
    return best


def continuous_lower_bound(topology: Topology, collective: Collective) -> float:
    """Seconds no schedule can beat (``tacos.check.bounds.lower_bound`` when it is installed)."""
    if importlib.util.find_spec("tacos.check.bounds") is not None:
        try:
            value = importlib.import_module("tacos.check.bounds").lower_bound(topology, collective)
            return float(getattr(value, "seconds", getattr(value, "value", value)))
        except (ImportError, OSError, AttributeError, TypeError, ValueError):
            pass  # e.g. OR-Tools max-flow cannot load next to highspy: use the bound below
    best = 0.0
    recv = [0.0] * topology.n_nodes
    for ch in collective.chunks:
        targets = ch.post - ch.pre
        if not targets:
            continue
        import networkx as nx

        g = nx.DiGraph()
        for lk in topology.links:
            w = lk.time(ch.size)
            if not g.has_edge(lk.src, lk.dst) or g.edges[lk.src, lk.dst]["weight"] > w:
                g.add_edge(lk.src, lk.dst, weight=w)
        dist = nx.multi_source_dijkstra_path_length(g, set(ch.pre) & set(g.nodes))
        best = max([best] + [dist.get(d, 0.0) for d in targets])
        for d in targets:
            recv[d] += ch.size
    for v in range(topology.n_nodes):
        bw = topology.ingress_bandwidth(v)
        if recv[v] and bw > 0:
            best = max(best, recv[v] / bw)
    return best


def upper_bound_schedule(problem: Problem, seed: int, trials: int, source: str = "greedy",
                         time_limit: float | None = None) -> list[tuple[list[Transfer], str]]:
    """Complete schedules to start from; the first one sets the top of the horizon search.

    ``source="greedy"``: TACOS-Greedy (best of ``trials``) with ``max_merge=1`` (one chunk per
    transfer, like the TEN model, so it maps onto the step grid without loss), then, unless the
    problem asks for ``max_merge=1``, greedy with the problem's ``max_merge`` (default
    ``"auto"``: several chunks per transfer may pay α once, which the TEN cannot express) as a
    further candidate.  Otherwise, or without the greedy solver, shortest paths.
    ``time_limit`` (seconds) bounds the greedy runs: the first completes at least one trial,
    the second runs only if time is left.
    """
    out: list[tuple[list[Transfer], str]] = []
    t0 = time.perf_counter()
    if source == "greedy" and importlib.util.find_spec("tacos.solvers.greedy.solver") is not None:
        greedy = importlib.import_module("tacos.solvers.greedy.solver").GreedySolver()
        merge = problem.options.get("max_merge", "auto")
        for cap, label in ((1, GREEDY), (merge, GREEDY_MERGED)):
            if label == GREEDY_MERGED and cap in (1, "1"):
                break
            opts = {"seed": seed, "trials": trials, "max_merge": cap,
                    "workers": problem.options.get("workers"),
                    "cluster": problem.options.get("cluster")}
            if time_limit is not None:  # the first run may use 60% of the budget
                left = time_limit - (time.perf_counter() - t0)
                if out and left <= 0:  # a start is in hand: no further run past the budget
                    break
                opts["time_limit"] = max(0.0, left * (0.6 if label == GREEDY else 1.0))
                if opts["time_limit"] < POOL_MIN_SECONDS:  # worker start-up would eat it
                    opts["workers"], opts["cluster"] = 1, None
            res = greedy.solve(Problem(problem.topology, problem.collective, opts))
            if res.schedule is not None:
                out.append((list(res.schedule.transfers), label))
    if not out:
        out.append((complete_schedule(problem.topology, problem.collective, []), SHORTEST))
    return out


def _tri_state(value: str) -> bool | str:
    """Command-line reader for ``cluster_first``."""
    return "auto" if value == "auto" else boolean(value)


def _options(problem: Problem) -> dict[str, Any]:
    o = problem.options
    mode = o.get("mode", "exact")
    if mode not in ("exact", "cluster"):
        raise UsageError(f"unknown ILP mode {mode!r}", hint="use mode 'exact' or 'cluster'")
    limit = o.get("time_limit")
    limit = 60.0 if limit is None else limit
    if isinstance(limit, bool) or not isinstance(limit, int | float) or not (
            math.isfinite(limit) and limit > 0):
        raise UsageError(f"time_limit must be a positive number of seconds, not {limit!r}")
    limit = float(limit)
    factor = int(o.get("discretization_factor", 1) or 1)
    if factor < 1:
        raise UsageError("discretization_factor must be at least 1")
    cluster_steps = o.get("cluster_steps")
    if cluster_steps is not None and int(cluster_steps) < 1:
        raise UsageError("cluster_steps must be at least 1")
    formulation = o.get("formulation") or "auto"
    if formulation not in ("auto", "link", "ten"):
        raise UsageError(f"unknown ILP formulation {formulation!r}",
                         hint="use formulation 'link' (default), 'ten' or 'auto'")
    gap = o.get("gap")
    gap = 0.0 if gap is None else gap
    if isinstance(gap, bool) or not isinstance(gap, int | float) or not 0 <= gap < 1:
        raise UsageError(f"gap must be a fraction in [0, 1), not {gap!r}",
                         hint="e.g. gap=0.01 stops once the plan is proven within 1%")
    upper = o.get("upper_bound", "greedy")
    if upper not in ("greedy", "shortest_path"):
        raise UsageError(f"unknown upper_bound {upper!r}",
                         hint="use upper_bound 'greedy' or 'shortest_path'")
    backend = o.get("backend")
    if formulation == "auto":
        link_ok = backend in (None, "cpsat") and ilp_backends.is_available("cpsat")
        formulation = "link" if link_ok else "ten"
    if formulation == "link" and backend not in (None, "cpsat"):
        raise UsageError(f"the link formulation is a CP-SAT model, not a {backend} one",
                         hint="drop the back end (or use backend=cpsat), or formulation=ten")
    backend = backend or ("cpsat" if formulation == "link" else ilp_backends.default_backend())
    ilp_backends.require(backend)
    return {"mode": mode, "time_limit": limit, "factor": factor, "backend": backend,
            "formulation": formulation, "gap": float(gap),
            "seed": int(o.get("seed", 0) or 0), "threads": int(o.get("threads", 1) or 1),
            "cluster_steps": cluster_steps, "trials": int(o.get("trials", 16) or 16),
            "upper_bound": upper, "window_time_limit": o.get("window_time_limit"),
            "cluster_first": o.get("cluster_first", "auto")}


class IlpSolver(SolverBase):
    """The TEN ILP with horizon bisection, early termination + recovery, time clustering."""

    name = "ilp"
    options = {
        "backend": Option("MILP back end: highs, cpsat, cbc or gurobi (link formulation: "
                          "cpsat; TEN: the fastest installed)", str,
                          ("highs", "cpsat", "cbc", "gurobi", None)),
        "formulation": Option("'link' (CP-SAT on the links at the greedy's granularity), "
                              "'ten' (the seed's time-expanded network) or 'auto' (link when "
                              "OR-Tools is installed and no other back end is asked for)",
                              str, ("auto", "link", "ten"), "auto"),
        "gap": Option("link formulation: stop once the plan is proven within this fraction "
                      "of the optimum (0: prove it)", float, default=0.0, range=(0.0, 0.999)),
        "mode": Option("'exact' (minimize until proven or the time limit: early termination) "
                       "or 'cluster' (time clustering, seed paper V-C)", str,
                       ("exact", "cluster"), "exact"),
        "threads": Option("solver threads", int, default=1, range=(1, 256)),
        "cluster_steps": Option("time-clustering window length in steps, or for the link "
                                "formulation in slowest-link chunk times (default 2)", int,
                                range=(1, 100_000)),
        "window_time_limit": Option("cap in seconds per clustering window", float,
                                    range=(1e-3, 1e6)),
        "discretization_factor": Option("steps per fastest-link chunk time", int, default=1,
                                        range=(1, 1000)),
        "upper_bound": Option("first schedule: 'greedy' or 'shortest_path'", str,
                              ("greedy", "shortest_path"), "greedy"),
        "cluster_first": Option("exact mode: tighten the upper bound by time clustering "
                                "first: 'auto', true or false", _tri_state, default="auto"),
        "max_merge": Option("chunks per transfer of the greedy starting schedule "
                            "(see greedy)", int_or_text("auto"), default="auto",
                            range=(1, MAX_MERGE)),
    }

    def solve(self, problem: Problem) -> SolveResult:
        """Synthesize a schedule for ``problem`` (see the module docstring for options)."""
        t0 = time.perf_counter()
        opt = _options(problem)
        deadline = t0 + opt["time_limit"] * (1 - RESERVE)
        topo, coll = problem.topology, problem.collective
        reason = unreachable(topo, coll)
        if reason is not None:
            return SolveResult("infeasible", None, None, {"reason": reason})
        starts = upper_bound_schedule(problem, opt["seed"], opt["trials"], opt["upper_bound"],
                                      time_limit=opt["time_limit"] * GREEDY_SHARE)
        if opt["formulation"] == "link":
            from tacos.solvers.ilp.link import solve_link

            return solve_link(problem, opt, starts, t0)
        lower = continuous_lower_bound(topo, coll)
        tp = TenProblem.of(topo, coll, opt["factor"])
        ub_transfers, ub_source = starts[0]
        ub_sends = transfers_to_sends(ub_transfers, tp.steps, tp.pre, topo)
        lb = ten_lower_bound(tp)
        stats: dict[str, Any] = {
            "backend": opt["backend"], "mode": opt["mode"], "step": tp.disc.step,
            "discretization_exact": tp.exact(), "upper_bound_source": ub_source,
            "ten_lower_bound_steps": lb,
            "ten_upper_bound_steps": schedule_steps(ub_sends, tp.steps),
        }
        candidates: list[tuple[list[Transfer], str]] = list(starts)
        if opt["mode"] == "cluster":
            from tacos.solvers.ilp.clustering import solve_clustered

            sends, _complete, cstats = solve_clustered(tp, opt, deadline)
            stats.update(cstats, horizon=schedule_steps(sends, tp.steps))
            candidates.append((tp.complete(sends), "cluster"))
            status = "time_limit" if cstats["timed_out"] else "feasible"
        else:
            if self._cluster_first(tp, opt, lb, ub_sends):
                from tacos.solvers.ilp.clustering import solve_clustered

                now = time.perf_counter()
                sends, complete, cstats = solve_clustered(
                    tp, opt, now + (deadline - now) * CLUSTER_SHARE)
                stats["cluster_first"] = {k: cstats[k] for k in ("n_windows", "solve_seconds")}
                candidates.append((tp.complete(sends), "cluster"))
                if complete and schedule_steps(sends, tp.steps) < schedule_steps(ub_sends,
                                                                                  tp.steps):
                    ub_sends = sends
            status, extra = self._bisect(tp, opt, deadline, lb, ub_sends, stats)
            candidates.extend(extra)
        # step-grid schedules carry rounding slack: replay them as early as the α-β model allows
        candidates = [(tr if src in BASELINES else _retime(topo, coll, tr), src)
                      for tr, src in candidates]
        # the best complete schedule wins; on a tie the ILP's own one
        transfers, source = min(candidates,
                                key=lambda cs: (_makespan(cs[0]), cs[1] in BASELINES))
        makespan = _makespan(transfers)
        stats.update(source=source, solve_time=time.perf_counter() - t0,
                     candidates={src: _makespan(tr) for tr, src in candidates},
                     gap=stats.get("ten_gap"),
                     bound_ratio=makespan / lower if lower > 0 else None)
        meta = {"solver": "ilp", "status": status, "backend": opt["backend"],
                "seed": opt["seed"], "lower_bound": lower, "gap": stats["bound_ratio"],
                "ten_gap": stats.get("ten_gap"),
                "horizon_steps": stats.get("horizon"), "step": tp.disc.step, "source": source,
                "mode": opt["mode"]}
        schedule = Schedule(topo, coll, tuple(sorted(transfers)), meta)
        return SolveResult(status, schedule, lower, stats)

    @staticmethod
    def _cluster_first(tp: TenProblem, opt: dict[str, Any], lb: int, ub_sends: list[Send]
                       ) -> bool:
        """Whether exact mode first tightens its upper bound by time clustering.

        Option ``cluster_first`` (default ``"auto"``: when the first schedule is not provably
        optimal and the TEN at its horizon would have more than :data:`CLUSTER_FIRST_VARS`
        send variables, i.e. when whole-horizon probes are unlikely to finish).
        """
        choice = opt.get("cluster_first", "auto")
        hi = schedule_steps(ub_sends, tp.steps)
        if choice in (False, "false", "no", 0) or hi <= lb:
            return False
        if choice in (True, "true", "yes", 1):
            return True
        return len(tp.sizes) * len(tp.topology.links) * hi > CLUSTER_FIRST_VARS

    def _bisect(self, tp: TenProblem, opt: dict[str, Any], deadline: float, lb: int,
                ub_sends: list[Send], stats: dict[str, Any]
                ) -> tuple[str, list[tuple[list[Transfer], str]]]:
        """Bisect the horizon; returns the status and the schedules found.

        Probes fix the postcondition (``h[c,d,T] = 1``): infeasibility proofs are then an
        order of magnitude faster than with a "maximize delivered" objective.  A feasible probe
        lowers the top to the makespan it found.  Probes must end by ``1 - SOFT_SHARE`` of the
        budget; if one is cut short, the rest goes to early termination (seed §V-B): the same
        horizon, postcondition as objective (``Σ_t h`` over postcondition pairs, i.e. early
        arrivals), warm-started from the best schedule so far; its incumbent, partial or not,
        becomes a candidate, completed by shortest-path recovery when partial.
        """
        start = time.perf_counter()
        probe_deadline = start + (deadline - start) * (1 - SOFT_SHARE)
        lo, hi = lb, schedule_steps(ub_sends, tp.steps)
        best = ub_sends
        extra: list[tuple[list[Transfer], str]] = []
        probes: list[dict[str, Any]] = []
        cut_at: int | None = None
        while lo < hi:
            mid = (lo + hi) // 2
            sends, res, model = self._probe(tp, opt, mid, probe_deadline, hard=True)
            if res is None:
                cut_at = mid
                break
            probes.append(_probe_stats(mid, "hard", res, model, sends, tp))
            if res.status == "infeasible" or (res.status == "optimal" and not _full(sends, tp)):
                lo = mid + 1
            elif _full(sends, tp):
                hi, best = schedule_steps(sends, tp.steps), sends
            else:
                cut_at = mid
                break
        if cut_at is not None and time.perf_counter() < deadline:
            sends, res, model = self._probe(tp, opt, cut_at, deadline, hard=False, hint=best)
            if res is not None:
                probes.append(_probe_stats(cut_at, "early_termination", res, model, sends, tp))
                if _full(sends, tp):
                    if schedule_steps(sends, tp.steps) < hi:
                        hi, best = schedule_steps(sends, tp.steps), sends
                elif sends:
                    extra.append((tp.complete(sends), "ilp+recovery"))
        if best is not ub_sends:
            extra.append((tp.transfers(best), "ilp"))
        stats.update(probes=probes, horizon=hi, ten_lower_bound_steps=lo,
                     ten_gap=(hi - lo) / hi if hi else 0.0,
                     solve_seconds=sum(p["seconds"] for p in probes),
                     variables=max((p["vars"] for p in probes), default=0),
                     constraints=max((p["rows"] for p in probes), default=0))
        if lo >= hi:
            return "optimal", extra
        return "time_limit", extra

    def _probe(self, tp: TenProblem, opt: dict[str, Any], horizon: int, deadline: float, *,
               hard: bool, hint: list[Send] | None = None):
        """Build and solve the model at ``horizon``; ``(sends, result, model)``.

        ``result`` is None when the deadline passed before the solver could start.
        """
        if time.perf_counter() >= deadline:
            return [], None, None
        try:
            model = build_ten_model(tp.topology, tp.steps, tp.pre, tp.post, horizon,
                                    hard_post=hard, objective="delivered" if hard else "early",
                                    deadline=deadline)
        except BuildTimeout:
            return [], None, None
        values = model.hint_from(hint, tp.pre, tp.steps, tp.topology) if hint else None
        res = ilp_backends.solve_model(
            model, opt["backend"], time_limit=deadline - time.perf_counter(),
            seed=opt["seed"], threads=opt["threads"], hint=values)
        sends: list[Send] = []
        if res.values is not None:
            sends = prune_useless(causal_sends(model.sends_of(res.values), tp.pre, tp.steps,
                                               tp.topology), tp.post, tp.topology)
        return sends, res, model


def _full(sends: list[Send], tp: TenProblem) -> bool:
    """True when ``sends`` serve every postcondition pair."""
    need = sum(len(q - p) for p, q in zip(tp.pre, tp.post, strict=True))
    return demands_met(sends, tp.pre, tp.post, tp.topology) == need


def _probe_stats(horizon: int, kind: str, res, model, sends: list[Send],
                 tp: TenProblem) -> dict[str, Any]:
    return {"horizon": horizon, "kind": kind, "status": res.status,
            "delivered": demands_met(sends, tp.pre, tp.post, tp.topology),
            "demands": model.n_demands, "vars": model.n_vars, "rows": model.n_rows,
            "seconds": round(res.seconds, 4)}


def _retime(topology: Topology, collective: Collective, transfers: list[Transfer]
            ) -> list[Transfer]:
    """``transfers`` replayed by :func:`tacos.check.simulate.simulate` (same order per link, no idle
    time left by rounding link times up to whole steps); unchanged without the simulator."""
    if importlib.util.find_spec("tacos.check.simulate") is None or not transfers:
        return transfers
    simulate = importlib.import_module("tacos.check.simulate").simulate
    replay = simulate(Schedule(topology, collective, tuple(sorted(transfers)))).schedule
    return list(replay.transfers)


def _makespan(transfers: list[Transfer]) -> float:
    return max((t.end for t in transfers), default=0.0)
