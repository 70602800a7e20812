"""MSCCL verifier: real fixtures pass with a correct summary; small programs per collective
exercise every whole-program analysis (FIFO deadlock, cycles, races with aliasing, symbolic
postconditions) and the α-β timing."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from tacos.model.topology import Link, Npu, Switch, Topology
from tacos.msccl.program import Gpu, Program, Step, Threadblock
from tacos.msccl.verify import verify_program, verify_xml, verify_xml_file

FIXTURES = Path(__file__).parent / "fixtures" / "msccl"
XML_FILES = sorted(FIXTURES.glob("*.xml"))


TOOLS_OUTPUT = "mscclang_"  # msccl-tools output: lacks outofplace/minBytes/maxBytes


@pytest.fixture(scope="module")
def reports() -> dict[str, object]:
    """Each fixture verified once per session (msccl-tools output leniently)."""
    return {p.name: verify_xml_file(p, strict=not p.name.startswith(TOOLS_OUTPUT))
            for p in XML_FILES}


@pytest.mark.parametrize("path", [p for p in XML_FILES if p.name.startswith(TOOLS_OUTPUT)],
                         ids=lambda p: p.name)
def test_tools_output_fails_by_default_like_the_runtime(path: Path) -> None:
    report = verify_xml_file(path)
    assert not report.ok
    (v,) = report.violations
    assert v.rule == "missing-attribute" and v.line == 1
    assert "outofplace" in v.message and "minBytes" in v.message and "maxBytes" in v.message
    assert 'minBytes="0" maxBytes="0"' in v.hint and "--lenient" in v.hint
    lenient = verify_xml_file(path, strict=False)
    assert lenient.ok and [w.rule for w in lenient.warnings] == ["missing-attribute"]


@pytest.mark.parametrize("path", XML_FILES, ids=lambda p: p.name)
def test_fixture_passes_and_summary_matches_file(path: Path, reports: dict) -> None:
    report = reports[path.name]
    assert report.ok, report.text()
    text = path.read_text()
    algo = dict(re.findall(r'(\w+)="([^"]*)"', re.search(r"<algo [^>]*>", text).group(0)))
    gpu_blocks = text.split("<gpu ")[1:]
    tbs = [b.count("<tb ") for b in gpu_blocks]
    s = report.summary
    assert s["coll"] == algo["coll"]
    assert s["ngpus"] == int(algo["ngpus"]) == len(gpu_blocks)
    assert s["nchannels"] == int(algo["nchannels"])
    assert s["tbs_total"] == sum(tbs) == text.count("<tb ")
    assert (s["tbs_min"], s["tbs_max"]) == (min(tbs), max(tbs))
    assert s["steps_total"] == text.count("<step ")
    # every analysis ran and passed, including the symbolic postcondition
    assert set(report.checks) >= {"parse", "structure", "connections", "dependencies",
                                  "happens-before", "races", "fifo", "symbolic"}
    assert all(v == "passed" for v in report.checks.values()), report.checks
    header = report.text().splitlines()[0]
    assert f"coll={algo['coll']}" in header and f"ngpus={algo['ngpus']}" in header
    assert report.text().endswith("OK")


def test_json_report_is_serializable(reports: dict) -> None:
    report = reports["executor_ndv4_ap2ll.xml"]
    data = json.loads(json.dumps(report.as_dict()))
    assert data["ok"] is True and data["violations"] == []
    assert data["summary"]["tbs_per_gpu"] == 16
    assert data["checks"]["symbolic"] == "passed"


def test_step_limit_and_sm_count_are_configurable() -> None:
    path = FIXTURES / "executor_ndv4_ap2ll.xml"
    per_tb = [block.count("<step ") for block in path.read_text().split("<tb ")[1:]]
    assert max(per_tb) > 16
    report = verify_xml_file(path, max_steps=16)
    assert not report.ok
    assert {v.rule for v in report.violations} == {"step-limit"}
    assert len(report.violations) == sum(1 for n in per_tb if n > 16)
    assert all(v.step == 16 for v in report.violations)
    warned = verify_xml_file(FIXTURES / "executor_ndv5_ag-1k-512k.xml", sms=20)
    assert warned.ok
    assert {w.rule for w in warned.warnings} == {"tbs-per-gpu"}


# -- a tiny builder for in-memory programs ----------------------------------------------------


def step(kind: str, src: str = "i0", dst: str = "o0", cnt: int = 1, dep: tuple = (-1, -1),
         hasdep: int = 0) -> tuple:
    return (kind, src[0], int(src[1:]), dst[0], int(dst[1:]), cnt, dep[0], dep[1], hasdep)


def tb(tid: int, send: int, recv: int, *steps: tuple, chan: int = 0) -> Threadblock:
    return Threadblock(tid, send, recv, chan,
                       tuple(Step(i, *s) for i, s in enumerate(steps)))


def program(coll: str, chunks: int, gpus: list[tuple[int, int, int, list]], *,
            inplace: int = 0, outofplace: int = 1) -> Program:
    return Program("t", "Simple", 1, chunks, len(gpus), coll, inplace, outofplace, 0, 0,
                   tuple(Gpu(r, i, o, s, tuple(tbs)) for r, (i, o, s, tbs) in enumerate(gpus)))


def allgather2() -> Program:
    return program("allgather", 2, [
        (1, 2, 0, [tb(0, -1, -1, step("cpy", "i0", "o0")),
                   tb(1, 1, 1, step("s", "i0", "o0"), step("r", "i0", "o1"))]),
        (1, 2, 0, [tb(0, -1, -1, step("cpy", "i0", "o1")),
                   tb(1, 0, 0, step("s", "i0", "o1"), step("r", "i0", "o0"))]),
    ])


def reducescatter2() -> Program:
    return program("reducescatter", 2, [
        (2, 1, 0, [tb(0, 1, 1, step("s", "i1", "o0"), step("rrc", "i0", "o0"))]),
        (2, 1, 0, [tb(0, 0, 0, step("s", "i0", "o0"), step("rrc", "i1", "o0"))]),
    ])


def allreduce2() -> Program:
    return program("allreduce", 2, [
        (2, 0, 0, [tb(0, 1, 1, step("s", "i1", "i1"), step("rrc", "i0", "i0"),
                      step("s", "i0", "i0"), step("r", "i1", "i1"))]),
        (2, 0, 0, [tb(0, 0, 0, step("s", "i0", "i0"), step("rrc", "i1", "i1"),
                      step("s", "i1", "i1"), step("r", "i0", "i0"))]),
    ], inplace=1, outofplace=0)


def alltoall2(inplace: int = 0) -> Program:
    return program("alltoall", 2, [
        (2, 2, 0, [tb(0, -1, -1, step("cpy", "i0", "o0")),
                   tb(1, 1, -1, step("s", "i1", "o0")),
                   tb(2, -1, 1, step("r", "i0", "o1"))]),
        (2, 2, 0, [tb(0, -1, -1, step("cpy", "i1", "o1")),
                   tb(1, 0, -1, step("s", "i0", "o1")),
                   tb(2, -1, 0, step("r", "i1", "o0"))]),
    ], inplace=inplace, outofplace=1 - inplace)


def broadcast3(root: int = 1) -> Program:
    gpus = []
    for r in range(3):
        if r == root:
            peers = [p for p in range(3) if p != r]
            tbs = [tb(0, -1, -1, step("cpy", "i0", "o0"))]
            tbs += [tb(k + 1, p, -1, step("s", "i0", "o0")) for k, p in enumerate(peers)]
        else:
            tbs = [tb(0, -1, root, step("r", "i0", "o0"))]
        gpus.append((1, 1, 0, tbs))
    return program("broadcast", 1, gpus)


def reduce3(dep: bool = True) -> Program:
    return program("reduce", 1, [
        (1, 1, 0, [tb(0, -1, 1, step("rrc", "i0", "o0", hasdep=1)),
                   tb(1, -1, 2, step("rrc", "o0", "o0", dep=(0, 0) if dep else (-1, -1)))]),
        (1, 1, 0, [tb(0, 0, -1, step("s", "i0", "o0"))]),
        (1, 1, 0, [tb(0, 0, -1, step("s", "i0", "o0"))]),
    ])


@pytest.mark.parametrize("build", [allgather2, reducescatter2, allreduce2, alltoall2,
                                   broadcast3, reduce3])
def test_each_collective_verifies(build) -> None:
    report = verify_program(build())
    assert report.ok, report.text()
    assert report.checks["symbolic"].startswith("passed")


def test_broadcast_and_reduce_root_is_inferred() -> None:
    assert verify_program(broadcast3(root=2)).checks["symbolic"] == "passed (root 2)"
    assert verify_program(reduce3()).checks["symbolic"] == "passed (root 0)"


def test_wrong_result_is_a_postcondition_violation() -> None:
    # rank 1 stores the received chunk into the slot of its own data
    p = allgather2()
    g1 = p.gpus[1]
    bad = Threadblock(1, 0, 0, 0, (g1.tbs[1].steps[0],
                                    Step(1, "r", "i", 0, "o", 1, 1)))
    p = Program(**{**p.__dict__, "gpus": (p.gpus[0], Gpu(1, 1, 2, 0, (g1.tbs[0], bad)))})
    report = verify_program(p)
    rules = {v.rule for v in report.violations}
    assert "postcondition" in rules
    assert any(v.rank == 1 and "o[0]" in v.message and "never written" in v.message
               for v in report.violations)


def test_double_counting_is_named() -> None:
    p = reducescatter2()
    g0 = p.gpus[0]
    twice = Threadblock(0, 1, 1, 0, g0.tbs[0].steps + (Step(2, "re", "i", 0, "o", 0, 1),))
    p = Program(**{**p.__dict__, "gpus": (Gpu(0, 2, 1, 0, (twice,)), p.gpus[1])})
    report = verify_program(p)
    (v,) = [v for v in report.violations if v.rule == "double-count"]
    assert (v.rank, v.tb, v.step) == (0, 0, 2) and "(rank 0, chunk 0)" in v.message


def test_missing_dependency_in_reduce_is_a_race() -> None:
    report = verify_program(reduce3(dep=False))
    races = [v for v in report.violations if v.rule == "race"]
    assert races and races[0].rank == 0 and "o[0]" in races[0].message


def test_inplace_aliasing_creates_a_race() -> None:
    assert verify_program(alltoall2(inplace=0)).ok
    report = verify_program(alltoall2(inplace=1))
    races = [v for v in report.violations if v.rule == "race"]
    assert races and "in-place aliasing" in races[0].message
    assert races[0].rank in (0, 1)


def test_capacity_one_fifo_deadlock_that_happens_before_misses() -> None:
    # each rank sends twice before receiving: fine with unbounded buffers, stuck at capacity 1
    p = program("allgather", 4, [
        (2, 4, 0, [tb(0, 1, 1, step("s", "o0", "o0"), step("s", "o1", "o1"),
                      step("r", "o2", "o2"), step("r", "o3", "o3"))]),
        (2, 4, 0, [tb(0, 0, 0, step("s", "o2", "o2"), step("s", "o3", "o3"),
                      step("r", "o0", "o0"), step("r", "o1", "o1"))]),
    ], inplace=1, outofplace=0)
    report = verify_program(p)
    assert report.checks["happens-before"] == "passed"
    assert report.checks["fifo"] == "failed"
    dead = [v for v in report.violations if v.rule == "deadlock"]
    assert {(v.rank, v.tb, v.step) for v in dead} == {(0, 0, 1), (1, 0, 1)}
    assert all("room on connection" in v.message for v in dead)
    assert verify_program(p, capacity=2).ok


def test_happens_before_cycle_is_reported() -> None:
    p = program("allgather", 2, [
        (1, 2, 0, [tb(0, 1, 1, step("r", "o1", "o1"), step("s", "o0", "o0"))]),
        (1, 2, 0, [tb(0, 0, 0, step("r", "o0", "o0"), step("s", "o1", "o1"))]),
    ], inplace=1, outofplace=0)
    report = verify_program(p)
    (cycle,) = [v for v in report.violations if v.rule == "cycle"]
    assert "rank 0 tb 0 step 0" in cycle.message and "rank 1 tb 0 step 1" in cycle.message
    assert {v.rule for v in report.violations} == {"cycle", "deadlock"}


def test_gather_is_accepted_but_not_semantically_checked() -> None:
    p = allgather2()
    report = verify_program(Program(**{**p.__dict__, "coll": "gather"}))
    assert report.ok
    assert report.checks["symbolic"].startswith("not checked")
    assert any(w.rule == "coll" for w in report.warnings)


def test_in_memory_program_must_carry_selection_attributes() -> None:
    p = allgather2()
    report = verify_program(Program(**{**p.__dict__, "minBytes": None}))
    assert [v.rule for v in report.violations] == ["missing-attribute"]


# -- timing -----------------------------------------------------------------------------------

ALPHA, BW = 1e-6, 1e9
RING_XML = FIXTURES / "mscclang_allgather_ring_4gpu_1ch.xml"


def ring(n: int) -> Topology:
    return Topology(tuple(Npu(i, f"n{i}") for i in range(n)), (),
                    tuple(Link(i, (i + 1) % n, ALPHA, BW) for i in range(n)))


def star(n: int) -> Topology:
    links = []
    for i in range(n):
        links += [Link(i, n, ALPHA, BW), Link(n, i, ALPHA, BW)]
    return Topology(tuple(Npu(i, f"n{i}") for i in range(n)), (Switch(n, "sw"),), tuple(links))


def test_ring_allgather_time_on_a_ring() -> None:
    report = verify_xml_file(RING_XML, topology=ring(4))
    chunk = (1 << 20) / 4  # no maxBytes: 1 MiB, 4 chunks per loop
    assert report.time == pytest.approx(3 * (ALPHA + chunk / BW))
    small = verify_xml_file(RING_XML, topology=ring(4), nbytes=4096)
    assert small.time == pytest.approx(3 * (ALPHA + 1024 / BW))
    assert report.timing["routes"]["0->1"] == [0]


def test_time_through_a_switch_pays_both_hops() -> None:
    report = verify_xml_file(RING_XML, topology=star(4), nbytes=4096)
    assert report.time == pytest.approx(3 * (2 * ALPHA + 1024 / BW))
    assert len(report.timing["routes"]["2->3"]) == 2


def test_topology_of_the_wrong_size_is_a_violation() -> None:
    report = verify_xml_file(RING_XML, topology=ring(3), strict=False)
    assert not report.ok and [v.rule for v in report.violations] == ["topology"]
    assert report.time is None


def test_missing_route_is_a_violation() -> None:
    one_way = Topology(tuple(Npu(i, f"n{i}") for i in range(4)), (),
                       tuple(Link(i, i + 1, ALPHA, BW) for i in range(3)))
    report = verify_xml_file(RING_XML, topology=one_way, strict=False)
    (v,) = report.violations
    assert v.rule == "topology" and "NPU 3 to NPU 0" in v.message


def test_text_report_lines() -> None:
    text = RING_XML.read_text().replace('send="0" recv="2"', 'send="3" recv="2"')
    report = verify_xml(text, source="ring.xml")
    lines = report.text().splitlines()
    assert lines[-1].startswith("FAILED")
    line = 1 + text.splitlines().index('    <tb id="0" send="3" recv="2" chan="0">')
    (self_peer,) = [ln for ln in lines if "[self-peer]" in ln]
    assert self_peer.startswith(f"ring.xml:{line}: rank 3 tb 0: [self-peer]")


def test_both_inplace_flags_are_checked_in_both_modes() -> None:
    p = alltoall2()
    both = verify_program(Program(**{**p.__dict__, "inplace": 1, "outofplace": 1}))
    assert "symbolic (in-place)" in both.checks and "symbolic (out-of-place)" in both.checks
    assert both.checks["symbolic (out-of-place)"] == "passed"
    assert any(v.rule == "race" for v in both.violations)


def test_random_attribute_edits_never_crash() -> None:
    rng = random.Random(7)
    texts = [(FIXTURES / n).read_text() for n in (
        "mscclang_allgather_ring_4gpu_1ch.xml", "mscclang_allgather_ring_4gpu_oop.xml",
        "mscclang_allreduce_ring_4gpu.xml")]
    values = ["-1", "0", "1", "3", "99", "x", "", "01", "s", "i", "nop", "re", "rrc", "rcs"]
    rejected = 0
    for _ in range(300):
        text = rng.choice(texts)
        for _ in range(rng.randint(1, 3)):
            m = rng.choice(list(re.finditer(r'="([^"]*)"', text)))
            text = text[:m.start(1)] + rng.choice(values) + text[m.end(1):]
        report = verify_xml(text)
        assert report.ok == (not report.violations)
        assert all(v.severity == "error" for v in report.violations)
        report.text()
        rejected += not report.ok
    assert rejected > 200  # most random edits break a rule


def _both(p: Program) -> Program:
    return Program(**{**p.__dict__, "inplace": 1, "outofplace": 1})


def test_self_copy_under_aliasing_is_not_a_race() -> None:
    # cpy i0 -> o[r] is the same chunk when in-place: no write, so no race with the send of i0
    for build in (allgather2, broadcast3, reducescatter2):
        report = verify_program(_both(build()))
        assert report.ok, report.text()
        assert report.checks["symbolic (in-place)"].startswith("passed")


def test_inplace_only_program_declared_out_of_place_too_fails() -> None:
    report = verify_program(_both(allreduce2()))
    assert report.checks["symbolic (in-place)"] == "passed"
    assert report.checks["symbolic (out-of-place)"] == "failed"
    assert all(v.rule == "postcondition" and "never written" in v.message
               for v in report.violations)
    assert all(v.line is None for v in report.violations)
