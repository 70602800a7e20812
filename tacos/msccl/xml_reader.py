"""MSCCL XML read-back: text -> :class:`tacos.msccl.program.Program`.

The MSCCL runtime (msccl-executor-nccl) reads algorithm files with a small hand-written parser
that is much stricter than XML (``docs/msccl-xml.md`` §1.2): no ``<?xml?>`` prolog, attributes
double-quoted and separated by spaces on one line, no tabs between elements, no text, numbers
read with ``strtol(…, 0)`` (a leading 0 means octal), every required attribute present.  This
module re-implements those lexical rules on the raw text (a general XML parser would accept
files the runtime rejects; see :mod:`.msccl_xml_lex`) and builds the program model with line
numbers.

It never expands entities: DOCTYPE/ENTITY/CDATA sections are rejected outright, and attribute
values are taken verbatim (like the runtime, which does not decode ``&amp;``).

Two entry points: :func:`parse_xml` / :func:`load_xml` raise :class:`MscclXmlError` on the
first error; :func:`parse_xml_collect` / :func:`load_xml_collect` return every problem found (the
verifier turns them into violations).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tacos.errors import Span, TacosError
from tacos.inputs import decode_text, read_capped
from tacos.msccl.program import (
    ALGO_ATTRS,
    ALGO_OPTIONAL,
    GPU_ATTRS,
    STEP_ATTRS,
    TB_ATTRS,
    Gpu,
    Program,
    Step,
    Threadblock,
)
from tacos.msccl.verify_report import Violation
from tacos.msccl.xml_lexer import DECIMAL, Element, Reader, StepRun, strtol

__all__ = [
    "MscclXmlError",
    "ParseOutcome",
    "load_xml",
    "load_xml_collect",
    "parse_xml",
    "parse_xml_collect",
    "parse_xml_runs",
    "read_xml_text",
]

#: ``<algo>`` attributes older msccl-tools/TACCL omit although the runtime requires them.
SELECTION_ATTRS = ("outofplace", "minBytes", "maxBytes")


class MscclXmlError(TacosError):
    """An MSCCL XML file the runtime would reject (first problem; ``problems`` has all)."""

    def __init__(self, message: str, *, problems: list[Violation] | None = None, **kw) -> None:
        super().__init__(message, **kw)
        self.problems = problems or []


@dataclass
class ParseOutcome:
    """Result of a tolerant parse: the program (None if no ``<algo>`` could be read), every
    problem found, and ``damaged`` when required values are missing or unreadable (the program
    then holds placeholders and whole-program analyses are meaningless)."""

    program: Program | None
    problems: list[Violation] = field(default_factory=list)
    damaged: bool = False
    source: str = "<string>"
    lines: list[str] = field(default_factory=list, repr=False)

    @property
    def errors(self) -> list[Violation]:
        """Problems of severity ``error``."""
        return [p for p in self.problems if p.severity == "error"]


# -- tree -> program ------------------------------------------------------------------------


class _Builder:
    def __init__(self, reader: Reader) -> None:
        self.r = reader
        #: columns mode: per tb in program order, its StepRun spans (False once a step is not
        #: canonical: then the caller parses again the usual way)
        self.tb_runs: list[list[StepRun]] = []
        self.runs_only = True

    def int_attr(self, e: Element, key: str, where: dict, default: int = -1,
                 required: bool = True) -> int | None:
        raw = e.attrs.get(key)
        if raw is None:
            if required:
                self.r.problem("missing-attribute", f"<{e.name}> lacks required attribute "
                               f"{key!r}", e.line, e.col, hint=f'add {key}="..."', **where)
                self.r.damaged = True
                return default
            return None
        col = e.cols.get(key, e.col)
        value = int(raw) if DECIMAL.match(raw) and len(raw) < 24 else strtol(raw[:64])
        bits = 64 if key in ("minBytes", "maxBytes") else 32
        if value is not None and not -2 ** (bits - 1) <= value < 2 ** (bits - 1):
            self.r.problem("number-range", f"{key}={raw[:40]!r} does not fit the runtime's "
                           f"{bits}-bit integer", e.line, col,
                           hint="write a value the runtime can store", **where)
            self.r.damaged = True
            return default
        if DECIMAL.match(raw):
            return value
        if value is None:
            self.r.problem("number-format", f"{key}={raw!r} is not a number (the runtime "
                           "reads it as 0)", e.line, col, hint="write a plain decimal integer",
                           **where)
            self.r.damaged = True
            return default
        self.r.problem("number-format", f"{key}={raw!r} is not plain decimal: the runtime "
                       f"(strtol base 0) reads it as {value}", e.line, col,
                       hint=f'write {key}="{value}" without leading zeros, sign or hex prefix'
                       if value >= 0 or raw.strip().startswith("-") else "write plain decimal",
                       **where)
        return value

    def str_attr(self, e: Element, key: str, where: dict) -> str:
        raw = e.attrs.get(key)
        if raw is None:
            self.r.problem("missing-attribute", f"<{e.name}> lacks required attribute {key!r}",
                           e.line, e.col, hint=f'add {key}="..."', **where)
            self.r.damaged = True
            return ""
        return raw

    def unknown_attrs(self, e: Element, known: tuple[str, ...], where: dict) -> None:
        for key in e.attrs:
            if key not in known:
                self.r.problem("unknown-attribute", f"<{e.name}> attribute {key!r} is "
                               "ignored by the runtime", e.line, e.cols.get(key, e.col),
                               severity="warning", **where)

    def unknown_child(self, parent: str, child: Element) -> None:
        key = (parent, child.name)
        first, count = self.r.unknown.get(key, (child.line, 0))
        self.r.unknown[key] = (first, count + 1)

    def program(self, top: list[Element]) -> Program | None:
        r = self.r
        algos = [e for e in top if e.name == "algo"]
        if not algos:
            r.problem("algo-missing", "no <algo> element", 1, 1,
                      hint='the file must start with <algo name="..." proto="..." ...>')
            r.damaged = True
            return None
        algo = algos[0]
        if top[0] is not algo:
            r.problem("algo-first", f"the first element is <{top[0].name}>, not <algo>: the "
                      "runtime reads the selection attributes from the first element",
                      top[0].line, top[0].col, hint="put <algo> first")
        for extra in algos[1:]:
            r.problem("algo-duplicate", "more than one <algo> element; the runtime uses the "
                      "first", extra.line, extra.col)
        for e in top:
            if e.name != "algo":
                self.unknown_child("document", e)
        where: dict = {}
        ints = {k: self.int_attr(algo, k, where) for k in ("nchannels", "nchunksperloop",
                                                             "ngpus", "inplace")}
        sel: dict[str, int | None] = {}
        missing = [k for k in SELECTION_ATTRS if k not in algo.attrs]
        if missing:
            names = ", ".join(repr(k) for k in missing)
            fill = {"outofplace": int(algo.attrs.get("inplace") != "1"), "minBytes": 0,
                    "maxBytes": 0}  # outofplace=1 only where in-place is not declared
            add = " ".join(f'{k}="{fill[k]}"' for k in missing)
            r.problem("missing-attribute", f"<algo> lacks {names}, which the runtime requires "
                      f"(\"Attribute {missing[0]} of node algo not found\": the file, and "
                      "every algorithm in its folder, fails to load); older msccl-tools/TACCL "
                      "omit them", algo.line, algo.col,
                      severity="error" if r.strict else "warning",
                      hint=f"add {add} to <algo> (maxBytes 0 = unlimited)"
                      + ("; to check msccl-tools output you will fix up, run  tacosc verify "
                         "--lenient" if r.strict else ""))
        for k in SELECTION_ATTRS:
            sel[k] = None if k in missing else self.int_attr(algo, k, where)
        self.unknown_attrs(algo, ALGO_ATTRS + ALGO_OPTIONAL, where)
        gpus = []
        for ge in algo.children:
            if ge.name != "gpu":
                self.unknown_child("algo", ge)
                continue
            gpus.append(self.gpu(ge))
        return Program(
            name=algo.attrs.get("name", ""),
            proto=self.str_attr(algo, "proto", where),
            nchannels=ints["nchannels"],
            nchunksperloop=ints["nchunksperloop"],
            ngpus=ints["ngpus"],
            coll=self.str_attr(algo, "coll", where),
            inplace=ints["inplace"],
            outofplace=sel["outofplace"],
            minBytes=sel["minBytes"],
            maxBytes=sel["maxBytes"],
            gpus=tuple(gpus),
            redop=algo.attrs.get("redop"),
            extra=tuple((k, v) for k, v in algo.attrs.items()
                        if k not in ALGO_ATTRS + ALGO_OPTIONAL),
            line=algo.line,
        )

    def gpu(self, ge: Element) -> Gpu:
        gid = self.int_attr(ge, "id", {})
        where = {"rank": gid}
        vals = [self.int_attr(ge, k, where) for k in GPU_ATTRS[1:]]
        self.unknown_attrs(ge, GPU_ATTRS, where)
        tbs = []
        for te in ge.children:
            if te.name != "tb":
                self.unknown_child("gpu", te)
                continue
            tbs.append(self.tb(te, gid))
        return Gpu(gid, vals[0], vals[1], vals[2], tuple(tbs), ge.line)

    def tb(self, te: Element, rank: int) -> Threadblock:
        tid = self.int_attr(te, "id", {"rank": rank})
        where = {"rank": rank, "tb": tid}
        send, recv, chan = (self.int_attr(te, k, where) for k in TB_ATTRS[1:])
        self.unknown_attrs(te, TB_ATTRS, where)
        steps = []
        runs: list[StepRun] = []
        for se in te.children:
            if se.__class__ is Step:  # canonical line, read by the lexer's fast path
                steps.append(se)
            elif se.__class__ is StepRun:  # canonical lines in columns mode
                runs.append(se)
            elif se.name != "step":
                self.unknown_child("tb", se)
            else:
                self.runs_only = False
                steps.append(self.step(se, rank, tid, len(steps)))
        if self.r.columns:
            self.tb_runs.append(runs)
        return Threadblock(tid, send, recv, chan, tuple(steps), te.line)

    def step(self, se: Element, rank: int, tb: int, index: int) -> Step:
        where = {"rank": rank, "tb": tb, "step": index}
        s = self.int_attr(se, "s", where, default=index)
        st = self.str_attr(se, "type", where)
        srcbuf = self.str_attr(se, "srcbuf", where)
        srcoff = self.int_attr(se, "srcoff", where)
        dstbuf = self.str_attr(se, "dstbuf", where)
        dstoff = self.int_attr(se, "dstoff", where)
        cnt = self.int_attr(se, "cnt", where, default=0)
        depid = self.int_attr(se, "depid", where)
        deps = self.int_attr(se, "deps", where)
        hasdep = self.int_attr(se, "hasdep", where, default=0)
        self.unknown_attrs(se, STEP_ATTRS, where)
        if se.children:
            for c in se.children:
                self.unknown_child("step", c)
        return Step(s, st, srcbuf, srcoff, dstbuf, dstoff, cnt, depid, deps, hasdep, se.line)


def parse_xml_collect(text: str, *, source: str = "<string>", strict: bool = False
                      ) -> ParseOutcome:
    """Parse MSCCL XML text and return the program with *every* problem found (never raises
    for content problems).  ``strict`` makes the missing ``outofplace``/``minBytes``/
    ``maxBytes`` of older tools an error instead of a warning."""
    reader = Reader(text, source, strict)
    top = reader.lex()
    program = None
    if top:
        program = _Builder(reader).program(top)
    elif not reader.fatal:
        reader.problem("algo-missing", "no <algo> element", 1, 1)
        reader.damaged = True
    for (parent, name), (line, count) in sorted(reader.unknown.items(), key=lambda x: x[1]):
        times = f" ({count} times)" if count > 1 else ""
        reader.problems.append(Violation(
            "unknown-element", f"<{name}> inside <{parent}> is ignored by the runtime{times}",
            line=line, severity="warning"))
    reader.problems.sort(key=lambda p: (p.line or 0, p.col or 0))
    return ParseOutcome(program, reader.problems, reader.damaged, source,
                        text.splitlines())


def parse_xml_runs(text: str, *, source: str = "<string>", strict: bool = False
                   ) -> tuple[ParseOutcome, list[list[StepRun]]] | None:
    """Parse without building canonical steps: the program's tbs have no steps, and each
    tb's canonical ``<step>`` lines come back as :class:`StepRun` spans of ``text`` (per tb in
    program order).  None when a step is not canonical, the file has any problem, or its
    ``<algo>`` is missing: :func:`parse_xml_collect` then gives the program and the report.
    ``outcome.lines`` is left empty."""
    reader = Reader(text, source, strict, columns=True)
    top = reader.lex()
    if not top or reader.problems or reader.unknown:
        return None
    builder = _Builder(reader)
    program = builder.program(top)
    if program is None or not builder.runs_only or reader.problems or reader.unknown \
            or reader.damaged:
        return None
    return ParseOutcome(program, [], False, source, []), builder.tb_runs


def _raise_first(outcome: ParseOutcome) -> None:
    errors = outcome.errors
    if not errors:
        return
    first = errors[0]
    more = f" (and {len(errors) - 1} more error{'s' if len(errors) > 2 else ''})" \
        if len(errors) > 1 else ""
    line = first.line or 1
    source_line = outcome.lines[line - 1] if 0 < line <= len(outcome.lines) else None
    where = "" if first.place() == "algo" else f"{first.place()}: "
    raise MscclXmlError(f"{where}{first.message}{more}",
                        span=Span(outcome.source, line, first.col or 1),
                        hint=first.hint, source_line=source_line, problems=outcome.problems)


def parse_xml(text: str, *, source: str = "<string>", strict: bool = False) -> Program:
    """Parse MSCCL XML text into a :class:`Program`.

    Raises :class:`MscclXmlError` (a ``TacosError`` with ``file:line:col``, the line and a hint)
    on the first lexical or attribute error the runtime would reject; warnings are ignored.
    """
    outcome = parse_xml_collect(text, source=source, strict=strict)
    _raise_first(outcome)
    assert outcome.program is not None  # no errors implies an <algo> was read
    return outcome.program


def read_xml_text(path: str | Path) -> str:
    """The text of an MSCCL XML file (``InputFileError`` if unreadable or too large)."""
    data = read_capped(path, limit="xml_bytes", what="MSCCL XML file")
    return decode_text(data, str(path), "MSCCL XML file",
                       "an MSCCL file starts with <algo ...>")


def load_xml_collect(path: str | Path, *, strict: bool = False) -> ParseOutcome:
    """Read a file and :func:`parse_xml_collect` it (``InputFileError`` if unreadable)."""
    return parse_xml_collect(read_xml_text(path), source=str(path), strict=strict)


def load_xml(path: str | Path, *, strict: bool = False) -> Program:
    """Read and :func:`parse_xml` an MSCCL XML file."""
    return parse_xml(read_xml_text(path), source=str(path), strict=strict)
