"""Every numeric option (solver option, common API keyword, command-line flag) has a documented
range that is checked before any work, whatever the output format; a flag that does not apply
to the chosen output is an error that says so."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import tacos
from tacos.cli import main
from tacos.errors import TacosError, UsageError
from tacos.solvers.options import COMMON_OPTIONS, check_options, describe
from tacos.solvers.registry import SOLVERS, solver_class

RING = "ring r[4] 10GB/s 1us\n"


def numeric_options() -> list[tuple[str, str]]:
    """(solver, option) for every option whose command-line reader gives numbers."""
    out = []
    for solver in SOLVERS:
        for key, opt in describe(solver).items():
            name = getattr(opt.type, "__name__", "")
            if opt.type in (int, float) or name.startswith("int"):
                out.append((solver, key))
    return out


def test_every_numeric_option_declares_a_range() -> None:
    missing = [(s, k) for s, k in numeric_options() if describe(s)[k].range is None]
    assert not missing, f"numeric options without a documented range: {missing}"
    assert ("forest", "trees") in numeric_options() and ("ilp", "threads") in numeric_options()


@pytest.mark.parametrize("solver, key", [p for p in numeric_options()
                                         if p[1] not in COMMON_OPTIONS])
def test_solver_options_out_of_range_are_refused(solver: str, key: str) -> None:
    lo, hi = describe(solver)[key].range  # type: ignore[misc]
    cls = solver_class(solver)
    for bad in (lo - 1, hi + 1, float("nan"), True):
        with pytest.raises(UsageError, match=key):
            check_options(solver, cls, {key: bad})
    check_options(solver, cls, {key: lo})  # both ends are inside
    check_options(solver, cls, {key: hi})


@pytest.mark.parametrize("keyword, value", [("seed", -1), ("trials", 0), ("trials", 10**9),
                                            ("workers", 0), ("workers", 10**6),
                                            ("time_limit", 0.0)])
def test_common_keywords_out_of_range_are_refused(keyword: str, value: float) -> None:
    ring = tacos.builders.ring(4, bandwidth=1e9, latency=1e-6)
    coll = tacos.collective("allgather", range(4), size="4KiB")
    with pytest.raises(UsageError, match=keyword):
        tacos.synthesize(ring, coll, solver="greedy", **{keyword: value})


def test_api_msccl_options_have_ranges() -> None:
    from tacos.msccl.lower import msccl_options

    with pytest.raises(TacosError, match="instances"):
        msccl_options(instances=33)
    with pytest.raises(TacosError, match="max_steps_per_tb"):
        msccl_options(max_steps_per_tb=10**6)
    assert msccl_options(instances=32).instances == 32


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, float]:
    t0 = time.perf_counter()
    code = main(args)
    return code, capsys.readouterr().err, time.perf_counter() - t0


@pytest.mark.parametrize("extra, out, phrase", [
    (["--solver", "forest", "-O", "trees=-1"], "x.xml", "-O trees=-1 is out of range (1 to 64)"),
    (["--solver", "forest", "-O", "trees=1000"], "x.json", "out of range (1 to 64)"),
    (["--solver", "ilp", "-O", "threads=0"], "x.json", "threads=0 is out of range"),
    (["--solver", "multicast", "-O", "trees=0"], "x.json", "trees=0 is out of range"),
    (["--solver", "ilp", "-O", "window_time_limit=nan"], "x.json", "window_time_limit"),
    (["--instances", "1000000"], "x.xml", "--instances 1000000 is out of range (1 to 32)"),
    (["--instances", "1000000"], "x.json", "--instances applies to MSCCL output only"),
    (["--min-bytes", "4096", "--max-bytes", "1024"], "x.xml",
     "--min-bytes 4096 is above --max-bytes 1024"),
    (["--min-bytes", "4096", "--max-bytes", "1024"], "x.json",
     "--min-bytes, --max-bytes apply to MSCCL output only"),
    (["--proto", "LL"], None, "no output file is written"),
    (["--max-steps", "1"], "x.xml", "--max-steps 1 is out of range"),
    (["--max-steps", "100"], "x.json", "--max-steps applies to MSCCL output only"),
    (["--seed", "-1"], "x.json", "--seed -1 is out of range"),
    (["--trials", "1000000000"], "x.json", "--trials 1000000000 is out of range"),
    (["--workers", "0"], "x.json", "--workers 0 is out of range"),
    (["--sizes", "1KiB:4KiB:x2", "--shape", "fixed", "--instances", "2"], "plans",
     "--instances does not apply"),
    (["--sizes", "1KiB:4KiB:x2", "--proto", "LL"], None, "without -o DIR"),
    (["--sizes", "1KiB:4KiB:x2", "-O", "trees=2"], None, "--sizes sweep with --solver auto"),
    (["--objective", "fairness"], "x.json", "--objective applies to the joint plan"),
])
def test_compile_flags_fail_fast_for_every_format(extra: list[str], out: str | None,
                                                  phrase: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    topo = tmp_path / "ring.tdl"
    topo.write_text(RING)
    args = [str(topo), "-c", "allgather", "-q", *extra]
    if out:
        args += ["-o", str(tmp_path / out)]
    code, err, took = run(args, capsys)
    assert code in (1, 2) and phrase in err, err
    assert "internal error" not in err
    assert took < 5  # before any synthesis
    assert not (tmp_path / "x.xml").exists() and not (tmp_path / "x.json").exists()


def test_msccl_flags_still_apply_to_msccl_outputs(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    topo = tmp_path / "ring.tdl"
    topo.write_text(RING)
    code, err, _ = run([str(topo), "-c", "allgather", "-q", "--solver", "greedy",
                        "--instances", "2", "--min-bytes", "1KiB", "--max-bytes", "1MiB",
                        "-o", str(tmp_path / "p.xml")], capsys)
    assert code == 0, err
    text = (tmp_path / "p.xml").read_text()
    assert 'minBytes="1024"' in text and 'maxBytes="1048576"' in text
    assert tacos.verify(tmp_path / "p.xml").ok


@pytest.mark.parametrize("args, phrase", [
    (["verify", "PLAN", "--max-steps", "0"], "--max-steps 0 is out of range"),
    (["cost", "TOPO", "-c", "allreduce", "--size", "1MiB", "--seed", "-3"], "--seed -3"),
    (["explore", "TOPO", "--model", "gpt-5b", "--layers", "4"], "describe a custom model"),
    (["allocate", "Ring(2)_FC(4)", "--budget", "300GB/s", "--op", "allreduce:64MiB",
      "--confirm", "1000000"], "--confirm 1000000 is out of range"),
])
def test_other_commands_check_their_numbers(args: list[str], phrase: str, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    topo = tmp_path / "ring.tdl"
    topo.write_text(RING)
    plan = tmp_path / "p.json"
    plan.write_text("{}")
    args = [str(topo) if a == "TOPO" else str(plan) if a == "PLAN" else a for a in args]
    code, err, took = run(args, capsys)
    assert code in (1, 2) and phrase in err, err
    assert took < 5


def test_solvers_listing_documents_the_ranges(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    assert main(["solvers", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["solvers"]["forest"]["options"]["trees"]["range"] == [1, 64]
    assert "range 1 to 100,000" in doc["common"]["trials"]
