"""Nothing lost on disk: every file tacosc writes is replaced atomically (a failed write keeps
the previous file and leaves no partial one), and output paths are checked before synthesis."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tacos.atomic import write_text, write_with
from tacos.cli import main
from tacos.errors import TacosError

EXAMPLES = Path(__file__).parent.parent / "examples"


def _limit_file_size() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (20 * 1024, 20 * 1024))


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

    monkeypatch.setattr(sys.modules["tacos.synthesize"], "synthesize", never)
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
