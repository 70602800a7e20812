"""Property: any TDL text, MSCCL XML or JSON schedule, extreme numbers included, makes tacosc
exit 0 or fail with a clear, located error, never an internal error, within bounded time and
memory; any value of any numeric option of any solver (``-O NAME=VALUE``) is accepted exactly
when it lies in the option's documented range, and refused at once otherwise.

The default run checks a few dozen derandomized examples per format; ``pytest -m slow`` runs
many more with fresh randomness.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import re
import resource
import tempfile
import time
from functools import cache
from pathlib import Path

import pytest
from cli_output import after_phases
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tacos.backends.json_schedule import to_document

import tacos
from tacos.cli import main

FIXTURES = Path(__file__).parent / "fixtures" / "msccl"
SECONDS = 20.0  # per example; generous, the machine is shared
MEGABYTES = 400  # growth of the peak resident set per example

NUMBERS = st.one_of(
    st.integers(-3, 40).map(str),
    st.sampled_from(["0", "1", "2", "4", "8", "1e400", "1e-300", "1e300", "1e15", "-1",
                     "99999999999", "4294967296", "9007199254740993", "0.5", "1.5e3",
                     "123456789012345678901234567890", "1e-9"]),
)
UNITS = st.sampled_from(["", "GB/s", "Gb/s", "MiB/s", "B/s", "us", "ns", "s", "ms", "B", "KiB",
                         "MiB", "GiB", "TB"])
QUANTITY = st.builds(lambda n, u: n + u, NUMBERS, UNITS)
NAMES = st.sampled_from(["a", "b", "g", "n", "x"])
REF = st.one_of(
    NAMES,
    st.builds(lambda n, i: f"{n}[{i}]", NAMES, NUMBERS),
    st.builds(lambda n, i, j: f"{n}[{i}..{j}]", NAMES, NUMBERS, NUMBERS),
    st.builds(lambda n: f"{n}[*]", NAMES),
    NUMBERS,
)
PROPS = st.lists(st.one_of(QUANTITY, st.builds(lambda m: f"x{m}", NUMBERS)), max_size=3).map(
    " ".join)
GENERATOR = st.one_of(
    st.builds(lambda g, n, a, p: f"{g} {n}[{a}] {p}",
              st.sampled_from(["ring", "biring", "fullyconnected", "hypercube", "star"]),
              NAMES, NUMBERS, PROPS),
    st.builds(lambda g, n, a, b, p: f"{g} {n}[{a},{b}] {p}",
              st.sampled_from(["mesh", "torus", "dragonfly"]), NAMES, NUMBERS, NUMBERS, PROPS),
    st.builds(lambda n, a, b, c, p: f"torus {n}[{a},{b},{c}] {p}", NAMES, NUMBERS, NUMBERS,
              NUMBERS, PROPS),
    st.builds(lambda n, h, leaves, s, p: f"fattree {n}[{h}] leaves={leaves} spines={s} {p}",
              NAMES, NUMBERS, NUMBERS, NUMBERS, PROPS),
    st.builds(lambda n, a, b, p: f"dims {n} Ring({a})_FC({b}) {p}", NAMES, NUMBERS, NUMBERS,
              PROPS),
)
SIMPLE = st.one_of(
    st.builds(lambda n, k: f"npu {n}[{k}]", NAMES, NUMBERS),
    st.builds(lambda s, a, d, p: f"link {s} {a} {d} {p}", REF, st.sampled_from(["->", "<->"]),
              REF, PROPS),
    GENERATOR,
    st.builds(lambda n, r, p: f"switch {n} attach {r} {p}", NAMES, REF, PROPS),
    st.builds(lambda k, n, v: f"{k} {n} = {v}", st.sampled_from(["let", "param"]), NAMES,
              st.one_of(NUMBERS, QUANTITY)),
    st.builds(lambda q: f"default {q}", PROPS),
    st.builds(lambda k, q, c: f"collective {k} size {q} chunks {c}",
              st.sampled_from(["allgather", "allreduce", "alltoall", "reducescatter"]),
              QUANTITY, NUMBERS),
    st.builds(lambda r, q, c: f"collective broadcast root {r} size {q} chunks {c}", REF,
              QUANTITY, NUMBERS),
    st.builds(lambda a, b, q, c: f"collective custom {{ chunk from {a} to {b} size {q} "
              f"count {c} }}", REF, REF, QUANTITY, NUMBERS),
    st.builds(lambda r: f"fail npu {r}", REF),
    st.builds(lambda a, b: f"fail link {a} -> {b}", REF, REF),
    st.sampled_from(["use dgx1", "use ndv2(nodes=2)", "use tpu_v4(x=2, y=2, z=2)",
                     'use "missing.tdl"', "@@", "}", "npu a[(((1)))]"]),
)
STATEMENT = st.one_of(
    SIMPLE,
    st.builds(lambda a, b, s: f"for i in {a}..{b} {{ {s} }}", NUMBERS, NUMBERS, SIMPLE),
    st.builds(lambda a, b, s: f"if {a} < {b} {{ {s} }}", NUMBERS, NUMBERS, SIMPLE),
)
TDL = st.builds(lambda base, stmts: "\n".join(([base] if base else []) + stmts) + "\n",
                st.sampled_from(["", "npu a[4]", "ring r[4] 50GB/s 1us"]),
                st.lists(STATEMENT, min_size=1, max_size=6))


def run_cli(args: list[str]) -> tuple[int, str]:
    """``main(args)`` in-process; the exit code and stderr+stdout, within time and memory."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    elapsed = time.perf_counter() - t0
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert elapsed < SECONDS, (args, elapsed)
    assert grown < MEGABYTES, (args, grown)
    text = after_phases(err.getvalue()) + out.getvalue()
    assert "internal error" not in text and "Traceback" not in text, text
    return code, text


