"""``tacosc``: runtime-shaped MSCCL output (``-o DIR`` windows, ``--shape auto`` files)."""

from __future__ import annotations

from pathlib import Path

import pytest

import tacos
from tacos.cli import main
from tacos.msccl.xml_reader import load_xml

NODE = str(Path(tacos.__file__).parent / "presets" / "dgx_a100_node.tdl")


def test_output_folder_gets_shaped_windows_that_verify_as_a_set(tmp_path, capsys):
    out = tmp_path / "plans"
    assert main([NODE, "-c", "allgather", "--sizes", "1KiB,64MiB", "--inplace",
                 "--workers", "1", "-o", str(out), "-q"]) == 0
    text = capsys.readouterr().out
    assert "runtime-shaped" in text and "MSCCL_ALGO_DIR" in text
    progs = [load_xml(p) for p in sorted(out.glob("*.xml"))]
    assert progs and all(p.inplace == 1 for p in progs)
    spans = sorted((p.minBytes, p.maxBytes) for p in progs)
    assert spans[0][0] == 0 and spans[-1][1] == 0
    small = min(progs, key=lambda p: p.minBytes)
    assert small.proto == "LL"
    assert main(["verify", str(out)]) == 0
    assert "load as one set" in capsys.readouterr().out


def test_fixed_shape_keeps_the_old_windows(tmp_path, capsys):
    out = tmp_path / "plans"
    assert main([NODE, "-c", "allgather", "--sizes", "1KiB:1MiB:x32", "--shape", "fixed",
                 "--workers", "1", "-o", str(out), "-q"]) == 0
    progs = [load_xml(p) for p in out.glob("*.xml")]
    assert progs and all(p.proto == "Simple" and p.nchannels == 1 for p in progs)
    capsys.readouterr()


@pytest.mark.slow  # ~1.3 s; the output folder of shaped windows stays in the default run
def test_one_file_with_shape_auto_gets_the_window_around_its_size(tmp_path, capsys):
    out = tmp_path / "plan.xml"
    assert main([NODE, "-c", "allreduce", "--size", "4KiB", "--inplace", "--shape", "auto",
                 "-o", str(out), "--report", "-q"]) == 0
    text = capsys.readouterr().out
    assert "msccl shape" in text and "why" in text and "bound" in text
    prog = load_xml(out)
    assert prog.minBytes <= 4096 <= prog.maxBytes and prog.minBytes > 1024
    assert prog.proto == "LL"
    assert main(["verify", str(out)]) == 0


@pytest.mark.slow  # the whole default range: 12 sizes
def test_output_folder_alone_covers_1kib_to_no_limit(tmp_path, capsys):
    out = tmp_path / "plans"
    assert main([NODE, "-c", "allgather", "--inplace", "--workers", "1", "-o", str(out),
                 "-q"]) == 0
    text = capsys.readouterr().out
    assert "4 GiB" in text and "1 KiB" in text
    progs = [load_xml(p) for p in out.glob("*.xml")]
    spans = sorted((p.minBytes, p.maxBytes) for p in progs)
    assert spans[0][0] == 0 and spans[-1][1] == 0
    assert main(["verify", str(out)]) == 0
