"""A plan no MSCCL runtime can load is not lowered to be timed (tacos/runtime/plans.py
``unloadable``): the runtime model says why instead of timing a program the parser refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

import tacos
from tacos.check.verify import verify_schedule
from tacos.msccl import shape_choose
from tacos.msccl.shape import RuntimeLimits
from tacos.runtime import plans
from tacos.synthesize import solve

ROOT = Path(__file__).resolve().parent.parent


def _ring8():
    spec = tacos.load(str(ROOT / "examples" / "ring8.tdl"))
    res = solve(spec.topology, spec.collective, solver="greedy", seed=0, trials=1, workers=1,
                bound=False)
    assert res.schedule is not None and verify_schedule(res.schedule).ok
    return spec.topology, res.schedule


def test_a_loadable_plan_is_lowered_and_timed() -> None:
    topo, plan = _ring8()
    assert plans.unloadable(plan) == ""
    est, what = plans.runtime_of(plan, topo)
    assert est is not None and est.time > 0 and what == "its MSCCL XML lowering"


def test_a_plan_over_the_parsers_nodes_is_refused_before_lowering(
        monkeypatch: pytest.MonkeyPatch) -> None:
    topo, plan = _ring8()  # 8 ranks: 1 + 8 gpus + a thread block and a step per peer > 10
    monkeypatch.setattr(shape_choose, "limits_for",
                        lambda topology, steps=0: RuntimeLimits(max_nodes=10))

    def no_lowering(*args, **kwargs):
        raise AssertionError("an unloadable plan was lowered")

    monkeypatch.setattr("tacos.msccl.lower.lower", no_lowering)
    why = plans.unloadable(plan)
    assert "parsed nodes" in why and "> 10" in why
    est, what = plans.runtime_of(plan, topo)
    assert est is None
    assert what.startswith("runtime model: no MSCCL program of this plan can load")
