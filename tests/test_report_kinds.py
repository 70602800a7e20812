"""Every ``--json`` report of the design-space commands (cost, explore, allocate, reshards,
jobs) is one object of the versioned report schema, with its own ``kind``; the schema rejects
a report of one kind dressed as another."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from tacos.cli import main
from tacos.report_schema import SCHEMA_ID, envelope, report_schema

EXAMPLES = Path(__file__).parent.parent / "examples"


def _report(capsys: pytest.CaptureFixture[str], argv: list[str], kind: str) -> dict:
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    jsonschema.validate(doc, report_schema())
    assert doc["schema"] == SCHEMA_ID and doc["kind"] == kind and doc["ok"] is True
    return doc


def test_cost_explore_allocate_reports(capsys: pytest.CaptureFixture[str]) -> None:
    ring8 = str(EXAMPLES / "ring8.tdl")
    cost = _report(capsys, ["cost", ring8, "--size", "16MiB", "-m", "ring", "--json"], "cost")
    assert cost["models"][0]["size"] == 16 * 2**20 and cost["models"][0]["predicted"] > 0
    explore = _report(capsys, ["explore", ring8, "--model", "custom", "--layers", "1",
                               "--hidden", "512", "--tokens", "1024", "--no-synthesize",
                               "--algorithm", "ring", "--placements", "axonn", "--json"],
                      "explore")
    assert explore["configurations"] and all(c["model"] > 0 for c in explore["configurations"])
    alloc = _report(capsys, ["allocate", "Ring(4)_Switch(4)", "--budget", "200GB/s", "--op",
                             "allreduce:64MiB", "--confirm", "0", "--json"], "allocate")
    assert sum(alloc["bandwidth"]) == pytest.approx(200e9)
    with pytest.raises(jsonschema.ValidationError):  # an allocate report is not a cost report
        jsonschema.validate({**alloc, "kind": "cost"}, report_schema())


def test_reshard_and_jobs_reports(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    reshard = tmp_path / "r.tdl"
    reshard.write_text("use p3_8xlarge(nodes=4)\nreshard tensor [4194304] from node[0].gpu[0] "
                       "spec R to node[1].gpu[0..1] shape [2] spec S0\n")
    doc = _report(capsys, [str(reshard), "-q", "--json"], "reshard")
    assert doc["plan"]["time"] >= doc["bound"]["value"] > 0
    jobs = tmp_path / "jobs.tdl"
    jobs.write_text('fattree h[8] leaves=2 spines=2 down 50GB/s 1us up 25GB/s 1us\n'
                    'job "big" group h[0], h[4] { collective allreduce size 8MiB }\n'
                    'job "small" group h[1], h[5] { collective allgather size 2MiB }\n')
    doc = _report(capsys, [str(jobs), "-q", "--json"], "jobs")
    assert [j["name"] for j in doc["jobs"]] == ["big", "small"]
    assert all(m["makespan"] > 0 for m in doc["methods"].values())
    with pytest.raises(jsonschema.ValidationError):  # a jobs report lacks what reshard needs
        jsonschema.validate({**doc, "kind": "reshard"}, report_schema())


def test_envelope_refuses_an_unknown_kind() -> None:
    with pytest.raises(ValueError, match="unknown report kind"):
        envelope("costs", {}, True)
