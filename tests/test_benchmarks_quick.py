"""Benchmark machinery on tiny problems: rows, ratios, skips, markdown/CSV and the docs block."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the benchmarks folder is run from the checkout, not installed

from benchmarks import __main__ as bench_main  # noqa: E402
from benchmarks import suite  # noqa: E402
from benchmarks.suite import Context, Table, markdown_table, measure, write_csv  # noqa: E402
from tacos.model.patterns import build  # noqa: E402
from tacos.model.topology import Link, Npu, Topology  # noqa: E402
from tacos.solvers.registry import Capabilities, SolverBase  # noqa: E402

ALPHA, BW = 1e-6, 1e9


def ring(n: int) -> Topology:
    links = []
    for i in range(n):
        links += [Link(i, (i + 1) % n, ALPHA, BW), Link((i + 1) % n, i, ALPHA, BW)]
    return Topology(tuple(Npu(i, f"n{i}") for i in range(n)), (), tuple(links), name="ring")


def ctx(tmp_path: Path) -> Context:
    return Context(quick=True, out_dir=tmp_path, ilp_limit=5, trials=2, log=lambda m: None)


def test_measure_rows_carry_consistent_metrics(tmp_path) -> None:
    topo = ring(6)
    coll = build("allreduce", range(6), size=6 * 6000)
    rows = measure(ctx(tmp_path), "ring6", topo, coll,
                   ["ring", "direct", "biring", "nosuch", ("rhd a2a", "rhd", {})],
                   reference="ring")
    by = {r["solver"]: r for r in rows}
    assert list(by) == ["ring", "direct", "biring", "nosuch", "rhd a2a"]
    ring_us = 2 * 5 * (ALPHA + 6000 / BW) * 1e6  # textbook ring all-reduce
    assert by["ring"]["time_us"] == pytest.approx(ring_us)
    assert by["ring"]["vs_ring"] == pytest.approx(1.0)
    assert by["direct"]["vs_direct"] == pytest.approx(1.0)
    assert by["biring"]["vs_ring"] == pytest.approx(ring_us / by["biring"]["time_us"])
    assert by["biring"]["norm"] == pytest.approx(by["biring"]["time_us"] / ring_us)
    for name in ("ring", "direct", "biring"):
        r = by[name]
        assert r["verified"] is True
        assert r["gap"] >= 1.0 - 1e-9  # a lower bound never exceeds a real schedule
        assert r["algbw_GBps"] == pytest.approx(coll.size / (r["time_us"] * 1e-6) / 1e9)
        assert r["npus"] == 6 and r["collective"] == "allreduce"
    assert by["nosuch"]["time_us"] is None and "not available" in by["nosuch"]["note"]
    assert by["nosuch"]["status"] == "skipped"


def test_unsupported_collective_becomes_a_noted_row(tmp_path) -> None:
    coll = build("alltoall", range(4), size=4 * 4000)
    rows = measure(ctx(tmp_path), "a2a", ring(4), coll, ["rhd", "direct"])
    rhd = rows[0]
    assert rhd["status"] == "unsupported" and "does not implement alltoall" in rhd["note"]
    assert rhd["vs_direct"] is None and rows[1]["vs_direct"] == pytest.approx(1.0)


def test_markdown_and_csv_hold_every_row(tmp_path) -> None:
    rows = measure(ctx(tmp_path), "p|q", ring(4), build("allgather", range(4), size=4096),
                   ["ring", "direct"])
    md = markdown_table(rows, bench_main.SHOWN)
    lines = md.strip().splitlines()
    assert len(lines) == 2 + len(rows)
    assert lines[0].count("|") == len(bench_main.SHOWN) + 1
    assert "p\\|q" in lines[2]  # pipes in cells are escaped
    write_csv(tmp_path / "x.csv", rows)
    with (tmp_path / "x.csv").open() as fh:
        back = list(csv.DictReader(fh))
    assert [r["solver"] for r in back] == ["ring", "direct"]
    assert float(back[0]["time_us"]) == pytest.approx(rows[0]["time_us"], rel=1e-5)
    assert list(back[0]) == list(suite.COLUMNS)


def test_docs_block_keeps_narrative_and_cases_not_rerun(tmp_path) -> None:
    page = tmp_path / "benchmarks.md"
    mark = bench_main.CASE_MARK
    page.write_text(f"# Benchmarks\n\nnarrative\n\n{bench_main.BEGIN}\nold header\n"
                    f"{mark.format('a')}\nold a\n{mark.format('b')}\nold b\n"
                    f"{bench_main.END}\ntail text\n")
    bench_main.update_docs(page, {"b": f"{mark.format('b')}\nnew b\n"}, gap=False)
    text = page.read_text()
    assert "narrative" in text and "tail text" in text
    assert "old a" in text and "new b" in text
    assert "old b" not in text and "old header" not in text
    assert text.index("old a") < text.index("new b")
    assert text.count(bench_main.BEGIN) == 1 and text.count(mark.format("b")) == 1


def test_main_runs_a_case_and_writes_outputs(tmp_path, monkeypatch) -> None:
    def tiny(c: Context) -> Table:
        t = Table("z", "tiny", "ring of 4")
        t.rows = measure(c, "ring4", ring(4), build("allgather", range(4), size=4096),
                         ["ring"])
        t.notes.append("note text")
        return t

    module = type(sys)("fake_case")
    module.case_z = tiny
    monkeypatch.setitem(sys.modules, "fake_case", module)
    monkeypatch.setitem(bench_main.CASES, "z", ("fake_case", "case_z"))
    assert bench_main.main(["run", "--only", "z", "--out", str(tmp_path)]) == 0
    results = (tmp_path / "results.md").read_text()
    assert "### (z) tiny" in results and "note text" in results
    assert "| ring4 | 4 | ring |" in results
    assert (tmp_path / "z.csv").read_text().count("\n") == 2


def test_unknown_case_is_a_usage_error(tmp_path) -> None:
    with pytest.raises(SystemExit):
        bench_main.main(["run", "--only", "q", "--out", str(tmp_path)])


class _SlowSolver(SolverBase):
    name = "slow"
    capabilities = Capabilities(combining=True)

    def solve(self, problem):
        import time

        time.sleep(60)


def test_a_synthesizer_past_its_timeout_becomes_a_timeout_row(tmp_path, monkeypatch) -> None:
    from tacos.solvers import registry

    module = type(sys)("fake_slow_solver")
    module.SlowSolver = _SlowSolver
    monkeypatch.setitem(sys.modules, "fake_slow_solver", module)
    monkeypatch.setitem(registry.SOLVERS, "slow", "fake_slow_solver:SlowSolver")
    c = ctx(tmp_path)
    c.timeout = 1.0
    rows = measure(c, "ring4", ring(4), build("allgather", range(4), size=4096), ["slow"])
    assert rows[0]["status"] == "timeout" and rows[0]["time_us"] is None
    assert 1.0 <= rows[0]["synthesis_s"] < 30
