"""TDL text → lark tree, with syntax errors turned into located, friendly messages."""

from __future__ import annotations

import os
import re
import sys
from functools import lru_cache
from pathlib import Path

from lark import Lark, Token, Tree
from lark import __version__ as lark_version
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from tacos import limits
from tacos.errors import InputFileError, Span, TdlSyntaxError
from tacos.inputs import decode_text, position, read_capped

# How each statement is written, shown as a hint when a line starting with that keyword breaks.
STATEMENT_FORMS: dict[str, str] = {
    "link": "links are written  link SRC -> DST BANDWIDTH LATENCY [xN] [tag NAME]"
    "  (use <-> for two-way), e.g.  link gpu[0] <-> gpu[1] 25GB/s 0.7us x2",
    "npu": "NPUs are declared as  npu NAME  or  npu NAME[COUNT]  e.g.  npu gpu[8]",
    "switch": "switches are declared as  switch NAME [unwind full|ring|biring|degree(D)]"
    " [with multicast, reduce] [attach NPUS BANDWIDTH LATENCY]",
    "collective": "collectives are written  collective KIND [size SIZE] [chunks K] [root NPU]"
    " [group NPUS] [name \"...\"]",
    "fail": "failures are written  fail npu NPUS  or  fail link SRC -> DST",
    "for": "loops are written  for i in 0..7 { ... }  (ranges include both ends)",
    "use": "presets and files are included with  use NAME[(param=value, ...)] [as NAME[COUNT]]",
    "dims": "multi-dimensional topologies are written"
    "  dims NAME Ring(2)_FullyConnected(4)_Switch(8) BW LAT, BW LAT, BW LAT",
    "param": "parameters are written  param NAME = VALUE",
    "let": "constants are written  let NAME = VALUE",
    "default": "defaults are written  default 50GB/s 0.5us",
    "chunk": "chunks are written  chunk [reduce] from NPUS to NPUS [size SIZE] [count N]",
    "reshard": "reshards are written  reshard [\"NAME\"] tensor [D0, D1, ...] [dtype f32]"
    " from NPUS [shape [R, C]] spec S0RR to NPUS [shape [R, C]] spec RS0R [pieces K]",
    "job": "jobs are written  job \"NAME\" group NPUS [priority P] { collective ... }",
}
for _gen in ("ring", "biring", "mesh", "torus", "fullyconnected", "hypercube", "dragonfly",
             "fattree", "star"):
    STATEMENT_FORMS[_gen] = (
        f"generators are written  {_gen} NAME[SHAPE] BANDWIDTH LATENCY  e.g.  "
        + {"mesh": "mesh m[4,4] 50GiB/s 0.5us  (or per dimension: x 100GB/s 1us y 25GB/s 2us)",
           "torus": "torus t[8,8,8] 50GiB/s 0.5us",
           "dragonfly": "dragonfly d[4,5] local 400GB/s 0.5us global 200GB/s 1us",
           "fattree": "fattree f[16] leaves=4 spines=2 down 50GB/s 1us up 100GB/s 1us",
           "star": "star s[8] 300GB/s 0.35us unwind degree(2)"}.get(
               _gen, f"{_gen} r[8] 50GB/s 0.5us")
    )

UNIT_HINT = (
    "units: bandwidth GB/s GiB/s Gb/s MB/s (default GB/s); time ns us ms s (default us); "
    "size B KB KiB MB MiB GB GiB (default B)"
)

TOKEN_NAMES: dict[str, str] = {
    "NAME": "a name",
    "NUMBER": "a number",
    "UNIT": "a unit",
    "STRING": "a quoted string",
    "ARROW": "'->' or '<->'",
    "MULT": "a multiplicity such as x2",
    "_NL": "end of line",
    "$END": "end of file",
    "LSQB": "'['",
    "RSQB": "']'",
    "LPAR": "'('",
    "RPAR": "')'",
    "LBRACE": "'{'",
    "RBRACE": "'}'",
    "COMMA": "','",
    "EQUAL": "'='",
    "DOT": "'.'",
    "__ANON_0": "'..'",
    "DIMSPEC": "a dimension list such as Ring(2)_FullyConnected(4)",
    "GENERATOR": "a generator name",
    "VARREF": "a $constant",
    "SEMICOLON": "';'",
}


