"""The compiled MSCCL checks (tacos.msccl.verify_jit) agree with the Python passes.

The compiled path only vouches for programs whose passes after ``structure`` are clean; whatever
it cannot vouch for goes to the Python passes.  So the reports must be identical whichever path
runs, on the fixtures (all clean: the compiled path must say so) and on mutated programs (the
compiled path must refuse every one the Python passes find something in).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import re
from pathlib import Path

import pytest

from tacos.msccl import verify_columns, verify_jit
from tacos.msccl.program import Program, Step
from tacos.msccl.verify import _modes, verify_program, verify_xml, verify_xml_file
from tacos.msccl.verify_structure import check_structure
from tacos.msccl.xml_reader import load_xml_collect

pytest.importorskip("numba")

FIXTURES = sorted((Path(__file__).parent / "fixtures" / "msccl").glob("*.xml"))
#: the default run sweeps mutations of the msccl-tools all-reduce and all-gather and the
#: smallest NDv5 executor plan; ``-m slow`` sweeps the rest (NDv4 LL, larger NDv5 plans, TE-CCL)
DEFAULT_SWEPT = ("mscclang_allreduce_ring_4gpu.xml", "mscclang_allgather_ring_4gpu_oop.xml",
                 "executor_ndv5_ag-1k-512k.xml")
SWEPT = [p if p.name in DEFAULT_SWEPT else pytest.param(p, marks=pytest.mark.slow)
         for p in FIXTURES]
#: the text mutants of the NDv5 plan take about 1.5 s: the default run edits the two
#: msccl-tools plans' text, ``-m slow`` every fixture's
TEXT_SWEPT = [p if p.name in DEFAULT_SWEPT[:2] else pytest.param(p, marks=pytest.mark.slow)
              for p in FIXTURES]


@pytest.fixture
def compiled(monkeypatch: pytest.MonkeyPatch):
    """Run the compiled checks (and read files by columns) whatever the program's size."""
    monkeypatch.setenv(verify_jit.ENV, "1")
    monkeypatch.setattr(verify_jit, "MIN_STEPS", 0)
    monkeypatch.setattr(verify_columns, "MIN_BYTES", 0)


def _both(monkeypatch: pytest.MonkeyPatch, run):
    monkeypatch.setenv(verify_jit.ENV, "1")
    monkeypatch.setattr(verify_jit, "MIN_STEPS", 0)
    monkeypatch.setattr(verify_columns, "MIN_BYTES", 0)
    fast = run()
    monkeypatch.setenv(verify_jit.ENV, "0")
    slow = run()
    monkeypatch.setenv(verify_jit.ENV, "1")
    return fast, slow


