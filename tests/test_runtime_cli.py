"""Reported times come from the runtime model: the CLI's JSON ``runtime`` object."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tacos.frontends.tdl_includes import preset_folder

from tacos.cli import main

FIXTURES = Path(__file__).parent / "fixtures" / "msccl"
KEYS = {"time", "algbw", "busbw", "model", "bound"}


def _json(capsys, argv):
    assert main(argv) in (0, 1)
    return json.loads(capsys.readouterr().out)


def _preset(name: str) -> str:
    return str(preset_folder() / f"{name}.tdl")


def test_compile_json_has_the_runtime_object(tmp_path, capsys):
    out = tmp_path / "plan.xml"
    doc = _json(capsys, [_preset("dgx_a100_node"), "--collective", "allgather", "--size",
                         "1MiB", "--solver", "greedy", "--trials", "1", "-o", str(out),
                         "--json"])
    rt = doc["runtime"]
    assert KEYS <= set(rt)
    assert rt["model"] == "msccl-executor/a100"
    assert rt["algbw"] == pytest.approx((1 << 20) / rt["time"])
    assert rt["busbw"] == pytest.approx(rt["algbw"] * 7 / 8)
    assert rt["link_time"] == doc["time"]  # the link model's, beside it
    assert rt["time"] > doc["time"]  # CTAs and protocol costs the link model leaves out
    # verify times the same file the same way
    ver = _json(capsys, ["verify", str(out), "--topology", _preset("dgx_a100_node"),
                         "--size", "1MiB", "--json"])
    assert ver["runtime"]["time"] == pytest.approx(rt["time"])


def test_nccl_solver_reports_nccl_as_nccl_runs_it(capsys):
    doc = _json(capsys, [_preset("dgx_h100_node"), "--collective", "allreduce", "--size",
                         "64MiB", "--solver", "nvls", "--json"])
    assert doc["runtime"]["model"] == "nccl-nvls/h100"
    assert doc["runtime"]["bound"].startswith("nvls")


def test_in_switch_plan_is_not_reported_as_executable(capsys):
    doc = _json(capsys, [_preset("dgx_h100_node"), "--collective", "allreduce", "--size",
                         "64MiB", "--solver", "forest", "--json"])
    rt = doc["runtime"]
    assert rt["time"] is None and "link model" in rt["note"]


def test_verify_times_microsofts_plans(capsys):
    xml = FIXTURES / "executor_ndv5_ar-1k-512k.xml"
    doc = _json(capsys, ["verify", str(xml), "--topology", _preset("dgx_h100_node"),
                         "--size", "1KiB", "--json"])
    assert doc["ok"] and doc["runtime"]["model"] == "msccl-executor/h100"
    assert doc["runtime"]["time"] < doc["time"]  # LL, 56 CTAs: faster than the link model
    plan = FIXTURES / "mscclpp_ring_allgather_4.json"
    doc = _json(capsys, ["verify", str(plan), "--topology", _preset("dgx_h100_node"),
                         "--ranks", "0,1,2,3", "--size", "64MiB", "--json"])
    assert doc["ok"] and doc["runtime"]["model"] == "mscclpp-executor/h100"
    assert doc["runtime"]["bound"].startswith("cta")


def test_report_says_what_bounds_the_runtime(capsys):
    assert main([_preset("dgx_a100_node"), "--collective", "allreduce", "--size", "64MiB",
                 "--solver", "greedy", "--trials", "1", "--report"]) == 0
    text = capsys.readouterr().out
    assert "runtime " in text and "bounded by" in text and "per-CTA rate" in text
