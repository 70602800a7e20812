"""The hierarchical plan's link-model lower bound (tacos/solvers/baselines/hier_bound.py) and
the scale gate's use of it: never above the built plan's time, tight on tori of equal links,
and a portfolio that skips the plan keeps the winner and every other time."""

from __future__ import annotations

import random

import pytest

import tacos.runtime.plans as runtime_plans
from tacos.builders import mesh, multi_dim, torus
from tacos.check.verify import verify_schedule
from tacos.model.patterns import build
from tacos.solvers import scale_gate
from tacos.solvers.auto import run_portfolio
from tacos.solvers.baselines import hier_bound
from tacos.solvers.baselines.hier_bound import hierarchical_floor
from tacos.solvers.baselines.solver import baseline_schedule

MiB = 1 << 20


def _shapes(seed: int):
    """Small tori, meshes and multi-dimensional topologies with random links per dimension."""
    rng = random.Random(seed)
    for _ in range(4):
        dims = tuple(rng.choice((2, 3, 4)) for _ in range(rng.choice((2, 3))))
        bws = [rng.choice((25e9, 50e9, 100e9)) for _ in dims]
        lats = [rng.choice((0.3e-6, 1e-6, 2e-6)) for _ in dims]
        yield f"torus{dims}", torus(*dims, bandwidth=bws, latency=lats)
        yield f"mesh{dims}", mesh(*dims, bandwidth=bws, latency=lats)
    kinds = [("Ring", 2), ("FullyConnected", 3), ("Switch", 4), ("Ring", 4)]
    for _ in range(3):
        dims = rng.sample(kinds, rng.choice((2, 3)))
        yield f"multi{dims}", multi_dim(dims, [rng.choice((25e9, 100e9)) for _ in dims],
                                        [rng.choice((0.5e-6, 2e-6)) for _ in dims])


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_bound_is_never_above_the_built_plan(seed):
    checked = 0
    for name, topo in _shapes(seed):
        n = len(topo.live_npus)
        for size, chunks in ((n * 64, 1), (n * 3 * MiB, 2)):
            coll = build("allgather", topo.live_npus, size=size, chunks_per_npu=chunks)
            floor = hierarchical_floor(topo, coll)
            sched = baseline_schedule("hierarchical", topo, coll)
            assert verify_schedule(sched).ok, name
            assert floor is not None, name
            assert 0 < floor.time <= sched.makespan, (name, size, floor.describe())
            checked += 1
    assert checked == 2 * len(list(_shapes(seed)))


@pytest.mark.parametrize("dims", [(4, 4, 4), (2, 3, 4), (5, 3)])
def test_on_a_torus_of_equal_links_the_bound_is_the_plan_time(dims):
    topo = torus(*dims, bandwidth=50e9, latency=0.5e-6)
    n = len(topo.live_npus)
    for size in (n * 64, n * MiB):
        coll = build("allgather", topo.live_npus, size=size)
        floor = hierarchical_floor(topo, coll)
        sched = baseline_schedule("hierarchical", topo, coll)
        assert verify_schedule(sched).ok
        assert floor.time <= sched.makespan <= floor.time * (1 + 1e-6)
        assert [s.size for s in floor.stages] == [k for k in reversed(dims) if k > 1]


def test_no_claim_for_reductions_or_non_products():
    topo = torus(3, 3, bandwidth=50e9, latency=1e-6)
    assert hierarchical_floor(topo, build("allreduce", topo.live_npus, size=9 * 64)) is None
    assert hierarchical_floor(topo, build("reducescatter", topo.live_npus, size=9 * 64)) is None
    sub = build("allgather", topo.live_npus[:5], size=5 * 64)  # not a product of dimensions
    assert hierarchical_floor(topo, sub) is None


def _force_link_ranking(monkeypatch):
    """As on 4,096 ranks: the gate on, no MSCCL program loads, NCCL finds no ring."""
    from tacos.errors import TacosError

    monkeypatch.setattr(scale_gate, "SCALE_PAIRS", 0)
    monkeypatch.setattr(scale_gate, "no_plan_loads", lambda topology, collective: True)
    monkeypatch.setattr(runtime_plans, "unloadable", lambda schedule, options=None:
                        "refused before lowering (test: as on 4,096 ranks)")

    def no_ring(*args, **kwargs):
        raise TacosError("no ring through every NPU of the group")

    monkeypatch.setattr("tacos.solvers.nccl.solver.nccl_algorithms", no_ring)


