"""``auto`` builds NCCL's link-level schedules only for the algorithm that wins (and, ranking by
the runtime model, tries no in-switch fusion, which that model cannot time), and verifies a
plan once per process: the answers are those of building and verifying everything."""

from __future__ import annotations

from pathlib import Path

import pytest

import tacos
from tacos.check.verify import verify_schedule
from tacos.check.verify_once import verified
from tacos.errors import TacosError
from tacos.model.schedule import Schedule
from tacos.solvers.auto import NOT_FUSED, run_portfolio

ROOT = Path(__file__).resolve().parent.parent
FACTS = ("winner", "times", "runner_up", "margin", "margin_at_least", "nccl_best", "nccl_time",
         "speedup_vs_nccl", "ranked_by", "runtime")

CASES = {
    # NCCL's ring wins, its tree is runner-up (all-reduce: two NCCL algorithms)
    "ring8-allreduce": ("biring r[8] 100GB/s 1us\ncollective allreduce size 16MiB\n",
                        ("greedy", "nccl")),
    # NCCL's tree wins over its ring
    "mesh-allreduce": ("mesh m[2, 4] 50GB/s 1us\ncollective allreduce size 64KiB\n",
                       ("greedy", "nccl")),
    # NVLS wins (a plan with in-switch groups); the greedy's fused plan is not tried
    "h100-allreduce": ("use dgx_h100\ncollective allreduce size 64MiB\n", ("greedy", "nccl")),
    # a synthesized plan wins: no NCCL schedule is built
    "ndv2": ((ROOT / "examples" / "ndv2_2node.tdl").read_text(encoding="utf-8"),
             ("greedy", "nccl")),
}


def _load(name: str, tmp_path: Path):
    path = tmp_path / f"{name}.tdl"
    path.write_text(CASES[name][0], encoding="utf-8")
    return tacos.load(str(path))


@pytest.mark.parametrize("name", sorted(CASES))
def test_building_only_the_winning_nccl_schedule_gives_the_same_answer(name: str,
                                                                        tmp_path: Path
                                                                        ) -> None:
    spec = _load(name, tmp_path)
    cands = CASES[name][1]
    lazy = run_portfolio(spec.topology, spec.collective, candidates=cands, seed=0)
    full = run_portfolio(spec.topology, spec.collective, candidates=cands, seed=0,
                         build_nccl=True)
    assert lazy[0] == full[0]
    assert lazy[1].transfers == full[1].transfers and verify_schedule(lazy[1]).ok
    assert lazy[1].meta.get("tuned") == full[1].meta.get("tuned")
    for key in FACTS:
        assert lazy[2].get(key) == full[2].get(key), key
    fused = {k for k in full[2]["skipped"] if k.endswith("+in-switch")}
    assert {k: v for k, v in lazy[2]["skipped"].items() if k not in fused} == \
        {k: v for k, v in full[2]["skipped"].items() if k not in fused}
    for label in fused:  # ranked by the runtime model, in which it has no time: not tried
        assert label in full[2]["link_times"] and label not in full[2]["times"]
        assert lazy[2]["skipped"][label] == NOT_FUSED
    assert bool(fused) == (name == "h100-allreduce")
    # only the winner among NCCL's algorithms was built at link level
    built = {k for k in lazy[2]["link_times"] if k.startswith("nccl-")}
    nccl = {k for k in full[2]["link_times"] if k.startswith("nccl-")}
    assert len(nccl) >= 1 and built == ({lazy[0]} & nccl)
    assert len(nccl) > len(built) or name == "ndv2" or len(nccl) == 1
    assert lazy[0] == {"ring8-allreduce": "nccl-ring", "mesh-allreduce": "nccl-tree",
                       "ndv2": "greedy", "h100-allreduce": "nccl-nvls"}[name]


def test_a_winner_that_cannot_be_built_falls_back_to_building_them_all(tmp_path: Path,
                                                                        monkeypatch) -> None:
    from tacos.solvers import auto_nccl

    spec = _load("ring8-allreduce", tmp_path)
    full = run_portfolio(spec.topology, spec.collective, candidates=("greedy", "nccl"),
                         seed=0, build_nccl=True)
    calls = []

    def refuse(self, label):
        calls.append(label)
        raise TacosError("refused")

    monkeypatch.setattr(auto_nccl.TimedNccl, "build", refuse)
    got = run_portfolio(spec.topology, spec.collective, candidates=("greedy", "nccl"), seed=0)
    assert calls == [full[0]]
    assert got[0] == full[0] and got[1].transfers == full[1].transfers
    assert got[2]["link_times"].keys() == full[2]["link_times"].keys()


def test_nccl_that_the_runtime_model_cannot_time_is_built(tmp_path: Path) -> None:
    from tacos.solvers.auto_nccl import timed_nccl

    spec = _load("ring8-allreduce", tmp_path)
    timed = timed_nccl(spec.topology, spec.collective)
    assert timed is not None and timed.names == ["ring", "tree"]
    assert list(timed.by_label()) == ["nccl-ring", "nccl-tree"]
    path = tmp_path / "a2a.tdl"
    path.write_text("biring r[4] 100GB/s 1us\ncollective alltoall size 1MiB\n",
                    encoding="utf-8")
    a2a = tacos.load(str(path))
    got = timed_nccl(a2a.topology, a2a.collective)
    assert got is None or all(est.time > 0 for est, _ in got.timed.values())


def test_a_plan_is_verified_once_per_process(tmp_path: Path) -> None:
    spec = _load("ring8-allreduce", tmp_path)
    plan = tacos.synthesize(spec.topology, spec.collective, solver="greedy")
    first = verified(plan)
    assert first.ok and first == verify_schedule(plan)
    twin = Schedule(plan.topology, plan.collective, plan.transfers, {"other": 1})
    assert verified(twin) is first  # the report's copy of the winner: same transfers
    # a plan that breaks a rule is reported as broken, through the memo too
    broken = Schedule(plan.topology, plan.collective, tuple(plan.transfers[1:]), {})
    assert not verified(broken).ok and verified(broken) == verify_schedule(broken)
    listed = Schedule(plan.topology, plan.collective, list(plan.transfers), {})
    assert verified(listed) is not first and verified(listed).ok  # a list may change
