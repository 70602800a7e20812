"""Numbers are finite and in range wherever they enter (TDL, CLI, API): no overflow, no NaN,
no internal error, and numeric options that would be silently changed or ignored are refused."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

import tacos
from tacos.builders import TopologyBuilder
from tacos.cli import main
from tacos.errors import TacosError
from tacos.model.topology import Link, Npu, Topology

RING = "ring r[4] 10GB/s 1us\n"


@pytest.mark.parametrize("text, phrase", [
    ("ring r[4] 10GB/s\ncollective allgather size 1e400MiB\n", "not finite"),
    ("npu a[2]\nlink a[0] <-> a[1] 1e400GB/s\n", "not finite"),
    ("npu a[2]\nlink a[0] <-> a[1] 1e300GB/s\n", "not finite"),
    ("npu a[2]\nlink a[0] <-> a[1] 1e290GB/s\n", "out of range (1 B/s to 1 PB/s)"),
    ("npu a[2]\nlink a[0] <-> a[1] 1e-300GB/s\n", "out of range (1 B/s to 1 PB/s)"),
    ("npu a[2]\nlink a[0] <-> a[1] 10GB/s 1e300s\n", "out of range (0 to 1e6 s)"),
    ("ring r[4] 10GB/s\ncollective allgather size 2000TiB\n", "out of range (1 B to 1 PiB)"),
    ("let n = 99999999999999999999\nnpu a[2]\n", "larger than 2^53"),
    ("let n = 4294967296 * 4294967296\nnpu a[2]\n", "larger than 2^53"),
    ("let x = 1e400\nnpu a[2]\n", "not finite"),
    ("npu a[2]\nfor i in 0..1e300 { npu b }\n", "larger than 2^53"),
])
def test_tdl_numbers(text: str, phrase: str) -> None:
    with pytest.raises(TacosError) as info:
        tacos.parse(text, source="n.tdl")
    err = info.value
    assert phrase in err.message and err.span is not None
    assert err.source_line == text.splitlines()[err.span.line - 1]


@pytest.mark.parametrize("args, phrase", [
    (["-c", "allgather", "--size", "1e400"], "not a finite size"),
    (["-c", "allgather", "--size", "1e30"], "out of range"),
    (["-c", "allgather", "--max-merge", "0"], "max_merge=0 is out of range (1 to"),
    (["-c", "allgather", "--solver", "greedy", "--max-merge", "0"],
     "max_merge=0 is out of range (1 to"),
    (["-c", "allgather", "--trials", "0"], "--trials 0 is out of range (1 to"),
    (["-c", "allgather", "--chunks", "0"], "not a count >= 1 or auto"),
    (["-c", "allgather", "--workers", "-2"], "--workers -2 is out of range (1 to"),
    (["-c", "allgather", "--solver", "ilp", "--time-limit", "0"], "--time-limit"),
    (["-c", "allgather", "--solver", "ilp", "--time-limit", "nan"], "finite"),
    (["-c", "allgather", "--solver", "ilp", "--time-limit", "inf"], "finite"),
    (["--size", "1e400"], "not a finite size"),  # applies to the file's collective
    (["--chunks", "100000000"], "(chunks)"),
    (["-c", "allgather", "--chunks", "100000000"], "(chunks)"),
    (["-c", "allgather", "--param", "x=nan"], "--param x"),
])
def test_cli_numbers(args: list[str], phrase: str, tmp_path: Path,
                     capsys: pytest.CaptureFixture[str]) -> None:
    topo = tmp_path / "ring.tdl"
    topo.write_text(RING + "param x = 1\ncollective allgather\n")
    code = main([str(topo), "-q", *args])
    err = capsys.readouterr().err
    assert code in (1, 2), err
    assert phrase in err and "internal error" not in err, err


def test_api_numbers() -> None:
    b = TopologyBuilder()
    a, c = b.npus(2)
    for bad in (math.inf, math.nan, 1e300, 1e-300, 0.0, "1e400GB/s"):
        with pytest.raises(TacosError):
            b.link(a, c, bandwidth=bad)
    for bad in (math.inf, 1e300, "1e400s"):
        with pytest.raises(TacosError):
            b.link(a, c, bandwidth=1e9, latency=bad)
    for bad in (math.inf, 2**60, "2000TiB"):
        with pytest.raises(TacosError):
            tacos.collective("allreduce", range(4), size=bad)
    for bw, phrase in ((math.inf, "not inf"), (1e300, "out of range (1 B/s to 1 PB/s)")):
        topo = Topology(tuple(Npu(i, f"n{i}") for i in range(2)),
                        links=(Link(0, 1, 0.0, bw), Link(1, 0, 0.0, 1e9)))
        with pytest.raises(TacosError, match=re.escape(phrase)):
            tacos.synthesize(topo, tacos.collective("allgather", [0, 1], size=1024))
    ring = tacos.parse(RING).topology
    coll = tacos.collective("allgather", range(4), size=4096)
    for bad in (0, -1, "zero"):
        with pytest.raises(TacosError, match="max_merge"):
            tacos.synthesize(ring, coll, max_merge=bad, trials=1, workers=1)
    for bad in (0, -5.0, math.nan):
        with pytest.raises(TacosError, match="time_limit"):
            tacos.synthesize(ring, coll, solver="ilp", time_limit=bad)


@pytest.mark.parametrize("kind", ["allreduce", "alltoall"])
def test_huge_latencies_verify(kind: str) -> None:
    """One slow dimension (latency 99999999999 us ~ 1e5 s) next to a fast one: the
    synthesizer's schedule verifies (rounding is judged relative to the times involved)."""
    spec = tacos.parse("mesh m[4,4] x 50GB/s 0.5us y 25GB/s 99999999999us\n")
    coll = tacos.collective(kind, spec.topology.live_npus, size=1 << 20)
    schedule = tacos.synthesize(spec.topology, coll, solver="greedy", trials=2, workers=1,
                                bound=False)
    assert schedule.makespan > 1e5
    tacos.verify(schedule).raise_if_failed()
    small = [t for t in schedule.transfers if t.end - t.start < 1e-5 and t.start > 1e5]
    assert small  # short transfers late in a long schedule, verified at full precision


