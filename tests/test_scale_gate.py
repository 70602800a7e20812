"""The scale gate of the ``auto`` portfolio (tacos/solvers/scale_gate.py): on small systems,
forced on, it keeps the full portfolio's winner; what it skips cannot win; its plans verify."""

from __future__ import annotations

import pytest

import tacos
from tacos.check.verify import verify_schedule
from tacos.model.patterns import build
from tacos.runtime.plans import nccl_runtime, runtime_of
from tacos.solvers import scale_gate
from tacos.solvers.auto import run_portfolio

MiB = 1 << 20

CASES = [
    ('topology "ring"\nbiring r[8] 100GB/s 1us\n', "allgather", 16 * MiB),
    ('topology "ring"\nbiring r[8] 100GB/s 1us\n', "allreduce", 64 * 1024),
    ('topology "mesh"\nmesh m[3, 3] x 200GB/s 0.5us y 25GB/s 2us\n', "allreduce", 4 * MiB),
    ("use dgx_a100(nodes=1)", "allgather", 64 * MiB),
]


def _problem(text: str, kind: str, size: int):
    topo = tacos.parse(text, source="test").topology
    npus = topo.live_npus
    return topo, build(kind, npus, size=size - size % len(npus))


def _run(topo, coll, **options):
    return run_portfolio(topo, coll, seed=0, trials=2, workers=1, keep_plans=True, **options)


def test_small_groups_and_named_candidates_run_the_full_portfolio():
    topo, coll = _problem(*CASES[0])
    assert scale_gate.scale_gate(topo, coll, candidates=None, emit="") is None
    assert scale_gate.scale_gate(topo, coll, candidates=("greedy",), emit="") is None
    n = len(coll.group)
    assert n * (n - 1) < scale_gate.SCALE_PAIRS


@pytest.mark.parametrize("case", [pytest.param(c, id=f"{c[1]}-{i}",
                                               marks=[pytest.mark.slow] if i == 2 else [])
                                  for i, c in enumerate(CASES)])
def test_the_gate_keeps_the_winner_of_the_full_portfolio(case, monkeypatch):
    topo, coll = _problem(*case)
    full_winner, full_plan, full = _run(topo, coll)
    monkeypatch.setattr(scale_gate, "SCALE_PAIRS", 0)  # gate every group
    winner, plan, facts = _run(topo, coll)
    assert winner == full_winner
    assert facts["times"][winner] == pytest.approx(full["times"][full_winner], rel=1e-12)
    assert plan.makespan == pytest.approx(full_plan.makespan, rel=1e-12)
    assert verify_schedule(plan).ok
    for label, sched in facts["plans"].items():
        assert verify_schedule(sched).ok, label
    # every NCCL algorithm not built is one the full portfolio ranked no faster than the winner
    for label, why in facts["skipped"].items():
        if label.startswith("nccl-") and why.startswith("cannot win"):
            assert label in full["times"]
            assert full["times"][label] >= facts["times"][winner]
            assert label not in facts["plans"]
    assert facts.get("nccl_best") == full.get("nccl_best")
    if full.get("speedup_vs_nccl") is None:  # no NCCL algorithm for this group
        assert facts.get("speedup_vs_nccl") is None
    else:
        assert facts["speedup_vs_nccl"] == pytest.approx(full["speedup_vs_nccl"], rel=1e-12)


def test_nccl_that_can_win_is_built_and_ranked_by_its_model(monkeypatch):
    # 64 KiB all-reduce on 8 NPUs: NCCL's model is the one to beat there
    topo, coll = _problem(*CASES[1])
    monkeypatch.setattr(scale_gate, "SCALE_PAIRS", 0)
    _, _, facts = _run(topo, coll)
    built = [k for k in facts["plans"] if k.startswith("nccl-")]
    skipped = [k for k, v in facts["skipped"].items()
               if k.startswith("nccl-") and v.startswith("cannot win")]
    assert built or skipped
    for label in built:
        algo = label.removeprefix("nccl-")
        est = nccl_runtime(topo, coll.kind, coll.size, coll.group, algo)
        assert facts["times"][label] == pytest.approx(est.time, rel=1e-12)


def test_the_ring_is_built_within_the_transfer_budget(monkeypatch):
    topo, coll = _problem("use dgx_a100(nodes=2)", "allgather", 64 * 1024)
    monkeypatch.setattr(scale_gate, "SCALE_PAIRS", 0)
    monkeypatch.setattr(scale_gate, "TRANSFER_BUDGET", 16 * 15 * 2)  # two channels at most
    gate = scale_gate.ScaleGate(16, "")
    from tacos.solvers.nccl.rings import max_channels
    from tacos.solvers.nccl.system import system

    sys_ = system(topo, coll.group)
    assert max_channels(sys_) > 2  # so the budget cuts NCCL's channel search
    skipped: dict[str, str] = {}
    plans = {"greedy": tacos.synthesize(topo, coll, solver="greedy", trials=1, workers=1)}
    _, _, built = gate.nccl(topo, coll, plans, skipped, sys_=sys_)
    assert "ring" in built  # at 64 KiB NCCL's ring beats the greedy in the runtime model
    ring = built["ring"]
    assert ring.meta["tuned"]["channels"] <= 2
    assert verify_schedule(ring).ok
    assert any(k.startswith("nccl-ring (") and "channel" in v for k, v in skipped.items())
    # ranked as NCCL runs its ring, whatever the channels of the link-level plan
    est, _ = runtime_of(ring, topo)
    assert est.time == pytest.approx(nccl_runtime(topo, coll.kind, coll.size, coll.group,
                                                  "ring").time, rel=1e-12)


def test_the_report_reuses_the_ranked_runtime_of_the_winner(monkeypatch):
    topo, coll = _problem(*CASES[0])
    monkeypatch.setattr(scale_gate, "SCALE_PAIRS", 0)
    sched = tacos.synthesize(topo, coll, trials=2, workers=1)
    assert verify_schedule(sched).ok
    kept = scale_gate.ranked_runtime(sched)
    assert kept is not None
    fresh, note = runtime_of(sched, topo)
    assert kept[0].time == pytest.approx(fresh.time, rel=1e-12)
    assert kept[1] == note
    other = tacos.synthesize(topo, coll, solver="greedy", trials=1, workers=1)
    assert scale_gate.ranked_runtime(other) is None
