"""MSCCL XML read-back: the runtime's lexical rules, required attributes and source positions."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tacos.errors import InputFileError, TacosError
from tacos.msccl.program import STEP_ATTRS, Program
from tacos.msccl.xml_reader import MscclXmlError, load_xml, parse_xml, parse_xml_collect

FIXTURES = Path(__file__).parent / "fixtures" / "msccl"
XML_FILES = sorted(FIXTURES.glob("*.xml"))
RING = (FIXTURES / "mscclang_allgather_ring_4gpu_1ch.xml").read_text()
AR1M = (FIXTURES / "executor_ndv5_ar-1m.xml").read_text()


def _attrs(tag_text: str) -> dict[str, str]:
    return dict(re.findall(r'(\w+)="([^"]*)"', tag_text))


@pytest.mark.parametrize("path", XML_FILES, ids=lambda p: p.name)
def test_fixture_tree_matches_the_text(path: Path) -> None:
    text = path.read_text()
    program = load_xml(path)
    algo = _attrs(re.search(r"<algo [^>]*>", text).group(0))
    assert program.coll == algo["coll"]
    assert program.ngpus == int(algo["ngpus"])
    assert program.nchannels == int(algo["nchannels"])
    assert program.nchunksperloop == int(algo["nchunksperloop"])
    assert program.proto == algo["proto"]
    assert program.minBytes == (int(algo["minBytes"]) if "minBytes" in algo else None)
    gpu_blocks = text.split("<gpu ")[1:]
    assert [g.id for g in program.gpus] == [int(_attrs(b.split(">")[0])["id"])
                                            for b in gpu_blocks]
    assert [len(g.tbs) for g in program.gpus] == [b.count("<tb ") for b in gpu_blocks]
    assert program.num_steps == text.count("<step ")
    # every step's attributes are read verbatim and its line number points at it
    lines = text.splitlines()
    for g in program.gpus[:2]:
        for tb in g.tbs[:3]:
            assert lines[tb.line - 1].lstrip().startswith(f'<tb id="{tb.id}"')
            for st in tb.steps:
                raw = _attrs(lines[st.line - 1])
                assert [str(getattr(st, k)) for k in STEP_ATTRS] == [raw[k] for k in STEP_ATTRS]


def test_both_self_closing_spellings_give_the_same_program() -> None:
    spaced = RING
    tight = RING.replace('" />', '"/>')
    assert spaced != tight
    assert parse_xml(spaced) == parse_xml(tight)


def test_unknown_elements_are_warnings_and_ignored() -> None:
    outcome = parse_xml_collect((FIXTURES / "teccl_amd_32.xml").read_text())
    assert not outcome.errors
    (warning,) = [p for p in outcome.problems if p.rule == "unknown-element"]
    assert "<copy>" in warning.message and "64 times" in warning.message
    assert warning.line == 3


def test_missing_selection_attributes_warn_by_default_and_fail_when_strict() -> None:
    program = parse_xml(RING)
    assert (program.outofplace, program.minBytes, program.maxBytes) == (None, None, None)
    lenient = parse_xml_collect(RING)
    assert [p.severity for p in lenient.problems if p.rule == "missing-attribute"] == ["warning"]
    with pytest.raises(MscclXmlError, match="outofplace"):
        parse_xml(RING, strict=True)


def _error(text: str) -> MscclXmlError:
    with pytest.raises(MscclXmlError) as info:
        parse_xml(text, source="plan.xml")
    return info.value


def test_prolog_is_rejected_with_position_and_hint() -> None:
    err = _error('<?xml version="1.0"?>\n' + AR1M)
    assert err.span.line == 1 and err.span.col == 1
    assert "prolog" in err.message
    rendered = err.render()
    assert rendered.startswith("plan.xml:1:1: error:")
    assert "<?xml" in rendered and "hint:" in rendered


def test_entity_declarations_are_refused_without_expansion() -> None:
    bomb = ('<!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;">'
            '<!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;">]>\n')
    start = time.perf_counter()
    err = _error(bomb + AR1M.replace('name="all_reduce_llm"', 'name="&lol3;"'))
    assert time.perf_counter() - start < 1.0
    assert "DOCTYPE" in err.message and err.span.line == 1


@pytest.mark.parametrize(
    ("old", "new", "rule", "fragment"),
    [
        ('nchannels="32"', "nchannels='32'", "xml-quote", "double quotes"),
        ('nchannels="32"', "nchannels=32", "xml-quote", "double quotes"),
        ('nchannels="32" ', 'nchannels="32"\n   ', "xml-multiline-tag", "one line"),
        ('nchannels="32" ', 'nchannels="32"\t', "xml-tab", "tab"),
        ('nchannels="32"', 'nchannels = "32"', "xml-syntax", "space around"),
    ],
)
def test_lexical_rules_of_the_runtime(old: str, new: str, rule: str, fragment: str) -> None:
    outcome = parse_xml_collect(AR1M.replace(old, new, 1))
    hits = [p for p in outcome.errors if p.rule == rule]
    assert hits and fragment in hits[0].message
    assert hits[0].line == 1
    # the tree is still read (a lexical slip does not hide later problems)
    assert outcome.program is not None and outcome.program.nchannels == 32


def test_tab_indentation_between_elements_is_an_error() -> None:
    text = AR1M.replace("\n    <tb id=\"1\"", "\n\t<tb id=\"1\"", 1)
    err = _error(text)
    assert err.span.line == 6 and "tab" in err.message


@pytest.mark.parametrize(("raw", "read_as"), [("010", 8), ("0x10", 16), ("+5", 5)])
def test_numbers_must_be_plain_decimal(raw: str, read_as: int) -> None:
    outcome = parse_xml_collect(RING.replace('s_chunks="0"', f's_chunks="{raw}"', 1))
    (p,) = [p for p in outcome.errors if p.rule == "number-format"]
    assert f"reads it as {read_as}" in p.message and p.rank == 0 and p.line == 2
    assert outcome.program.gpus[0].s_chunks == read_as  # value the runtime would use


def test_missing_step_attribute_names_rank_tb_step_and_line() -> None:
    text = RING.replace(' cnt="1" depid="-1" deps="-1" hasdep="0" />\n    </tb>\n  </gpu>\n'
                        '  <gpu id="1"', ' depid="-1" deps="-1" hasdep="0" />\n    </tb>\n'
                        '  </gpu>\n  <gpu id="1"', 1)
    err = _error(text)
    assert "'cnt'" in err.message and "rank 0 tb 0 step 3" in err.message
    assert err.span.line == 7


def test_too_many_attributes_are_reported() -> None:
    extra = " ".join(f'x{i}="1"' for i in range(7))
    outcome = parse_xml_collect(RING.replace('hasdep="0" />', f'hasdep="0" {extra}/>', 1))
    assert any(p.rule == "too-many-attributes" and p.line == 4 for p in outcome.errors)


def test_unclosed_element_and_text_content() -> None:
    assert any(p.rule == "xml-syntax" for p in parse_xml_collect(RING[:-8]).errors)
    with_text = RING.replace("</tb>", "oops</tb>", 1)
    assert [p.rule for p in parse_xml_collect(with_text).errors] == ["xml-text"]


def test_first_element_must_be_algo() -> None:
    outcome = parse_xml_collect('<info a="1"/>\n' + AR1M)
    assert [p.rule for p in outcome.errors] == ["algo-first"]


def test_load_errors_are_input_file_errors(tmp_path: Path) -> None:
    with pytest.raises(InputFileError):
        load_xml(tmp_path / "missing.xml")
    binary = tmp_path / "bin.xml"
    binary.write_bytes(b"\xff\xfe<algo")
    with pytest.raises(InputFileError, match="UTF-8"):
        load_xml(binary)
    assert issubclass(MscclXmlError, TacosError)


def test_program_is_frozen_and_positions_do_not_affect_equality() -> None:
    a = parse_xml(RING)
    b = parse_xml("\n\n" + RING)
    assert a == b and a.line != b.line
    assert isinstance(a, Program)
    with pytest.raises(AttributeError):
        a.coll = "x"  # type: ignore[misc]
