"""forest's bounds on what a packing could gain: below every schedule of its trees, at the
optimum for the exact rate, and what keeps the integer programs from running in vain."""

from __future__ import annotations

import pytest

import tacos
from tacos.builders import mesh, ring, star
from tacos.check.verify import verify_schedule
from tacos.model.patterns import build
from tacos.solvers.forest.bound import cannot_win, load_bound, rate_floor
from tacos.solvers.forest.candidates import Candidate, Context, candidates
from tacos.solvers.forest.solver import plan_forest
from tacos.solvers.forest.view import RouteView

GB = 1e9
US = 1e-6
TOPOS = {
    "ring": lambda: ring(6, bandwidth=10 * GB, latency=US),
    "mesh": lambda: mesh(3, 3, bandwidth=10 * GB, latency=US),
    "star": lambda: star(5, bandwidth=10 * GB, latency=US),
}


@pytest.mark.parametrize("trees,name", [
    pytest.param(trees, name, marks=pytest.mark.slow) if (trees, name) == (1, "mesh")  # ~0.7 s
    else (trees, name) for trees in ("exact", 1, 2) for name in sorted(TOPOS)])
def test_load_bound_lies_between_the_rate_floor_and_the_schedule(name, trees):
    topo = TOPOS[name]()
    group = tuple(topo.live_npus)
    size = len(group) * 2**22
    forest = plan_forest(topo, group, group, "copy", False, trees)
    data = size / len(group)
    load = load_bound(forest, data, RouteView(topo))
    # no packing at the optimum beats the min cut, and none with k trees beats its rate floor
    assert load >= forest.optimal_time(data) * (1 - 1e-9)
    assert load >= rate_floor(forest, data) * (1 - 1e-9)
    # only packings of this tree count (no candidate rebuilds them at another count)
    sched = tacos.synthesize(topo, build("allgather", group, size=size), solver="forest",
                             trees=trees, dims=False, share=False, nic=False, timed=False,
                             shallow=False)
    assert verify_schedule(sched).ok
    assert sched.meta["forest"]["phases"][0]["k"] == forest.rate.k
    assert sched.makespan >= rate_floor(forest, data) * (1 - 1e-9)


def test_exact_rate_floor_is_the_optimum():
    topo = TOPOS["mesh"]()
    group = tuple(topo.live_npus)
    forest = plan_forest(topo, group, group, "copy", False, "exact")
    assert forest.rate.exact
    assert rate_floor(forest, 1e6) == pytest.approx(forest.optimal_time(1e6), rel=1e-12)


def test_cannot_win_compares_with_the_best_so_far():
    assert not cannot_win(1.0, None)  # nothing timed yet: everything may win
    assert cannot_win(2.0, 2.0) and cannot_win(3.0, 2.0)
    assert not cannot_win(1.9, 2.0)


def test_costly_candidates_are_asked_only_when_worth_it():
    asked: list[str] = []

    def make(name: str, costly: bool, instead_of: str | None = None) -> Candidate:
        def build(ctx):
            asked.append(name)
            return [[name]]
        return Candidate(name, name, build, lambda ctx: True, ("test",),
                         instead_of=instead_of, costly=costly)

    table = (make("program", True), make("other", True, instead_of="program"),
             make("quick", False))
    ctx = Context([], None, (0, 1), order=True, fixed=False, stepped={}, deep={})
    assert candidates(table, ctx, {}, worth=lambda c: False) == [[["quick"]]]
    assert asked == ["quick"]
    asked.clear()
    assert candidates(table, ctx, {}, worth=lambda c: True) == [[["program"]], [["quick"]]]
    assert asked == ["program", "quick"]


def test_solver_reports_what_the_bound_skipped():
    topo = TOPOS["ring"]()
    coll = build("allgather", topo.live_npus, size=6 * 2**24)
    sched = tacos.synthesize(topo, coll, solver="forest")
    assert verify_schedule(sched).ok
    forest = sched.meta["forest"]
    assert isinstance(forest["skipped_by_bound"], int) and forest["skipped_by_bound"] >= 0
    # every packing timed could beat the best one timed before it
    times = [t["makespan"] for t in forest["tried"]]
    assert sched.makespan <= min(times) * (1 + 1e-9)


@pytest.mark.slow  # ~1.5 s: two sizes packed cold and again; the memo's own test stays default
def test_a_sweep_packs_once_and_gives_the_cold_schedules():
    from tacos.solvers.forest import memo
    from tacos.solvers.forest import solver as forest_solver

    topo = TOPOS["mesh"]()
    group = tuple(topo.live_npus)
    sizes = (len(group) * 2**16, len(group) * 2**22)
    cold = []
    for size in sizes:
        memo.clear()
        sched = tacos.synthesize(topo, build("allgather", group, size=size), solver="forest")
        assert verify_schedule(sched).ok
        cold.append(tacos.emit(sched, "json"))
    memo.clear()
    calls: list[object] = []
    real = forest_solver.plan_forest

    def counting(*args, **kwargs):
        calls.append(args[5])  # the tree count
        return real(*args, **kwargs)

    forest_solver.plan_forest = counting
    try:
        warm, packed = [], []
        for size in sizes:
            warm.append(tacos.emit(tacos.synthesize(topo, build("allgather", group, size=size),
                                                    solver="forest"), "json"))
            packed.append(len(calls))
    finally:
        forest_solver.plan_forest = real
        memo.clear()
    assert warm == cold  # the same bytes as solving each size alone
    assert packed[0] > 0 and packed[1] == packed[0]  # the second size packed nothing


def test_the_memo_keeps_the_most_recent_shapes():
    from tacos.solvers.forest import memo

    memo.clear()
    shapes = [ring(n, bandwidth=GB, latency=US) for n in range(3, 4 + memo.MAX_SHAPES)]
    first = memo.shape_caches(shapes[0], (0, 1, 2), "allgather", None, ())
    first["plans"]["x"] = 1
    assert memo.shape_caches(shapes[0], (0, 1, 2), "allgather", None, ()) is first
    for t in shapes[1:]:
        memo.shape_caches(t, tuple(t.live_npus), "allgather", None, ())
    assert memo.shape_caches(shapes[0], (0, 1, 2), "allgather", None, ())["plans"] == {}
    memo.clear()
