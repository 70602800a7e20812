"""Everyday use, round two: one line after a compile, -o -, flags on the file's collective,
verify's exit codes and units, one versioned JSON schema for every report, nccl-tests-shaped
sweep tables, the design's packages as core dependencies."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import jsonschema
import pytest

from tacos.cli import main
from tacos.report_schema import SCHEMA_ID, envelope, report_schema

ROOT = Path(__file__).parent.parent
RING8 = str(ROOT / "examples" / "ring8.tdl")
FIXTURES = Path(__file__).parent / "fixtures" / "msccl"


def _valid(doc: dict) -> dict:
    jsonschema.validate(doc, report_schema())
    assert doc["schema"] == SCHEMA_ID
    return doc


def test_the_design_packages_are_core_dependencies() -> None:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {re.split(r"[<>=\[ ]", d)[0].lower() for d in deps}
    assert {"pulp", "ortools", "highspy"} <= names


def test_a_compile_prints_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "p.xml"
    assert main([RING8, "-q", "--solver", "greedy", "--trials", "1", "-o", str(out)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1, lines
    line = lines[0]
    assert line.startswith(f"wrote {out}: allgather 16 MiB on 8 NPUs")
    assert "(runtime model)" in line and "NCCL's modelled best (nccl-" in line
    assert line.endswith(", verified") and out.is_file()
    assert main(["verify", str(out)]) == 0


def test_dash_o_writes_the_plan_to_standard_output(capsys: pytest.CaptureFixture[str],
                                                    tmp_path: Path) -> None:
    assert main([RING8, "-q", "--solver", "greedy", "--trials", "1", "--shape", "fixed",
                 "-o", "-"]) == 0
    cap = capsys.readouterr()
    assert cap.out.lstrip().startswith(("<!--", "<algo")) and "</algo>" in cap.out
    assert cap.err.startswith("wrote standard output: allgather")
    plan = tmp_path / "from_stdout.xml"
    plan.write_text(cap.out)
    assert main(["verify", str(plan)]) == 0  # what went to stdout is a valid plan
    capsys.readouterr()
    assert main([RING8, "-q", "--solver", "greedy", "--trials", "1", "--format", "json",
                 "-o", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["collective"]["kind"] == "allgather"
    assert main([RING8, "-q", "-o", "-", "--report"]) == 2  # would mix into the plan
    assert "standard output" in capsys.readouterr().err


def test_size_chunks_root_apply_to_the_collective_the_file_declares(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main([RING8, "-q", "--solver", "greedy", "--trials", "1", "--size", "1MiB",
                 "--chunks", "2", "--json"]) == 0
    doc = _valid(json.loads(capsys.readouterr().out))
    assert doc["kind"] == "compile" and doc["ok"]
    assert doc["collective"]["kind"] == "allgather"  # the file's, not repeated
    assert doc["collective"]["size"] == 1 << 20 and doc["collective"]["chunks_per_npu"] == 2


def test_auto_reports_its_verdict_and_skipped_candidates_in_json(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main([RING8, "-q", "--size", "1MiB", "--trials", "1", "--json",
                 "-O", "candidates=greedy,a2a,nosuch,nccl"]) == 0
    doc = _valid(json.loads(capsys.readouterr().out))
    auto = doc["auto"]
    assert auto["winner"] in auto["times"] and "won" in auto["verdict"]
    assert {"candidate": "nosuch", "reason": "no such solver"} in auto["skipped"]
    assert any(s["candidate"] == "a2a" and "all-to-all" in s["reason"]
               for s in auto["skipped"])
    assert main([RING8, "-q", "--size", "1MiB", "--trials", "1", "--report",
                 "-O", "candidates=greedy,a2a,nosuch,nccl"]) == 0
    assert re.search(r"^skipped +nosuch: no such solver$", capsys.readouterr().out, re.M)


def test_verify_exit_codes_for_ci(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good.xml"
    assert main([RING8, "-q", "--solver", "greedy", "--trials", "1", "--shape", "fixed",
                 "-o", str(good)]) == 0
    assert main(["verify", str(good)]) == 0
    text = good.read_text()
    bad = tmp_path / "bad.xml"  # a receive whose send is gone: the plan breaks a rule
    bad.write_text(re.sub(r'<step s="0" type="s"[^>]*/>', "", text, count=1))
    assert bad.read_text() != text
    assert main(["verify", str(bad)]) == 1
    assert main(["verify", str(tmp_path / "missing.xml")]) == 2
    broken = tmp_path / "broken.xml"
    broken.write_bytes(b"\x00\x01 not a plan of any kind")  # unreadable as any plan format
    assert main(["verify", str(broken)]) == 2
    assert main(["verify", str(good), "--topology", str(tmp_path / "none.tdl")]) == 2
    capsys.readouterr()
    assert main(["verify", str(bad), "--json"]) == 1
    doc = _valid(json.loads(capsys.readouterr().out))
    assert doc["kind"] == "verify" and not doc["ok"] and doc["format"] == "msccl-xml"


def test_verify_prints_user_units_and_times_the_plans_own_window(
        capsys: pytest.CaptureFixture[str]) -> None:
    fixture = FIXTURES / "executor_ndv4_ap2ll.xml"
    assert main(["verify", str(fixture)]) == 0
    out = capsys.readouterr().out
    assert "None" not in out and "18446744073709551615" not in out
    assert "sizes 512 B to 40 KiB" in out


def test_no_limit_window_is_printed_as_such(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    plan = tmp_path / "p.xml"
    assert main([RING8, "-q", "--solver", "greedy", "--trials", "1", "--shape", "fixed",
                 "-o", str(plan)]) == 0
    text = re.sub(r'maxBytes="\d+"', 'maxBytes="9223372036854775807"', plan.read_text())
    plan.write_text(text)
    capsys.readouterr()
    assert main(["verify", str(plan), "--topology", RING8]) == 0
    out = capsys.readouterr().out
    assert "to no limit" in out and "18446744073709551615" not in out and "None" not in out
    assert "16 EiB" not in out and "1 MiB" in out  # timed at a size the window holds


def test_verify_folder_and_schedule_json_share_the_schema(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sched = tmp_path / "s.json"
    assert main([RING8, "-q", "--solver", "greedy", "--trials", "1", "-o", str(sched)]) == 0
    capsys.readouterr()
    assert main(["verify", str(sched), "--json"]) == 0
    doc = _valid(json.loads(capsys.readouterr().out))
    assert doc["format"] == "schedule-json" and doc["ok"]
    folder = tmp_path / "plans"
    folder.mkdir()
    assert main([RING8, "-q", "--solver", "greedy", "--trials", "1", "--shape", "fixed",
                 "-o", str(folder / "a.xml")]) == 0
    capsys.readouterr()
    assert main(["verify", str(folder), "--json"]) == 0
    doc = _valid(json.loads(capsys.readouterr().out))
    assert doc["kind"] == "verify-folder" and doc["files"][0]["format"] == "msccl-xml"
    with pytest.raises(jsonschema.ValidationError):  # the schema does reject a wrong shape
        jsonschema.validate(envelope("verify-folder", {"files": {}}, True), report_schema())


def test_sweep_table_has_nccl_tests_columns(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([RING8, "-q", "-c", "allgather", "--sizes", "1KiB,1MiB", "--solver",
                 "greedy", "--trials", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    head = next(line for line in out if "count" in line)
    for word in ("size", "count", "type", "redop", "root", "time", "algbw", "busbw",
                 "speedup"):
        assert word in head
    assert any("out-of-place" in line and "in-place" in line for line in out)
    rows = [line.split() for line in out if not line.startswith("#")]
    assert [r[:4] for r in rows] == [["1024", "32", "float", "none"],
                                     ["1048576", "32768", "float", "none"]]
    assert main([RING8, "-q", "-c", "allgather", "--sizes", "1KiB", "--solver", "greedy",
                 "--trials", "1", "--json"]) == 0
    doc = _valid(json.loads(capsys.readouterr().out))
    assert doc["rows"][0]["size"] == 1024 and doc["rows"][0]["count"] == 32


def test_preset_loader_and_npu_names() -> None:
    import tacos
    from tacos.errors import UsageError

    topo = tacos.preset("dgx_a100", nodes=2).topology
    assert topo.n_npus == 16
    npu = topo.npu("node[1].gpu[3]")
    assert topo.npus[npu].name == "node[1].gpu[3]"
    with pytest.raises(UsageError, match="node\\[1\\].gpu\\[7\\]"):
        topo.npu("node[1].gpu[9]")
    with pytest.raises(UsageError, match="did you mean 'dgx_a100'"):
        tacos.preset("dgx_a10")
    with pytest.raises(UsageError):
        tacos.preset("dgx_a100", nodez=2)


def test_out_of_range_npu_ids_are_input_errors() -> None:
    import tacos
    from tacos import builders
    from tacos.errors import UsageError

    topo = builders.ring(4, bandwidth=1e9)
    coll = tacos.collective("allgather", [0, 1, 2, 7], size=4096)
    for solver in ("greedy", "auto"):
        with pytest.raises(UsageError, match="NPU id 7 .* 4 NPUs"):
            tacos.synthesize(topo, coll, solver=solver)


def test_auto_skips_synthesizers_nccl_beats_by_their_bound() -> None:
    """composition.tdl: NCCL's ring, in the runtime model, is under the physical bound that
    every synthesized plan's runtime time obeys, so no synthesizer runs; each one, named,
    is indeed slower."""
    import tacos
    from tacos.check.bounds import lower_bound
    from tacos.solvers.auto import run_portfolio
    from tacos.solvers.auto_prune import unbeatable_reference

    spec = tacos.load(str(ROOT / "examples" / "composition.tdl"))
    topo, coll = spec.topology, spec.collective
    ref = unbeatable_reference(topo, coll)
    assert ref is not None and ref.time <= ref.bound
    assert ref.bound == lower_bound(topo, coll).bandwidth
    winner, plan, facts = run_portfolio(topo, coll, trials=1)
    assert winner.startswith("nccl-") and tacos.verify(plan).ok
    assert {"greedy", "forest"} <= set(facts["skipped"])
    assert "cannot win" in facts["skipped"]["greedy"]
    assert facts["times"][winner] <= ref.time
    # the bound holds: the greedy, run anyway, is no faster than it in the runtime model
    _, _, named = run_portfolio(topo, coll, candidates=("greedy",), trials=1)
    assert named["times"]["greedy"] >= ref.bound


def test_info_imports_only_what_it_needs() -> None:
    import subprocess
    import sys

    code = ("import sys\nfrom tacos.cli import main\n"
            f"assert main(['info', {str(ROOT / 'examples' / 'reshard_p3.tdl')!r}]) == 0\n"
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('networkx', 'numba',"
            " 'ortools', 'pulp', 'highspy') or m in ('tacos.reshard.plan', 'tacos.check.bounds'))"
            "\nprint('HEAVY', heavy)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert "npus:" in out and out.strip().endswith("HEAVY []"), out


def test_nccl_ring_search_runs_once_per_system() -> None:
    import tacos
    from tacos.solvers.nccl import rings
    from tacos.solvers.nccl.system import system

    topo = tacos.preset("dgx1").topology
    sys_ = system(topo, topo.live_npus)
    members = sys_.nodes[0]
    first = rings.intra_rings(sys_, members)
    assert first == rings._intra_rings(system(topo, topo.live_npus), members)  # same rings
    first[0].reverse()  # callers get copies: the cache is not changed through them
    again = rings.intra_rings(sys_, members)
    assert again == rings._intra_rings(sys_, members) and again[0] != first[0]
    assert len(sys_.__dict__["_intra_rings"]) == 1


def test_the_jobs_command_prints_its_comparison(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    tdl = tmp_path / "jobs.tdl"
    tdl.write_text('fattree h[8] leaves=2 spines=2 down 50GB/s 1us up 25GB/s 1us\n'
                   'job "big" group h[0], h[4] priority 1 { collective allreduce size 8MiB }\n'
                   'job "small" group h[1], h[5] { collective allgather size 2MiB }\n')
    out = tmp_path / "plan.json"
    assert main([str(tdl), "-q", "--objective", "priority", "-o", str(out)]) == 0  # no --report
    text = capsys.readouterr().out
    assert f"wrote {tmp_path / 'plan.big.json'}" in text
    assert "objective: priority" in text and "ecmp" in text  # the comparison with ECMP
    assert main(["verify", str(tmp_path / "plan.big.json"), "--topology", str(tdl)]) == 0


def test_allocate_names_its_objective_and_where_synthesis_disagrees() -> None:
    from tacos.cost.cli import disagreement, fastest_synthesized

    rows = [{"name": "optimum", "synthesized": 388.8e-6}, {"name": "grid best",
            "synthesized": 331.3e-6}, {"name": "EqualBW", "synthesized": 298.6e-6},
            {"name": "MessageBW", "synthesized": None}]
    assert fastest_synthesized(rows) == "EqualBW"
    line = disagreement(rows, "hierarchical", "greedy")
    assert "of the hierarchical model's time" in line and "DISAGREE: 'EqualBW'" in line
    assert "298.6 us against 388.8 us" in line.replace("µ", "u")
    rows[0]["synthesized"] = 1e-6
    assert "agree" in disagreement(rows, "hierarchical", "greedy")
    assert "no synthesis" in disagreement([], "hierarchical", "greedy")


def test_cost_handles_hierarchical_systems_declared_by_presets(
        capsys: pytest.CaptureFixture[str]) -> None:
    import tacos
    from tacos.cost.node_dims import with_node_dims

    topo = tacos.preset("dgx_a100", nodes=2).topology
    dimmed = with_node_dims(topo)
    assert {lk.dim for lk in dimmed.links} == {0, 1}
    assert with_node_dims(dimmed) is dimmed  # declared dimensions are kept
    assert main(["cost", str(ROOT / "examples" / "dgx_a100_2node.tdl"), "-c", "allreduce",
                 "--size", "64MiB"]) == 0
    out = capsys.readouterr().out
    assert "needs every link to carry a dimension" not in out
    row = next(line for line in out.splitlines() if line.startswith("hierarchical "))
    # the model's prediction, then its baseline simulated and the error between them
    assert re.search(r"\s[\d.]+ [mu]s\s+hierarchical\s+[\d.]+ [mu]s\s+[+-]\d", row), row


def test_progress_in_a_pipe_is_one_line_per_phase() -> None:
    import io

    from tacos.progress import TerminalReporter

    stream = io.StringIO()  # not a terminal; every phase counts as long
    rep = TerminalReporter(stream=stream, quiet_below=0.0)
    with rep.phase("synthesizing"):
        with rep.phase("a part of it"):
            pass
    with rep.phase("verifying"):
        pass
    assert stream.getvalue() == "tacosc: synthesizing ...\ntacosc: verifying ...\n"
    quiet = io.StringIO()
    with TerminalReporter(enabled=False, stream=quiet, quiet_below=0.0).phase("x"):
        pass
    assert quiet.getvalue() == ""
    slow = io.StringIO()  # the line comes while a long phase still runs
    with TerminalReporter(stream=slow, quiet_below=0.05).phase("a long one"):
        import time

        deadline = time.monotonic() + 5
        while not slow.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert slow.getvalue() == "tacosc: a long one ...\n"
    with TerminalReporter(stream=slow, quiet_below=30).phase("a quick one"):
        pass
    assert "quick" not in slow.getvalue()


def test_pictures_can_be_read_back(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    import matplotlib
    from tacos.backends.plot import chunk_sources, plot_schedule
    from tacos.backends.plot_sweep import plot_sweep

    import tacos
    from tacos.sweep import sweep

    spec = tacos.load(RING8)
    coll = tacos.collective("allgather", spec.topology.live_npus, size="64KiB",
                            chunks_per_npu=4)
    sched = tacos.synthesize(spec.topology, coll, solver="greedy", trials=1)
    assert tacos.verify(sched).ok
    sources = chunk_sources(sched)
    assert len(sources) == 32 and len(set(sources.values())) == 8  # 32 chunks, 8 colours
    with matplotlib.rc_context({"svg.fonttype": "none"}):  # text stays text in the SVG
        svg = plot_schedule(sched, tmp_path / "s.svg").path.read_text()
        res = sweep(spec.topology, "allgather", "1KiB,1MiB", candidates=("greedy", "nccl"),
                    trials=1, workers=1)
        assert all(tacos.verify(r.schedule).ok for r in res.rows)
        sweep_svg = plot_sweep(res, tmp_path / "w.svg").read_text()
    algorithm = str(sched.meta.get("algorithm") or sched.meta.get("solver"))
    assert f"by {algorithm}" in svg
    for npu in spec.topology.npus:
        assert f"from {npu.name}" in svg
    assert "speedup vs best NCCL model" in sweep_svg and "tacos (auto)" in sweep_svg
    for model in res.models:
        assert model in sweep_svg
