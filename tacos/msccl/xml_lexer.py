"""Lexer for MSCCL XML that follows the runtime's hand-written parser (``docs/msccl-xml.md`` §1.2).

:class:`Reader` scans the raw text: comments are skipped, a ``<?xml?>`` prolog is reported,
DOCTYPE/ENTITY/CDATA stop the scan (nothing is ever expanded), tags must be on one line with
double-quoted attributes separated by spaces, and only spaces and newlines may separate
elements.  Well-formed tags take a regular-expression fast path; anything else is diagnosed and
read leniently so that later problems are still found.  The result is a forest of
:class:`Element` with line/column positions plus a list of problems.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass, field

from tacos.msccl.program import MAX_ATTRS, MAX_STR_LEN, Step
from tacos.msccl.verify_report import Violation

__all__ = ["DECIMAL", "Element", "Reader", "StepRun", "strtol"]

DECIMAL = re.compile(r"-?(?:0|[1-9][0-9]*)\Z")
_NAME = r"[A-Za-z_][A-Za-z0-9_.:-]*"
_TAG = re.compile(r'<(' + _NAME + r')((?: +[^ \t\n\r=/>"]+="[^"\t\n\r]*")*)( *)(/?)>')
_ATTR = re.compile(r'( +)([^ \t\n\r=/>"]+)="([^"\t\n\r]*)"')
_CLOSE = re.compile(r"</(" + _NAME + r")>")
_LOOSE_NAME = re.compile(r"<\s*/?\s*([^\s/>]+)")
_LOOSE_ATTR = re.compile(r"""([^\s=/>"']+)\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s/>"']+))""")
_BAD_SPACE = re.compile(r"[^ \n\r]")
_INT = r'"(-?(?:0|[1-9][0-9]{0,8}))"'  # plain decimal that fits the runtime's int32


def _step_pattern(group: str) -> str:
    """The canonical ``<step>``; ``group`` opens each value's group (``(`` or ``(?:``)."""
    i = '"' + group + r'-?(?:0|[1-9][0-9]{0,8}))"'
    return (r'<step s=' + i + r' type="' + group + r'[a-z]{1,4})" srcbuf="' + group
            + r'[ios])" srcoff=' + i + r' dstbuf="' + group + r'[ios])" dstoff=' + i + r' cnt='
            + i + r' depid=' + i + r' deps=' + i + r' hasdep=' + i + r'/>')


#: A ``<step>`` exactly as tacos and the production files write it: read without the general
#: path, which would find no problem in it and build the very same step.
_STEP = re.compile(_step_pattern("("))

#: the next canonical ``<step>`` after only spaces and newlines (the lexer's run loop)
_STEP_NEXT = re.compile(r"[ \n\r]*" + _STEP.pattern)
#: canonical ``<step>`` lines following a step, one per line (a newline, then only spaces):
#: the lexer takes the whole run with one match and reads its values with one ``findall``
_STEP_LINES = re.compile(r"(?:\n *" + _step_pattern("(?:") + r")+")


def _step(g: tuple[str, ...], line: int) -> Step:
    """A :class:`Step` from the groups of :data:`_STEP`."""
    return Step(int(g[0]), g[1], g[2], int(g[3]), g[4], int(g[5]), int(g[6]), int(g[7]),
                int(g[8]), int(g[9]), line)


@dataclass
class Element:
    """One element: name, attributes (with their columns), position and children."""

    name: str
    attrs: dict[str, str]
    cols: dict[str, int]
    line: int
    col: int
    children: list[Element | Step] = field(default_factory=list)  # canonical steps as Step


@dataclass(frozen=True, slots=True)
class StepRun:
    """Canonical ``<step>`` lines read without building them (the reader's ``columns`` mode):
    ``count`` steps from text offset ``start`` to ``end``, nothing but canonical steps and the
    blank space between them."""

    start: int
    end: int
    count: int


def strtol(text: str) -> int | None:
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


class Reader:
    """Lexer + tree builder; collects problems instead of raising."""

    def __init__(self, text: str, source: str, strict: bool, columns: bool = False) -> None:
        self.text = text
        self.columns = columns  # canonical steps as StepRun spans, not Step objects
        self.source = source
        self.strict = strict
        self.problems: list[Violation] = []
        self.damaged = False
        self.fatal = False
        self._at = (0, 1)  # a text offset and its line: positions are mostly asked in order
        self._starts: list[int] | None = None  # line starts, built if asked backwards
        self.unknown: dict[tuple[str, str], tuple[int, int]] = {}

    # -- positions and problems ---------------------------------------------------------------
    def pos(self, offset: int) -> tuple[int, int]:
        """1-based ``(line, column)`` of a text offset."""
        text = self.text
        at, line = self._at
        if offset >= at:
            line += text.count("\n", at, offset)
            self._at = (offset, line)
        else:  # rare: every line start, once
            if self._starts is None:
                self._starts = [0] + [m.end() for m in re.finditer(r"\n", text)]
            line = bisect_right(self._starts, offset)
        return line, offset - text.rfind("\n", 0, offset)

    def problem(self, rule: str, message: str, line: int | None, col: int | None = None,
                *, severity: str = "error", hint: str | None = None, rank: int | None = None,
                tb: int | None = None, step: int | None = None) -> None:
        self.problems.append(Violation(rule, message, rank, tb, step, line, col, severity, hint))

    # -- lexing ---------------------------------------------------------------------------------
    def lex(self) -> list[Element]:
        """Build the element forest; returns the top-level elements."""
        text, n = self.text, len(self.text)
        top: list[Element] = []
        stack: list[Element] = []
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
            if stack and stack[-1].name == "tb" and text.startswith("<step ", lt):
                pos = self._step_run(lt, stack[-1].children)
                if pos > lt:
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

    def _step_run(self, lt: int, children: list[Element | Step]) -> int:
        """Read the run of canonical ``<step>`` lines starting at ``lt`` (separated only by
        spaces and newlines) into ``children`` as :class:`Step` objects (no element: the
        general path would find no problem in them); returns where it stopped (``lt`` if none
        matched)."""
        text = self.text
        if self.columns:
            return self._step_spans(lt, children)
        line = self.pos(lt)[0]
        pos = lt
        m = _STEP.match(text, lt)
        while m is not None:
            at = m.start(1) - 9  # where '<step s="' begins
            line += text.count("\n", pos, at)
            children.append(_step(m.groups(), line))
            pos = m.end()
            run = _STEP_LINES.match(text, pos)
            if run is not None:  # the usual case: one step per line
                rows = _STEP.findall(text, pos, run.end())
                children.extend(map(_step, rows, range(line + 1, line + 1 + len(rows))))
                line += len(rows)
                pos = run.end()
            m = _STEP_NEXT.match(text, pos)
        return pos

    def _step_spans(self, lt: int, children: list) -> int:
        """:meth:`_step_run` in ``columns`` mode: the run as :class:`StepRun` spans."""
        text = self.text
        pos = lt
        m = _STEP.match(text, lt)
        while m is not None:
            start = m.start(1) - 9  # where '<step s="' begins
            pos = m.end()
            count = 1
            run = _STEP_LINES.match(text, pos)
            if run is not None:
                count += text.count("<step ", pos, run.end())
                pos = run.end()
            children.append(StepRun(start, pos, count))
            m = _STEP_NEXT.match(text, pos)
        return pos

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

    def _start_tag(self, lt: int) -> tuple[Element | None, bool, int]:
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
        return Element(name, attrs, cols, line, col), selfclose, end

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
