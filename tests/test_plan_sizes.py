"""A plan is used where it claims to be: ``verify --size`` fails an MSCCL XML plan the runtime
would skip at that size (chunks per loop that do not divide the message, outside its window)."""

from __future__ import annotations

from pathlib import Path

import pytest

import tacos
from tacos.cli import main
from tacos.msccl.lower import MscclOptions
from tacos.msccl.verify import verify_xml
from tacos.msccl.xml_reader import load_xml
from tacos.msccl.xml_writer import schedule_to_xml

PRESETS = Path(tacos.__file__).parent / "presets"


@pytest.fixture(scope="module")
def dgx1_xml():
    topo = tacos.parse("use dgx1()\n").topology
    coll = tacos.collective("allgather", range(8), size="48MiB", chunks_per_npu=3)
    schedule = tacos.synthesize(topo, coll, solver="greedy", workers=1)
    return schedule_to_xml(schedule, MscclOptions(max_bytes=1 << 30))


def _chunks(text: str) -> int:
    import re

    return int(re.search(r'nchunksperloop="(\d+)"', text).group(1))


def test_size_that_does_not_divide_the_chunks_fails_saying_why(dgx1_xml):
    chunks = _chunks(dgx1_xml)
    assert chunks % 3 == 0  # 3 chunks per NPU: 2^k bytes never divide
    report = verify_xml(dgx1_xml, nbytes=64 << 20)
    assert not report.ok and report.checks["size"] == "failed"
    msg = next(v.message for v in report.violations if v.rule == "size")
    assert f"{chunks} chunks per loop" in msg and "skips the plan" in msg


def test_size_that_divides_passes_and_window_is_checked(dgx1_xml):
    chunks = _chunks(dgx1_xml)
    good = chunks * 4 * 1024  # a multiple of chunks x 4-byte elements
    report = verify_xml(dgx1_xml, nbytes=good)
    assert report.ok, report.text()
    assert report.checks["size"] == "passed" and not report.warnings
    half = chunks * 2 * 1023  # divides for 2-byte elements, not for 4-byte ones
    if (half // 4) % chunks:
        sized = verify_xml(dgx1_xml, nbytes=half)
        assert sized.ok and any(w.rule == "size" for w in sized.warnings)
    over = verify_xml(dgx1_xml, nbytes=chunks * 4 << 30)
    assert not over.ok and any("outside the plan's window" in v.message
                               for v in over.violations)


def test_cli_verify_size_without_topology(tmp_path, dgx1_xml, capsys):
    path = tmp_path / "ag.xml"
    path.write_text(dgx1_xml)
    assert load_xml(path).nchunksperloop == _chunks(dgx1_xml)
    assert main(["verify", str(path), "--size", "64MiB"]) == 1
    assert "nchunksperloop" in capsys.readouterr().out
    assert main(["verify", str(path), "--size", str(_chunks(dgx1_xml) * 4096)]) == 0


@pytest.mark.slow  # ~1 s
def test_compile_warns_when_the_plan_would_be_skipped_at_its_own_size(tmp_path, capsys):
    bad, good = tmp_path / "bad.xml", tmp_path / "good.xml"
    dgx1 = str(PRESETS / "dgx1.tdl")
    assert main([dgx1, "-c", "allgather", "--chunks", "3", "--size", "64MiB",
                 "--solver", "greedy", "--shape", "fixed", "-o", str(bad)]) == 0
    assert "skips the plan" in capsys.readouterr().err
    assert main([dgx1, "-c", "allgather", "--chunks", "2", "--size", "64MiB",
                 "--solver", "greedy", "-o", str(good)]) == 0
    err = capsys.readouterr().err
    assert "warning" not in err and "MSCCL_ALGO_DIR=" in err


def test_a_shaped_plan_is_used_at_its_own_size(tmp_path, capsys):
    """The shape chooser rejects shapes whose chunks do not divide the message, so the
    default (shaped) plan of the same request is not skipped where the fixed one is."""
    out = tmp_path / "shaped.xml"
    assert main([str(PRESETS / "dgx1.tdl"), "-c", "allgather", "--chunks", "3", "--size",
                 "64MiB", "--solver", "greedy", "-o", str(out)]) == 0
    assert "skips the plan" not in capsys.readouterr().err
    assert main(["verify", str(out), "--size", "64MiB"]) == 0


def test_fit_windows_hands_sizes_a_plan_cannot_cut_to_the_window_below():
    from tacos.msccl.size_fit import fit_windows, smallest_served

    assert smallest_served(64) == 128 and smallest_served(48) is None
    # window 2's 4096 chunks serve 8 KiB and up: 2049..8191 go to window 1 (8 chunks)
    assert fit_windows([(0, 2048, 8), (2049, 0, 4096)]) == [(0, 8191), (8192, 0)]
    # a window whose plan serves no power of two is left for window_gaps to name
    assert fit_windows([(0, 2048, 8), (2049, 0, 48)]) == [(0, 2048), (2049, 0)]
    # nor is a boundary moved when the window below cannot serve the sizes either
    assert fit_windows([(0, 2048, 48), (2049, 0, 4096)]) == [(0, 2048), (2049, 0)]


def test_window_gaps_name_the_sizes_left_to_nccl_and_why():
    from tacos.msccl.size_fit import window_gaps

    topo = tacos.parse("use dgx_a100_node()\n").topology
    progs = []
    for chunks, lo, hi in ((1, 16, 32768), (3, 32769, 0)):
        coll = tacos.collective("allgather", range(8), size=f"{48 * chunks}KiB",
                                chunks_per_npu=chunks)
        schedule = tacos.synthesize(topo, coll, solver="greedy", workers=1)
        text = schedule_to_xml(schedule, MscclOptions(min_bytes=lo, max_bytes=hi))
        from tacos.msccl.xml_reader import parse_xml

        progs.append((f"w{chunks}.xml", parse_xml(text)))
    gaps = window_gaps(progs, top=1 << 20)
    assert gaps[0].startswith("power-of-two sizes 1 B .. 8 B: no window covers it")
    assert any("65536 B .. 1048576 B: w3.xml's 24 chunks per loop do not divide it" in g
               for g in gaps)
    assert not any("w1.xml" in g for g in gaps)  # 8 chunks cut 16 B .. 32 KiB
    assert window_gaps(progs[:1], top=32768) == [gaps[0]]


def test_sweep_prints_where_its_windows_leave_sizes_to_nccl(tmp_path, capsys):
    out = tmp_path / "plans"
    assert main([str(PRESETS / "dgx_a100_node.tdl"), "-c", "allgather", "--sizes",
                 "96KiB,96MiB", "--chunks", "3", "--solver", "greedy", "--shape", "fixed",
                 "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "# gap: power-of-two sizes" in text and "24 chunks per loop do not divide" in text
