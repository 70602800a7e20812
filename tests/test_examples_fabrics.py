"""The fabric and process-group examples end to end through the CLI, and mutation tests: a
compiled plan for a switched example, tampered so that two transfers use one switch port at
once or an uplink carries more transfers than it has lanes, is rejected by
``tacosc verify --topology`` with the port or uplink named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tacos
from tacos.cli import main

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
# the two leaf-spines (about 10 s each) run with -m slow; the ring plan on the 4:1 one below and
# the process groups keep the fabric path in the default run
FABRICS = (pytest.param("leafspine", marks=pytest.mark.slow),
           pytest.param("leafspine_4to1", marks=pytest.mark.slow),
           pytest.param("dgx_a100_group4", marks=pytest.mark.slow),
           "group_noncontiguous")


def compile_(capsys, tdl: Path, out: Path, *extra: str) -> str:
    capsys.readouterr()
    assert main([str(tdl), "-q", "--trials", "1", "--workers", "1", "-o", str(out),
                 *extra]) == 0, capsys.readouterr().err
    return out.read_text()


def verify(capsys, plan: Path, tdl: Path) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["verify", str(plan), "--topology", str(tdl)])
    got = capsys.readouterr()
    return code, got.out + got.err


@pytest.mark.parametrize("name", FABRICS)
def test_example_compiles_verifies_and_emits_xml(name, tmp_path, capsys):
    tdl = EXAMPLES / f"{name}.tdl"
    spec = tacos.load(tdl)
    compile_(capsys, tdl, tmp_path / "plan.json")
    code, text = verify(capsys, tmp_path / "plan.json", tdl)
    assert code == 0, text
    xml = compile_(capsys, tdl, tmp_path / "plan.xml")
    group = spec.collective.group
    assert f'ngpus="{len(group)}"' in xml
    if list(group) != list(range(len(group))):
        assert xml.startswith("<!-- tacos ranks: " + " ".join(map(str, group)) + " -->")
    code, text = verify(capsys, tmp_path / "plan.xml", tdl)
    assert code == 0, text


@pytest.mark.slow
def test_two_jobs_on_one_fat_tree(tmp_path, capsys):
    tdl = EXAMPLES / "multijob_fattree.tdl"
    spec = tacos.load(tdl)
    a, b = spec.collectives
    # both jobs at once, sharing the fabric: one JSON schedule, verified on the physical tree
    compile_(capsys, tdl, tmp_path / "both.json", "--solver", "ring")
    code, text = verify(capsys, tmp_path / "both.json", tdl)
    assert code == 0, text
    both = json.loads((tmp_path / "both.json").read_text())
    senders = {t["src"] for t in both["transfers"]}
    assert senders == set(a.group) | set(b.group)
    # each job's own MSCCL plan, in its own rank numbering
    for coll in (a, b):
        out = tmp_path / f"{coll.name}.xml"
        xml = compile_(capsys, tdl, out, "-c", coll.name)
        assert xml.startswith("<!-- tacos ranks: " + " ".join(map(str, coll.group)) + " -->")
        assert 'ngpus="8"' in xml
        code, text = verify(capsys, out, tdl)
        assert code == 0, text
        assert "ranks: on NPUs " + " ".join(map(str, coll.group)) in text


def _plan(capsys, tmp_path: Path, example: str, solver: str) -> tuple[Path, dict, Path]:
    tdl = EXAMPLES / f"{example}.tdl"
    path = tmp_path / "plan.json"
    compile_(capsys, tdl, path, "--solver", solver, "-c", "allgather", "--size", "16MiB")
    code, text = verify(capsys, path, tdl)
    assert code == 0, text
    return tdl, json.loads(path.read_text()), path


def test_two_transfers_on_one_switch_port_are_rejected_with_the_port_named(tmp_path, capsys):
    tdl, plan, path = _plan(capsys, tmp_path, "leafspine", "direct")
    first, second = [t for t in plan["transfers"] if t["src"] == 0][:2]
    second["start"], second["end"] = first["start"], first["end"]  # same time, same up-port
    path.write_text(json.dumps(plan))
    code, text = verify(capsys, path, tdl)
    assert code == 1
    assert "overlap" in text and "host[0]->host_leaf[0] (port of host[0])" in text


def test_an_overloaded_uplink_is_rejected_with_the_uplink_named(tmp_path, capsys):
    tdl, plan, path = _plan(capsys, tmp_path, "leafspine_4to1", "ring")
    topo = tacos.load(tdl).topology
    leaf = {v: topo.links[topo.out_links[v][0]].dst for v in topo.live_npus}
    cross = [t for t in plan["transfers"] if leaf[t["src"]] != leaf[t["dst"]]]
    one = cross[0]
    # another host of the same leaf sends across the fabric at the same time, on the same uplink
    other = next(t for t in plan["transfers"]
                 if leaf[t["src"]] == leaf[one["src"]] and t["src"] != one["src"])
    dst = next(v for v in topo.live_npus if leaf[v] != leaf[one["src"]])
    route = next(r for r in topo.routing.routes(other["src"], dst)
                 if r.links[1] == one["route"][1])
    other.update(dst=dst, route=list(route.links), start=one["start"], end=one["end"])
    path.write_text(json.dumps(plan))
    code, text = verify(capsys, path, tdl)
    assert code == 1
    uplink = f"{topo.node_name(topo.links[one['route'][1]].src)}->" \
             f"{topo.node_name(topo.links[one['route'][1]].dst)}"
    assert uplink.startswith("host_leaf[") and "->host_spine[" in uplink
    assert "overlap" in text and uplink in text, text
