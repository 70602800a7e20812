"""The ILP's default formulation: the link model (:mod:`tacos.solvers.ilp.link_model`), solved
by CP-SAT from the greedy's schedules, with a proven lower bound and its optimality gap.

:func:`solve_link` runs the greedy (one chunk per transfer, then merged transfers) for its
first schedules, replays the best one on the integer clock as the warm start (so the model's
first incumbent is the greedy's plan and its search only goes down from there), and minimizes
the makespan within the time limit (``time_limit``) or until the proven gap is at most ``gap``
(early termination).  ``mode="cluster"`` solves in time windows instead (time clustering): the
window ``[k·W, (k+1)·W)`` is re-optimized with every transfer the incumbent starts before it
fixed, each window warm-started from the incumbent and limited to its share of the budget.

The result is the fastest complete schedule (the greedy's included, so never slower than
them), replayed by the simulator; the bound is CP-SAT's, scaled to continuous time
(:attr:`~tacos.solvers.ilp.link_grid.LinkGrid.bound_scale`) and combined with tacos's own
(:func:`tacos.check.bounds.lower_bound`).  It holds for every schedule of the problem whose
transfers carry at most ``max_merge`` chunks over one link each (``stats['bound_scope']``),
which with ``max_merge`` "auto" is every schedule unless the merge variables would pass
:data:`MERGE_VARS_PER_SECOND` per second of the time limit, or building them runs past half of
it (then one chunk per transfer, and the scope says so).
"""

from __future__ import annotations

import importlib
import math
import time
from typing import Any

from tacos.model.schedule import Schedule, Transfer
from tacos.solvers.ilp.link_grid import LinkGrid, Move, replay_in_ticks
from tacos.solvers.ilp.link_model import merge_pairs, solve_link_model
from tacos.solvers.registry import Problem, SolveResult

MERGE_VARS_PER_SECOND = 1_000  # "auto" merges while the member variables are at most this
# many per second of the time limit (the 32-NPU Table I all-gather: 79,360, proven in ~45 s)
GREEDY_SHARE = 0.25  # most of the time limit the greedy first schedules may take
RESERVE = 0.05  # share of the time limit kept for replay and bookkeeping
BASELINES = ("greedy", "greedy_merged", "shortest_path")


def merge_cap(grid: LinkGrid, max_merge: Any, time_limit: float) -> int:
    """Chunks per transfer the model allows: ``max_merge`` when it is a number, else (``auto``
    or None) every chunk when the merge variables are at most :data:`MERGE_VARS_PER_SECOND`
    per second of ``time_limit``, else 1."""
    n = max(1, len(grid.collective.chunks))
    if isinstance(max_merge, int) and not isinstance(max_merge, bool):
        return max(1, min(n, max_merge))
    if isinstance(max_merge, str) and max_merge.isdigit():
        return max(1, min(n, int(max_merge)))
    return n if merge_pairs(grid) <= MERGE_VARS_PER_SECOND * time_limit else 1


def relays_of(problem: Problem) -> frozenset[int] | None:
    """NPUs the problem lets relay: ``relay_npus`` (what :func:`tacos.synthesize` passes, from
    its ``relays``), else the ``relays`` option, else any NPU (None), as in the TEN."""
    if "relay_npus" in problem.options:
        r = problem.options["relay_npus"]
        return None if r is None else frozenset(r)
    if problem.options.get("relays"):
        return problem.collective.relay_npus(problem.options["relays"])
    return None


