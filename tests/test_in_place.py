"""Plans in the form frameworks call: in place by default for all-reduce, all-gather and
reduce-scatter, ``--out-of-place`` otherwise; a folder may hold both sets; the verifier checks
the buffer semantics each declares."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import tacos
from tacos.cli import in_place, main
from tacos.msccl.sweep_xml import check_set
from tacos.msccl.verify import verify_xml
from tacos.msccl.xml_reader import load_xml
from tacos.verify_plan import verify

NODE = str(Path(tacos.__file__).parent / "presets" / "dgx_a100_node.tdl")


@pytest.mark.parametrize("flag, kind, want", [
    (None, "allreduce", True), (None, "allgather", True), (None, "reducescatter", True),
    (None, "alltoall", False), (None, "broadcast", False), (False, "allreduce", False),
    (True, "alltoall", True)])
def test_default_mode(flag, kind, want):
    assert in_place(flag, kind) is want


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["allgather", "reducescatter", "allreduce"])
def test_compile_is_in_place_by_default_and_out_of_place_on_request(tmp_path, kind):
    ip, oop = tmp_path / "ip.xml", tmp_path / "oop.xml"
    assert main([NODE, "-c", kind, "--size", "1MiB", "--solver", "greedy", "-o", str(ip)]) == 0
    assert main([NODE, "-c", kind, "--size", "1MiB", "--solver", "greedy", "--out-of-place",
                 "-o", str(oop)]) == 0
    a, b = load_xml(ip), load_xml(oop)
    assert (a.inplace, a.outofplace) == (1, 0) and (b.inplace, b.outofplace) == (0, 1)
    for path in (ip, oop):
        report = verify_xml(path.read_text())
        assert report.ok and report.checks["symbolic"] == "passed", report.text()


@pytest.mark.slow  # ~1.3 s: a compile and a full verification
def test_flipped_buffer_semantics_fail_verification(tmp_path):
    path = tmp_path / "ag.xml"
    assert main([NODE, "-c", "allgather", "--size", "1MiB", "--solver", "greedy",
                 "-o", str(path)]) == 0
    text = path.read_text()
    flipped = re.sub(r'inplace="1"', 'inplace="0"', text, count=1)
    flipped = re.sub(r'outofplace="0"', 'outofplace="1"', flipped, count=1)
    assert flipped != text
    assert not verify_xml(flipped).ok  # an in-place program run out of place is wrong


@pytest.mark.slow
def test_mscclpp_plan_is_in_place_by_default(tmp_path):
    out = tmp_path / "ar.json"
    assert main([NODE, "-c", "allreduce", "--size", "1MiB", "--solver", "greedy",
                 "--format", "mscclpp", "-o", str(out)]) == 0
    assert json.loads(out.read_text())["inplace"] is True
    assert verify(out).ok


@pytest.mark.slow
def test_a_folder_holds_both_sets(tmp_path, capsys):
    out = tmp_path / "plans"
    base = [NODE, "-c", "allgather", "--sizes", "1KiB,64MiB", "--workers", "1", "-o", str(out),
            "-q"]
    assert main(base) == 0
    assert main([*base, "--out-of-place"]) == 0
    files = sorted(out.glob("*.xml"))
    modes = {(load_xml(f).inplace, load_xml(f).outofplace) for f in files}
    assert modes == {(1, 0), (0, 1)}
    assert check_set(files) == []
    capsys.readouterr()
    code = main(base)  # a second in-place set would overlap the first
    assert code != 0
    assert "already holds" in capsys.readouterr().err

