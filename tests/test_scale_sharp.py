"""All-reduce on a Clos whose switches reduce (SHARP in the rails, NVLS in the node): the
in-network bound against the general one, the plan against both verifiers and the full
synthesis, broken plans rejected."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import tacos
from tacos.check.bounds import lower_bound
from tacos.check.bounds_symmetric import in_network_allreduce, symmetric_bound
from tacos.check.symmetric import verify_symmetric
from tacos.check.verify import verify_schedule
from tacos.errors import TacosError
from tacos.model.clos import ClosFabric, recognize
from tacos.model.clos_rails import RailAxes
from tacos.model.patterns import build
from tacos.model.symmetric_plan import expand
from tacos.scale.plan_json import SCHEMA_ROOTED, dumps, loads, system_doc
from tacos.scale.sharp import Templates, synthesize_sharp
from tacos.scale.sharp_templates import direct, nvls_mixed, rail_reduce
from tacos.scale.synthesize import synthesize_symmetric

MiB = 1 << 20
TWO_TIER = ClosFabric(4, 2, hosts_per_leaf=2, gpus=2, sharp=True)
THREE_TIER = ClosFabric(8, 3, hosts_per_leaf=2, leaves_per_pod=2, gpus=2, sharp=True)


@pytest.mark.parametrize("fabric", [
    TWO_TIER,
    THREE_TIER,
    ClosFabric(2, 2, hosts_per_leaf=1, gpus=4, sharp=True),
    ClosFabric(4, 2, hosts_per_leaf=2, gpus=2, nic=300e9, sharp=True),        # GPU cut
    ClosFabric(4, 2, hosts_per_leaf=2, gpus=4, fabric=10e9, sharp=True),      # leaf cut
    ClosFabric(8, 3, hosts_per_leaf=2, leaves_per_pod=2, gpus=2, fabric=10e9, sharp=True),
], ids=["2tier", "3tier", "one-leaf", "gpu-cut", "leaf-cut", "3tier-slow-fabric"])
def test_in_network_bound_is_the_general_bound(fabric):
    size = 64 * MiB
    general = lower_bound(fabric.topology(), build("allreduce", range(fabric.n_npus), size=size))
    assert symmetric_bound(fabric, "allreduce", size) == pytest.approx(general.value, rel=1e-12)
    assert in_network_allreduce(fabric, size) == pytest.approx(general.value, rel=1e-12)


def test_sharp_bound_of_dgx_h100_fabrics_is_the_node_cut():
    for fabric in (ClosFabric(1024, 2, sharp=True),
                   ClosFabric(5000, 3, hosts_per_leaf=25, leaves_per_pod=25, sharp=True)):
        assert symmetric_bound(fabric, "allreduce", 1 << 30) == (1 << 30) / (8 * 50e9)
        plain = dataclasses.replace(fabric, sharp=False, name="")
        assert symmetric_bound(plain, "allreduce", 1 << 30) > 1.99 * (1 << 30) / (8 * 50e9)


@pytest.mark.parametrize("fabric", [TWO_TIER, THREE_TIER], ids=["2tier", "3tier"])
@pytest.mark.parametrize("lead", [1, 2])
def test_plan_equals_full_synthesis_and_passes_both_verifiers(fabric, lead):
    plan = synthesize_sharp(fabric, 4 * MiB, parts=(1, 2, 2, 1), lead=lead, symmetric=False)
    assert verify_symmetric(plan).ok
    schedule = expand(plan)
    assert verify_schedule(schedule).ok
    assert schedule.makespan == pytest.approx(plan.makespan, rel=1e-12)
    assert plan.makespan >= symmetric_bound(fabric, "allreduce", plan.size)
    kinds = {(ph.axis, ph.kind, bool(ph.scatter)) for ph in plan.phases}
    assert {(1, "reduce", False), (1, "broadcast", False), (0, "allgather", True)} <= kinds


def test_joint_node_phases_pass_both_verifiers():
    plan = synthesize_sharp(THREE_TIER, 16 * MiB, parts=(1, 2, 2, 2, 2, 1), lead=2, batch=2)
    assert any(ph.joint for ph in plan.phases if ph.axis == 0)
    assert verify_symmetric(plan).ok
    assert verify_schedule(expand(plan)).ok


def test_rail_phases_of_consecutive_parts_overlap():
    plan = synthesize_sharp(TWO_TIER, 64 * MiB, parts=(1, 1, 1, 1), lead=3)
    assert verify_symmetric(plan).ok
    red = {ph.part: ph for ph in plan.phases if ph.kind == "reduce"}
    bc = {ph.part: ph for ph in plan.phases if ph.kind == "broadcast"}
    assert any(red[q + 1].start < bc[q].end and bc[q].start < red[q + 1].end
               for q in range(3))


def _drop(plan, pred):
    return dataclasses.replace(plan, phases=tuple(ph for ph in plan.phases if not pred(ph)))


def _move(plan, pred, dt):
    return dataclasses.replace(plan, phases=tuple(
        dataclasses.replace(ph, start=ph.start + dt) if pred(ph) else ph for ph in plan.phases))


def test_broken_plans_are_rejected_by_both_verifiers():
    plan = synthesize_sharp(TWO_TIER, 4 * MiB, parts=(1, 1), lead=1)
    first_bc = next(ph for ph in plan.phases if ph.kind == "broadcast" and ph.part == 0)
    early = _move(plan, lambda ph: ph is first_bc, -first_bc.template.makespan / 2)
    no_bc = _drop(plan, lambda ph: ph is first_bc)
    red1 = next(ph for ph in plan.phases if ph.kind == "reduce" and ph.part == 1)
    red0 = next(ph for ph in plan.phases if ph.kind == "reduce" and ph.part == 0)
    clash = _move(plan, lambda ph: ph is red1 or (ph.part == 1 and ph.start > red1.start),
                  red0.start - red1.start)
    for bad, rule in ((early, "order"), (no_bc, "data"), (clash, "overlap")):
        rep = verify_symmetric(bad)
        assert rule in rep.rules(), (rule, rep.text())
        assert not verify_schedule(expand(bad)).ok


def test_a_phase_of_a_rooted_part_is_rejected():
    plan = synthesize_sharp(TWO_TIER, 4 * MiB, parts=(1,), lead=1)
    bc = next(ph for ph in plan.phases if ph.kind == "broadcast")
    ag = next(ph for ph in plan.phases if ph.kind == "allgather")
    # the all-gather run between the reduce and the broadcast: the part is held by member 0
    swapped = dataclasses.replace(plan, phases=tuple(
        dataclasses.replace(ph, start=bc.start) if ph is ag else
        dataclasses.replace(ph, start=bc.start + ag.template.makespan) if ph is bc else ph
        for ph in plan.phases))
    rep = verify_symmetric(swapped)
    assert any("only member 0" in t for _, t in rep.problems), rep.text()
    assert not verify_schedule(expand(swapped)).ok


def test_templates_need_reducing_switches():
    plain = RailAxes(ClosFabric(4, 2, hosts_per_leaf=2, gpus=4))
    assert not verify_schedule(rail_reduce(plain.template(1), 4096)).ok
    assert not verify_schedule(nvls_mixed(plain.template(0), 4096, 4096)).ok
    assert verify_schedule(direct(plain.template(0), "reducescatter", 4096)).ok
    with pytest.raises(TacosError, match="SHARP"):
        synthesize_sharp(plain.fabric, 4 * MiB)


def test_search_model_is_the_templates_time():
    tpl = Templates(RailAxes(THREE_TIER))
    for what, sizes in (("rs", (4 * MiB,)), ("rs", (4096,)), ("ag", (MiB,)),
                        ("mix", (MiB, 3 * MiB)), ("mix", (5 * MiB, MiB)), ("fi", (8 * MiB,)),
                        ("fo", (8 * MiB,))):
        assert tpl.duration(what, sizes) == pytest.approx(tpl.get(what, sizes).makespan,
                                                           rel=1e-9)


def test_plan_file_round_trip():
    plan = synthesize_sharp(THREE_TIER, 4 * MiB, parts=(1, 2, 1), lead=1)
    text = dumps(plan)
    assert SCHEMA_ROOTED in text
    back = loads(text)
    assert isinstance(back.system, RailAxes) and back.system.sharp
    assert verify_symmetric(back).ok
    assert back.makespan == plan.makespan
    assert dumps(back) == text
    # a plain fabric's file has no 'sharp' field: its bytes are what they were before SHARP
    assert "sharp" not in system_doc(ClosFabric(4, 2, hosts_per_leaf=2))


def test_tdl_sharp_fabric_is_recognized_and_planned(tmp_path: Path):
    tdl = tmp_path / "clos.tdl"
    tdl.write_text("use clos_h100(nodes=4, tiers=2, hosts_per_leaf=2, sharp=1)\n")
    topo = tacos.load(str(tdl)).topology
    fabric = recognize(topo)
    assert fabric is not None and fabric.sharp
    assert fabric.topology().switches == topo.switches
    tdl.write_text("use clos_h100(nodes=4, tiers=2, hosts_per_leaf=2)\n")
    assert not recognize(tacos.load(str(tdl)).topology).sharp


@pytest.mark.slow
def test_synthesize_symmetric_takes_the_in_network_plan_on_a_sharp_fabric():
    plan = synthesize_symmetric(TWO_TIER, "allreduce", 4 * MiB, parts=2)
    assert plan.meta["solver"] == "symmetric-sharp" and verify_symmetric(plan).ok
    plain = synthesize_symmetric(TWO_TIER, "allreduce", 4 * MiB, parts=2, in_network=False,
                                 share=False)
    assert not any(ph.kind in ("reduce", "broadcast") for ph in plain.phases)
    assert verify_symmetric(plain).ok


@pytest.mark.slow
def test_searched_layout_is_verified_and_no_slower_than_equal_parts():
    fabric = ClosFabric(64, 2, sharp=True)
    plan = synthesize_sharp(fabric, 1 << 30)
    assert verify_symmetric(plan).ok
    equal = synthesize_sharp(fabric, 1 << 30, parts=(1,) * 8, lead=3)
    assert plan.makespan <= equal.makespan
    assert plan.makespan / symmetric_bound(fabric, "allreduce", plan.size) < 1.2
