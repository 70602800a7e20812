"""Mixed phases: a part's early all-gathers and the next group's early reduce-scatters as joint
transfers (tacos.scale.mixed), checked by both verifiers and against the full synthesis."""

from __future__ import annotations

import functools
from dataclasses import replace

import pytest

from tacos.check.symmetric import verify_symmetric
from tacos.check.verify import verify_schedule
from tacos.model.clos import ClosFabric
from tacos.model.symmetric_plan import expand
from tacos.scale import plan_json, shared
from tacos.scale.mixed import mixed_template
from tacos.scale.synthesize import TemplateSolver, synthesize_symmetric

SMALL = ClosFabric(4, 2, hosts_per_leaf=2, gpus=2)   # rail digits pos0, leaf0
THREE = ClosFabric(8, 2, hosts_per_leaf=4, gpus=2)   # rail digits pos0, pos1, leaf0
RADIX5 = ClosFabric(25, 2, hosts_per_leaf=5, gpus=2)
LAYOUT = shared.SharedLayout(((1, 2), (1, 1), (1,)), (1, 1, 1))


@functools.cache
def _mixed(system=SMALL, layout=LAYOUT):
    size = 64 * system.n_npus * 6
    plan = shared.build(system, "allreduce", size, layout, TemplateSolver(("direct",), 0),
                        mix=mixed_template)
    assert plan is not None
    return plan


def _both(plan):
    return verify_symmetric(plan), verify_schedule(expand(plan))


@pytest.mark.parametrize("system,members", [(SMALL, 2), (RADIX5, 5)])
def test_mixed_template_pays_alpha_once_per_round(system, members) -> None:
    topo = system.template(1)
    t = mixed_template(topo, 64 * members, 32 * members)
    assert verify_schedule(t).ok
    assert len(t.transfers) == 2 * members * (members - 1)      # a copy and a reduce per pair
    assert {x.group for x in t.transfers if x.op == "copy"} == \
        {x.group for x in t.transfers if x.op == "reduce"}
    alpha = sum(topo.links[li].alpha for li in t.transfers[0].route)
    bw = min(topo.links[li].bandwidth for li in t.transfers[0].route)
    assert t.makespan == pytest.approx((members - 1) * (alpha + 96 / bw), rel=1e-12)
    assert mixed_template(topo, 64 * members + 1, 32 * members) is None


def test_joint_transfer_rules_in_the_full_verifier() -> None:
    t = mixed_template(SMALL.template(1), 64, 32)
    one = t.transfers[0]
    alpha = sum(SMALL.template(1).links[li].alpha for li in one.route)
    bw = min(SMALL.template(1).links[li].bandwidth for li in one.route)
    # each payload alone fits (32 and 16 bytes), both together (48) do not: one lane
    short = tuple(replace(x, end=x.start + alpha + 33 / bw) for x in t.transfers)
    rep = verify_schedule(replace(t, transfers=short))
    assert "duration" in {v.rule for v in rep.violations}
    assert "joint transfer" in rep.text()
    # a copy where a reduce is due: the owner misses the partner's contribution
    swapped = tuple(replace(x, op="copy") for x in t.transfers)
    assert "contribution" in {v.rule for v in verify_schedule(replace(t, transfers=swapped))
                              .violations}
    # two members on different routes are no joint transfer
    other = next(x for x in t.transfers if x.src != one.src)
    split = tuple(replace(x, group=one.group) if x is other else x for x in t.transfers)
    assert "group" in {v.rule for v in verify_schedule(replace(t, transfers=split)).violations}


def test_mixed_plan_passes_both_verifiers_and_is_faster() -> None:
    plan = _mixed()
    assert plan.meta["mixed_phases"] == 3
    assert sum(bool(p.scatter) for p in plan.phases) == 3
    a, b = _both(plan)
    assert a.ok, a.text(5)
    assert b.ok, b.text(5)
    assert expand(plan).makespan == pytest.approx(plan.makespan, rel=1e-12)
    plain = shared.build(SMALL, "allreduce", plan.size, LAYOUT, TemplateSolver(("direct",), 0))
    assert plain is not None and plan.makespan < plain.makespan


@pytest.mark.parametrize("system", [pytest.param(SMALL, id="small"),
                                    pytest.param(THREE, id="three", marks=pytest.mark.slow)])
def test_mixed_plan_equals_full_synthesis(system) -> None:
    layout = shared.SharedLayout(((1, 2), (1, 1)), (1, 1), mixed=True)
    size = 64 * system.n_npus * 5
    sym = synthesize_symmetric(system, "allreduce", size, parts=layout, solvers=("direct",))
    full = synthesize_symmetric(system, "allreduce", size, parts=layout, solvers=("direct",),
                                symmetric=False)
    assert sym.meta["mixed_phases"] > 0
    assert sym.makespan == full.makespan
    a, b = _both(sym)
    assert a.ok and b.ok


def _broken(plan, fn):
    """The plan with its first mixed phase replaced by ``fn(phase)``."""
    i = next(k for k, p in enumerate(plan.phases) if p.scatter)
    phases = list(plan.phases)
    phases[i] = fn(phases[i])
    return replace(plan, phases=tuple(phases))


def test_wrong_mixed_plans_are_rejected_by_both_verifiers() -> None:
    plan = _mixed()
    t = next(p for p in plan.phases if p.scatter).template
    swapped = replace(t, transfers=tuple(replace(x, op="copy") for x in t.transfers))
    cases = {
        "copy where a reduce is due": (_broken(plan, lambda p: replace(p, template=swapped)),
                                       "template"),
        "scatter the gathered part": (_broken(plan, lambda p: replace(p, scatter=(p.part,))),
                                      "data"),
        "started early": (_broken(plan, lambda p: replace(p, start=0.0)), "order"),
        "no scatter part": (_broken(plan, lambda p: replace(p, scatter=())), "data"),
    }
    for name, (bad, rule) in cases.items():
        sym = verify_symmetric(bad)
        assert rule in sym.rules(), name
        if name != "scatter the gathered part":   # expand needs distinct parts
            assert not verify_schedule(expand(bad)).ok, name


def test_plan_file_round_trip_and_determinism() -> None:
    plan = _mixed()
    text = plan_json.dumps(plan)
    assert '"tacos.symmetric-plan/2"' in text
    back = plan_json.loads(text)
    assert verify_symmetric(back).ok
    assert back.makespan == plan.makespan
    assert plan_json.dumps(back) == text
    again = shared.build(SMALL, "allreduce", plan.size, LAYOUT, TemplateSolver(("direct",), 0),
                         mix=mixed_template)
    assert again is not None and plan_json.dumps(again) == text    # same input, same bytes
    plain = shared.build(SMALL, "allreduce", plan.size, LAYOUT, TemplateSolver(("direct",), 0))
    assert plain is not None
    assert '"tacos.symmetric-plan/1"' in plan_json.dumps(plain)    # old reader still reads it
