"""MSCCL++ plans: channel types the topology can carry, the executor's loader checks, the
size check of ``verify --size``, and NVLS all-reduce with a switch channel."""

from __future__ import annotations

import json

import pytest

import tacos
from tacos.msccl.mscclpp_loader import loader_problems, size_problems
from tacos.msccl.mscclpp_nvls import nvls_allreduce_json, nvls_allreduce_plan
from tacos.msccl.mscclpp_writer import emit_mscclpp_json
from tacos.verify_plan import verify

TWO_NODES = "use dgx_a100(nodes=2)\n"
ONE_H100 = "use dgx_h100_node()\n"


def _topology(text: str):
    return tacos.parse(text).topology


def _plan(topology, kind: str, size: str = "1MiB") -> str:
    coll = tacos.collective(kind, range(len(topology.npus)), size=size)
    schedule = tacos.synthesize(topology, coll, solver="greedy", workers=1)
    return emit_mscclpp_json(schedule)


@pytest.fixture(scope="module")
def two_node_allgather():
    topo = _topology(TWO_NODES)
    return topo, _plan(topo, "allgather")


def test_two_node_plan_uses_port_channels_across_nodes_only(two_node_allgather):
    topo, text = two_node_allgather
    doc = json.loads(text)
    node = {r: r // 8 for r in range(16)}
    kinds = {(g["id"], p): ch["channel_type"] for g in doc["gpus"] for ch in g["channels"]
             for p in ch.get("connected_to", [])}
    assert "port" in set(kinds.values())
    for (a, b), kind in kinds.items():
        assert kind == ("memory" if node[a] == node[b] else "port"), (a, b, kind)
    assert loader_problems(doc) == []
    report = verify(text, topology=topo)
    assert report.ok, report.text()
    assert report.checks["channels"] == "passed"


def test_memory_channel_across_nodes_is_rejected_naming_it(two_node_allgather):
    topo, text = two_node_allgather
    doc = json.loads(text)
    for g in doc["gpus"]:  # what older plans did: every channel a memory channel
        for ch in g["channels"]:
            ch["channel_type"] = "memory"
        merged = [p for ch in g["channels"] for p in ch["connected_to"]]
        g["channels"] = [{"channel_type": "memory", "connected_to": merged}]
    report = verify(json.dumps(doc), topology=topo)
    assert not report.ok
    bad = [v for v in report.violations if v.rule == "channels"]
    assert bad and "memory channel" in bad[0].message and "crosses nodes" in bad[0].message
    assert bad[0].message.startswith("gpus[")


def test_switch_channel_needs_a_multicast_switch():
    h100 = _topology(ONE_H100)
    a100 = _topology("use dgx_a100_node()\n")
    text = nvls_allreduce_json(h100)
    ok = verify(text, topology=h100, nbytes=64 << 20)
    assert ok.ok, ok.text()
    assert ok.checks["symbolic"] == "passed"
    refused = verify(text, topology=a100)
    assert not refused.ok
    assert any("switch channel" in v.message for v in refused.violations)
    with pytest.raises(tacos.TacosError, match="multicast"):
        nvls_allreduce_json(a100)


def test_nvls_plan_shape_and_loader():
    doc = nvls_allreduce_plan(8)
    assert loader_problems(doc) == []
    sw = [ch for ch in doc["gpus"][3]["channels"] if ch["channel_type"] == "switch"]
    assert sw == [{"channel_type": "switch", "buffer_type": "i",
                   "rank_groups": [{"size": 8, "ranks": list(range(8))}]}]
    ops = [op["name"] for op in doc["gpus"][3]["threadblocks"][0]["ops"]]
    assert ops.count("glres") == 1 and doc["inplace"] is True


def test_nvls_plan_that_reduces_a_slice_twice_fails_verification():
    doc = nvls_allreduce_plan(4)
    ops = doc["gpus"][1]["threadblocks"][0]["ops"]
    glres = next(op for op in ops if op["name"] == "glres")
    glres["src_buff"][0]["index"] = glres["dst_buff"][0]["index"] = 0  # rank 1 redoes slice 0
    report = verify(json.dumps(doc))
    assert not report.ok


@pytest.mark.parametrize("mutate, words", [
    (lambda d: d["gpus"][0]["channels"][0].update(channel_type="nvlink"), "channel_type"),
    (lambda d: d["gpus"][1].update(id=0), "GPU rank does not match"),
    (lambda d: d.update(protocol="LL128"), "protocol"),
    (lambda d: d["gpus"][0]["threadblocks"][0]["ops"].append({"name": "glre"}),
     "invalid operation"),
    (lambda d: d["gpus"][2]["channels"].pop(), "switch channel groups"),
    (lambda d: d["gpus"][0]["threadblocks"][0]["ops"][0].update(channel_ids=[9]),
     "channel_ids"),
    (lambda d: d["gpus"][2]["channels"][0]["connected_to"].pop(), "lists"),
])
def test_loader_refuses_what_the_executor_refuses(mutate, words):
    doc = nvls_allreduce_plan(4)
    mutate(doc)
    problems = loader_problems(doc)
    assert any(words in p for p in problems), problems


def test_size_check_matches_the_executor():
    doc = nvls_allreduce_plan(6)  # 6 chunks of 16-byte units
    assert size_problems(doc, 6 * 16 * 1000) == []
    assert any("not aligned" in p for p in size_problems(doc, 64 << 20))  # 2^26/16 % 6 != 0
    doc["max_message_size"] = 1024
    assert any("valid range" in p for p in size_problems(doc, 6 * 16 * 1000))


def test_verify_size_fails_a_plan_the_executor_would_refuse():
    doc = nvls_allreduce_plan(6)
    report = verify(json.dumps(doc), nbytes=64 << 20)
    assert not report.ok and report.checks["size"] == "failed"
    assert "6 input" in report.violations[-1].message


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["dgx1", "dgx2_node", "dgx_a100_node", "dgx_h100_node",
                                    "mi250_node", "p3_8xlarge_node", "ndv2", "ndv4",
                                    "dgx_a100(nodes=2)", "dgx_h100(nodes=2)", "dgx2(nodes=2)",
                                    "mi250(nodes=2)", "ndv2(nodes=2)", "ndv4(nodes=2)",
                                    "p3_8xlarge(nodes=2)"])
