"""``tacosc --solver auto --format mscclpp`` ranks the in-switch plans (NCCL's NVLS schedule,
forest's star) beside auto's pick on a node with a multicast switch, and only there."""

from __future__ import annotations

import json
from importlib import resources

import pytest
from cli_output import after_phases

from tacos.cli import main
from tacos.msccl.mscclpp_channels import channel_type_violations
from tacos.msccl.mscclpp_loader import loader_problems, size_problems
from tacos.verify_plan import verify

PRESETS = resources.files("tacos") / "presets"


def _compile(tmp_path, preset: str, kind: str, capsys) -> tuple[dict, str, str]:
    out = tmp_path / f"{preset}_{kind}.json"
    topo = str(PRESETS / f"{preset}.tdl")
    assert main([topo, "-c", kind, "--size", "64MiB", "--format", "mscclpp",
                 "-o", str(out)]) == 0
    std = capsys.readouterr()
    assert main(["verify", str(out), "--topology", topo]) == 0  # the CLI's own check
    capsys.readouterr()
    doc = json.loads(out.read_text())
    report = verify(out, topology=_topology(topo), nbytes=64 << 20)
    assert report.ok, report
    assert not loader_problems(doc) and not size_problems(doc, 64 << 20)
    assert not channel_type_violations(doc, _topology(topo))
    return doc, std.out, std.err


def _topology(path: str):
    import tacos

    return tacos.load(path).topology


def _switch_channels(doc: dict) -> int:
    return sum(ch["channel_type"] == "switch" for g in doc["gpus"] for ch in g["channels"])


@pytest.mark.parametrize("kind", [pytest.param("allreduce", marks=pytest.mark.slow),  # ~1.5 s
                                  "allgather",
                                  pytest.param("reducescatter", marks=pytest.mark.slow)])
def test_auto_writes_the_in_switch_plan_on_an_nvls_node_when_it_is_fastest(tmp_path, capsys,
                                                                            kind):
    doc, out, err = _compile(tmp_path, "dgx_h100_node", kind, capsys)
    assert _switch_channels(doc) > 0
    assert "in-switch plan nvls (switch channels) chosen by auto" in out
    note = next(line for line in after_phases(err).splitlines() if "in-switch plan" in line)
    ours, theirs = (float(x) for x in
                    note.split("model: ")[1].split(" us for")[0].split(" us vs "))
    assert ours < theirs  # written because it is faster in the runtime model


@pytest.mark.slow
def test_a_node_without_a_multicast_switch_gets_no_switch_channels(tmp_path, capsys):
    doc, out, err = _compile(tmp_path, "dgx_a100_node", "allreduce", capsys)
    assert _switch_channels(doc) == 0
    assert "in-switch" not in out + err
