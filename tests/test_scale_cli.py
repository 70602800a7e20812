"""``tacosc`` on a multi-rail Clos: symmetric synthesis, the symmetric plan file, its verify."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import jsonschema
import pytest

import tacos
from tacos.check.bounds_symmetric import symmetric_bound
from tacos.check.symmetric import verify_symmetric
from tacos.cli import main
from tacos.errors import TacosError
from tacos.model.clos import clos_h100
from tacos.model.torus_axes import TorusAxes
from tacos.report_schema import report_schema
from tacos.scale.cli import SYMMETRIC_FROM, wants_symmetric
from tacos.scale.plan_json import dumps, loads, system_doc
from tacos.scale.synthesize import synthesize_symmetric
from tacos.verify_plan import sniff, verify

CLOS4 = "use clos_h100(nodes=4, tiers=2, hosts_per_leaf=2)\n"
CLOS2 = "use clos_h100(nodes=2, tiers=2, hosts_per_leaf=1)\n"  # two leaves under the spines


@pytest.fixture(scope="module", params=[pytest.param(CLOS2, id="16gpu"),
                                        pytest.param(CLOS4, id="32gpu",
                                                     marks=pytest.mark.slow)])  # ~6 s
def compiled(request: pytest.FixtureRequest,
             tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """A 2-node (16-GPU) or 4-node (32-GPU) Clos all-reduce compiled through
    ``tacosc --symmetric``."""
    d = tmp_path_factory.mktemp("clos")
    tdl = d / "clos.tdl"
    tdl.write_text(request.param)
    out = d / "plan.json"
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main([str(tdl), "-c", "allreduce", "--size", "1MiB", "--symmetric",
                   "--solver", "direct", "-o", str(out), "-q"])
    assert rc == 0
    return tdl, out, buf.getvalue()


def test_tacosc_writes_a_verified_symmetric_plan(compiled, capsys) -> None:
    tdl, out, line = compiled
    npus = len(tacos.load(str(tdl)).topology.live_npus)
    assert line.startswith(f"wrote {out}: allreduce 1 MiB on {npus} NPUs, link-model time ")
    assert "its lower bound" in line and line.rstrip().endswith(", verified")
    text = out.read_text()
    assert sniff(text) == "symmetric-json"
    plan = loads(text)
    found = tacos.model.clos.recognize(tacos.load(str(tdl)).topology)
    assert found is not None and system_doc(plan.system) == system_doc(found)
    assert verify_symmetric(plan).ok
    ratio = float(line.split("link-model time ")[1].split(", ")[1].split("x")[0])
    assert ratio == pytest.approx(plan.makespan / symmetric_bound(plan.system, "allreduce",
                                                                  plan.size), abs=1e-3)
    assert ratio >= 1.0
    capsys.readouterr()
    assert main(["verify", str(out), "--topology", str(tdl), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] and doc["format"] == "symmetric-json" and doc["violations"] == []
    jsonschema.validate(doc, report_schema())
    assert main([str(tdl), "-c", "reducescatter", "--size", "256KiB", "--symmetric",
                 "--solver", "direct", "--json", "-q"]) == 0
    doc = json.loads(capsys.readouterr().out)
    jsonschema.validate(doc, report_schema())
    assert doc["kind"] == "compile" and doc["verified"] and doc["gap"] >= 1.0
    assert doc["collective"] == {"kind": "reducescatter", "size": 256 << 10, "npus": npus}


def test_verify_rejects_a_tampered_plan_file(compiled, tmp_path, capsys) -> None:
    _, out, _ = compiled
    doc = json.loads(out.read_text())
    late = max(range(len(doc["phases"])), key=lambda k: doc["phases"][k][3])
    early = json.loads(json.dumps(doc))
    early["phases"][late][3] = 0.0          # the last phase starts before its part is ready
    bad = tmp_path / "early.json"
    bad.write_text(json.dumps(early))
    assert main(["verify", str(bad)]) == 1
    assert "[order]" in capsys.readouterr().out
    lie = json.loads(json.dumps(doc))
    lie["makespan"] = doc["makespan"] / 2   # a file that claims a faster plan than it is
    bad.write_text(json.dumps(lie))
    report = verify(bad)
    assert not report.ok and report.rules() == {"makespan"}
    other = tmp_path / "other.tdl"
    other.write_text("use clos_h100(nodes=8, tiers=2, hosts_per_leaf=4)\n")
    assert main(["verify", str(out), "--topology", str(other)]) == 1


def test_plan_file_round_trip_keeps_every_phase() -> None:
    for system, kind in ((clos_h100(nodes=4, hosts_per_leaf=2), "reducescatter"),
                         (clos_h100(nodes=16, hosts_per_leaf=4), "allreduce"),
                         (TorusAxes((3, 4)), "allgather")):
        plan = synthesize_symmetric(system, kind, 2**16, solvers=("direct",), parts=2)
        back = loads(dumps(plan))
        assert system_doc(back.system) == system_doc(plan.system) and back.parts == plan.parts
        assert [(p.part, p.axis, p.kind, p.start, p.template.transfers) for p in back.phases] \
            == [(p.part, p.axis, p.kind, p.start, p.template.transfers) for p in plan.phases]
        assert back.makespan == plan.makespan and verify_symmetric(back).ok
        assert dumps(back) == dumps(plan)
        if kind == "allreduce":   # fused digits (all-reduce phases) survive the file, also
            fused = [p for p in plan.phases if p.kind == "allreduce"]   # one template on 2 axes
            assert len({p.axis for p in fused}) > len({id(p.template) for p in fused})


def test_malformed_plan_files_are_errors_not_tracebacks(compiled) -> None:
    _, out, _ = compiled
    doc = json.loads(out.read_text())
    cases = [{**doc, "system": {"type": "hypercube"}},
             {**doc, "phases": [[0, 99, 0, 0.0]]},
             {**doc, "templates": [{"axis": 0}]},
             {**doc, "collective": {"kind": "broadcast", "size": 1}}]
    for case in cases:
        with pytest.raises(TacosError):
            loads(json.dumps(case), "case.json")


def _args(**kw) -> argparse.Namespace:
    base = {"symmetric": False, "solver": None, "sizes": None, "collective": "allreduce"}
    return argparse.Namespace(**{**base, **kw})


def test_large_clos_takes_symmetric_synthesis_by_default() -> None:
    big = tacos.preset("clos_h100", nodes=SYMMETRIC_FROM // 8, hosts_per_leaf=16)
    small = tacos.preset("clos_h100", nodes=4, hosts_per_leaf=2)
    assert wants_symmetric(big, _args())
    assert not wants_symmetric(big, _args(solver="greedy"))      # a solver named: per chunk
    assert not wants_symmetric(big, _args(collective="alltoall"))
    assert not wants_symmetric(small, _args())
    assert wants_symmetric(small, _args(symmetric=True))
    dgx = tacos.preset("dgx_h100", nodes=32)
    assert not wants_symmetric(dgx, _args())


def test_symmetric_flag_refuses_what_it_cannot_make(tmp_path, capsys) -> None:
    tdl = tmp_path / "clos.tdl"
    tdl.write_text(CLOS4)
    for extra in (["-c", "broadcast", "--root", "0"], ["-c", "allreduce", "--format", "xml",
                                                       "-o", str(tmp_path / "p.xml")]):
        assert main([str(tdl), "--symmetric", "-q", *extra]) == 2
        assert "symmetric" in capsys.readouterr().err
    ring = tmp_path / "ring.tdl"
    ring.write_text("use dgx_h100(nodes=2)\n")
    assert main([str(ring), "-c", "allgather", "--symmetric", "-q"]) != 0
    assert "isomorphic groups" in capsys.readouterr().err
