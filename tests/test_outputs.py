"""Nothing lost on disk: every file tacosc writes is replaced atomically (a failed write keeps
the previous file and leaves no partial one), and output paths are checked before synthesis."""

from __future__ import annotations

import importlib
import resource
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from tacos.atomic import write_text, write_with
from tacos.cli import main
from tacos.errors import TacosError

EXAMPLES = Path(__file__).parent.parent / "examples"


def _limit_file_size() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (20 * 1024, 20 * 1024))


@pytest.mark.slow  # ~1.3 s: a compile in a subprocess under a file-size limit
def test_output_hitting_a_file_size_limit_keeps_the_previous_file(tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    out.write_text("previous plan\n")
    code = "from tacos.cli import main; raise SystemExit(main())"
    proc = subprocess.run(
        [sys.executable, "-c", code, str(EXAMPLES / "mesh4x4.tdl"), "-c", "alltoall",
         "--trials", "1", "--workers", "1", "-q", "-o", str(out)],
        capture_output=True, text=True, preexec_fn=_limit_file_size, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert f"cannot write {out}" in proc.stderr and "internal error" not in proc.stderr
    assert out.read_text() == "previous plan\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]  # no temporary left


def test_helper_failure_leaves_nothing_behind(tmp_path: Path) -> None:
    out = tmp_path / "a.txt"
    out.write_text("old")

    def broken(tmp: Path) -> None:
        tmp.write_text("half")
        raise RuntimeError("writer died")

    with pytest.raises(RuntimeError):
        write_with(out, broken)
    assert out.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["a.txt"]
    write_text(out, "new")
    assert out.read_text() == "new" and [p.name for p in tmp_path.iterdir()] == ["a.txt"]
    with pytest.raises(TacosError, match="cannot write"):
        write_text(tmp_path / "missing" / "b.txt", "x")


@pytest.mark.parametrize("bad", ["missing-folder/plan.png", "plan.bmp", "."])
def test_plot_path_is_checked_before_synthesis(tmp_path: Path, bad: str,
                                               capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    def never(*args, **kwargs):
        raise AssertionError("synthesis ran although the plot path is bad")

    monkeypatch.setattr(importlib.import_module("tacos.synthesize"), "synthesize", never)
    out = tmp_path / "plan.json"
    t0 = time.perf_counter()
    code = main([str(EXAMPLES / "ring8.tdl"), "-c", "allgather", "-q", "-o", str(out),
                 "--plot", str(tmp_path / bad)])
    err = capsys.readouterr().err
    assert code == 1 and "cannot" in err and "internal error" not in err, err
    assert not out.exists() and time.perf_counter() - t0 < 5


@pytest.mark.slow
def test_plot_is_written_atomically(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "plan.png"
    png.write_bytes(b"old")
    code = main([str(EXAMPLES / "ring8.tdl"), "-c", "allgather", "-q", "--trials", "1",
                 "--workers", "1", "--plot", str(png), "-o", str(tmp_path / "plan.xml")])
    assert code == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.png", "plan.xml"]


@pytest.fixture(scope="module")
def ring_sweep():
    from tacos import parse
    from tacos.sweep import sweep

    topo = parse("ring r[4] 10GB/s 1us\n").topology
    small = sweep(topo, "allgather", "4KiB", candidates=("ring",), trials=1, workers=1)
    large = sweep(topo, "allgather", "1MiB", chunks_per_npu=2, candidates=("ring",), trials=1,
                  workers=1)
    return replace(small, rows=small.rows + large.rows)  # two programs: two XML files


@pytest.mark.parametrize("case", ["plot folder", "plot format", "xml in folder", "folder is a "
                                  "file", "window"])
def test_sweep_outputs_are_checked_before_the_sweep(case: str, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    def never(*args, **kwargs):
        raise AssertionError("the sweep ran although an output is bad")

    monkeypatch.setattr(importlib.import_module("tacos.sweep"), "sweep", never)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "old.xml").write_text("<algo/>")
    (tmp_path / "file").write_text("x")
    extra = {"plot folder": ["--plot", str(tmp_path / "missing" / "s.png")],
             "plot format": ["--plot", str(tmp_path / "s.bmp")],
             "xml in folder": ["-o", str(tmp_path / "full")],
             "folder is a file": ["-o", str(tmp_path / "file")],
             "window": ["-o", str(tmp_path / "new"), "--max-bytes", "1KiB"]}[case]
    code = main([str(EXAMPLES / "ring8.tdl"), "-c", "allgather", "-q", "--sizes",
                 "1MiB:4MiB:x2", *extra])
    err = capsys.readouterr().err
    assert code in (1, 2) and "error" in err and "internal error" not in err, err
    assert not (tmp_path / "new").exists() and not (tmp_path / "s.png").exists()


def test_sweep_folder_is_all_or_nothing(ring_sweep, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    import tacos.msccl.sweep_xml as sweep_xml
    from tacos.msccl.sweep_xml import write_windows

    calls = []
    real_replace = os.replace

    def fail_second(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    out = tmp_path / "plans"
    monkeypatch.setattr(sweep_xml.os, "replace", fail_second)
    with pytest.raises(TacosError, match="No space left"):
        write_windows(ring_sweep, out)
    assert len(calls) == 2 and list(out.iterdir()) == []  # no partial set, no staging folder
    monkeypatch.undo()
    paths = write_windows(ring_sweep, out)
    assert len(paths) == 2 and sorted(out.iterdir()) == sorted(paths)


def _failing_savefig(monkeypatch: pytest.MonkeyPatch) -> None:
    """matplotlib writes half a picture to the name it is given, then the disk is full."""
    from matplotlib.figure import Figure

    def half(self, fname, *args, **kwargs):
        Path(fname).write_bytes(b"\x89PNG half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", half)


def test_sweep_and_allocation_plots_are_written_atomically(ring_sweep, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    pytest.importorskip("matplotlib")
    from tacos.backends.plot_sweep import plot_sweep

    from tacos import parse
    from tacos.cost.allocate import GB, Op, allocate, workload_terms
    from tacos.cost.plots import plot_allocation

    topo = parse("dims npu Ring(2)_Switch(4) 100GB/s 0.5us, 100GB/s 1us").topology
    terms = workload_terms(topo, [Op("allreduce", 1 << 20)])
    alloc = allocate(terms, 200 * GB)
    writers = {"sweep.png": lambda p: plot_sweep(ring_sweep, p),
               "alloc.png": lambda p: plot_allocation(alloc, terms, p)}
    for name, write in writers.items():
        write(tmp_path / name)
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"
        (tmp_path / name).write_bytes(b"previous picture")
    _failing_savefig(monkeypatch)
    for name, write in writers.items():
        with pytest.raises(TacosError, match="No space left"):
            write(tmp_path / name)
        assert (tmp_path / name).read_bytes() == b"previous picture"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(writers)


def test_allocate_plot_path_is_checked_before_work(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    allocate_module = importlib.import_module("tacos.cost.allocate")

    def never(*args, **kwargs):
        raise AssertionError("the allocation ran although the plot path is bad")

    monkeypatch.setattr(allocate_module, "workload_terms", never)
    code = main(["allocate", "Ring(2)_Switch(4)", "--budget", "200GB/s", "--op",
                 "allreduce:1MiB", "--plot", str(tmp_path / "missing" / "a.png")])
    err = capsys.readouterr().err
    assert code == 1 and "does not exist" in err, err