def check_tdl(text: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.tdl"
        path.write_text(text)
        code, out = run_cli(["info", str(path)])
        assert code in (0, 1), out
        if code == 1:  # a located error: file:line:col (maybe of a used file), line, caret
            assert re.match(r"[^\n]+:\d+:\d+: error: .*\n +\d+ \| ", out), out
            return
        spec = tacos.load(path)
        if 2 <= len(spec.topology.live_npus) <= 16:
            code, out = run_cli([str(path), "-c", "allgather", "--trials", "1", "--workers",
                                 "1", "-q", "-o", str(Path(tmp) / "plan.json")])
            assert code in (0, 1) and ("error:" in out or code == 0), out
            if code == 0:
                code, out = run_cli(["verify", str(Path(tmp) / "plan.json")])
                assert code == 0, out


@cache
def xml_fixture() -> str:
    return (FIXTURES / "mscclang_allreduce_ring_4gpu.xml").read_text()


XML_EDIT = st.tuples(
    st.sampled_from(["ngpus", "nchunksperloop", "nchannels", "inplace", "id", "chan", "send",
                     "recv", "s", "srcoff", "dstoff", "cnt", "depid", "deps", "hasdep",
                     "i_chunks", "o_chunks"]),
    st.one_of(NUMBERS, st.sampled_from(["", "x", "0x10", "010", " 1", "1 2"])),
    st.integers(0, 40),
)


def check_xml(edits: list[tuple[str, str, int]], drop: int | None) -> None:
    text = xml_fixture()
    for attr, value, nth in edits:
        hits = [m for m in re.finditer(rf' {attr}="[^"]*"', text)]
        if hits:
            m = hits[nth % len(hits)]
            text = text[:m.start()] + f' {attr}="{value}"' + text[m.end():]
    if drop is not None:
        lines = text.split("\n")
        del lines[drop % len(lines)]
        text = "\n".join(lines)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.xml"
        path.write_text(text)
        code, out = run_cli(["verify", str(path), "--lenient"])
        assert code in (0, 1, 2), out  # 2: not recognisable as a plan (an input error)
        if code == 2:
            assert out.startswith(f"error: {path}: "), out
            return
        if code == 1:  # every problem names its place: a line, or a rank/tb/step
            assert re.search(rf"{re.escape(str(path))}:\d+", out) or "rank" in out, out


@cache
def json_fixture() -> str:
    topo = tacos.parse("ring r[4] 50GB/s 1us").topology
    coll = tacos.collective("allreduce", range(4), size=4096)
    sched = tacos.synthesize(topo, coll, solver="greedy", trials=1, workers=1, bound=False)
    return json.dumps(to_document(sched, bound=False))


JSON_VALUES = st.one_of(
    st.sampled_from(["null", "true", "-1", "0", "1e400", "-1e400", "1e-300", "[]", "{}",
                     '"x"', str(2**64), "1" + "0" * 40, "[" * 200 + "]" * 200, "0.5"]),
    NUMBERS,
)


def _paths(doc, prefix=()):
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield prefix + (k,)
            yield from _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:6]):
            yield prefix + (i,)
            yield from _paths(v, prefix + (i,))


