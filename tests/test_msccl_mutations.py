"""Mutated real fixtures are rejected, each with the rule broken and the place (rank/tb/step and
line).  Every mutation is a text edit of a file from tests/fixtures/msccl."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from tacos.msccl.verify import verify_xml
from tacos.msccl.verify_report import MscclReport, Violation
from tacos.msccl.xml_reader import parse_xml

FIXTURES = Path(__file__).parent / "fixtures" / "msccl"
RING = "mscclang_allgather_ring_4gpu_1ch.xml"
OOP = "mscclang_allgather_ring_4gpu_oop.xml"
ALLREDUCE = "mscclang_allreduce_ring_4gpu.xml"
AP2LL = "executor_ndv4_ap2ll.xml"
AG1K = "executor_ndv5_ag-1k-512k.xml"
AG32M = "executor_ndv5_ag-32m-1g.xml"
AR1M = "executor_ndv5_ar-1m.xml"


@cache
def text_of(name: str) -> str:
    return (FIXTURES / name).read_text()


@cache
def places(name: str) -> dict[int, tuple[int, int, int | None]]:
    """Source line -> (rank, tb, step) of the original fixture."""
    out: dict[int, tuple[int, int, int | None]] = {}
    for g in parse_xml(text_of(name)).gpus:
        for tb in g.tbs:
            out[tb.line] = (g.id, tb.id, None)
            for pos, st in enumerate(tb.steps):
                out[st.line] = (g.id, tb.id, pos)
    return out


def line_of(name: str, pattern: str, nth: int = 0) -> int:
    """1-based line number of the nth line of a fixture matching ``pattern``."""
    hits = [i + 1 for i, ln in enumerate(text_of(name).splitlines()) if re.search(pattern, ln)]
    return hits[nth]


def edit(name: str, line: int, old: str, new: str) -> str:
    lines = text_of(name).split("\n")
    assert old in lines[line - 1], (old, lines[line - 1])
    lines[line - 1] = lines[line - 1].replace(old, new, 1)
    return "\n".join(lines)


def delete(name: str, line: int) -> str:
    lines = text_of(name).split("\n")
    del lines[line - 1]
    return "\n".join(lines)


def rejected(text: str, rule: str) -> tuple[MscclReport, list[Violation]]:
    report = verify_xml(text, source="mutant.xml")
    assert not report.ok
    hits = [v for v in report.violations if v.rule == rule]
    assert hits, report.text()
    return report, hits


def at(v: Violation) -> tuple[int | None, int | None, int | None]:
    return (v.rank, v.tb, v.step)


# -- the nine mutations of the issue ----------------------------------------------------------


def test_deleted_dependency_is_a_race() -> None:
    line = line_of(OOP, r'type="s" .*depid="0" deps="0"')
    rank, tb, step = places(OOP)[line]
    _, races = rejected(edit(OOP, line, 'depid="0" deps="0"', 'depid="-1" deps="-1"'), "race")
    (race,) = [v for v in races if v.rank == rank]
    assert at(race) == (rank, tb, step) and race.line == line
    assert "tb 0 step 0 (cpy writes o[0])" in race.message


def test_deleted_dependency_in_production_file_is_a_race() -> None:
    line = line_of(AR1M, r'type="rrc" .*depid="4" deps="0"')
    rank, tb, step = places(AR1M)[line]
    _, races = rejected(edit(AR1M, line, 'depid="4" deps="0"', 'depid="-1" deps="-1"'), "race")
    assert any(v.rank == rank and f"tb {tb} step {step} (rrc" in v.message for v in races)


def test_deleted_dependency_after_nops_breaks_the_nop_chain() -> None:
    line = line_of(AP2LL, r'type="re" .*depid="2" deps="1"')
    _, hits = rejected(edit(AP2LL, line, 'depid="2" deps="1"', 'depid="-1" deps="-1"'),
                       "nop-chain")
    assert at(hits[0]) == places(AP2LL)[line] and hits[0].line == line


def test_changed_cnt_is_a_pairing_error() -> None:
    line = line_of(RING, r'type="r" ', 1)  # rank 1's last receive
    _, hits = rejected(edit(RING, line, 'cnt="1"', 'cnt="2"'), "pairing")
    assert at(hits[0]) == places(RING)[line] == (1, 0, 3)
    assert "cnt=2" in hits[0].message and "rank 0 tb 0 step 2" in hits[0].message


def test_changed_cnt_in_production_file() -> None:
    line = line_of(AG32M, r'type="r" .*dstoff="(\d+)" cnt="1"', 5)
    _, hits = rejected(edit(AG32M, line, 'cnt="1"', 'cnt="2"'), "pairing")
    assert [at(v) for v in hits] == [places(AG32M)[line]]


def test_cleared_hasdep_is_a_dependency_error() -> None:
    line = line_of(AP2LL, r'type="r" .*hasdep="1"')
    rank, tb, step = places(AP2LL)[line]
    waiters = {(g.id, t.id, pos) for g in parse_xml(text_of(AP2LL)).gpus if g.id == rank
               for t in g.tbs for pos, st in enumerate(t.steps)
               if (st.depid, st.deps) == (tb, step)}
    assert waiters
    _, hits = rejected(edit(AP2LL, line, 'hasdep="1"', 'hasdep="0"'), "hasdep-missing")
    assert {at(v) for v in hits} == waiters
    assert all(f"rank {rank} tb {tb} step {step}" in v.message for v in hits)


def test_cleared_hasdep_in_mscclang_file() -> None:
    line = line_of(OOP, r'type="cpy" .*hasdep="1"')
    _, hits = rejected(edit(OOP, line, 'hasdep="1"', 'hasdep="0"'), "hasdep-missing")
    waiter = line_of(OOP, r'depid="0" deps="0"')
    assert [(at(v), v.line) for v in hits] == [(places(OOP)[waiter], waiter)]


def test_deleted_send_is_a_pairing_error() -> None:
    line = line_of(RING, r'type="s" ')  # rank 0 step 0
    report, hits = rejected(delete(RING, line), "pairing")
    assert [at(v) for v in hits] == [(1, 0, 3)]
    assert "connection 0->1 chan 0" in hits[0].message
    numbering = [v for v in report.violations if v.rule == "step-numbering"]
    assert {v.rank for v in numbering} == {0}


def test_deleted_send_in_production_file() -> None:
    line = line_of(AG1K, r'type="s" ')
    rank, tb, _ = places(AG1K)[line]
    tb_line = line - 1
    send = int(re.search(r'send="(\d+)"', text_of(AG1K).splitlines()[tb_line - 1]).group(1))
    _, hits = rejected(delete(AG1K, line), "pairing")
    assert len(hits) == 1 and hits[0].rank == send
    assert f"connection {rank}->{send}" in hits[0].message


def test_self_peer() -> None:
    line = line_of(AG1K, r'<tb id="14" send="1"')
    _, hits = rejected(edit(AG1K, line, 'send="1"', 'send="0"'), "self-peer")
    assert [(at(v), v.line) for v in hits] == [((0, 14, None), line)]


def test_dangling_depid() -> None:
    line = line_of(AR1M, r'depid="4" deps="0"')
    _, hits = rejected(edit(AR1M, line, 'depid="4"', 'depid="99"'), "dangling-dependency")
    assert [(at(v), v.line) for v in hits] == [(places(AR1M)[line], line)]
    assert "depid=99" in hits[0].message


def test_dangling_deps() -> None:
    line = line_of(AR1M, r'depid="4" deps="0"')
    _, hits = rejected(edit(AR1M, line, 'deps="0"', 'deps="7"'), "dangling-dependency")
    assert at(hits[0]) == places(AR1M)[line]


def test_wrong_coll_spelling() -> None:
    line = line_of(AP2LL, r"<algo ")
    report, hits = rejected(edit(AP2LL, line, 'coll="allreduce"', 'coll="all_reduce"'), "coll")
    assert hits[0].line == line and hits[0].hint == 'write coll="allreduce"'
    line = line_of(RING, r"<algo ")
    _, hits = rejected(edit(RING, line, 'coll="allgather"', 'coll="custom"'), "coll")
    assert hits[0].line == line


def test_reduce_scatter_spelling_suggests_reducescatter() -> None:
    line = line_of(AR1M, r"<algo ")
    _, hits = rejected(edit(AR1M, line, 'coll="allreduce"', 'coll="reduce_scatter"'), "coll")
    assert hits[0].hint == 'write coll="reducescatter"'


def test_missing_required_attribute() -> None:
    algo = line_of(AG1K, r"<algo ")
    _, hits = rejected(edit(AG1K, algo, ' proto="LL"', ""), "missing-attribute")
    assert hits[0].line == algo and "'proto'" in hits[0].message
    tb_line = line_of(AG1K, r'<tb id="3" ')
    _, hits = rejected(edit(AG1K, tb_line, ' chan="10"', ""), "missing-attribute")
    assert (at(hits[0]), hits[0].line) == ((0, 3, None), tb_line)
    step_line = line_of(AP2LL, r'<step s="7" ')
    _, hits = rejected(edit(AP2LL, step_line, ' hasdep="0"', ""), "missing-attribute")
    assert (at(hits[0]), hits[0].line) == (places(AP2LL)[step_line], step_line)


def test_missing_outofplace_is_an_error_unless_lenient() -> None:
    line = line_of(AR1M, r"<algo ")
    text = edit(AR1M, line, ' outofplace="0"', "")
    assert verify_xml(text, strict=False).ok  # lenient: older tools omit it, a warning
    strict = verify_xml(text)
    assert [v.rule for v in strict.violations] == ["missing-attribute"]
    assert 'outofplace="0"' in strict.violations[0].hint


def test_xml_prolog() -> None:
    _, hits = rejected('<?xml version="1.0" encoding="UTF-8"?>\n' + text_of(AP2LL), "xml-prolog")
    assert (hits[0].line, hits[0].col) == (1, 1)


# -- more detectors, each on a real file --------------------------------------------------------


def test_nop_without_dependency() -> None:
    line = line_of(AP2LL, r'type="nop" .*depid="6" deps="1"')
    _, hits = rejected(edit(AP2LL, line, 'depid="6" deps="1"', 'depid="-1" deps="-1"'),
                       "nop-dependency")
    assert at(hits[0]) == places(AP2LL)[line]


def test_dependency_on_a_nop() -> None:
    nop = line_of(AP2LL, r'type="nop" ')
    rank, tb, step = places(AP2LL)[nop]
    line = line_of(AP2LL, r'type="s" .*depid="(\d+)" deps="(\d+)"')
    w_rank, w_tb, w_step = places(AP2LL)[line]
    assert w_rank == rank and w_tb != tb
    old = re.search(r'depid="\d+" deps="\d+"', text_of(AP2LL).splitlines()[line - 1]).group(0)
    _, hits = rejected(edit(AP2LL, line, old, f'depid="{tb}" deps="{step}"'),
                       "dependency-on-nop")
    assert at(hits[0]) == (w_rank, w_tb, w_step)


def test_swapped_ring_steps_deadlock() -> None:
    text = text_of(RING)
    for r in range(4):
        s0 = re.search(rf'( *)<step s="0" type="s" srcbuf="o" srcoff="{r}"[^\n]*\n', text)
        s1 = re.search(r' *<step s="1" type="rcs"[^\n]*\n', text[s0.end():])
        a, b = s0.group(0), s1.group(0)
        text = text.replace(a + b, b.replace('s="1"', 's="0"') + a.replace('s="0"', 's="1"'), 1)
    report, cycle = rejected(text, "cycle")
    assert all(f"rank {r} tb 0 step 0 (rcs) sends to" in cycle[0].message for r in range(4))
    dead = [v for v in report.violations if v.rule == "deadlock"]
    assert {(v.rank, v.tb, v.step) for v in dead} == {(r, 0, 0) for r in range(4)}


def test_double_counting_in_allreduce() -> None:
    line = line_of(ALLREDUCE, r'type="rcs" ')
    _, hits = rejected(edit(ALLREDUCE, line, 'type="rcs"', 'type="rrcs"'), "double-count")
    assert all("more than once" in v.message for v in hits)
    assert hits[0].line == line and at(hits[0]) == places(ALLREDUCE)[line]


def test_channel_outside_nchannels() -> None:
    line = line_of(RING, r"<tb ", 2)
    _, hits = rejected(edit(RING, line, 'chan="0"', 'chan="1"'), "channel")
    assert (at(hits[0]), hits[0].line) == ((2, 0, None), line)


def test_tb_numbering_gap() -> None:
    line = line_of(OOP, r'<tb id="4"')
    _, hits = rejected(edit(OOP, line, 'id="4"', 'id="5"'), "tb-ids")
    assert hits[0].rank == 0 and "tb 4 is missing" in hits[0].message


def test_offset_beyond_declared_chunks() -> None:
    line = line_of(AG1K, r'type="r" .*dstoff="2"')
    _, hits = rejected(edit(AG1K, line, 'dstoff="2"', 'dstoff="16"'), "offset")
    assert at(hits[0]) == places(AG1K)[line] and "o_chunks=16" in hits[0].message


def test_two_tbs_owning_one_connection() -> None:
    line = line_of(AG1K, r'<tb id="16" send="2" recv="-1" chan="0"')
    _, hits = rejected(edit(AG1K, line, 'send="2"', 'send="1"'), "connection-owner")
    assert (at(hits[0]), hits[0].line) == ((0, 16, None), line)
    assert "tb 14 and tb 16" in hits[0].message


def test_one_sided_connection() -> None:
    line = line_of(RING, r"<tb ", 1)  # rank 1 receives from 0 on channel 0
    report, hits = rejected(edit(RING, line, 'recv="0"', 'recv="3"'), "connection-symmetry")
    assert {(v.rank, v.tb) for v in hits} >= {(0, 0), (1, 0)}
