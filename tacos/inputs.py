"""Reading input files with a size cap applied while reading, and locating whole-file errors.

A size taken from ``stat`` says nothing about devices and pipes (``/dev/zero`` reports 0
bytes), so the cap is enforced on the bytes actually read.  Every path read must name a regular
file (:func:`check_regular`, before it is opened): a device, named pipe or socket could block or
stream forever; standard input is read only when asked for explicitly, as ``-``.  Errors about
a whole file (not text, not UTF-8, empty) carry a position: the first offending byte, or line 1.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

from tacos import limits
from tacos.errors import InputFileError, Span

_BLOCK = 1 << 20
BOM = "\ufeff"
"""The byte-order mark some editors put at the start of UTF-8 text; accepted and dropped."""
STDIN = "-"
"""The path that reads standard input (where a command says it does)."""


def check_regular(path: str | Path, what: str, hint: str = "check the path") -> os.stat_result:
    """``path``'s status if it is a regular file (symlinks followed), else an
    :class:`~tacos.errors.InputFileError` saying what it is instead; nothing is opened."""
    p = Path(path)
    try:
        info = p.stat()
    except FileNotFoundError:
        raise InputFileError(f"{p}: no such file", hint=hint) from None
    except OSError as exc:
        raise InputFileError(f"{p}: cannot read ({exc.strerror or exc})") from None
    if stat.S_ISDIR(info.st_mode):
        raise InputFileError(f"{p} is a directory, not a {what}")
    if not stat.S_ISREG(info.st_mode):
        kind = ("a named pipe" if stat.S_ISFIFO(info.st_mode) else
                "a socket" if stat.S_ISSOCK(info.st_mode) else "a device")
        raise InputFileError(f"{p} is {kind}, not a regular file",
                             hint="give an ordinary file (or - for standard input, where a "
                             f"command reads its {what} from it)")
    return info


def read_capped(path: str | Path, *, limit: str, what: str,
                regular_only: bool = True) -> bytes:
    """The bytes of ``path``, refusing more than ``limits.current().<limit>`` bytes.

    ``what`` names the kind of file in messages (``"TDL file"``).  Anything but a regular file
    is refused before it is opened (:func:`check_regular`; ``regular_only`` is kept for old
    callers and has no effect); ``path == "-"`` reads standard input, capped the same way.
    """
    cap = getattr(limits.current(), limit)
    if str(path) == STDIN and not isinstance(path, Path):
        return _read_fd(sys.stdin.buffer.fileno(), Path("<stdin>"), cap, limit, what)
    p = Path(path)
    info = check_regular(p, what)
    if info.st_size > cap:
        raise _too_big(p, info.st_size, cap, limit, what)
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise InputFileError(f"{p}: cannot read ({exc.strerror or exc})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # replaced meanwhile
            raise InputFileError(f"{p} is not a regular file")
        return _read_fd(fd, p, cap, limit, what)
    finally:
        os.close(fd)


def _read_fd(fd: int, p: Path, cap: int, limit: str, what: str) -> bytes:
    try:
        parts: list[bytes] = []
        total = 0
        while True:
            block = os.read(fd, min(_BLOCK, cap + 1 - total))
            if not block:
                break
            parts.append(block)
            total += len(block)
            if total > cap:
                raise _too_big(p, None, cap, limit, what)
    except OSError as exc:
        raise InputFileError(f"{p}: cannot read ({exc.strerror or exc})") from None
    return b"".join(parts)


def _too_big(p: Path, size: int | None, cap: int, limit: str, what: str) -> InputFileError:
    got = f"is {size:,} bytes" if size is not None else f"has more than {cap:,} bytes"
    return InputFileError(
        f"{p} {got}; a {what} is limited to {cap:,} bytes ({limit})",
        hint=f"raise the limit with --limit {limit}=BYTES if the file is really that big")


def position(data: bytes | str, offset: int) -> tuple[int, int]:
    """1-based (line, column) of ``offset`` in ``data``."""
    nl = b"\n" if isinstance(data, bytes) else "\n"
    line = data.count(nl, 0, offset) + 1
    start = data.rfind(nl, 0, offset) + 1
    return line, offset - start + 1


def strip_bom(text: str) -> str:
    """``text`` without a leading UTF-8 byte-order mark."""
    return text[1:] if text.startswith(BOM) else text


def decode_text(data: bytes, source: str, what: str, empty_hint: str | None = None) -> str:
    """``data`` as UTF-8 text, or a located :class:`InputFileError` (never echoing the bytes).

    Refused: NUL bytes (position of the first), undecodable bytes (position of the first) and
    text that is empty or only white space (line 1).  A leading UTF-8 byte-order mark (what
    Windows editors write) is dropped.
    """
    nul = data.find(b"\x00")
    if nul >= 0:
        line, col = position(data, nul)
        raise InputFileError(f"{source} is not a text file (it contains NUL bytes; the first "
                             f"at byte {nul})", span=Span(source, line, col),
                             hint=f"a {what} is UTF-8 text")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line, col = position(data, exc.start)
        raise InputFileError(f"{source} is not UTF-8 text (byte {exc.start} cannot be "
                             "decoded)", span=Span(source, line, col),
                             hint="save the file as UTF-8") from None
    text = strip_bom(text)
    if not text.strip():
        raise InputFileError(f"{source} is empty", span=Span(source, 1, 1),
                             hint=empty_hint or f"a {what} is not empty")
    return text


def check_json_nesting(doc: object, source: str, sample: int = 64) -> None:
    """Refuse a parsed JSON document nested deeper than ``limits.current().nesting``.

    Iterative, so it cannot itself run out of stack.  Arrays are followed through their first
    ``sample`` items only: those are what recursive consumers (schema validation of a sample)
    see; every other item is checked field by field by the structural readers.
    """
    limit = limits.current().nesting
    stack: list[tuple[object, int, str]] = [(doc, 1, "$")]
    while stack:
        value, depth, path = stack.pop()
        if isinstance(value, dict):
            items = [(v, f"{path}.{k}") for k, v in value.items()]
        elif isinstance(value, list):
            items = [(v, f"{path}[{i}]") for i, v in enumerate(value[:sample])]
        else:
            continue
        if depth > limit:
            raise limits.LimitError(f"{source}: {path}: JSON nested deeper than {limit} levels "
                                    "(nesting)",
                                    hint="a schedule file is a few levels deep; raise the "
                                    "limit with --limit nesting=N if this one is intended")
        stack.extend((v, depth + 1, p) for v, p in items if isinstance(v, dict | list))


def json_nesting_error(text: str, source: str) -> limits.LimitError:
    """The located error for JSON text too deeply nested for the parser (error path only)."""
    limit = limits.current().nesting
    depth, in_string, escaped = 0, False, False
    where = len(text)
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                where = i
                break
        elif ch in "]}":
            depth -= 1
    line, col = position(text, where)
    return limits.LimitError(f"JSON nested deeper than {limit} levels (nesting)",
                             span=Span(source, line, col),
                             hint="a schedule file is a few levels deep; raise the limit with "
                             f"--limit nesting={limit * 2} if this one is intended")
