"""`tacosc` on reshard files: the report, JSON plans that verify, MSCCL where it can run them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tacos
from tacos.cli import main
from tacos.errors import TacosError
from tacos.msccl.xml_writer import schedule_to_xml
from tacos.reshard import DeviceMesh, Reshard, plan_reshard
from tacos.reshard.msccl import standard_form

EXAMPLE = Path(__file__).parent.parent / "examples" / "reshard_p3.tdl"
HEAD = "use p3_8xlarge(nodes=4)\n"


def write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "r.tdl"
    path.write_text(HEAD + body)
    return path


def test_example_report_names_bound_plan_and_baselines(capsys) -> None:
    assert main([str(EXAMPLE), "--chunks", "4", "-q"]) == 0
    out = capsys.readouterr().out
    for word in ("unit tasks  4", "bound", "group cut", "tacos", "sendrecv", "alpa",
                 "broadcast"):
        assert word in out
    assert "x bound" in out


def test_json_plan_verifies_against_the_file(tmp_path: Path, capsys) -> None:
    plan = tmp_path / "plan.json"
    assert main([str(EXAMPLE), "--chunks", "2", "-q", "-o", str(plan)]) == 0
    data = json.loads(plan.read_text())
    assert data["collective"]["kind"] == "custom"
    assert main(["verify", str(plan), "--topology", str(EXAMPLE)]) == 0
    assert "no violations" in capsys.readouterr().out


def test_xml_is_refused_with_a_reason_and_nothing_is_written(tmp_path: Path, capsys) -> None:
    plan = tmp_path / "plan.xml"
    assert main([str(EXAMPLE), "--chunks", "2", "-q", "-o", str(plan)]) == 1
    err = capsys.readouterr().err
    assert "MSCCL XML cannot express this resharding plan" in err
    assert "-o plan.json" in err and "Traceback" not in err
    assert not plan.exists()


def test_one_device_to_a_replicated_mesh_is_an_msccl_broadcast(tmp_path: Path, capsys) -> None:
    path = write(tmp_path, "reshard tensor [4194304] from node[0].gpu[0] spec R "
                           "to node[1..3].gpu[*] shape [3, 4] spec R pieces 4\n")
    plan = tmp_path / "plan.xml"
    assert main([str(path), "-q", "-o", str(plan), "--solver", "multicast"]) == 0
    text = plan.read_text()
    assert 'coll="broadcast"' in text and 'ngpus="13"' in text
    assert main(["verify", str(plan)]) == 0


def test_allgather_within_one_mesh_is_an_msccl_allgather() -> None:
    topo = tacos.parse(HEAD).topology
    m = DeviceMesh.of(range(4))
    r = Reshard.of((1024, 64), m, "S0R", m, "RR")
    result = plan_reshard(topo, r, pieces=2, baselines=False)
    sched = standard_form(result.schedule)
    assert sched.collective.kind == "allgather" and sched.collective.chunks_per_npu == 2
    tacos.verify(sched).raise_if_failed()
    assert 'coll="allgather"' in schedule_to_xml(sched)


def test_standard_form_explains_what_the_runtime_lacks() -> None:
    topo = tacos.parse(HEAD).topology
    r = Reshard.of((64, 64), DeviceMesh.of(range(4), (2, 2)), "S0R",
                   DeviceMesh.of(range(8, 12), (2, 2)), "RS1")
    sched = plan_reshard(topo, r, pieces=1, baselines=False).schedule
    with pytest.raises(TacosError, match="only runs all-gather") as info:
        standard_form(sched)
    assert "plan.json" in info.value.hint


def test_reshards_and_collectives_in_one_file_need_a_choice(tmp_path: Path, capsys) -> None:
    path = write(tmp_path, "collective allgather size 1MiB\nreshard tensor [64, 64] "
                           "from node[0].gpu[*] spec S0R to node[1].gpu[*] spec RS0\n")
    assert main([str(path), "-q"]) == 2
    assert "--collective" in capsys.readouterr().err
    assert main([str(path), "-q", "--collective", "allgather", "--solver", "ring"]) == 0


def test_info_lists_reshards(capsys) -> None:
    assert main(["info", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    assert "reshards: 1" in out and "RS0R on 2x4 -> S0RR on 2x4, 4 unit tasks" in out