def _clean(program: Program) -> str | None:
    return verify_jit.clean(program, capacity=1, modes=_modes(program))


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_fixture_reports_agree(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fast, slow = _both(monkeypatch, lambda: verify_xml_file(path))
    assert fast.as_dict() == slow.as_dict()
    assert fast.text() == slow.text()


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_compiled_path_vouches_for_every_fixture(path: Path) -> None:
    program = load_xml_collect(path).program
    assert program is not None and check_structure(program)[0] == []
    assert _clean(program) is None


def test_off_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(verify_jit.ENV, "0")
    assert not verify_jit.available()
    monkeypatch.setenv(verify_jit.ENV, "1")
    assert verify_jit.available()


# -- mutations -----------------------------------------------------------------------------------


def _replace_step(p: Program, gi: int, ti: int, si: int, steps: list[Step]) -> Program:
    """Program with step ``si`` of tb ``ti`` of gpu ``gi`` replaced by ``steps`` (renumbered)."""
    g = p.gpus[gi]
    tb = g.tbs[ti]
    new = list(tb.steps[:si]) + steps + list(tb.steps[si + 1:])
    new = [dataclasses.replace(st, s=k) for k, st in enumerate(new)]
    tbs = list(g.tbs)
    tbs[ti] = dataclasses.replace(tb, steps=tuple(new))
    gpus = list(p.gpus)
    gpus[gi] = dataclasses.replace(g, tbs=tuple(tbs))
    return dataclasses.replace(p, gpus=tuple(gpus))


def _mutants(p: Program, per_kind: int = 3):
    """Deterministic mutants: (name, program), a few of each kind spread over the program."""
    places = [(gi, ti, si) for gi, g in enumerate(p.gpus) for ti, tb in enumerate(g.tbs)
              for si in range(len(tb.steps))]

    def step(place):
        gi, ti, si = place
        return p.gpus[gi].tbs[ti].steps[si]

    kinds = {
        "drop-dependency": (lambda st: st.depid >= 0,
                            lambda st: [dataclasses.replace(st, depid=-1, deps=-1)]),
        "earlier-deps": (lambda st: st.depid >= 0 and st.deps > 0,
                         lambda st: [dataclasses.replace(st, deps=st.deps - 1)]),
        "clear-hasdep": (lambda st: st.hasdep == 1,
                         lambda st: [dataclasses.replace(st, hasdep=0)]),
        "set-hasdep": (lambda st: st.hasdep == 0 and st.type != "nop",
                       lambda st: [dataclasses.replace(st, hasdep=1)]),
        "cnt": (lambda st: st.type != "nop" and st.cnt > 1,
                lambda st: [dataclasses.replace(st, cnt=st.cnt - 1)]),
        "srcoff": (lambda st: st.type != "nop" and st.srcoff > 0,
                   lambda st: [dataclasses.replace(st, srcoff=st.srcoff - 1)]),
        "dstoff": (lambda st: st.type != "nop" and st.dstoff > 0,
                   lambda st: [dataclasses.replace(st, dstoff=st.dstoff - 1)]),
        "delete": (lambda st: True, lambda st: []),
        "duplicate": (lambda st: st.type != "nop", lambda st: [st, st]),
        "to-copy": (lambda st: st.type in ("r", "rrc"),
                    lambda st: [dataclasses.replace(st, type="cpy")]),
    }
    for name, (pick, change) in kinds.items():
        hits = [pl for pl in places if pick(step(pl))]
        if not hits:
            continue
        for k in range(per_kind):
            pl = hits[(k * len(hits)) // per_kind + len(hits) // (2 * per_kind)]
            yield f"{name}@{pl}", _replace_step(p, *pl, change(step(pl)))
    # swap two neighbouring steps of a tb (a reordering that keeps every count)
    swaps = [pl for pl in places if pl[2] + 1 < len(p.gpus[pl[0]].tbs[pl[1]].steps)]
    for k in range(per_kind if swaps else 0):
        gi, ti, si = swaps[(k * len(swaps)) // per_kind]
        a, b = p.gpus[gi].tbs[ti].steps[si:si + 2]
        q = _replace_step(p, gi, ti, si + 1, [])
        yield f"swap@{(gi, ti, si)}", _replace_step(q, gi, ti, si, [b, a])


@pytest.mark.parametrize("path", SWEPT, ids=lambda p: p.name)
def test_mutated_programs_agree(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    program = load_xml_collect(path).program
    assert program is not None
    refused = 0
    for name, mutant in _mutants(program):
        fast, slow = _both(monkeypatch, lambda m=mutant: verify_program(m))
        assert fast.as_dict() == slow.as_dict(), name
        if not check_structure(mutant)[0]:
            py_clean = all(v.rule == "missing-attribute" for v in slow.violations) \
                and not slow.warnings
            verdict = _clean(mutant)
            if not py_clean:  # the compiled path must not vouch for a broken program
                assert verdict is not None, name
                refused += 1
    assert refused > 0  # the mutations reach the compiled path and are refused there


def test_mutated_large_plan_is_refused(compiled) -> None:
    """A dropped dependency in a plan with a dependency in every tb: a race both ways."""
    program = load_xml_collect(Path(__file__).parent / "fixtures" / "msccl"
                               / "executor_ndv4_ap4ll.xml").program
    assert program is not None
    gi, ti, si = next((gi, ti, si) for gi, g in enumerate(program.gpus)
                      for ti, tb in enumerate(g.tbs) for si, st in enumerate(tb.steps)
                      if st.depid >= 0 and st.type != "nop")
    st = program.gpus[gi].tbs[ti].steps[si]
    mutant = _replace_step(program, gi, ti, si, [dataclasses.replace(st, depid=-1, deps=-1)])
    assert _clean(mutant) is not None
    report = verify_program(mutant)
    assert not report.ok


# -- the verifier's own tests, with the compiled path forced ------------------------------------


def _load(name: str):
    """A sibling test module, loaded by path (tests/ is not a package)."""
    spec = importlib.util.spec_from_file_location(f"_jit_{name}", Path(__file__).parent /
                                                  f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _zero_arg_tests(module) -> list:
    return [f for name, f in sorted(vars(module).items())
            if name.startswith("test_") and inspect.isfunction(f)
            and not inspect.signature(f).parameters and not hasattr(f, "pytestmark")]


_VERIFIER_TESTS = [f for name in ("test_msccl_mutations", "test_msccl_verify")
                   for f in _zero_arg_tests(_load(name))]
#: about 1 s on the compiled path; the default run keeps it on the Python path
#: (test_msccl_verify.py) and every other verifier test on both paths
_SLOW_ON_COMPILED = ("test_random_attribute_edits_never_crash",)
_VERIFIER_TESTS = [pytest.param(f, marks=pytest.mark.slow) if f.__name__ in _SLOW_ON_COMPILED
                   else f for f in _VERIFIER_TESTS]


@pytest.mark.parametrize("test", _VERIFIER_TESTS, ids=lambda f: f"{f.__module__}.{f.__name__}")
def test_verifier_tests_pass_on_the_compiled_path(test, compiled) -> None:
    test()


def test_fifo_deadlock_agrees(monkeypatch: pytest.MonkeyPatch) -> None:
    """Capacity 0 blocks every send: a deadlock the FIFO kernel must find, not happens-before."""
    program = load_xml_collect(FIXTURES[0]).program
    assert verify_jit.clean(program, capacity=0, modes=_modes(program)) == "fifo"
    assert verify_jit.clean(program, capacity=2, modes=_modes(program)) is None
    for capacity, ok in ((0, False), (2, True)):
        fast, slow = _both(monkeypatch, lambda c=capacity: verify_program(program, capacity=c))
        assert fast.as_dict() == slow.as_dict()
        assert any(v.rule == "deadlock" for v in fast.violations) is not ok


# -- reading by columns (tacos.msccl.verify_columns) --------------------------------------------


def _vouch(text: str):
    return verify_columns.vouch(text, source="x", strict=True, max_steps=64, sms=108,
                                capacity=1, modes=_modes)


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_columns_vouch_for_correct_fixtures(path: Path, monkeypatch: pytest.MonkeyPatch
                                            ) -> None:
    monkeypatch.setattr(verify_columns, "MIN_BYTES", 0)
    monkeypatch.setenv(verify_jit.ENV, "0")
    slow = verify_xml_file(path)
    monkeypatch.setenv(verify_jit.ENV, "1")
    got = _vouch(path.read_text())
    assert (got is not None) == (slow.ok and not slow.warnings)
    if got is not None:
        program = load_xml_collect(path).program
        assert list(got[1]) == [len(tb.steps) for g in program.gpus for tb in g.tbs]


_STEP_LINE = re.compile(r'<step s="(\d+)" type="([a-z]+)" srcbuf="(\w)" srcoff="(-?\d+)" '
                        r'dstbuf="(\w)" dstoff="(-?\d+)" cnt="(\d+)" depid="(-?\d+)" '
                        r'deps="(-?\d+)" hasdep="(\d)"/>')


def _text_mutants(text: str, per_kind: int = 2):
    """Edits of canonical step lines: every field, a few lines each, plus non-canonical
    spellings the columns path must leave to the usual reader."""
    lines = text.split("\n")
    rows = [i for i, ln in enumerate(lines) if _STEP_LINE.search(ln)]
    if not rows:
        return
    edits = {
        "s": lambda g: {1: str(int(g[1]) + 1)},
        "type-nop": lambda g: {2: "nop"},
        "type-bad": lambda g: {2: "rx"},
        "type-r": lambda g: {2: "r" if g[2] != "r" else "s"},
        "srcbuf": lambda g: {3: "s"},
        "srcoff": lambda g: {4: str(int(g[4]) + 1)},
        "srcoff-neg": lambda g: {4: "-2"},
        "dstoff-big": lambda g: {6: "100000"},
        "cnt0": lambda g: {7: "0"},
        "cnt-big": lambda g: {7: "72"},
        "depid": lambda g: {8: "0", 9: "0"},
        "deps-only": lambda g: {9: "3"},
        "hasdep": lambda g: {10: "0" if g[10] == "1" else "1"},
        "hasdep-2": lambda g: {10: "2"},
    }
    for name, edit in edits.items():
        for k in range(per_kind):
            i = rows[(k * len(rows)) // per_kind + len(rows) // (2 * per_kind)]
            m = _STEP_LINE.search(lines[i])
            g = {j: m.group(j) for j in range(1, 11)}
            g.update(edit(g))
            new = (f'<step s="{g[1]}" type="{g[2]}" srcbuf="{g[3]}" srcoff="{g[4]}" '
                   f'dstbuf="{g[5]}" dstoff="{g[6]}" cnt="{g[7]}" depid="{g[8]}" '
                   f'deps="{g[9]}" hasdep="{g[10]}"/>')
            out = list(lines)
            out[i] = lines[i][:m.start()] + new + lines[i][m.end():]
            yield f"{name}@{i + 1}", "\n".join(out)
    i = rows[len(rows) // 2]
    yield "spaces", "\n".join(lines[:i] + [lines[i].replace(" type=", "  type=")]
                               + lines[i + 1:])
    yield "octal", "\n".join(lines[:i] + [re.sub(r'cnt="(\d+)"', r'cnt="0\1"', lines[i])]
                              + lines[i + 1:])
    yield "two-per-line", "\n".join(lines[:i] + [lines[i] + " " + lines[i + 1].strip()]
                                     + lines[i + 2:])
    yield "crlf", text.replace("\n", "\r\n")
    last = max(j for j, ln in enumerate(lines) if "<gpu " in ln)
    end = next(j for j in range(last, len(lines)) if "</gpu>" in lines[j])
    yield "gpu-without-tbs", "\n".join(lines[:last + 1] + lines[end:])
    yield "too-many-steps", "\n".join(lines[:i] + [lines[i]] * 70 + lines[i + 1:])


@pytest.mark.parametrize("path", TEXT_SWEPT, ids=lambda p: p.name)
def test_text_mutants_agree(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Edited files: the same report whether the columns path, the compiled checks or the
    Python passes run; the columns path vouches only for clean ones."""
    for name, text in _text_mutants(path.read_text()):
        fast, slow = _both(monkeypatch, lambda t=text: verify_xml(t))
        assert fast.as_dict() == slow.as_dict(), name
        monkeypatch.setattr(verify_columns, "MIN_BYTES", 0)
        if _vouch(text) is not None:
            assert slow.ok and not slow.warnings, name


@pytest.mark.parametrize("limit", ["MAX_SLOT_BYTES", "MAX_QUEUE_SLOTS"])
def test_programs_beyond_the_kernel_memory_caps_take_the_python_passes(
        limit: str, monkeypatch: pytest.MonkeyPatch) -> None:
    program = load_xml_collect(FIXTURES[0]).program
    monkeypatch.setattr(verify_jit, limit, 0)
    assert _clean(program) == "unsupported"
    fast, slow = _both(monkeypatch, lambda: verify_program(program))
    assert fast.as_dict() == slow.as_dict() and fast.ok