@pytest.mark.parametrize("kind", ["allgather", "reducescatter", "allreduce", "alltoall"])
def test_every_preset_plan_loads_with_possible_channels(preset, kind):
    from tacos.msccl.mscclpp_choose import choose_mscclpp

    name = preset if "(" in preset else f"{preset}()"
    topo = _topology(f"use {name}\n")
    coll = tacos.collective(kind, range(len(topo.npus)), size="16MiB")
    schedule = tacos.synthesize(topo, coll, solver="greedy", workers=1)
    choice = choose_mscclpp(schedule)  # what tacosc writes: thread blocks by the model
    doc = json.loads(choice.text)
    assert loader_problems(doc) == []
    assert size_problems(doc, 16 << 20) == []  # loads at the size it was made for
    report = verify(choice.text, topology=topo, nbytes=16 << 20)
    assert report.ok, report.text()
    assert report.checks["channels"] == "passed"
    assert isinstance(choice.tried[choice.value], float)
    assert choice.time == min(v for v in choice.tried.values() if isinstance(v, float)) \
        or choice.time <= 1.005 * min(v for v in choice.tried.values() if isinstance(v, float))


@pytest.mark.slow
@pytest.mark.parametrize("kind, solver", [("allreduce", "forest"), ("allreduce", "nvls"),
                                          ("allgather", "nvls"), ("reducescatter", "nvls")])
def test_dgx_h100_in_switch_plans_use_switch_channels(kind, solver):
    from tacos.msccl.mscclpp_choose import choose_mscclpp

    topo = _topology(ONE_H100)
    coll = tacos.collective(kind, range(8), size="16MiB")
    choice = choose_mscclpp(tacos.synthesize(topo, coll, solver=solver, workers=1))
    doc = json.loads(choice.text)
    assert choice.kind == "switch" and loader_problems(doc) == []
    assert all(any(ch["channel_type"] == "switch" for ch in g["channels"]) for g in doc["gpus"])
    assert size_problems(doc, 16 << 20) == []
    report = verify(choice.text, topology=topo, nbytes=16 << 20)
    assert report.ok and report.checks["symbolic"] == "passed", report.text()


def test_process_group_plan_uses_its_own_rank_numbering():
    topo = _topology(TWO_NODES)
    group = (0, 1, 8, 9)  # ranks 0, 1 on node 0; ranks 2, 3 on node 1
    coll = tacos.collective("allreduce", group, size="1MiB")
    text = emit_mscclpp_json(tacos.synthesize(topo, coll, solver="greedy", workers=1))
    doc = json.loads(text)
    assert len(doc["gpus"]) == 4
    kinds = {(g["id"], p): ch["channel_type"] for g in doc["gpus"] for ch in g["channels"]
             for p in ch.get("connected_to", [])}
    for (a, b), kind in kinds.items():
        assert kind == ("memory" if a // 2 == b // 2 else "port"), (a, b, kind)
    assert loader_problems(doc) == []
    assert verify(text, topology=topo, ranks=list(group)).ok
    wrong = verify(text, topology=topo, ranks=[0, 1, 2, 3])  # all on node 0: ports are fine
    assert wrong.ok
    crossing = verify(text, topology=topo, ranks=[0, 8, 1, 9])  # memory pairs now cross
    assert not crossing.ok and any(v.rule == "channels" for v in crossing.violations)


@pytest.mark.parametrize("threadblocks", [2, 4, 16])
def test_nvls_plan_over_several_thread_blocks_verifies(threadblocks):
    doc = nvls_allreduce_plan(8, threadblocks=threadblocks)
    assert loader_problems(doc) == []
    assert len(doc["gpus"][0]["threadblocks"]) == threadblocks
    report = verify(json.dumps(doc), topology=_topology(ONE_H100), nbytes=64 << 20)
    assert report.ok and report.checks["races"] == "passed", report.text()
    glres = next(op for op in doc["gpus"][0]["threadblocks"][1]["ops"] if op["name"] == "glres")
    glres["src_buff"][0]["index"] = glres["dst_buff"][0]["index"] = 0  # tb 0's chunk again
    assert not verify(json.dumps(doc)).ok


def test_nvls_thread_blocks_are_the_runtime_models_choice():
    from tacos.msccl.mscclpp_nvls import TB_CHOICES, best_threadblocks
    from tacos.msccl.mscclpp_reader import read_plan
    from tacos.runtime.mscclpp_exec import estimate_mscclpp

    topo = _topology(ONE_H100)
    chosen = best_threadblocks(topo, list(range(8)), 64 << 20)
    times = {t: estimate_mscclpp(read_plan(nvls_allreduce_plan(8, threadblocks=t))[0], topo,
                                 64 << 20).time for t in TB_CHOICES}
    assert times[chosen] == min(times.values())
    doc = json.loads(nvls_allreduce_json(topo, nbytes=64 << 20))
    assert len(doc["gpus"][0]["threadblocks"]) == chosen
