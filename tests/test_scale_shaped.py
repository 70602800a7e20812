"""The scale gate's ranking by runtime-shaped MSCCL XML (tacos/solvers/scale_shaped.py) and what
the gate skips before timing: forced on small systems, it keeps the full portfolio's winner;
every plan it leaves out cannot win; its floors are bounds."""

from __future__ import annotations

import pytest

import tacos
from tacos.check.verify import verify_schedule
from tacos.model.patterns import build
from tacos.msccl.lower import MscclOptions, lower
from tacos.msccl.shape import Shape
from tacos.msccl.shape_bounds import link_bytes, port_bound
from tacos.msccl.shape_choose import SHARED_CACHE, ShapesPruned, choose_shape
from tacos.runtime.plans import runtime_of
from tacos.solvers import scale_gate
from tacos.solvers.auto import RANK_INSTANCES, run_portfolio
from tacos.solvers.scale_shaped import RANK_INSTANCES as GATED_INSTANCES
from tacos.solvers.scale_shaped import port_floor, schedule_link_bytes

MiB = 1 << 20
TORUS = 'topology "t"\ntorus t[3, 3, 2] 50GiB/s 0.5us\n'

MESH = 'topology "mesh"\nmesh m[3, 3] x 200GB/s 0.5us y 25GB/s 2us\n'
SHAPED_CASES = [
    pytest.param((TORUS, "allreduce", 18 * MiB), marks=pytest.mark.slow, id="torus-3x3x2"),
    pytest.param(('topology "t"\ntorus t[4, 4] 50GiB/s 0.5us\n', "allreduce", 1 * MiB),
                 marks=pytest.mark.slow, id="torus-4x4"),
    pytest.param(("use dgx_a100(nodes=2)", "allgather", 16 * MiB), marks=pytest.mark.slow,
                 id="dgx-a100-2"),
    pytest.param(('topology "ring"\nbiring r[8] 100GB/s 1us\n', "allreduce", 64 * 1024),
                 id="ring-8"),
    pytest.param((MESH, "allreduce", 9 * MiB), marks=pytest.mark.slow, id="mesh-3x3"),
]


def _problem(text: str, kind: str, size: int, chunks: int = 1):
    topo = tacos.parse(text, source="test").topology
    npus = topo.live_npus
    return topo, build(kind, npus, size=size - size % len(npus), chunks_per_npu=chunks)


def _shaped(topo, coll):
    return run_portfolio(topo, coll, seed=0, trials=2, workers=1, keep_plans=True,
                         emit="shaped", in_switch=False)


@pytest.mark.parametrize("solver,instances", [  # the tree needs > 32 channels at 2
    ("greedy", 1), pytest.param("greedy", 2, marks=pytest.mark.slow), ("nccl-ring", 1),
    pytest.param("nccl-ring", 2, marks=pytest.mark.slow), ("nccl-tree", 1),
    pytest.param("hierarchical", 1, marks=pytest.mark.slow), ("hierarchical", 2)])
def test_the_schedule_link_loads_are_those_of_its_lowering(solver, instances):
    topo, coll = _problem(TORUS, "allreduce", 18 << 16, chunks=2)
    sched = tacos.synthesize(topo, coll, solver=solver, trials=1, workers=1)
    assert verify_schedule(sched).ok
    program = lower(sched, options=MscclOptions(inplace=True, outofplace=False,
                                                 instances=instances, pair_peers=True,
                                                 fit_fifo=False))
    got = schedule_link_bytes(sched, topo)
    want = link_bytes(program, topo, coll.size, coll.group)
    assert set(got) == set(want)
    for link, nbytes in want.items():
        assert got[link] == pytest.approx(nbytes, rel=1e-9)
    floor = port_floor(sched, topo)
    assert floor == min(port_bound(want, topo, p) for p in ("Simple", "LL", "LL128"))
    for proto in ("Simple", "LL128"):  # a bound on the program's time in every protocol
        from dataclasses import replace

        est, _ = runtime_of(sched, topo, program=replace(program, proto=proto))
        assert est.time >= floor * (1 - 1e-9)


def test_the_gated_ranking_tries_the_instance_counts_of_the_full_one():
    assert GATED_INSTANCES == RANK_INSTANCES


@pytest.mark.parametrize("case", SHAPED_CASES)
def test_the_shaped_ranking_keeps_the_winner_of_the_full_portfolio(case, monkeypatch):
    topo, coll = _problem(*case)
    full_winner, full_plan, full = _shaped(topo, coll)
    monkeypatch.setattr(scale_gate, "SCALE_PAIRS", 0)  # gate every group
    winner, plan, facts = _shaped(topo, coll)
    assert winner == full_winner
    assert facts["times"][winner] == pytest.approx(full["times"][full_winner], rel=1e-12)
    assert plan.makespan == pytest.approx(full_plan.makespan, rel=1e-12)
    assert facts["ranked_by"] == full["ranked_by"] == "runtime model (shaped MSCCL XML)"
    for label, sched in facts["plans"].items():
        assert verify_schedule(sched).ok, label
    left_out = [k for k, v in facts["skipped"].items() if v.startswith("cannot win")]
    for label in left_out:  # what the full ranking timed of it is no faster than the winner
        assert label not in facts["times"]
        if label in full["times"]:
            assert full["times"][label] >= facts["times"][winner]
    assert all(k not in facts["times"] for k in facts["skipped"])