@pytest.mark.slow
def test_the_portfolio_skips_only_what_cannot_win(monkeypatch):
    topo = torus(4, 4, bandwidth=50e9, latency=0.5e-6)
    coll = build("allgather", topo.live_npus, size=16 * 4 * MiB)
    _force_link_ranking(monkeypatch)
    kw = dict(seed=0, trials=1, workers=1)
    winner, sched, facts = run_portfolio(topo, coll, **kw)
    assert "hierarchical" in facts["skipped"]
    assert facts["skipped"]["hierarchical"].startswith("cannot win")
    assert facts["ranked_by"] == "link model"
    assert verify_schedule(sched).ok
    floor = hierarchical_floor(topo, coll).time
    assert floor > max(facts["times"].values())  # the runner-up is a plan built
    assert facts["runner_up"] in facts["times"] and not facts.get("margin_at_least")
    # without the bound the plan is built: it loses, and every other time is the same
    monkeypatch.setattr(hier_bound, "hierarchical_floor", lambda *a, **k: None)
    full_winner, _, full = run_portfolio(topo, coll, **kw)
    assert full_winner == winner
    assert "hierarchical" in full["times"]
    assert floor <= full["times"]["hierarchical"]
    assert {k: t for k, t in full["times"].items() if k != "hierarchical"} == facts["times"]


def test_the_gate_skips_nothing_it_cannot_prove(monkeypatch):
    from tacos.synthesize import solve

    topo = torus(4, 4, bandwidth=50e9, latency=0.5e-6)
    coll = build("allgather", topo.live_npus, size=16 * 4 * MiB)
    monkeypatch.setattr(scale_gate, "SCALE_PAIRS", 0)
    gate = scale_gate.scale_gate(topo, coll, candidates=None, emit="")
    hier = baseline_schedule("hierarchical", topo, coll)
    greedy = solve(topo, coll, solver="greedy", seed=0, trials=1).schedule
    assert verify_schedule(greedy).ok and greedy.makespan < hier.makespan
    assert not scale_gate.no_plan_loads(topo, coll)  # 16 ranks: programs load, none skipped
    assert gate.skip("hierarchical", topo, coll, {"greedy": greedy}) == ""
    monkeypatch.setattr(scale_gate, "no_plan_loads", lambda topology, collective: True)
    assert gate.skip("hierarchical", topo, coll, {"greedy": greedy}).startswith("cannot win")
    assert gate.skip("greedy", topo, coll, {"hierarchical": hier}) == ""  # no bound of its own
    assert gate.skip("hierarchical", topo, coll, {}) == ""
    assert gate.skip("hierarchical", topo, coll, {"slow": hier}) == ""  # not under the bound
    assert scale_gate.ScaleGate(16, "xml").skip("hierarchical", topo, coll,
                                                {"greedy": greedy}) == ""
    # a plan at exactly the bound: it wins the tie when its label sorts first
    monkeypatch.setattr(hier_bound, "hierarchical_floor",
                        lambda *a, **k: hier_bound.HierFloor(greedy.makespan, ()))
    assert gate.skip("hierarchical", topo, coll, {"greedy": greedy}).startswith("cannot win")
    assert gate.skip("hierarchical", topo, coll, {"zzz": greedy}) == ""


def test_a_skipped_plan_is_named_runner_up_at_least_its_bound_behind():
    gate = scale_gate.ScaleGate(4096, "")
    gate.skipped_floors["hierarchical"] = 5e-3
    facts = {"winner": "greedy"}
    gate.runner_up(facts, {"greedy": 1e-3})
    assert facts == {"winner": "greedy", "runner_up": "hierarchical", "margin": 5.0,
                     "margin_at_least": True}
    facts = {"winner": "greedy", "runner_up": "nccl-ring", "margin": 2.0}
    gate.runner_up(facts, {"greedy": 1e-3, "nccl-ring": 2e-3})  # a plan built is closer
    assert facts == {"winner": "greedy", "runner_up": "nccl-ring", "margin": 2.0}
