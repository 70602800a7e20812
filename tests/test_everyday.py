"""Everyday use: explicit API options, sizes with units, plan output and verification in
memory, the command line's collective defaults, --json everywhere, progress, presets."""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path

import pytest

import tacos
from tacos import builders
from tacos.cli import main
from tacos.errors import TacosError, UsageError

EXAMPLES = Path(__file__).parent.parent / "examples"
FIXTURES = Path(__file__).parent / "fixtures" / "msccl"


@pytest.fixture(scope="module")
def ring_schedule() -> tacos.Schedule:
    topo = builders.ring(4, bandwidth=1e9, latency=1e-6)
    return tacos.synthesize(topo, tacos.collective("allreduce", range(4), size="16KiB"),
                            workers=1, trials=2)


def test_misspelled_options_are_refused_with_the_closest_name() -> None:
    topo = builders.ring(4, bandwidth=1e9)
    coll = tacos.collective("allgather", range(4), size=4096)
    with pytest.raises(UsageError, match="did you mean 'trials'"):
        tacos.synthesize(topo, coll, trails=4)
    with pytest.raises(UsageError, match="did you mean 'backend'"):
        tacos.synthesize(topo, coll, solver="ilp", ilp_backend="highs")
    with pytest.raises(UsageError, match="option of solver 'ilp'"):
        tacos.synthesize(topo, coll, backend="highs")  # greedy has no back end
    with pytest.raises(UsageError, match="not one of"):
        tacos.synthesize(topo, coll, solver="ilp", mode="clustered")
    with pytest.raises(UsageError, match="trials must be an integer"):
        tacos.synthesize(topo, coll, trials=0)
    assert "max_merge" in tacos.solver_options("greedy")
    assert "ring_order" in tacos.solver_options("ring")


def test_synthesize_signature_is_explicit() -> None:
    import inspect

    params = inspect.signature(tacos.synthesize).parameters
    for name in ("solver", "seed", "trials", "workers", "time_limit", "progress", "bound"):
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY
    assert "max_merge" in tacos.synthesize.__doc__ and "mode" in tacos.synthesize.__doc__


@pytest.mark.parametrize("call, message", [
    (lambda: tacos.collective("allgathr", range(4), size=64), "did you mean 'allgather'"),
    (lambda: tacos.collective("broadcast", range(4), size=64), "needs a root"),
    (lambda: tacos.collective("allgather", range(4), size=64, root=1), "takes no root"),
    (lambda: tacos.collective("allgather", range(16), size=1000), "992 B or 1008 B"),
    (lambda: tacos.collective("allgather", range(4), size="1.5B"), "whole number of bytes"),
    (lambda: tacos.collective("allgather", range(4), size="12 parsecs"), "unit"),
    (lambda: builders.star(4, bandwidth=1e9, policy="rnig"), "did you mean 'ring'"),
    (lambda: builders.ring(4, bandwidth=-1), "is not a bandwidth"),
    (lambda: builders.ring(4, bandwidth=0), "bandwidth must be a positive"),
    (lambda: builders.ring(4, bandwidth="50 parsecs"), "unknown bandwidth unit"),
])
def test_user_mistakes_raise_tacos_errors(call, message: str) -> None:
    with pytest.raises(TacosError, match=message):
        call()


def test_link_to_a_missing_npu_is_caught_before_solving() -> None:
    b = builders.TopologyBuilder("broken")
    a, c = b.npus(2)
    b.link(a, c, bandwidth=1e9, both=True)
    b.link(a, 7, bandwidth=1e9)
    with pytest.raises(TacosError, match="endpoint 7 is not a node"):
        b.build()
    bad = tacos.Topology((tacos.Npu(0, "a"), tacos.Npu(1, "b")),
                         links=(tacos.Link(0, 5, 0.0, 1e9),))
    with pytest.raises(TacosError, match="endpoint 5"):
        tacos.synthesize(bad, tacos.collective("allgather", [0, 1], size=64))


def test_sizes_with_units_are_exact_everywhere(capsys: pytest.CaptureFixture[str]) -> None:
    coll = tacos.collective("allgather", range(16), size="64MiB")
    assert coll.size == 64 << 20 and {c.size for c in coll.chunks} == {4 << 20}
    ar = tacos.collective("allreduce", range(16), size=1000)  # uneven: never silently 992
    assert sum(c.size for c in ar.chunks) == 1000 and {c.size for c in ar.chunks} == {62, 63}
    assert tacos.parse_size("1.5KiB") == 1536

def test_tdl_size_error_is_located() -> None:
    with pytest.raises(TacosError) as info:
        tacos.parse("ring r[16] 10GB/s\ncollective allgather size 1000B\n", source="s.tdl")
    assert str(info.value).startswith("s.tdl:2:22: error: an allgather of 1000 B over 16 NPUs")
    assert "992 B or 1008 B" in str(info.value)


