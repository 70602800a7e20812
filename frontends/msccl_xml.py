"""MSCCL XML read-back: text -> :class:`tacos.msccl.program.Program`.

The MSCCL runtime (msccl-executor-nccl) reads algorithm files with a small hand-written parser
that is much stricter than XML (``docs/msccl-xml.md`` §1.2): no ``<?xml?>`` prolog, attributes
double-quoted and separated by spaces on one line, no tabs between elements, no text, numbers
read with ``strtol(…, 0)`` (a leading 0 means octal), every required attribute present.  This
module re-implements those lexical rules on the raw text (a general XML parser would accept
files the runtime rejects) and builds the program model with line numbers.

It never expands entities: DOCTYPE/ENTITY/CDATA sections are rejected outright, and attribute
values are taken verbatim (like the runtime, which does not decode ``&amp;``).

Two entry points: :func:`parse_xml` / :func:`load_xml` raise :class:`MscclXmlError` on the
first error; :func:`parse_xml_collect` / :func:`load_xml_collect` return every problem found (the
verifier turns them into violations).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass, field
from pathlib import Path

from tacos.errors import InputFileError, Span, TacosError
from tacos.msccl.program import (
    ALGO_ATTRS,
    ALGO_OPTIONAL,
    GPU_ATTRS,
    MAX_ATTRS,
    MAX_CHILDREN,
    MAX_NODES,
    MAX_STR_LEN,
    STEP_ATTRS,
    TB_ATTRS,
    Gpu,
    Program,
    Step,
    Threadblock,
)
from tacos.msccl.verify_report import Violation

__all__ = [
    "MscclXmlError",
    "ParseOutcome",
    "load_xml",
    "load_xml_collect",
    "parse_xml",
    "parse_xml_collect",
]

#: ``<algo>`` attributes older msccl-tools/TACCL omit although the runtime requires them.
SELECTION_ATTRS = ("outofplace", "minBytes", "maxBytes")

_DECIMAL = re.compile(r"-?(?:0|[1-9][0-9]*)\Z")
_NAME = r"[A-Za-z_][A-Za-z0-9_.:-]*"
_TAG = re.compile(r'<(' + _NAME + r')((?: +[^ \t\n\r=/>"]+="[^"\t\n\r]*")*)( *)(/?)>')
_ATTR = re.compile(r'( +)([^ \t\n\r=/>"]+)="([^"\t\n\r]*)"')
_CLOSE = re.compile(r"</(" + _NAME + r")>")
_LOOSE_NAME = re.compile(r"<\s*/?\s*([^\s/>]+)")
_LOOSE_ATTR = re.compile(r"""([^\s=/>"']+)\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s/>"']+))""")
_BAD_SPACE = re.compile(r"[^ \n\r]")


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


@dataclass
class _Elem:
    name: str
    attrs: dict[str, str]
    cols: dict[str, int]
    line: int
    col: int
    children: list[_Elem] = field(default_factory=list)


def _strtol(text: str) -> int | None:
    """C ``strtol(text, NULL, 0)``: the longest valid prefix (None when there is none)."""
    m = re.match(r"\s*([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)", text)
    if not m:
        return None
    sign = -1 if m.group(1) == "-" else 1
    digits = m.group(2)
    if digits[:2] in ("0x", "0X"):
        return sign * int(digits[2:], 16)
    if digits.startswith("0") and len(digits) > 1:
        return sign * int(digits[1:], 8)
    return sign * int(digits)


class _Reader:
    """Lexer + tree builder; collects problems instead of raising."""

    def __init__(self, text: str, source: str, strict: bool) -> None:
        self.text = text
        self.source = source
        self.strict = strict
        self.problems: list[Violation] = []
        self.damaged = False
        self.fatal = False
        self.starts = [0] + [m.end() for m in re.finditer(r"\n", text)]
        self.unknown: dict[tuple[str, str], tuple[int, int]] = {}

    # -- positions and problems ---------------------------------------------------------------
    def pos(self, offset: int) -> tuple[int, int]:
        i = bisect_right(self.starts, offset) - 1
        return i + 1, offset - self.starts[i] + 1

    def problem(self, rule: str, message: str, line: int | None, col: int | None = None,
                *, severity: str = "error", hint: str | None = None, rank: int | None = None,
                tb: int | None = None, step: int | None = None) -> None:
        self.problems.append(Violation(rule, message, rank, tb, step, line, col, severity, hint))

    # -- lexing ---------------------------------------------------------------------------------
    def lex(self) -> list[_Elem]:
        """Build the element forest; returns the top-level elements."""
        text, n = self.text, len(self.text)
        top: list[_Elem] = []
        stack: list[_Elem] = []
        pos = 0
        if text.startswith("\ufeff"):
            self.problem("xml-syntax", "file starts with a byte-order mark", 1, 1,
                         hint="save the file as plain ASCII/UTF-8 without BOM")
            pos = 1
        while pos < n:
            lt = text.find("<", pos)
            end = n if lt < 0 else lt
            if _BAD_SPACE.search(text, pos, end):
                self._bad_text(pos, end)
            if lt < 0:
                break
            if text.startswith("<!--", lt):
                close = text.find("-->", lt + 4)
                if close < 0:
                    self._fatal("xml-syntax", "unterminated comment", lt)
                    break
                pos = close + 3
                continue
            if text.startswith("<?", lt):
                line, col = self.pos(lt)
                self.problem("xml-prolog", "XML prolog/processing instruction "
                             f"{text[lt:lt + 5]!r}...: the runtime reads it as an element named "
                             "'?xml' and fails to load the file", line, col,
                             hint="delete the '<?xml ...?>' line; the file must start with "
                                  "<algo (comments may precede it)")
                close = text.find("?>", lt)
                if close < 0:
                    self._fatal("xml-syntax", "unterminated processing instruction", lt)
                    break
                pos = close + 2
                continue
            if text.startswith("<!", lt):
                kind = re.match(r"<!(\[CDATA\[|[A-Za-z]*)", text[lt:lt + 12]).group(1)
                self._fatal("xml-doctype", f"'<!{kind}' is not allowed: DOCTYPE, ENTITY and "
                            "CDATA are never read (entities are not expanded)", lt,
                            hint="remove the declaration; MSCCL files are plain elements")
                break
            if text.startswith("</", lt):
                m = _CLOSE.match(text, lt)
                if m:
                    name, pos = m.group(1), m.end()
                else:
                    gt = text.find(">", lt)
                    if gt < 0:
                        self._fatal("xml-syntax", "unterminated closing tag", lt)
                        break
                    lm = _LOOSE_NAME.match(text, lt)
                    name = lm.group(1) if lm else ""
                    line, col = self.pos(lt)
                    self.problem("xml-syntax", f"malformed closing tag {text[lt:gt + 1]!r}",
                                 line, col, hint=f"write '</{name}>' with no spaces")
                    pos = gt + 1
                if not stack or stack[-1].name != name:
                    line, col = self.pos(lt)
                    expected = f"</{stack[-1].name}>" if stack else "nothing"
                    self._fatal("xml-syntax", f"closing tag </{name}> does not match "
                                f"(expected {expected})", lt)
                    break
                stack.pop()
                continue
            elem, selfclose, pos = self._start_tag(lt)
            if elem is None:
                break
            (stack[-1].children if stack else top).append(elem)
            if not selfclose:
                stack.append(elem)
        if stack and not self.fatal:
            e = stack[-1]
            self.problem("xml-syntax", f"<{e.name}> is never closed", e.line, e.col,
                         hint=f"add </{e.name}> or self-close the element with '/>'")
            self.damaged = True
        return top

    def _fatal(self, rule: str, message: str, offset: int, hint: str | None = None) -> None:
        line, col = self.pos(offset)
        self.problem(rule, message, line, col, hint=hint)
        self.fatal = self.damaged = True

    def _bad_text(self, start: int, end: int) -> None:
        seg = self.text[start:end]
        m = _BAD_SPACE.search(seg)
        line, col = self.pos(start + m.start())
        if seg.strip(" \n\r\t") == "":
            self.problem("xml-tab", "tab between elements: the runtime only skips spaces and "
                         "newlines and fails with \"expecting '<'\"", line, col,
                         hint="indent with spaces")
        else:
            snippet = seg.strip()[:20]
            self.problem("xml-text", f"text {snippet!r} between elements: the runtime fails "
                         "with \"expecting '<'\"", line, col, hint="remove the text")

    def _start_tag(self, lt: int) -> tuple[_Elem | None, bool, int]:
        text = self.text
        m = _TAG.match(text, lt)
        line, col = self.pos(lt)
        attrs: dict[str, str] = {}
        cols: dict[str, int] = {}
        if m:
            name, selfclose, end = m.group(1), m.group(4) == "/", m.end()
            nattrs = len(m.group(3))  # trailing spaces make empty attributes
            base = m.start(2)
            for am in _ATTR.finditer(m.group(2)):
                nattrs += len(am.group(1))  # one per space: extra spaces are empty attributes
                self._add_attr(attrs, cols, name, am.group(2), am.group(3),
                               base + am.start(2), line)
        else:
            gt = text.find(">", lt)
            if gt < 0:
                self._fatal("xml-syntax", "unterminated tag", lt)
                return None, False, len(text)
            end = gt + 1
            tag = text[lt:end]
            lm = _LOOSE_NAME.match(tag)
            name = lm.group(1) if lm else ""
            selfclose = tag[:-1].rstrip().endswith("/")
            self._diagnose_tag(tag, lt)
            nattrs = 0
            for am in _LOOSE_ATTR.finditer(tag, lm.end() if lm else 1):
                nattrs += 1
                value = next(g for g in am.group(2, 3, 4) if g is not None)
                self._add_attr(attrs, cols, name, am.group(1), value, lt + am.start(), line)
        if nattrs > MAX_ATTRS:
            self.problem("too-many-attributes", f"<{name}> has {nattrs} attributes (counting "
                         f"empty ones made by extra spaces); the runtime keeps only "
                         f"{MAX_ATTRS} and drops the rest silently", line, col,
                         hint="separate attributes with single spaces and drop unused ones")
        if len(name) > MAX_STR_LEN - 1:
            self.problem("string-length", f"element name longer than {MAX_STR_LEN - 1}", line, col)
        return _Elem(name, attrs, cols, line, col), selfclose, end

    def _add_attr(self, attrs: dict[str, str], cols: dict[str, int], elem: str, key: str,
                  value: str, offset: int, line: int) -> None:
        _, col = self.pos(offset)
        if key in attrs:
            self.problem("duplicate-attribute", f"<{elem}> repeats attribute {key!r}; the "
                         "runtime uses the first one", line, col)
            return
        if len(key) > MAX_STR_LEN - 1 or len(value) > MAX_STR_LEN - 1:
            self.problem("string-length", f"attribute {key!r} of <{elem}>: names and values "
                         f"are limited to {MAX_STR_LEN - 1} characters", line, col)
        if "&" in value:
            self.problem("xml-entity", f"attribute {key!r} contains '&': the runtime does not "
                         "decode entities", line, col, severity="warning")
        attrs[key] = value
        cols[key] = col

    def _diagnose_tag(self, tag: str, offset: int) -> None:
        line, col = self.pos(offset)
        found = False
        if "\n" in tag or "\r" in tag:
            found = True
            self.problem("xml-multiline-tag", "element spans several lines: the runtime needs "
                         "all attributes of an element on one line (\"expected >\")", line, col,
                         hint="join the attributes into one line separated by single spaces")
        if "\t" in tag:
            found = True
            self.problem("xml-tab", "tab inside a tag: the runtime separates attributes only "
                         "with spaces", line, col, hint="use single spaces")
        if re.search(r"\s=|=\s", tag):
            found = True
            self.problem("xml-syntax", "space around '=' in an attribute", line, col,
                         hint='write name="value" with no spaces')
        if re.search(r"='|=[^\s\"']", tag):
            found = True
            self.problem("xml-quote", "attribute value not in double quotes", line, col,
                         hint='write name="value"')
        if not found:
            self.problem("xml-syntax", f"malformed tag {tag[:60]!r}", line, col,
                         hint='write <name attr="value" .../> with single spaces on one line')


# -- tree -> program ------------------------------------------------------------------------


class _Builder:
    def __init__(self, reader: _Reader) -> None:
        self.r = reader

    def int_attr(self, e: _Elem, key: str, where: dict, default: int = -1,
                 required: bool = True) -> int | None:
        raw = e.attrs.get(key)
        if raw is None:
            if required:
                self.r.problem("missing-attribute", f"<{e.name}> lacks required attribute "
                               f"{key!r}", e.line, e.col, hint=f'add {key}="..."', **where)
                self.r.damaged = True
                return default
            return None
        if _DECIMAL.match(raw):
            return int(raw)
        value = _strtol(raw)
        col = e.cols.get(key, e.col)
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

    def str_attr(self, e: _Elem, key: str, where: dict) -> str:
        raw = e.attrs.get(key)
        if raw is None:
            self.r.problem("missing-attribute", f"<{e.name}> lacks required attribute {key!r}",
                           e.line, e.col, hint=f'add {key}="..."', **where)
            self.r.damaged = True
            return ""
        return raw

    def unknown_attrs(self, e: _Elem, known: tuple[str, ...], where: dict) -> None:
        for key in e.attrs:
            if key not in known:
                self.r.problem("unknown-attribute", f"<{e.name}> attribute {key!r} is "
                               "ignored by the runtime", e.line, e.cols.get(key, e.col),
                               severity="warning", **where)

    def unknown_child(self, parent: str, child: _Elem) -> None:
        key = (parent, child.name)
        first, count = self.r.unknown.get(key, (child.line, 0))
        self.r.unknown[key] = (first, count + 1)

    def program(self, top: list[_Elem]) -> Program | None:
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
            r.problem("missing-attribute", f"<algo> lacks {names}, which the runtime requires "
                      f"(\"Attribute {missing[0]} of node algo not found\"); older "
                      "msccl-tools/TACCL omit them", algo.line, algo.col,
                      severity="error" if r.strict else "warning",
                      hint='add outofplace="0" minBytes="0" maxBytes="0" (0 = unlimited)')
        for k in SELECTION_ATTRS:
            sel[k] = None if k in missing else self.int_attr(algo, k, where)
        self.unknown_attrs(algo, ALGO_ATTRS + ALGO_OPTIONAL, where)
        gpus = []
        ngpu_elems = sum(1 for e in algo.children if e.name == "gpu")
        if ngpu_elems > MAX_CHILDREN:
            r.problem("children-limit", f"{ngpu_elems} <gpu> elements exceed the runtime's "
                      f"{MAX_CHILDREN} children per element", algo.line, algo.col)
        for ge in algo.children:
            if ge.name != "gpu":
                self.unknown_child("algo", ge)
                continue
            gpus.append(self.gpu(ge, ngpu_elems))
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

    def gpu(self, ge: _Elem, ngpu_elems: int) -> Gpu:
        gid = self.int_attr(ge, "id", {})
        where = {"rank": gid}
        vals = [self.int_attr(ge, k, where) for k in GPU_ATTRS[1:]]
        self.unknown_attrs(ge, GPU_ATTRS, where)
        tbs = []
        tb_elems = [e for e in ge.children if e.name == "tb"]
        if len(tb_elems) > MAX_CHILDREN:
            self.r.problem("children-limit", f"{len(tb_elems)} <tb> elements exceed "
                           f"{MAX_CHILDREN}", ge.line, ge.col, **where)
        for te in ge.children:
            if te.name != "tb":
                self.unknown_child("gpu", te)
                continue
            tbs.append(self.tb(te, gid))
        nodes = 1 + ngpu_elems + len(tbs) + sum(len(t.steps) for t in tbs)
        if nodes > MAX_NODES:
            self.r.problem("node-limit", f"rank {gid} needs {nodes} parsed nodes (1 algo + "
                           f"{ngpu_elems} gpu + tbs + steps); the runtime parser holds "
                           f"{MAX_NODES}", ge.line, ge.col, hint="use fewer, longer steps",
                           **where)
        return Gpu(gid, vals[0], vals[1], vals[2], tuple(tbs), ge.line)

    def tb(self, te: _Elem, rank: int) -> Threadblock:
        tid = self.int_attr(te, "id", {"rank": rank})
        where = {"rank": rank, "tb": tid}
        send, recv, chan = (self.int_attr(te, k, where) for k in TB_ATTRS[1:])
        self.unknown_attrs(te, TB_ATTRS, where)
        steps = []
        step_elems = [e for e in te.children if e.name == "step"]
        if len(step_elems) > MAX_CHILDREN:
            self.r.problem("children-limit", f"{len(step_elems)} <step> elements exceed "
                           f"{MAX_CHILDREN}", te.line, te.col, **where)
        for se in te.children:
            if se.name != "step":
                self.unknown_child("tb", se)
                continue
            steps.append(self.step(se, rank, tid, len(steps)))
        return Threadblock(tid, send, recv, chan, tuple(steps), te.line)

    def step(self, se: _Elem, rank: int, tb: int, index: int) -> Step:
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
    reader = _Reader(text, source, strict)
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


def _read(path: str | Path) -> str:
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise InputFileError(f"no such file: {p}", hint="check the path") from None
    except IsADirectoryError:
        raise InputFileError(f"{p} is a directory, not an MSCCL XML file") from None
    except OSError as exc:
        raise InputFileError(f"cannot read {p}: {exc.strerror}") from None
    if not data.strip():
        raise InputFileError(f"{p} is empty", hint="an MSCCL file starts with <algo ...>")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputFileError(f"{p} is not UTF-8 text (byte {exc.start})",
                             hint="MSCCL XML files are plain ASCII") from None


def load_xml_collect(path: str | Path, *, strict: bool = False) -> ParseOutcome:
    """Read a file and :func:`parse_xml_collect` it (``InputFileError`` if unreadable)."""
    return parse_xml_collect(_read(path), source=str(path), strict=strict)


def load_xml(path: str | Path, *, strict: bool = False) -> Program:
    """Read and :func:`parse_xml` an MSCCL XML file."""
    return parse_xml(_read(path), source=str(path), strict=strict)
