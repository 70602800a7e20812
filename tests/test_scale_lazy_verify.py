"""The scale gate's shaped MSCCL XML ranking verifies a plan only once it can be ranked, and
leaves NCCL's tree unbuilt where its XML is refused for its chunk count: the ranking, the
winner and every other line of ``skipped`` are those of the gate that builds and verifies
everything first; the busiest pair of a schedule is computed once (busiest_memo)."""

from __future__ import annotations

import pytest

import tacos
from tacos.check.verify import verify_schedule
from tacos.model.patterns import build
from tacos.msccl import busiest_memo
from tacos.msccl.busiest_memo import busiest_pair_once
from tacos.msccl.channel_floor import busiest_pair
from tacos.solvers import scale_gate
from tacos.solvers.auto import run_portfolio
from tacos.solvers.nccl import tree as tree_mod
from tacos.solvers.nccl import tree_refuse

KiB = 1 << 10
TORUS = 'topology "t"\ntorus t[4, 4] 50GiB/s 0.5us\n'
RING = 'topology "r"\nbiring r[8] 100GB/s 1us\n'


def _problem(text: str, size: int):
    topo = tacos.parse(text, source="test").topology
    return topo, build("allreduce", topo.live_npus, size=size, chunks_per_npu=1)


def _gated(topo, coll):
    return run_portfolio(topo, coll, seed=0, trials=1, workers=1, keep_plans=True,
                         emit="shaped", in_switch=False)


def _verified_everything_first(monkeypatch):
    """The gate as it was: NCCL's tree built, and every plan verified before ranking."""
    from tacos.solvers import auto

    real_ranking = scale_gate.ScaleGate.shaped_times

    def ranking(self, topology, collective, plans, link_times, skipped):
        ok = {k: t for k, t in link_times.items() if self.verify(plans[k]).ok}
        return real_ranking(self, topology, collective, plans, ok, skipped)

    monkeypatch.setattr(tree_refuse, "refused_unbuilt", lambda *a, **k: None)
    monkeypatch.setattr(scale_gate.ScaleGate, "shaped_times", ranking)
    return auto


@pytest.mark.slow  # two portfolios on 16 NPUs, about 3 s
def test_the_ranking_is_that_of_verifying_and_building_everything_first(monkeypatch):
    monkeypatch.setattr(scale_gate, "SCALE_PAIRS", 0)  # gate every group
    monkeypatch.setattr(tree_mod, "MAX_TRANSFERS", 200)  # NCCL's tree: 3 slices, 48 chunks
    topo, coll = _problem(TORUS, 256 * KiB)
    verified: list[str] = []
    real_verify = scale_gate.ScaleGate.verify

    def spy(self, schedule):
        if id(schedule) not in self._reports:
            verified.append(str(schedule.meta.get("solver")))
        return real_verify(self, schedule)

    monkeypatch.setattr(scale_gate.ScaleGate, "verify", spy)
    winner, plan, facts = _gated(topo, coll)
    now = list(verified)
    verified.clear()
    with monkeypatch.context() as m:
        _verified_everything_first(m)
        old_winner, old_plan, old = _gated(topo, coll)
    assert winner == old_winner
    assert facts["times"] == old["times"] and facts["runtime"] == old["runtime"]
    assert plan.transfers == old_plan.transfers
    assert verify_schedule(plan).ok
    tree = facts["skipped"]["nccl-tree"]
    assert tree.startswith("not ranked: runtime-shaped XML refused before lowering: "
                           "nchunksperloop (48 chunks")
    assert "not built" in tree and "nccl-tree" not in facts["plans"]
    assert old["skipped"]["nccl-tree"].split(" (")[0] == tree.split(" (")[0]
    assert {k: v for k, v in facts["skipped"].items() if k != "nccl-tree"} == \
        {k: v for k, v in old["skipped"].items() if k != "nccl-tree"}
    # verified: what was ranked, never what was refused unbuilt
    assert "nccl-tree" not in now and "nccl-tree" in verified
    ranked = {str(facts["plans"][k].meta.get("solver")) for k in facts["times"]}
    assert ranked <= set(now) and len(now) <= len(verified)


def test_a_plan_refused_before_lowering_is_not_verified(monkeypatch):
    from tacos.solvers.scale_shaped import shaped_ranking

    topo, coll = _problem(RING, 64 * KiB)
    sched = tacos.synthesize(topo, coll, solver="greedy", trials=1, workers=1)
    seen: list[int] = []

    def verify(schedule):
        seen.append(id(schedule))
        return verify_schedule(schedule)

    skipped: dict[str, str] = {}
    # 8 bytes less than the message: 16382 elements, which 8 chunks do not divide
    short = build("allreduce", topo.live_npus, size=64 * KiB - 8, chunks_per_npu=1)
    assert shaped_ranking(topo, short, {"greedy": sched}, {"greedy": sched.makespan},
                          skipped, verify=verify) is None
    assert not seen
    assert skipped["greedy"].startswith("not ranked: runtime-shaped XML refused before "
                                        "lowering: nchunksperloop")
    assert skipped["greedy"].endswith(", plan not verified)")
    times, _, _ = shaped_ranking(topo, coll, {"greedy": sched}, {"greedy": sched.makespan},
                                 skipped, verify=verify)
    assert seen == [id(sched)] and set(times) == {"greedy"}


@pytest.fixture
def busiest_calls(monkeypatch) -> list[int]:
    """The schedules (ids) ``busiest_pair`` is computed for from now on, memo emptied."""
    calls: list[int] = []

    def spy(schedule, max_steps, *, kept_runs=False):
        calls.append(id(schedule))
        return busiest_pair(schedule, max_steps, kept_runs=kept_runs)

    monkeypatch.setattr(busiest_memo, "busiest_pair", spy)
    monkeypatch.setattr(busiest_memo, "_MEMO", {})
    return calls


def test_the_busiest_pair_is_computed_once_per_schedule(busiest_calls):
    calls = busiest_calls
    topo, coll = _problem(RING, 64 * KiB)
    sched = tacos.synthesize(topo, coll, solver="greedy", trials=1, workers=1)
    first = busiest_pair_once(sched, 7)
    assert first == busiest_pair(sched, 7) and first is not None
    assert busiest_pair_once(sched, 7) is first and len(calls) == 1
    busiest_pair_once(sched, 7, kept_runs=True)
    assert len(calls) == 2
    copy = tacos.synthesize(topo, coll, solver="greedy", trials=1, workers=1)
    assert busiest_pair_once(copy, 7) == first and len(calls) == 3  # another schedule


def test_the_portfolios_winner_reuses_its_busiest_pair(busiest_calls):
    calls = busiest_calls
    from tacos.model.schedule import Schedule
    from tacos.msccl.busiest_memo import share

    topo, coll = _problem(RING, 64 * KiB)
    sched = tacos.synthesize(topo, coll, solver="greedy", trials=1, workers=1)
    first = busiest_pair_once(sched, 7)
    out = Schedule(sched.topology, sched.collective, sched.transfers,
                   {**sched.meta, "auto": {}})
    share(sched, out)
    assert busiest_pair_once(out, 7) is first and len(calls) == 1
    other = Schedule(sched.topology, sched.collective, sched.transfers[:-1], dict(sched.meta))
    share(sched, other)  # other transfers: nothing shared
    assert busiest_pair_once(other, 7) == busiest_pair(other, 7) and len(calls) == 2
