"""Bounded work on any input: every size, count, range, nesting depth and fan-out is checked
against a documented limit before the work it stands for, with a located error, and limits can
be raised per run (CLI ``--limit``, API ``tacos.limits.raised``)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import tacos
from tacos import limits
from tacos.cli import main
from tacos.errors import TacosError
from tacos.limits import LimitError


def located(text: str, *, limit: str | None = None, source: str = "t.tdl",
            seconds: float = 3.0) -> TacosError:
    """Parse ``text``; assert it fails fast with a located error (naming ``limit``)."""
    t0 = time.perf_counter()
    with pytest.raises(TacosError) as info:
        tacos.parse(text, source=source)
    assert time.perf_counter() - t0 < seconds
    err = info.value
    assert err.span is not None and err.span.file == source, err.render()
    if limit is not None:
        assert isinstance(err, LimitError), err.render()
        assert f"({limit})" in err.message and f"--limit {limit}=" in err.hint
    return err


def test_empty_loop_over_a_huge_range() -> None:
    err = located("npu a[2]\nfor i in 0..100000000 {}\n", limit="loop_iterations")
    assert err.span.line == 2 and "100,000,001" in err.message


def test_two_variable_loop_is_counted_before_it_runs() -> None:
    err = located("npu a[2]\nfor i in 0..100000, j in 0..100000 {}\n", limit="loop_iterations")
    assert "10,000,200,001" in err.message


def test_loop_iterations_add_up_over_nested_loops() -> None:
    text = "npu a[2]\nfor i in 0..999 {\n  for j in 0..2999 {}\n}\n"
    with limits.raised(loop_iterations=100_000):
        err = located(text, limit="loop_iterations")
    assert err.span.line == 3  # the inner loop pushes the total over the limit
    assert "100,000" in err.message


def test_chunk_count() -> None:
    err = located("npu a[2]\ncollective custom {\n  chunk from a[0] to a[1] count 1000000000\n}\n",
                  limit="chunks")
    assert err.span.line == 3


def test_standard_collective_chunks() -> None:
    err = located("ring r[4] 1GB/s\ncollective alltoall chunks 100000000\n", limit="chunks")
    assert err.span.line == 2


@pytest.mark.parametrize("text, limit", [
    ("torus t[1000,1000,1000] 1GB/s\n", "nodes"),
    ("fullyconnected f[5000] 1GB/s\n", "links"),
    ("npu a[3000], b[3000]\nlink a <-> b 1GB/s\n", "links"),
    ("npu g[2000]\nswitch s[600] attach g 1GB/s\n", "links"),
    ("dims d FC(2000)_Ring(2) 1GB/s\n", "links"),
    ("npu a[2]\nlink a[0] -> a[1] 1GB/s x100000\n", None),
    ("npu a[2000000]\n", "nodes"),
])
def test_generated_elements_are_counted_first(text: str, limit: str | None) -> None:
    err = located(text, limit=limit)
    if limit is None:  # multiplicity
        assert "(multiplicity)" in err.message


def test_huge_index_range_is_checked_before_it_is_listed() -> None:
    err = located("npu a[4]\nlink a[0] -> a[0..100000000] 1GB/s\n")
    assert "out of range 0..3" in err.message


def test_deep_nesting_is_refused_before_parsing() -> None:
    deep = "npu a[2]\n" + "if 1 == 1 {\n" * 2000 + "npu b\n" + "}\n" * 2000
    err = located(deep, limit="nesting")
    assert err.span.line == 102  # the first block beyond 100 levels
    parens = "npu a[" + "(" * 500 + "2" + ")" * 500 + "]\n"
    assert located(parens, limit="nesting").span.line == 1


def test_long_expressions_do_not_exhaust_the_stack() -> None:
    spec = tacos.parse("let x = " + " + ".join(["1"] * 5000) + "\nnpu a[x / 1000]\n")
    assert spec.topology.n_npus == 5
    spec = tacos.parse("let x = " + "- " * 3000 + "2\nnpu a[x]\n")
    assert spec.topology.n_npus == 2


def test_self_inclusion_fan_out(tmp_path: Path) -> None:
    f = tmp_path / "fan.tdl"
    f.write_text('param d = 15\nnpu a\nif d > 0 {\n  use "fan.tdl"(d=d-1) as x[10]\n}\n')
    t0 = time.perf_counter()
    with pytest.raises(LimitError) as info, limits.raised(includes=2000):
        tacos.load(f)
    assert time.perf_counter() - t0 < 5
    assert info.value.span.line == 4 and "(includes)" in info.value.message
    cycle = tmp_path / "cycle.tdl"
    cycle.write_text('npu a\nuse "cycle.tdl" as x[10]\n')
    with pytest.raises(TacosError, match="16 levels deep"):
        tacos.load(cycle)


def test_limits_can_be_raised_for_one_run(capsys: pytest.CaptureFixture[str],
                                          tmp_path: Path) -> None:
    f = tmp_path / "loop.tdl"
    f.write_text("npu a[2]\nfor i in 0..2999 {}\n")
    with limits.raised(loop_iterations=1000):  # a small default, to keep the test quick
        assert main(["info", str(f)]) == 1
        assert "--limit loop_iterations=3000" in capsys.readouterr().err
        assert main(["info", str(f), "--limit", "loop_iterations=3000"]) == 0
        assert "npus: 2" in capsys.readouterr().out
        with limits.raised(loop_iterations=3000):
            assert tacos.load(f).topology.n_npus == 2
        with pytest.raises(LimitError):  # the raise ended with the block
            tacos.load(f)
    assert main(["info", str(f), "--limit", "loop_iteration=5"]) == 2
    assert "did you mean 'loop_iterations'" in capsys.readouterr().err
    assert main(["info", str(f), "--limit", "nodes=0"]) == 2
    assert main(["info", str(f), "--limit", "nodes"]) == 2


def _full_switch(tmp_path: Path, capsys: pytest.CaptureFixture[str], n: int) -> None:
    """info answers quickly; synthesis refuses the n(n-1) unwinding before building it."""
    f = tmp_path / "star.tdl"
    f.write_text(f"star s[{n}] 100GB/s 1us\ncollective allgather group s[0..7]\n")
    t0 = time.perf_counter()
    assert main(["info", str(f)]) == 0
    assert "diameter: 2 hops" in capsys.readouterr().out
    code = main([str(f), "-q"])
    err = capsys.readouterr().err
    assert code == 1 and "(links)" in err and f"{n * (n - 1):,}" in err
    assert time.perf_counter() - t0 < 20


def test_a_full_switch_of_many_npus(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with limits.raised(links=1_000_000):
        _full_switch(tmp_path, capsys, 3000)


@pytest.mark.slow
def test_a_20000_npu_full_switch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _full_switch(tmp_path, capsys, 20000)


def test_api_collectives_and_synthesis_check_limits() -> None:
    with pytest.raises(LimitError, match=r"\(chunks\)"):
        tacos.collective("allgather", range(4), size=1 << 20, chunks_per_npu=100_000_000)
    with pytest.raises(LimitError, match=r"\(deliveries\)"):
        tacos.collective("allgather", range(20000), size=1 << 30, chunks_per_npu=1)
    with limits.raised(deliveries=10**9):
        assert tacos.collective("allgather", range(100), size=102400).n_chunks == 100


def test_reshard_sizes_and_pieces_are_bounded() -> None:
    mesh = "from g[0..3] shape [4] spec S0R to g[4..7] shape [4] spec RS0"
    err = located(f"npu g[8]\nreshard \"x\" tensor [1000000000, 1000000000] dtype f32 {mesh}\n")
    assert "out of range (1 B to 1 PiB)" in err.message and err.span.line == 2
    err = located(f"npu g[8]\nreshard \"x\" tensor [1024, 1024] dtype f32 {mesh} "
                  "pieces 100000000\n")
    assert "(chunks)" in err.message and err.span.line == 2


@pytest.mark.parametrize("command", [
    ["cost", "{f}", "--no-baseline", "-m", "ring"],
    ["explore", "{f}", "--no-synthesize", "--model", "custom", "--layers", "1", "--hidden",
     "64"],
    ["allocate", "{f}", "--budget", "200GB/s", "--op", "allreduce:1MiB", "--confirm", "0"],
])
def test_design_space_commands_take_limits_and_include_dirs(
        command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """tacosc cost/explore/allocate read TDL like every other command: under the documented
    limits, which --limit raises, and with 'use' confined to --include-dir."""
    (tmp_path / "lib").mkdir()
    (tmp_path / "proj").mkdir()
    (tmp_path / "lib" / "two.tdl").write_text("dims npu Ring(2)_Switch(4) 100GB/s 0.5us, "
                                               "100GB/s 1us\n")
    f = tmp_path / "proj" / "main.tdl"
    f.write_text('use "../lib/two.tdl"\n')
    args = [a.replace("{f}", str(f)) for a in command]
    assert main(args) == 1
    assert "outside the folders" in capsys.readouterr().err
    inc = ["--include-dir", str(tmp_path / "lib")]
    assert main([*args, *inc, "--limit", "nodes=4"]) == 1
    err = capsys.readouterr().err
    assert "(nodes)" in err and "--limit nodes=" in err, err
    assert main([*args, *inc, "--limit", "nodes=100"]) == 0, capsys.readouterr().err
    assert main([*args, "--limit", "nodes=zero"]) == 2


def test_cost_estimates_take_finite_sizes() -> None:
    from tacos.cost import estimate

    ring = tacos.parse("ring r[4] 10GB/s 1us\n").topology
    for bad in (float("inf"), float("nan"), 0, -5, 2**60):
        with pytest.raises(TacosError, match="cost estimate: a size"):
            estimate(ring, "allreduce", bad)
    with pytest.raises(TacosError, match="chunks"):
        estimate(ring, "allreduce", 4096, chunks=0)
    assert estimate(ring, "allreduce", 4096).time > 0