def test_cli_sizes_use_the_same_parser(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                       ) -> None:
    ring = str(EXAMPLES / "ring8.tdl")
    assert main([ring, "-c", "allgather", "--size", "1001", "-q"]) == 2
    assert "1001 B over 8 NPUs" in capsys.readouterr().err
    out = tmp_path / "p.xml"
    assert main([ring, "-c", "allgather", "--size", "8KiB", "--min-bytes", "1KiB",
                 "--max-bytes", "1MiB", "-q", "--workers", "1", "-o", str(out)]) == 0
    text = out.read_text()
    assert 'minBytes="1024"' in text and 'maxBytes="1048576"' in text


def test_schedule_outputs_and_verify_in_memory(ring_schedule: tacos.Schedule) -> None:
    xml = tacos.emit(ring_schedule, "xml", instances=2, max_bytes="1MiB")
    assert xml.startswith("<algo") and 'nchannels="2"' in xml
    for text in (tacos.emit(ring_schedule, "json"), xml, tacos.emit(ring_schedule, "mscclpp")):
        report = tacos.verify(text)
        assert report.ok, report.text()
    assert tacos.verify(ring_schedule).ok
    with pytest.raises(TacosError, match="did you mean 'instances'"):
        tacos.emit(ring_schedule, "xml", instnces=2)
    with pytest.raises(TacosError, match="cannot tell what kind of plan"):
        tacos.verify("hello\nworld")


def _plan() -> dict:
    return json.loads((FIXTURES / "mscclpp_ring_allgather_4.json").read_text())


@pytest.mark.parametrize("mutate, rule", [
    (lambda ops: ops.pop(1), "syncthreads"),                                    # nop removed
    (lambda ops: ops.pop(3), "pairing"),                                        # wait removed
    (lambda ops: ops[5]["src_buff"][0].__setitem__("index", 2), "uninitialized-read"),
    (lambda ops: ops[0]["dst_buff"][0].__setitem__("index", 9), "bounds"),
    (lambda ops: ops.insert(6, ops.pop(3)), "race"),                            # wait too late
    (lambda ops: ops.__setitem__(0, {"name": "putt"}), "structure"),
    (lambda ops: ops.__setitem__(0, {"name": "ppkt"}), "not-modelled"),
])
def test_mscclpp_verifier_catches_broken_plans(mutate, rule: str) -> None:
    plan = copy.deepcopy(_plan())
    mutate(plan["gpus"][1]["threadblocks"][0]["ops"])
    report = tacos.verify(json.dumps(plan))
    assert not report.ok
    assert rule in {v.rule for v in report.violations}, report.text()


def test_mscclpp_verifier_passes_the_real_plan_and_finds_deadlocks() -> None:
    assert tacos.verify(FIXTURES / "mscclpp_ring_allgather_4.json").ok
    plan = _plan()
    for gpu in plan["gpus"]:  # every rank waits before it signals: nobody moves
        ops = gpu["threadblocks"][0]["ops"]
        ops.insert(0, ops.pop(3))
    report = tacos.verify(json.dumps(plan))
    assert "deadlock" in {v.rule for v in report.violations}


