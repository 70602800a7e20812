"""The floor taken inside the MSCCL lowering (tacos/solvers/auto_floor_early.py): never above
the runtime floor of the program the lowering builds (hence never above the runtime model's
time), the same thread-block figure, and a lowering it stops is one that would lose."""

from __future__ import annotations

import pytest

import tacos
from tacos.check.verify import verify_schedule
from tacos.msccl import lower as lower_mod
from tacos.msccl.lower import MscclOptions, lower
from tacos.msccl.xml_writer import emit_xml
from tacos.runtime.msccl_exec import estimate_program
from tacos.solvers.auto_floor import runtime_floor, thread_block_floor
from tacos.solvers.auto_floor_early import lowered_or_floor, plan_floor, steps_floor
from tacos.synthesize import solve

KiB, MiB = 1 << 10, 1 << 20

#: small systems: a ring, a mesh, a torus, a switch with ranks on two levels
TOPOLOGIES = {
    "biring6": "biring r[6] 100GB/s 1us",
    "mesh2x3": "mesh n[2, 3] 50GiB/s 0.5us",
    "torus3x2": "torus t[3, 2] 45GB/s 1us",
}


def _plans(full: bool):
    """(label, topology, verified plan) over topologies, collectives, solvers and seeds (a
    few of them unless ``full``)."""
    kinds = ("allreduce", "allgather", "reducescatter")
    runs = (("greedy", 0), ("greedy", 1), ("forest", 0))
    for name, text in list(TOPOLOGIES.items())[:None if full else 1]:
        for kind in kinds if full else kinds[:1]:
            spec = tacos.parse(f'topology "{name}"\n{text}\ncollective {kind} size 3MiB '
                               "chunks 2\n")
            for solver, seed in runs if full else runs[:1]:
                res = solve(spec.topology, spec.collective, solver=solver, seed=seed,
                            trials=1, workers=1, bound=False)
                if res.schedule is None:
                    continue
                assert verify_schedule(res.schedule).ok
                yield f"{name}/{kind}/{solver}/{seed}", spec.topology, res.schedule


def _lowered_with_floors(plan, topo, options, nbytes):
    """The program, and the hook's two floors for ``nbytes`` taken on its final structure."""
    got = {}

    def check(flow, chan, tb_plan, tbs):
        got["plan"] = plan_floor(flow, chan, tb_plan, topo, nbytes, plan.collective.group,
                                 options.proto)
        got["steps"] = steps_floor(tbs, flow.layout.nchunksperloop, topo, nbytes,
                                   options.proto)

    lower_mod._KEPT.clear()  # a kept program would skip the hook
    prog = lower(plan, options=options, check=check)
    return prog, got


@pytest.mark.parametrize("full", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_the_early_floors_are_under_the_runtime_floor_on_many_plans(full: bool) -> None:
    checked = 0
    cases = (("Simple", 1, 48 * MiB), ("LL", 1, 96 * KiB), ("LL128", 2, 6 * MiB),
             ("Simple", 2, 3 * MiB))
    for label, topo, plan in _plans(full):
        for proto, inst, nbytes in cases if full else cases[:2]:
            options = MscclOptions(proto=proto, instances=inst)
            prog, got = _lowered_with_floors(plan, topo, options, nbytes)
            nb = nbytes - nbytes % prog.nchunksperloop
            if nb != nbytes:
                prog, got = _lowered_with_floors(plan, topo, options, nb)
            floor = runtime_floor(prog, topo, nb, plan.collective.group)
            est = estimate_program(prog, topo, nb, ranks=plan.collective.group).time
            # the same thread-block figure, read from the blocks before the program exists
            assert got["steps"] == thread_block_floor(prog, topo, nb), (label, proto)
            assert 0 < got["plan"] <= floor * (1 + 1e-12), (label, proto, inst, nb)
            assert floor <= est * (1 + 1e-12)
            checked += 1
    # every topology and collective gave plans
    assert checked >= (4 * 24 if full else 2)


def test_the_early_floor_sees_thread_block_order() -> None:
    # program order inside thread blocks is what makes the relaxation more than a bound on
    # data-dependency chains: on a ring all-gather it exceeds the busiest block's own work
    spec = tacos.parse('topology "r"\nbiring r[8] 100GB/s 1us\ncollective allgather size '
                       "16MiB\n")
    plan = solve(spec.topology, spec.collective, solver="greedy", seed=0, trials=1,
                 workers=1, bound=False).schedule
    assert plan is not None and verify_schedule(plan).ok
    prog, got = _lowered_with_floors(plan, spec.topology, MscclOptions(), 16 * MiB)
    assert got["plan"] > got["steps"]
    assert got["plan"] <= runtime_floor(prog, spec.topology, 16 * MiB, plan.collective.group)


@pytest.mark.parametrize("where", ["steps", "plan", "none"])
def test_a_lowering_stops_only_when_its_floor_is_above_the_time_to_beat(where: str) -> None:
    spec = tacos.parse('topology "m"\nmesh n[2, 3] 50GiB/s 0.5us\ncollective allreduce size '
                       "12MiB chunks 2\n")
    topo = spec.topology
    plan = solve(topo, spec.collective, solver="greedy", seed=0, trials=1, workers=1,
                 bound=False).schedule
    assert plan is not None and verify_schedule(plan).ok
    nbytes = int(plan.collective.size)
    prog, got = _lowered_with_floors(plan, topo, MscclOptions(), nbytes)
    est = estimate_program(prog, topo, nbytes, ranks=plan.collective.group).time
    above = {"steps": got["steps"] * 0.99, "plan": max(got["steps"], got["plan"] * 0.99),
             "none": max(got["steps"], got["plan"]) * 1.01}[where]
    if where == "plan" and got["plan"] <= got["steps"]:
        pytest.skip("the thread-block figure is the larger one on this plan")
    lower_mod._KEPT.clear()
    from tacos.runtime import plans

    plans._LOWERED.clear()
    program, floor = lowered_or_floor(plan, topo, above)
    if where == "none":
        assert program is not None and floor == 0.0
        assert emit_xml(program) == emit_xml(prog)  # the hook changes nothing
    else:
        assert program is None
        assert floor == got[where]
        assert above < floor <= est * (1 + 1e-12)  # the full lowering loses too