@pytest.mark.slow  # about 1.7 s; the other tests here keep the ranking in the default run
def test_a_plan_left_out_by_its_floor_is_not_lowered(monkeypatch):
    # 16 MiB on two DGX-A100 nodes: the greedy's shape beats NCCL's ring's every shape
    topo, coll = _problem("use dgx_a100(nodes=2)", "allgather", 16 * MiB)
    monkeypatch.setattr(scale_gate, "SCALE_PAIRS", 0)
    lowered: list[str] = []
    real = SHARED_CACHE.program

    def spy(schedule, shape, base):
        lowered.append(str(schedule.meta.get("solver")))
        return real(schedule, shape, base)

    monkeypatch.setattr(SHARED_CACHE, "program", spy)
    winner, _, facts = _shaped(topo, coll)
    floor_skips = [k for k, v in facts["skipped"].items()
                   if v.startswith("cannot win") and "(not lowered)" in v]
    assert floor_skips, facts["skipped"]
    for label in floor_skips:
        plan = facts["plans"].get(label)
        solver = plan.meta.get("solver") if plan is not None else label
        assert solver not in lowered
    # its floor is no faster than the winner's time
    assert winner not in floor_skips


@pytest.mark.slow
def test_losing_plans_release_their_programs(monkeypatch):
    from tacos.runtime import msccl_exec

    topo, coll = _problem(MESH, "allreduce", 9 * MiB)
    monkeypatch.setattr(scale_gate, "SCALE_PAIRS", 0)
    msccl_exec._ANALYSED.clear()
    winner, _, facts = _shaped(topo, coll)
    # the runtime model keeps its analysis of no program the cache has let go
    cached = {id(v.gpus) for v in SHARED_CACHE._programs.values() if hasattr(v, "gpus")}
    assert msccl_exec._ANALYSED
    assert all(id(v[0]) in cached for v in msccl_exec._ANALYSED.values())
    kept = {SHARED_CACHE.structure(facts["plans"][winner])}
    losers = [k for k in facts["times"] if k != winner]
    assert losers
    held = {key[0] for key in SHARED_CACHE._programs}
    for label in losers:
        assert SHARED_CACHE._structure(facts["plans"][label]) not in held, label
    assert kept & held  # the winner's programs stay for the file written


def test_choose_shape_against_an_incumbent_it_cannot_beat():
    topo, coll = _problem(TORUS, "allreduce", 18 * MiB)
    sched = tacos.synthesize(topo, coll, solver="nccl-ring", trials=1, workers=1)
    free = choose_shape({"ring": sched}, topo, coll.size, quick=True,
                        candidates=[Shape(1, "Simple", False, True)])
    with pytest.raises(ShapesPruned):
        choose_shape({"ring": sched}, topo, coll.size, quick=True,
                     candidates=[Shape(1, "Simple", False, True)], incumbent=1e-9)
    beaten = choose_shape({"ring": sched}, topo, coll.size, quick=True,
                          candidates=[Shape(1, "Simple", False, True)],
                          incumbent=free.time * 2)
    assert beaten.time == pytest.approx(free.time, rel=1e-12)


def test_the_cli_check_and_report_reuse_the_gated_winners_verification(monkeypatch):
    topo, coll = _problem('topology "ring"\nbiring r[8] 100GB/s 1us\n', "allgather", 16 * MiB)
    monkeypatch.setattr(scale_gate, "SCALE_PAIRS", 0)
    sched = tacos.synthesize(topo, coll, trials=2, workers=1)
    kept = scale_gate.verified_report(sched)
    assert kept is not None and kept.ok
    fresh = verify_schedule(sched)
    assert fresh.ok and len(fresh.violations) == len(kept.violations)
    other = tacos.synthesize(topo, coll, solver="greedy", trials=1, workers=1)
    assert scale_gate.verified_report(other) is None


def test_a_synthesized_plan_over_nccls_model_is_not_timed_in_full(monkeypatch):
    # 1 GiB all-gather on two DGX-A100 nodes: NCCL's ring is under the greedy's runtime floor
    topo, coll = _problem("use dgx_a100(nodes=2)", "allgather", 1024 * MiB)
    full_winner, _, full = run_portfolio(topo, coll, seed=0, trials=1, workers=1,
                                         candidates=("greedy", "nccl"))
    assert full_winner == "nccl-ring"
    monkeypatch.setattr(scale_gate, "SCALE_PAIRS", 0)
    timed: list[str] = []
    real = scale_gate.ScaleGate.runtime_of

    def spy(self, schedule, topology, *, as_xml=False):
        timed.append(str(schedule.meta.get("solver")))
        return real(self, schedule, topology, as_xml=as_xml)

    monkeypatch.setattr(scale_gate.ScaleGate, "runtime_of", spy)
    gate = scale_gate.ScaleGate(16, "")
    greedy = tacos.synthesize(topo, coll, solver="greedy", trials=1, workers=1)
    skipped: dict[str, str] = {}
    first, ring, built = gate.nccl(topo, coll, {"greedy": greedy}, skipped)
    assert first == "ring" and "ring" in built and verify_schedule(ring).ok
    assert "greedy" not in timed
    floor = gate.floor_of(greedy, topo)
    est, _ = runtime_of(greedy, topo)
    assert floor <= est.time * (1 + 1e-9)
    assert floor > full["times"]["nccl-ring"]
