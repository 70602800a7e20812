"""Large-plan paths of the MSCCL backend: self-verification on the lowered program (no re-parse),
streaming output, the runtime parser's limits checked in memory, and the linear race check's
exact fallback for accesses ordered only through other ranks."""

from __future__ import annotations

from pathlib import Path

import pytest

from tacos import builders
from tacos.errors import TacosError
from tacos.model import patterns
from tacos.msccl.lower import MscclOptions
from tacos.msccl.program import MAX_CHILDREN, Gpu, Program, Step, Threadblock
from tacos.msccl.verify import verify_program, verify_xml
from tacos.msccl.xml_reader import parse_xml
from tacos.msccl.xml_writer import emit_xml, iter_xml, lower_verified, schedule_to_xml, write_xml
from tacos.synthesize import synthesize


@pytest.fixture(scope="module")
def torus_allreduce():
    topo = builders.torus(3, 3, bandwidth=50e9, latency=5e-7)
    coll = patterns.build("allreduce", range(9), size="9MiB")
    return synthesize(topo, coll, solver="greedy", seed=0, trials=1, workers=1)


@pytest.mark.parametrize("max_steps", [64, 12])
def test_lowered_greedy_plan_is_what_the_file_says(torus_allreduce, max_steps, tmp_path):
    """The in-memory verification stands for the file: the text parses back to the very
    program that was verified, and verifying the text agrees."""
    opts = MscclOptions(max_steps_per_tb=max_steps)
    program = lower_verified(torus_allreduce, opts)
    text = emit_xml(program)
    assert "".join(iter_xml(program)) == text
    assert parse_xml(text) == program
    assert schedule_to_xml(torus_allreduce, opts) == text
    in_memory = verify_program(program, max_steps=max_steps)
    from_text = verify_xml(text, strict=True, max_steps=max_steps)
    assert in_memory.ok and from_text.ok, from_text.text()
    assert in_memory.summary == from_text.summary
    assert max(len(tb.steps) for g in program.gpus for tb in g.tbs) <= max_steps
    path = tmp_path / "plan.xml"
    write_xml(program, path, header="<!-- x -->\n")
    assert path.read_text() == "<!-- x -->\n" + text
    assert [p.name for p in tmp_path.iterdir()] == ["plan.xml"]  # no temporary left


def test_write_xml_leaves_nothing_on_error(tmp_path: Path) -> None:
    program = Program("bad", "Simple", 1, 1, 1, "allreduce", 0, 1, 0, 0,
                      (Gpu(0, 1, 1, 0, (Threadblock(0, -1, -1, 0, (
                          Step(0, "cpy", "i", 0, "o", True, 1),)),)),))
    with pytest.raises(TacosError, match="non-integer"):
        write_xml(program, tmp_path / "plan.xml")
    assert list(tmp_path.iterdir()) == []


def test_parser_limits_are_checked_on_programs_in_memory() -> None:
    n = MAX_CHILDREN + 1
    steps = tuple(Step(i, "cpy", "i", 0, "o", 0, 1) for i in range(n))
    program = Program("big", "Simple", 1, 1, 1, "allreduce", 0, 1, 0, 0,
                      (Gpu(0, 1, 1, 0, (Threadblock(0, -1, -1, 0, steps),)),))
    report = verify_program(program, max_steps=n)
    rules = {v.rule for v in report.violations}
    assert "children-limit" in rules and "node-limit" not in rules
    text = emit_xml(program)
    assert "children-limit" in {v.rule for v in verify_xml(text, max_steps=n).violations}


def _two_rank_allgather(round_trip: bool) -> Program:
    """Rank 0's tb 1 reads o[0] that its tb 0 wrote, with no dependency between them; they
    are ordered only if rank 1 receives rank 0's message before it answers."""
    def st(s, kind, sb, so, db, do):
        return Step(s, kind, sb, so, db, do, 1)

    rank0 = (Threadblock(0, 1, -1, 0, (st(0, "cpy", "i", 0, "o", 0), st(1, "s", "o", 0, "o", 0))),
             Threadblock(1, -1, 1, 0, (st(0, "r", "i", 0, "o", 1), st(1, "cpy", "o", 0, "s", 0))))
    talk = [st(0, "r", "o", 0, "o", 0), st(1, "s", "i", 0, "o", 1)]
    if not round_trip:
        talk = [st(0, "s", "i", 0, "o", 1), st(1, "r", "o", 0, "o", 0)]
    rank1 = (Threadblock(0, 0, 0, 0, tuple(talk)),
             Threadblock(1, -1, -1, 0, (st(0, "cpy", "i", 0, "o", 1),)))
    return Program("t", "Simple", 1, 2, 2, "allgather", 0, 1, 0, 0,
                   (Gpu(0, 1, 2, 1, rank0), Gpu(1, 1, 2, 0, rank1)))


def test_accesses_ordered_through_another_rank_are_not_races() -> None:
    ok = verify_program(_two_rank_allgather(round_trip=True))
    assert ok.checks["races"] == "passed", ok.text()
    assert ok.ok, ok.text()
    bad = verify_program(_two_rank_allgather(round_trip=False))
    races = [v for v in bad.violations if v.rule == "race"]
    assert len(races) == 1 and races[0].rank == 0
    assert "cpy reads o[0]" in races[0].message and "cpy writes o[0]" in races[0].message


def test_canonical_steps_read_on_the_fast_path_equal_the_general_reader(
        torus_allreduce, monkeypatch) -> None:
    """Steps the lexer reads with one pattern give the same program, lines and problems as the
    general reader; variants it does not recognise (a space before ``/>``, an octal number)
    still go through the general reader and its diagnostics."""
    import re

    from tacos.msccl import xml_lexer as msccl_xml_lex
    from tacos.msccl.xml_reader import parse_xml_collect

    text = emit_xml(lower_verified(torus_allreduce))
    odd = text.replace('hasdep="0"/>', 'hasdep="0" />', 3).replace('cnt="1"', 'cnt="01"', 2)
    fast = [parse_xml_collect(t) for t in (text, odd)]
    monkeypatch.setattr(msccl_xml_lex, "_STEP", re.compile(r"(?!)"))
    slow = [parse_xml_collect(t) for t in (text, odd)]
    for a, b in zip(fast, slow, strict=True):
        assert a.program == b.program
        steps_a = [st.line for g in a.program.gpus for tb in g.tbs for st in tb.steps]
        steps_b = [st.line for g in b.program.gpus for tb in g.tbs for st in tb.steps]
        assert steps_a == steps_b
        assert [(p.rule, p.line, p.col) for p in a.problems] == \
            [(p.rule, p.line, p.col) for p in b.problems]
    assert any(p.rule == "number-format" for p in fast[1].problems)