@pytest.mark.parametrize("args, phrase", [
    (["allocate", "Ring(2)_Switch(4)", "--budget", "200GB/s", "--op", "allreduce:1MiB",
      "--prices", "nan,1"], "prices must be finite"),
    (["allocate", "Ring(2)_Switch(4)", "--budget", "200GB/s", "--op", "allreduce:1MiB",
      "--grid-step", "1B/s"], "more than 2,000,000"),
    (["allocate", "Ring(2)_Switch(4)", "--budget", "200GB/s", "--op", "allreduce:1MiB:x0"],
     "count must be"),
    (["allocate", "Ring(2)_Switch(4)", "--budget", "200GB/s", "--op", "allreduce:0"],
     "out of range"),
    (["allocate", "Ring(2)_Switch(4)", "--budget", "200GB/s", "--op", "allreduce:2000TiB"],
     "out of range"),
    (["cost", "{ring}", "-c", "allreduce", "--groups", "inner=0"], "inner must be"),
    (["explore", "{ring}", "--model", "custom", "--layers", "1000000000000", "--hidden", "64"],
     "--layers must be"),
    (["explore", "{ring}", "--bytes-per-element", "nan"], "--bytes-per-element"),
    (["explore", "{ring}", "--tokens", "0"], "--tokens must be"),
    (["{ring}", "-c", "allgather", "--sizes", "1B:1TiB:+1"], "more than 64 sizes"),
])
def test_design_space_numbers(args: list[str], phrase: str, tmp_path: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    """``tacosc allocate/cost/explore`` and size sweeps refuse out-of-range numbers up front
    (a NaN price used to hang the search, a 1 B/s grid or a +1 B sweep to exhaust memory)."""
    topo = tmp_path / "ring.tdl"
    topo.write_text(RING)
    code = main([a.replace("{ring}", str(topo)) for a in args] + ["--confirm", "0"] * (
        args[0] == "allocate"))
    err = capsys.readouterr().err
    assert code in (1, 2), err
    assert phrase in err and "internal error" not in err, err
