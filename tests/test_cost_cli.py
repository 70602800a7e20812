"""``tacosc cost``, ``tacosc explore`` and ``tacosc allocate``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tacos.cli import main

EXAMPLES = Path(__file__).parent.parent / "examples"


def test_cost_table_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    ring8 = str(EXAMPLES / "ring8.tdl")
    assert main(["cost", ring8, "-c", "allgather", "--size", "16MiB", "-m", "ring",
                 "-m", "biring", "--explain"]) == 0
    out = capsys.readouterr().out
    assert "(N-1)(α + M/(Nβ))" in out and "+0.00%" in out and "step 1" in out
    assert main(["cost", ring8, "--size", "16MiB", "--json", "-m", "ring"]) == 0
    rows = json.loads(capsys.readouterr().out)["models"]
    (ring,) = rows
    # 2(N-1)(α + M/(Nβ)) with N 8, α 1 µs, β 100 GB/s
    assert ring["predicted"] == pytest.approx(14 * (1e-6 + (16 << 20) / 8 / 100e9))
    assert abs(ring["error"]) < 1e-9


def test_cost_groups_and_errors(capsys: pytest.CaptureFixture[str]) -> None:
    ring8 = str(EXAMPLES / "ring8.tdl")
    assert main(["cost", ring8, "--groups", "inner=2", "-m", "direct", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["models"]
    assert row["groups"] == 4 and row["npus"] == 2
    assert main(["cost", ring8, "--group", "0-3", "--group", "r[4],r[5],r[6],r[7]",
                 "-m", "ring", "--no-baseline", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["models"]
    assert row["groups"] == 2 and row["simulated"] is None
    assert main(["cost", ring8, "-m", "rign"]) == 1
    assert "did you mean 'ring'" in capsys.readouterr().err
    assert main(["cost", ring8, "--group", "0-3", "--group", "2-5"]) == 1
    assert "two concurrent groups" in capsys.readouterr().err
    assert main(["cost", ring8, "--group", "gpu[9]"]) == 2
    assert main(["cost", ring8, "-c", "allgathr"]) == 1
    assert "did you mean 'allgather'" in capsys.readouterr().err


def test_explore_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explore", str(EXAMPLES / "ring8.tdl"), "--model", "custom", "--layers", "1",
                 "--hidden", "512", "--tokens", "1024", "--no-synthesize", "--json",
                 "--algorithm", "ring", "--placements", "axonn"]) == 0
    rows = json.loads(capsys.readouterr().out)["configurations"]
    assert len(rows) == 20
    assert [r["model"] for r in rows] == sorted(r["model"] for r in rows)
    assert main(["explore", str(EXAMPLES / "ring8.tdl"), "--model", "gpt-2"]) == 2


def test_allocate_notation_with_plot(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    png = tmp_path / "split.png"
    assert main(["allocate", "Ring(4)_Switch(4)", "--latency", "0.5us,1us", "--budget",
                 "200GB/s", "--op", "allreduce:64MiB", "--confirm", "2", "--no-synthesize",
                 "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "exact" in out and "grid check" in out and "optimum" in out
    assert png.stat().st_size > 10_000
    assert main(["allocate", "Ring(4)_Switch(4)", "--budget", "200GB/s", "--op",
                 "allreduce:64MiB", "--confirm", "0", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert sum(data["bandwidth"]) == pytest.approx(200e9)
    assert data["time"] <= data["grid"]["value"] * (1 + 1e-9)


def test_allocate_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["allocate", "Ring(4)_Switch(4)", "--budget", "lots", "--op",
                 "allreduce:1MiB"]) == 2
    assert main(["allocate", "Ring(4)_Switch(4)", "--budget", "100GB/s"]) == 2
    assert "no workload" in capsys.readouterr().err
    assert main(["allocate", "nonsense", "--budget", "100GB/s", "--op", "allreduce:1MiB"]) == 2
    assert main(["allocate", "Ring(4)_Switch(4)", "--budget", "100GB/s", "--op",
                 "allreduce:1MiB", "--latency", "1us"]) == 2