def grammar_cache_file() -> str | None:
    """Where the built TDL parser is cached, or None when caching is off or impossible.

    The folder is ``$TACOS_CACHE_DIR`` when set (an empty value turns the cache off), else the
    user cache folder (``platformdirs.user_cache_dir("tacos")``, e.g. ``~/.cache/tacos``).  The
    file name carries the lark and Python versions; lark checks the grammar's hash on load
    and rebuilds (and rewrites) a stale or damaged cache, and an unwritable folder only costs
    the rebuild.
    """
    folder = os.environ.get("TACOS_CACHE_DIR")
    if folder is None:
        try:
            import platformdirs

            folder = platformdirs.user_cache_dir("tacos", appauthor=False)
        except Exception:  # noqa: BLE001 - no cache folder: build the parser each time
            return None
    if not folder:
        return None
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:
        return None
    if not os.access(folder, os.W_OK | os.R_OK):
        return None
    tag = f"lark{lark_version}-py{sys.version_info[0]}{sys.version_info[1]}"
    return os.path.join(folder, f"tdl-grammar-{tag}.cache")


@lru_cache(maxsize=1)
def grammar() -> Lark:
    """The TDL parser (LALR, positions kept), loaded from the installed package and cached
    on disk (:func:`grammar_cache_file`): building it takes about 0.1 s, loading 0.01 s."""
    cache = grammar_cache_file()
    return Lark.open_from_package(
        "tacos.grammar",
        "tdl.lark",
        parser="lalr",
        propagate_positions=True,
        maybe_placeholders=False,
        **({"cache": cache} if cache else {}),
    )


def read_source(path: str | Path, *, regular_only: bool = False) -> str:
    """Read a TDL file, refusing missing, non-text, empty or huge files with a located error.

    At most ``limits.current().tdl_bytes`` bytes are read, whatever the file claims to be;
    ``regular_only`` (for included files) refuses devices, pipes and sockets unopened.
    """
    data = read_capped(path, limit="tdl_bytes", what="TDL file", regular_only=regular_only)
    return decode_text(data, str(path), "TDL file", EMPTY_HINT)


def check_nesting(text: str, source: str) -> None:
    """Refuse blocks, brackets or parentheses nested deeper than ``limits.current().nesting``.

    Checked on the raw text (comments and strings blanked) before parsing, so that no stage
    recurses deeper than the limit.
    """
    if not any(c in text for c in "{[("):
        return
    blanked = _BLANK.sub(lambda m: " " * len(m.group()), text)
    limit = limits.current().nesting
    depth = 0
    for m in _BRACKET.finditer(blanked):
        if m.group() in "{[(":
            depth += 1
            if depth > limit:
                line, col = position(text, m.start())
                raise limits.LimitError(
                    f"blocks, brackets or parentheses nested deeper than {limit} levels "
                    "(nesting)", span=Span(source, line, col), source_line=_line(text, line),
                    hint=f"flatten the nesting, or raise the limit: --limit nesting={limit * 2}")
        else:
            depth -= 1


_BLANK = re.compile(r'#[^\n]*|"[^"\n]*"')
_BRACKET = re.compile(r"[][{}()]")
EMPTY_HINT = "a TDL file declares at least one NPU"


def _line(text: str, lineno: int) -> str:
    lines = text.splitlines()
    return lines[lineno - 1] if 0 < lineno <= len(lines) else ""


def _describe(token: Token) -> str:
    if token.type == "$END":
        return "end of file"
    if token.type == "_NL":
        return "end of line"
    return f"'{token}'"


def _expected(names: set[str]) -> str:
    readable = sorted({TOKEN_NAMES.get(n, f"'{n.lower()}'" if n.isupper() else n) for n in names})
    if len(readable) > 8:
        readable = readable[:8] + ["..."]
    return ", ".join(readable)


def _statement_hint(text: str, lineno: int) -> str | None:
    words = _line(text, lineno).split()
    if not words:
        return None
    return STATEMENT_FORMS.get(words[0])


