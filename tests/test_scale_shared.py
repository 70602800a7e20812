"""Shared late digits: groups of all-reduce parts take the late rail digits as joint phases
(tacos.scale.shared), checked by both verifiers and against the full synthesis."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import tacos
from tacos.check.bounds import lower_bound
from tacos.check.symmetric import verify_symmetric
from tacos.check.verify import verify_schedule
from tacos.errors import TacosError
from tacos.model.clos import ClosFabric, clos_h100
from tacos.model.symmetric_plan import expand
from tacos.scale import plan_json, shared
from tacos.scale.pipeline import schedule_tasks
from tacos.scale.synthesize import TemplateSolver, synthesize_symmetric

CLOS2 = ClosFabric(4, 2, hosts_per_leaf=2)
SMALL = ClosFabric(4, 2, hosts_per_leaf=2, gpus=2)
THREE = ClosFabric(8, 2, hosts_per_leaf=4, gpus=2)   # rail digits pos0, pos1, leaf0
CLOS3 = ClosFabric(8, 3, hosts_per_leaf=2, leaves_per_pod=2)
SOLVERS = ("direct",)


def _plan(system, layout, per_npu=64, **kw):
    size = per_npu * system.n_npus * sum(len(g) for g in layout.groups)
    return synthesize_symmetric(system, "allreduce", size, parts=layout, solvers=SOLVERS, **kw)


@pytest.mark.parametrize("system,layout", [
    pytest.param(SMALL, shared.SharedLayout(((1, 2), (1,)), (1, 1)), id="2-gpu nodes"),
    pytest.param(THREE, shared.SharedLayout((((1, 1), (2, 1)), (1,)), ((1, 2), 2)),
                 id="nested"),
    pytest.param(CLOS2, shared.SharedLayout(((1, 2), (1,)), (1, 1)), id="clos2",
                 marks=pytest.mark.slow),
    pytest.param(CLOS3, shared.SharedLayout(((1, 1, 2),), (1,)), id="clos3",
                 marks=pytest.mark.slow)])
def test_shared_plan_equals_full_synthesis_and_both_verifiers(system, layout) -> None:
    sym = _plan(system, layout)
    full = _plan(system, layout, symmetric=False)
    assert any(p.joint for p in sym.phases)
    assert len(sym.parts) == len(shared._leaves(layout.groups))
    assert sym.makespan == full.makespan
    report = verify_symmetric(sym)
    assert report.ok, report.text(5)
    written = expand(sym)
    checked = verify_schedule(written)
    assert checked.ok, checked.text(5)
    assert written.makespan == pytest.approx(sym.makespan, rel=1e-12)
    ref = tacos.collective("allreduce", range(system.n_npus), size=sym.size)
    assert sym.makespan >= lower_bound(written.topology, ref).value


def test_nested_groups_share_each_level_of_digits() -> None:
    plan = _plan(THREE, shared.SharedLayout((((1, 1), (1, 1)),), ((1, 2),)), fuse=False)
    moved = {(p.axis, p.kind): set() for p in plan.phases}
    for p in plan.phases:
        moved[p.axis, p.kind].add(p.moved)
    assert moved[1, "reducescatter"] == {(0,), (1,), (2,), (3,)}      # alone
    assert moved[2, "reducescatter"] == {(0, 1), (2, 3)}             # in pairs
    assert moved[3, "reducescatter"] == {(0, 1, 2, 3)}               # the whole group
    assert moved[2, "allgather"] == moved[2, "reducescatter"]
    assert verify_symmetric(plan).ok and verify_schedule(expand(plan)).ok
    bad = shared.SharedLayout((((1, 1), 1),), ((1, 2),))   # subgroups of different depths
    assert shared.build(THREE, "allreduce", plan.size, bad, TemplateSolver(SOLVERS, 0)) is None


def test_a_group_pays_the_late_alpha_once() -> None:
    layout = shared.SharedLayout(((1, 1, 1),), (1,))
    together = _plan(CLOS2, layout, fuse=False)
    apart = synthesize_symmetric(CLOS2, "allreduce", together.size, parts=(1, 1, 1),
                                 solvers=SOLVERS, fuse=False)
    late = [p for p in together.phases if p.joint]
    assert late and all(p.moved == (0, 1, 2) for p in late)
    # one late template for three parts where the separate plan runs one per part
    assert len(late) < sum(p.axis == late[0].axis for p in apart.phases)
    assert together.makespan < apart.makespan


def test_rejects_joint_phases_that_do_not_add_up() -> None:
    plan = _plan(CLOS2, shared.SharedLayout(((1, 1),), (1,)))
    joint = [p for p in plan.phases if p.joint]
    # part 1 skips its early reduce-scatter: the joint phase moves parts in different states
    early = next(p for p in plan.phases if p.part == 1 and not p.joint and p.axis == 1
                 and p.kind == "reducescatter")
    bad = replace(plan, phases=tuple(p for p in plan.phases if p is not early))
    assert "data" in verify_symmetric(bad).rules()
    assert not verify_schedule(expand(bad)).ok
    # the late phases moving part 0 alone: their templates are the size of both parts
    alone = tuple(replace(p, joint=()) if p.joint else p for p in plan.phases)
    lone = replace(plan, phases=alone)
    assert "data" in verify_symmetric(lone).rules()
    assert not verify_schedule(expand(lone)).ok
    # a joint phase started before one of its parts has finished its early digits
    first = joint[0]
    early_end = max(p.end for p in plan.phases if p.part == 1 and p.start < first.start)
    moved = tuple(replace(p, start=early_end - 1e-7) if p is first else p for p in plan.phases)
    assert "order" in verify_symmetric(replace(plan, phases=moved)).rules()


def test_plan_file_keeps_joint_phases() -> None:
    plan = _plan(CLOS2, shared.SharedLayout(((1, 2), (1,)), (1, 1)))
    text = plan_json.dumps(plan)
    back = plan_json.loads(text)
    assert [(p.part, p.axis, p.kind, p.start, p.joint) for p in back.phases] \
        == [(p.part, p.axis, p.kind, p.start, p.joint) for p in plan.phases]
    assert verify_symmetric(back).ok and plan_json.dumps(back) == text
    doc = plan_json.plan_doc(plan)
    row = next(r for r in doc["phases"] if len(r) == 5)
    row[4] = [len(plan.parts)]
    with pytest.raises(TacosError, match="no part"):
        plan_json.plan_from_doc(doc)


def test_the_stage_model_predicts_the_built_plan() -> None:
    fabric = clos_h100(nodes=16, tiers=2, hosts_per_leaf=4)
    size = 2**30 // fabric.n_npus * fabric.n_npus
    solve = TemplateSolver(("direct",), 0)
    model = shared.stage_model(fabric, "allreduce", size, 2, solve)
    assert model is not None
    end, shares = shared.best_shares(model, (1, 2, 1), restarts=1)
    weights = tuple(tuple(max(1, round(x * 10000)) for x in g) for g in shares)
    plan = shared.build(fabric, "allreduce", size, shared.SharedLayout(weights, (2, 2, 2)),
                        solve)
    assert plan is not None and verify_symmetric(plan).ok
    assert plan.makespan == pytest.approx(end, rel=0.01)
    # the same layout on fitted template times, through the real scheduler; nested as well
    times = shared.AffineTemplates(solve, size)
    assert shared.layout_end(fabric, "allreduce", size, plan_layout := shared.SharedLayout(
        weights, (2, 2, 2)), times) == pytest.approx(plan.makespan, rel=0.01)
    nested = shared.SharedLayout((((1, 1), (1, 1)),), ((1, 2),))
    built = shared.build(fabric, "allreduce", size, nested, solve)
    assert built is not None and verify_symmetric(built).ok
    assert shared.layout_end(fabric, "allreduce", size, nested, times) == \
        pytest.approx(built.makespan, rel=0.01)
    assert plan_layout.cuts(0) == (2,)
    assert not shared.applies(fabric, "allgather") and shared.applies(fabric, "allreduce")


def test_schedule_tasks_keeps_precedences_and_one_task_per_resource() -> None:
    rng = np.random.default_rng(3)
    n = 40
    res = [str(rng.integers(3)) for _ in range(n)]
    dur = rng.random(n).tolist()
    preds = [sorted(set(rng.integers(0, i, size=min(i, 2)).tolist())) if i else []
             for i in range(n)]
    starts = schedule_tasks(res, dur, preds, [0] * n)
    for i in range(n):
        assert all(starts[i] >= starts[p] + dur[p] - 1e-12 for p in preds[i])
    for r in set(res):
        spans = sorted((starts[i], starts[i] + dur[i]) for i in range(n) if res[i] == r)
        assert all(b[0] >= a[1] - 1e-12 for a, b in zip(spans, spans[1:], strict=False))
