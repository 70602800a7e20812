"""``tacosc`` front door: help, info, presets, usage errors, ``python -m tacos``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cli_output import after_phases

from tacos.cli import main

EXAMPLES = Path(__file__).parent.parent / "examples"


def test_help_documents_every_option(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for option in ("--collective", "--size", "--chunks", "--root", "--solver", "--trials",
                   "--seed", "--output", "--report", "--plot", "--param", "--backend", "--mode",
                   "--option", "--instances", "--json", "solvers", "import",
                   "--time-limit", "--max-merge", "info", "verify"):
        assert option in out


def test_no_arguments_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2


def test_info_json_matches_topology(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", str(EXAMPLES / "dgx1_broadcast.tdl"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["npus"] == 8 and data["links"] == 32 and data["physical_links"] == 48
    assert all(r["ingress_GBps"] == 150.0 for r in data["per_npu"])
    kinds = sorted(c["kind"] for c in data["collectives"])
    assert kinds == ["broadcast", "reduce"]
    bcast = next(c for c in data["collectives"] if c["kind"] == "broadcast")
    # broadcast of 32 MiB in 4 chunks to 7 other NPUs
    assert bcast["chunks"] == 4 and bcast["volume_bytes"] == 7 * 32 * 2**20


def test_info_param_override(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    f = tmp_path / "p.tdl"
    f.write_text("param n = 4\nring r[n] 10GB/s 1us\n")
    assert main(["info", str(f), "--param", "n=6"]) == 0
    assert "npus: 6" in capsys.readouterr().out
    assert main(["info", str(f), "--param", "m=6"]) == 1
    assert "no parameter 'm'" in capsys.readouterr().err


def test_info_summarizes_large_systems(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", str(EXAMPLES / "torus3d.tdl")]) == 0
    out = capsys.readouterr().out
    assert "ingress min 322.1 GB/s" in out  # 6 links of 50 GiB/s = 322.1 GB/s
    assert main(["info", str(EXAMPLES / "torus3d.tdl"), "--per-npu"]) == 0
    assert capsys.readouterr().out.count("GB/s") >= 2 * 64


def test_presets_lists_every_preset(capsys: pytest.CaptureFixture[str]) -> None:
    import tacos

    assert main(["presets"]) == 0
    out = capsys.readouterr().out
    for p in (Path(tacos.__file__).parent / "presets").glob("*.tdl"):
        assert p.stem in out


def test_compile_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    topo = str(EXAMPLES / "ring8.tdl")
    assert main([topo, "--collective", "allgathr", "-o", "x.json"]) == 2
    assert "did you mean 'allgather'" in capsys.readouterr().err
    assert main([topo, "--collective", "broadcast", "-o", "x.json"]) == 2
    assert "needs --root" in capsys.readouterr().err
    assert main([topo, "--collective", "allgather", "-o", "x.txt"]) == 2
    assert "cannot tell the format" in capsys.readouterr().err
    assert main([topo, "--collective", "allgather", "--size", "12 parsecs"]) == 2
    assert "--size" in capsys.readouterr().err
    assert main([topo, "--solver", "greedyy", "--collective", "allgather"]) == 2
    assert "did you mean 'greedy'" in capsys.readouterr().err


def test_python_dash_m(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "tacos", "info",
                           str(EXAMPLES / "mesh4x4.tdl")], capture_output=True, text=True,
                          cwd=tmp_path)
    assert proc.returncode == 0
    assert "npus: 16" in proc.stdout


def test_user_error_exit_code_and_no_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.tdl"
    bad.write_text("npu a[2]\nlink a[0] -> a[5] 1GB/s\n")
    proc = subprocess.run([sys.executable, "-m", "tacos", "info", str(bad)],
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert after_phases(proc.stderr).startswith(f"{bad}:2:14: error:")
    assert "Traceback" not in proc.stderr


def test_unwritable_output_is_a_user_error(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "missing-folder" / "plan.json"
    code = main([str(EXAMPLES / "ring8.tdl"), "--collective", "allgather", "--trials", "1",
                 "--workers", "1", "-q", "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 1
    assert f"cannot write {out}" in err and "internal error" not in err