def _syntax_error(exc: UnexpectedInput, text: str, source: str) -> TdlSyntaxError:
    line = getattr(exc, "line", None) or 1
    col = getattr(exc, "column", None) or 1
    if isinstance(exc, UnexpectedEOF) or (
        isinstance(exc, UnexpectedToken) and exc.token.type == "$END"
    ):
        lines = text.splitlines() or [""]
        line = len(lines)
        col = len(lines[-1]) + 1
        hint = None
        if text.count("{") > text.count("}"):
            hint = "a '{' is not closed: add the matching '}'"
        return TdlSyntaxError(
            "unexpected end of file",
            span=Span(source, line, col),
            source_line=lines[-1],
            hint=hint or _statement_hint(text, line),
        )
    src_line = _line(text, line)
    hint = _statement_hint(text, line)
    if isinstance(exc, UnexpectedCharacters):
        ch = text[exc.pos_in_stream] if exc.pos_in_stream < len(text) else ""
        rest = text[exc.pos_in_stream: exc.pos_in_stream + 2]
        msg = f"unexpected character {ch!r}"
        if rest == "=>":
            msg, hint = "'=>' is not an arrow", "write '->' for a one-way link, '<->' for two-way"
        elif ch == "=" and hint is None:
            hint = "'=' is only used in  param NAME = VALUE,  let NAME = VALUE  and  key=value"
        elif ch in "<-" :
            hint = "links use '->' (one-way) or '<->' (two-way)"
        return TdlSyntaxError(msg, span=Span(source, line, col), source_line=src_line, hint=hint)
    tok = exc.token  # UnexpectedToken
    expected = set(exc.expected)
    parser = getattr(exc, "interactive_parser", None)
    if parser is not None:
        try:
            expected = set(parser.accepts()) or expected
        except Exception:  # noqa: BLE001 - fall back to the coarser LALR set
            pass
    if str(tok) == "=" and text[tok.end_pos: tok.end_pos + 1] == ">":
        return TdlSyntaxError("'=>' is not an arrow", span=Span(source, line, col, line, col + 2),
                              source_line=src_line,
                              hint="write '->' for a one-way link, '<->' for two-way")
    if tok.type == "_NL":
        msg = f"line ends too early; expected {_expected(expected)}"
        col = len(src_line.rstrip()) + 1
        return TdlSyntaxError(msg, span=Span(source, line, col), source_line=src_line, hint=hint)
    end_col = col + len(str(tok))
    msg = f"unexpected {_describe(tok)}; expected {_expected(expected)}"
    glued = tok.start_pos is not None and tok.start_pos > 0 and text[tok.start_pos - 1].isdigit()
    if tok.type == "NAME" and ("UNIT" in expected or glued):
        msg = f"unknown unit {str(tok)!r}"
        hint = UNIT_HINT
    elif tok.type == "NUMBER" and expected <= {"_NL", "SEMICOLON", "$END", "RBRACE"}:
        msg = f"unexpected number {str(tok)!r} at the end of the statement"
    elif tok.type == "ARROW" and "ARROW" not in expected:
        hint = hint or STATEMENT_FORMS["link"]
    elif str(tok) in STATEMENT_FORMS and {"_NL", "SEMICOLON"} & expected:
        msg = f"unexpected {_describe(tok)}: two statements on one line?"
        hint = "put each statement on its own line, or separate them with ';'"
    return TdlSyntaxError(
        msg, span=Span(source, line, col, line, end_col), source_line=src_line, hint=hint
    )


def parse_tree(text: str, source: str = "<string>") -> Tree:
    """Parse TDL text into a lark tree or raise :class:`TdlSyntaxError`."""
    nul = text.find("\x00")
    if nul >= 0:
        line, col = position(text, nul)
        raise InputFileError(f"{source} is not a text file (it contains NUL bytes)",
                             span=Span(source, line, col), hint="a TDL file is UTF-8 text")
    if not text.strip():
        raise InputFileError(f"{source} is empty", span=Span(source, 1, 1), hint=EMPTY_HINT)
    check_nesting(text, source)
    if not text.endswith("\n"):
        text += "\n"
    try:
        return grammar().parse(text)
    except UnexpectedInput as exc:
        raise _syntax_error(exc, text, source) from None