def solve_link(problem: Problem, opt: dict[str, Any], starts: list[tuple[list[Transfer], str]],
               t0: float) -> SolveResult:
    """Solve ``problem`` with the link model; ``starts`` are the complete schedules to start
    from (label, transfers), ``opt`` the checked options, ``t0`` when the solve began."""
    topo, coll = problem.topology, problem.collective
    deadline = t0 + opt["time_limit"] * (1 - RESERVE)
    grid = LinkGrid.of(topo, coll, relays_of(problem))
    cap = merge_cap(grid, problem.options.get("max_merge", "auto"), opt["time_limit"])
    usable = [(tr, src) for tr, src in starts if all(len(t.route) == 1 for t in tr)]
    hints = [(replay_in_ticks(grid, tr, cap), src) for tr, src in usable]
    hint, hint_src = min(hints, key=lambda h: grid.makespan(h[0])) if hints else ([], "")
    horizon = grid.makespan(hint) if hint else _trivial_horizon(grid)
    tacos_lb = _tacos_bound(topo, coll)
    lower = max(0, math.floor(tacos_lb / grid.tick * (1 - 1e-9)))
    stats: dict[str, Any] = {
        "formulation": "link", "backend": "cpsat", "mode": opt["mode"], "tick": grid.tick,
        "grid_exact": grid.exact, "max_merge": cap, "hint_source": hint_src,
        "hint_makespan": horizon * grid.tick, "bound_tacos": tacos_lb,
    }
    if opt["mode"] == "cluster":
        res_status, moves, bound, cstats = _clustered(grid, opt, hint, horizon, lower, cap,
                                                      deadline)
        stats.update(cstats)
    else:
        res = solve_link_model(grid, hint=hint, horizon=horizon, lower=lower,
                               time_limit=max(0.01, deadline - time.perf_counter()),
                               seed=opt["seed"], threads=opt["threads"],
                               gap_limit=opt["gap"], max_merge=cap)
        if res.stats.get("build_timeout") and cap > 1:  # too big with merges: without them
            cap = 1
            hint = min((replay_in_ticks(grid, tr, 1) for tr, _src in usable),
                       key=grid.makespan, default=[])
            horizon = grid.makespan(hint) if hint else horizon
            res = solve_link_model(grid, hint=hint, horizon=horizon, lower=lower,
                                   time_limit=max(0.01, deadline - time.perf_counter()),
                                   seed=opt["seed"], threads=opt["threads"],
                                   gap_limit=opt["gap"], max_merge=1)
            stats["max_merge"] = 1
        res_status, moves, bound = res.status, res.moves, res.bound
        stats.update(res.stats, solve_seconds=round(res.seconds, 4))
    candidates = list(starts)
    if moves:
        candidates.append((_retime(topo, coll, grid.transfers(moves)), "ilp"))
    transfers, source = min(candidates, key=lambda cs: (_makespan(cs[0]), cs[1] in BASELINES))
    makespan = _makespan(transfers)
    cp_bound = bound * grid.tick * grid.bound_scale
    everything = cap >= len(coll.chunks)
    proven = max(cp_bound, tacos_lb) if everything else tacos_lb
    if not everything and makespan >= cp_bound:
        proven = max(proven, cp_bound)  # a bound for one chunk per transfer, which this is
    proven = min(proven, makespan)
    gap = (makespan - proven) / makespan if makespan > 0 else 0.0
    if res_status == "infeasible":
        status = "infeasible"
    elif gap <= 1e-9 and (everything or _chunk_per_transfer(transfers)):
        status = "optimal"
    else:
        status = "time_limit" if res_status == "time_limit" else "feasible"
    stats.update(source=source, solve_time=time.perf_counter() - t0, bound_cpsat=cp_bound,
                 bound_scope=("all schedules" if everything else
                              f"transfers of at most {cap} chunk(s)"),
                 proven_bound=proven, optimality_gap=gap,
                 candidates={src: _makespan(tr) for tr, src in candidates},
                 bound_ratio=makespan / tacos_lb if tacos_lb > 0 else None)
    meta = {"solver": "ilp", "status": status, "backend": "cpsat", "formulation": "link",
            "seed": opt["seed"], "lower_bound": proven, "optimality_gap": gap,
            "gap": stats["bound_ratio"], "source": source, "mode": opt["mode"],
            "tick": grid.tick, "max_merge": cap}
    schedule = Schedule(topo, coll, tuple(sorted(transfers)), meta)
    return SolveResult(status, schedule, proven, stats)


def _clustered(grid: LinkGrid, opt: dict[str, Any], hint: list[Move], horizon: int,
               lower: int, cap: int, deadline: float
               ) -> tuple[str, list[Move], int, dict[str, Any]]:
    """Time clustering: re-optimize window after window, the incumbent's earlier transfers
    fixed; returns (status, moves, bound in ticks, stats)."""
    slowest = max(grid.d(c, li) for c in range(len(grid.collective.chunks))
                  for li in range(len(grid.topology.links)))
    width = max(1, int(opt.get("cluster_steps") or 2)) * slowest
    best, best_h = list(hint), horizon
    k, windows, timed_out = 0, 0, False
    bound = lower
    while k * width < best_h:
        now = time.perf_counter()
        if now >= deadline:
            timed_out = True
            break
        left_windows = max(1, math.ceil((best_h - k * width) / width))
        limit = (deadline - now) / left_windows
        if opt.get("window_time_limit"):
            limit = min(limit, float(opt["window_time_limit"]))
        fixed = [m for m in best if m[2] < k * width]
        res = solve_link_model(grid, hint=best, horizon=best_h, lower=lower,
                               time_limit=limit, seed=opt["seed"], threads=opt["threads"],
                               gap_limit=opt["gap"], max_merge=cap, fixed=fixed)
        windows += 1
        if k == 0 and res.status == "optimal":  # nothing fixed: a proof for the whole problem
            bound = max(bound, res.bound)
        if res.moves and res.objective is not None and res.objective <= best_h:
            best, best_h = res.moves, res.objective
        if bound >= best_h:
            break
        k += 1
    status = "optimal" if bound >= best_h else ("time_limit" if timed_out else "feasible")
    return status, best, bound, {"n_windows": windows, "window_ticks": width,
                                 "timed_out": timed_out}


def _trivial_horizon(grid: LinkGrid) -> int:
    return sum(grid.d(c, li) for c in range(len(grid.collective.chunks))
               for li in range(len(grid.topology.links))) + 1


def _tacos_bound(topology, collective) -> float:
    """tacos's own lower bound (seconds; the continuous one the ILP's solver module uses)."""
    return importlib.import_module("tacos.solvers.ilp.solver").continuous_lower_bound(
        topology, collective)


def _chunk_per_transfer(transfers: list[Transfer]) -> bool:
    return all(len(t.chunks) == 1 for t in transfers)


def _retime(topology, collective, transfers: list[Transfer]) -> list[Transfer]:
    """``transfers`` replayed by :func:`tacos.check.simulate.simulate` (same order per link)."""
    if not transfers:
        return transfers
    simulate = importlib.import_module("tacos.check.simulate").simulate
    return list(simulate(Schedule(topology, collective, tuple(sorted(transfers)))).schedule
                .transfers)


def _makespan(transfers: list[Transfer]) -> float:
    return max((t.end for t in transfers), default=0.0)