def test_collective_flag_keeps_the_files_size_and_root(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    f = tmp_path / "b.tdl"
    f.write_text("ring r[4] 10GB/s 1us\ncollective broadcast root r[2] size 64KiB chunks 2\n")
    out = tmp_path / "b.json"
    assert main([str(f), "-c", "broadcast", "-q", "--workers", "1", "-o", str(out), "--json",
                 "--solver", "greedy"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["collective"]["label"] == "broadcast(root=2)"
    assert rep["collective"]["size"] == 64 * 1024 and rep["collective"]["chunks"] == 2
    doc = json.loads(out.read_text())
    assert doc["collective"]["root"] == 2


def test_json_for_every_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ring = str(EXAMPLES / "ring8.tdl")
    plan = tmp_path / "p.json"
    assert main([ring, "-c", "alltoall", "--size", "8KiB", "-q", "--workers", "1",
                 "--format", "mscclpp", "-o", str(plan), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["busbw"] == pytest.approx(rep["algbw"] * 7 / 8)  # nccl-tests all-to-all factor
    assert main(["verify", str(plan), "--json"]) == 0  # tacos's own MSCCL++ plan
    assert json.loads(capsys.readouterr().out)["ok"] is True
    for argv in (["presets", "--json"], ["solvers", "--json"], ["info", ring, "--json"]):
        assert main(argv) == 0
        json.loads(capsys.readouterr().out)


def test_mscclpp_into_xml_file_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(EXAMPLES / "ring8.tdl"), "-c", "allgather", "--format", "mscclpp",
                 "-o", "x.xml", "-q"]) == 2
    assert "writes JSON" in capsys.readouterr().err


@pytest.mark.slow
def test_verify_topology_says_size_and_model(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    ring = str(EXAMPLES / "ring8.tdl")
    xml = tmp_path / "p.xml"
    assert main([ring, "-c", "allgather", "--size", "1MiB", "-q", "--workers", "1",
                 "-o", str(xml)]) == 0
    capsys.readouterr()
    assert main(["verify", str(xml), "--topology", ring, "--size", "1MiB"]) == 0
    out = capsys.readouterr().out
    assert "for a 1 MiB (1048576 B) message" in out and "estimate" in out
    # the plan is shaped for a window around its size: far outside it, verify says so
    assert main(["verify", str(xml), "--topology", ring, "--size", "1GiB"]) == 1


@pytest.mark.slow  # an ILP run to its time limit
def test_solver_options_and_channel_instances_from_the_cli(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ring = str(EXAMPLES / "ring8.tdl")
    out = tmp_path / "c.xml"
    assert main([ring, "-c", "allgather", "--size", "8KiB", "--solver", "ilp", "--mode",
                 "cluster", "--time-limit", "5", "-O", "threads=1", "--instances", "2",
                 "-q", "-o", str(out), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["verified"] is True
    assert 'nchannels="2"' in out.read_text() or 'nchannels="4"' in out.read_text()
    assert main([ring, "-c", "allgather", "--solver", "ilp", "-O", "cluster_step=3"]) == 2
    assert "did you mean 'cluster_steps'" in capsys.readouterr().err


def test_presets_show_whole_descriptions_and_parameters(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["presets"]) == 0
    out = capsys.readouterr().out
    assert "(TE-CCL's numbers). With nodes > 1 the NICs meet on one IB switch" in \
        " ".join(out.split())
    assert "parameters: nodes = 1, nic = 25GB/s, nic_alpha = 2us" in " ".join(out.split())


def test_progress_bars_only_on_a_terminal(ring_schedule: tacos.Schedule) -> None:
    from tacos.progress import TerminalReporter

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    quiet = io.StringIO()  # a pipe: no bar, and a quick phase leaves no line
    with TerminalReporter(stream=quiet).phase("x", total=2) as ph:
        ph.update(1, 2)
    assert quiet.getvalue() == ""
    loud = Tty()
    rep = TerminalReporter(stream=loud, quiet_below=0.0)
    topo = builders.ring(4, bandwidth=1e9)
    tacos.synthesize(topo, tacos.collective("allgather", range(4), size=4096), workers=1,
                     progress=rep, solver="greedy")
    text = loud.getvalue()
    assert "synthesizing (greedy): done" in text and "lower bound: done" in text
    seen: list[tuple[int, int]] = []
    tacos.synthesize(topo, tacos.collective("allgather", range(4), size=4096), workers=1,
                     trials=3, max_merge=1, progress=lambda d, t: seen.append((d, t)),
                     solver="greedy")
    assert seen[-1] == (3, 3)


def test_report_states_trials_and_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(EXAMPLES / "mesh4x4.tdl"), "-c", "allgather", "--trials", "4",
                 "--workers", "1", "-q", "--json", "--solver", "greedy"]) == 0
    solver = json.loads(capsys.readouterr().out)["solver"]
    assert solver["trials"] == 4 and solver["trials_run"] in (4, 8)


def test_grammar_cache_survives_an_unwritable_folder(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from tacos.frontends import tdl_parser

    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")  # no folder can be made below it, even by root
    monkeypatch.setenv("TACOS_CACHE_DIR", str(blocker / "sub"))
    assert tdl_parser.grammar_cache_file() is None
    monkeypatch.setenv("TACOS_CACHE_DIR", str(tmp_path / "cache"))
    path = tdl_parser.grammar_cache_file()
    tdl_parser.grammar.cache_clear()
    try:
        assert tacos.parse("ring r[4] 1GB/s\n").topology.n_npus == 4
        assert path is not None and Path(path).stat().st_size > 0
        Path(path).write_bytes(b"garbage")  # a damaged cache is rebuilt, not fatal
        tdl_parser.grammar.cache_clear()
        assert tacos.parse("ring r[4] 1GB/s\n").topology.n_npus == 4
    finally:
        tdl_parser.grammar.cache_clear()


def test_mscclpp_verifier_checks_reductions_of_tacos_plans(ring_schedule: tacos.Schedule
                                                           ) -> None:
    plan = json.loads(tacos.emit(ring_schedule, "mscclpp"))
    assert tacos.verify(json.dumps(plan)).ok
    first_re = next(op for g in plan["gpus"] for tb in g["threadblocks"] for op in tb["ops"]
                    if op["name"] == "re")
    first_re["src_buff"] = first_re["src_buff"][1:]  # drop the local partial sum
    report = tacos.verify(json.dumps(plan))
    assert not report.ok and any("lacks" in v.message for v in report.violations)
