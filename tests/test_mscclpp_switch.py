"""In-switch schedules (forest's star, NCCL's NVLS) written as MSCCL++ plans with switch
channels: loader rules, channel types, verification (symbolic), the runtime model's
thread-block choice, and clear refusals where MSCCL++ has no operation for a group."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

import tacos
from tacos.cli import main
from tacos.msccl.mscclpp_loader import loader_problems
from tacos.msccl.mscclpp_reader import read_plan
from tacos.msccl.mscclpp_switch import best_switch_plan, switch_ops, switch_plan
from tacos.msccl.mscclpp_writer import emit_mscclpp_json
from tacos.runtime.mscclpp_exec import estimate_mscclpp
from tacos.verify_plan import verify

PRESETS = Path(tacos.__file__).parent / "presets"

SIZE = 64 << 20


@pytest.fixture(scope="module")
def h100():
    return tacos.parse("use dgx_h100_node()\n").topology


def _schedule(topo, kind: str, solver: str):
    coll = tacos.collective(kind, range(8), size=SIZE)
    schedule = tacos.synthesize(topo, coll, solver=solver, workers=1)
    assert any(t.group is not None for t in schedule.transfers)
    return schedule


def _ops(doc, rank):
    return [op for tb in doc["gpus"][rank]["threadblocks"] for op in tb["ops"]]


def _checked(doc, topo):
    assert loader_problems(doc) == []
    report = verify(json.dumps(doc), topology=topo, nbytes=SIZE)
    assert report.ok, report.text()
    assert report.checks["symbolic"] == "passed" and report.checks["channels"] == "passed"
    return report


def test_forest_star_becomes_glres_issued_by_the_root(h100):
    schedule = _schedule(h100, "allreduce", "forest")
    root = schedule.meta["in_switch_tree"]["root"]
    doc = json.loads(emit_mscclpp_json(schedule))
    _checked(doc, h100)
    for r in range(8):
        names = [op["name"] for op in _ops(doc, r)]
        assert ("glres" in names) == (r == root)
        switch = [ch for ch in doc["gpus"][r]["channels"] if ch["channel_type"] == "switch"]
        assert switch and switch[0]["rank_groups"][0]["ranks"] == list(range(8))
    assert doc["inplace"] is True


def test_thread_blocks_are_the_runtime_models_fastest(h100):
    schedule = _schedule(h100, "allreduce", "forest")
    doc, why = best_switch_plan(schedule)
    times = {}
    for t in why["times_us"]:
        plan, _ = read_plan(switch_plan(schedule, threadblocks=t))
        times[t] = estimate_mscclpp(plan, h100, SIZE).time
    assert why["threadblocks"] == min(times, key=lambda t: (times[t], t))
    assert len(doc["gpus"][schedule.meta["in_switch_tree"]["root"]]["threadblocks"]) \
        == why["threadblocks"]


@pytest.mark.parametrize("inplace,kind,op", [  # reduce-scatter in place: ~0.7 s, -m slow
    pytest.param(inplace, kind, op, marks=pytest.mark.slow)
    if (inplace, kind) == (True, "reducescatter") else (inplace, kind, op)
    for inplace in (True, False)
    for kind, op in (("allreduce", "glres"), ("allgather", "gstore"), ("reducescatter", "glres"))])
def test_nccl_nvls_collectives_in_and_out_of_place(h100, kind, op, inplace):
    schedule = _schedule(h100, kind, "nvls")
    doc, _ = best_switch_plan(schedule, inplace=inplace)
    assert doc["inplace"] is inplace and doc["collective"] == kind
    _checked(doc, h100)
    for r in range(8):  # every rank issues its own shard's operation
        assert any(o["name"] == op for o in _ops(doc, r))


def test_a_switch_plan_writing_the_wrong_range_fails_verification(h100):
    doc, _ = best_switch_plan(_schedule(h100, "allgather", "nvls"))
    store = next(o for o in _ops(doc, 3) if o["name"] == "gstore")
    store["dst_buff"][0]["index"] = 0  # rank 3 multicasts its shard over rank 0's
    report = verify(json.dumps(doc), topology=h100)
    assert not report.ok


def test_switch_plan_is_refused_without_a_multicast_switch(h100):
    a100 = tacos.parse("use dgx_a100_node()\n").topology
    doc, _ = best_switch_plan(_schedule(h100, "allreduce", "forest"))
    report = verify(json.dumps(doc), topology=a100)
    assert not report.ok and any("switch channel" in v.message for v in report.violations)


def test_groups_that_glres_cannot_run_are_refused_saying_which(h100):
    schedule = _schedule(h100, "allreduce", "forest")
    ts = list(schedule.transfers)
    plain = replace(schedule, transfers=[replace(ts[0], group=None)] + ts[1:])
    with pytest.raises(tacos.TacosError, match="mixes plain transfers"):
        switch_ops(plain)
    gid = ts[0].group
    subset = [t for t in ts if t.group != gid or t.src != ts[0].src]
    with pytest.raises(tacos.TacosError, match="not all 8"):
        switch_ops(replace(schedule, transfers=subset))
    cast = next(t.group for t in ts if t.op == "copy")
    early = [replace(t, start=-1.0) if t.group == cast else t for t in ts]
    with pytest.raises(tacos.TacosError, match="before"):
        switch_ops(replace(schedule, transfers=early))


def test_loader_refuses_ranks_that_list_a_switch_group_differently(h100):
    doc, _ = best_switch_plan(_schedule(h100, "reducescatter", "nvls"))
    assert loader_problems(doc) == []
    chans = doc["gpus"][5]["channels"]
    chans[1], chans[2] = chans[2], chans[1]  # rank 5 connects its s group before its i group
    assert loader_problems(doc) == []  # one group each: the same ranks, order irrelevant
    chans[2]["rank_groups"][0]["ranks"] = [0, 5]
    chans[2]["rank_groups"][0]["size"] = 2
    assert any("switch channel groups" in p for p in loader_problems(doc))


def test_cli_forest_mscclpp_writes_a_switch_plan(tmp_path, capsys):
    out = tmp_path / "star.json"
    assert main([str(PRESETS / "dgx_h100_node.tdl"), "-c", "allreduce", "--size", "64MiB",
                 "--solver", "forest", "--format", "mscclpp", "-o", str(out),
                 "--report"]) == 0
    text = capsys.readouterr().out
    assert "switch channels" in text
    doc = json.loads(out.read_text())
    assert any(ch["channel_type"] == "switch" for ch in doc["gpus"][0]["channels"])
    assert main(["verify", str(out), "--topology", str(PRESETS / "dgx_h100_node.tdl"),
                 "--size", "64MiB"]) == 0


def test_process_group_switch_plan_in_its_own_numbering(h100):
    group = (1, 3, 4, 6)
    coll = tacos.collective("allreduce", group, size=SIZE)
    schedule = tacos.synthesize(h100, coll, solver="forest", workers=1)
    doc, _ = best_switch_plan(schedule)
    assert len(doc["gpus"]) == 4
    switch = [ch for ch in doc["gpus"][2]["channels"] if ch["channel_type"] == "switch"]
    assert switch[0]["rank_groups"][0]["ranks"] == [0, 1, 2, 3]
    report = verify(json.dumps(doc), topology=h100, ranks=list(group), nbytes=SIZE)
    assert report.ok and report.checks["symbolic"] == "passed", report.text()