def check_json(edits: list[tuple[int, str, bool]]) -> None:
    doc = json.loads(json_fixture())
    paths = list(_paths(doc))
    literals = {}
    for k, (pick, literal, delete) in enumerate(edits):
        path = paths[pick % len(paths)]
        target = doc
        try:
            for key in path[:-1]:
                target = target[key]
            if delete and isinstance(target, dict):
                target.pop(path[-1], None)
            else:
                target[path[-1]] = f"@@{k}@@"
                literals[f'"@@{k}@@"'] = literal
        except (KeyError, IndexError, TypeError):
            continue
    text = json.dumps(copy.deepcopy(doc))
    for key, literal in literals.items():
        text = text.replace(key, literal)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.json"
        path.write_text(text)
        code, out = run_cli(["verify", str(path)])
        assert code in (0, 1, 2), out  # 2: not recognisable as a plan (an input error)
        if code == 2:
            assert out.startswith(f"error: {path}: "), out
        if code == 1:  # the file (and a JSON path or line:col), or the verifier's violations
            assert out.startswith(f"error: {path}: ") or re.match(
                rf"{re.escape(str(path))}:\d+:\d+: error: ", out) or "violation" in out, out


def numeric_options() -> list[tuple[str, str]]:
    """(solver, option) for every numeric option every registered solver declares, and the
    common numeric options once (with the greedy)."""
    from tacos.solvers.options import COMMON_OPTIONS, describe
    from tacos.solvers.registry import SOLVERS

    out = []
    for solver in SOLVERS:
        for key, opt in describe(solver).items():
            if key in COMMON_OPTIONS and solver != "greedy":
                continue
            if opt.type in (int, float) or getattr(opt.type, "__name__", "").startswith("int"):
                out.append((solver, key))
    return out


OPTION_VALUES = st.one_of(NUMBERS, st.sampled_from(["auto", "exact", "none", "-0", "1.0", "",
                                                    "nan", "inf", "-inf", "0x10", "2**70"]))


def check_option(solver: str, key: str, text: str) -> None:
    """``-O key=text`` for a numeric option of ``solver``: refused fast with the option named,
    or accepted exactly when its number is inside the documented range."""
    from tacos.errors import UsageError
    from tacos.solvers.options import COMMON_OPTIONS, describe, read_cli_value

    opt = describe(solver)[key]
    lo, hi = opt.range  # every numeric option documents one
    try:
        value = read_cli_value(solver, key, text)
    except UsageError as exc:
        assert key in exc.message, exc.message
        if key not in COMMON_OPTIONS:  # the whole command fails as fast, before any work
            with tempfile.TemporaryDirectory() as tmp:
                topo = Path(tmp) / "ring.tdl"
                topo.write_text("ring r[4] 10GB/s 1us\n")
                code, out = run_cli([str(topo), "-c", "allgather", "-q", "--solver", solver,
                                     "-O", f"{key}={text}", "-o", str(Path(tmp) / "p.json")])
                assert code in (1, 2) and key in out and not (Path(tmp) / "p.json").exists()
        return
    if isinstance(value, int | float) and not isinstance(value, bool):
        assert lo <= value <= hi, (solver, key, text, value)
    else:  # a word the option takes ('auto', 'exact', None)
        assert value is None or isinstance(value, str), (solver, key, text, value)


FAST = settings(max_examples=25, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
SLOW = settings(max_examples=600, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

TDL_CASES = given(TDL)
XML_CASES = given(st.lists(XML_EDIT, min_size=1, max_size=4),
                  st.one_of(st.none(), st.integers(0, 200)))
OPTION_CASES = given(OPTION_VALUES)
JSON_CASES = given(st.lists(st.tuples(st.integers(0, 10**6), JSON_VALUES, st.booleans()),
                            min_size=1, max_size=3))


@FAST
@TDL_CASES
def test_any_tdl(text: str) -> None:
    check_tdl(text)


@FAST
@XML_CASES
def test_any_xml(edits: list[tuple[str, str, int]], drop: int | None) -> None:
    check_xml(edits, drop)


@FAST
@JSON_CASES
def test_any_json(edits: list[tuple[int, str, bool]]) -> None:
    check_json(edits)


@pytest.mark.slow
@SLOW
@TDL_CASES
def test_any_tdl_many(text: str) -> None:
    check_tdl(text)


@pytest.mark.slow
@SLOW
@XML_CASES
def test_any_xml_many(edits: list[tuple[str, str, int]], drop: int | None) -> None:
    check_xml(edits, drop)


@pytest.mark.slow
@SLOW
@JSON_CASES
def test_any_json_many(edits: list[tuple[int, str, bool]]) -> None:
    check_json(edits)


def test_every_solver_with_numeric_options_is_covered() -> None:
    covered = {s for s, _ in numeric_options()}
    assert {"forest", "greedy", "ilp", "multicast", "auto"} <= covered


@pytest.mark.parametrize("solver, key", numeric_options())
@settings(FAST, max_examples=12)
@OPTION_CASES
def test_any_solver_option(solver: str, key: str, text: str) -> None:
    check_option(solver, key, text)


@pytest.mark.slow
@pytest.mark.parametrize("solver, key", numeric_options())
@SLOW
@OPTION_CASES
def test_any_solver_option_many(solver: str, key: str, text: str) -> None:
    check_option(solver, key, text)
