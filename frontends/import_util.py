"""Shared pieces of the topology importers: located errors, quantities, and the TDL text
they write (an importer's result is TDL, so a user can read and edit what was imported).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tacos.errors import InputFileError, Span, TacosError
from tacos.model.units import as_quantity

MAX_IMPORT_BYTES = 16 * 1024 * 1024


def read_text(source: str | Path, what: str) -> tuple[str, str]:
    """``(text, name)`` of a file path; text given directly (it has a newline) is returned
    as is with the name ``<what>``."""
    if isinstance(source, str) and ("\n" in source or source.lstrip().startswith(("{", "<"))):
        return source, f"<{what}>"
    from tacos.inputs import check_regular, strip_bom

    p = Path(source)
    check_regular(p, what, hint=f"give the path of the {what}")
    if p.stat().st_size > MAX_IMPORT_BYTES:
        raise InputFileError(f"{p} is larger than {MAX_IMPORT_BYTES} bytes; not a {what}?")
    try:
        return strip_bom(p.read_text(encoding="utf-8")), str(p)
    except UnicodeDecodeError as exc:
        raise InputFileError(f"{p} is not UTF-8 text (byte {exc.start})") from None


def error_at(name: str, text: str, line: int, col: int, message: str,
             hint: str | None = None, width: int = 1) -> TacosError:
    """A :class:`TacosError` located at ``line``:``col`` of ``text`` (1-based)."""
    lines = text.splitlines()
    src = lines[line - 1] if 0 < line <= len(lines) else None
    return TacosError(message, span=Span(name, line, col, line, col + max(1, width)),
                      hint=hint, source_line=src)


def locate(text: str, needle: str, start: int = 0) -> tuple[int, int]:
    """1-based (line, column) of the first ``needle`` at or after offset ``start`` (the start
    of the text when absent)."""
    pos = text.find(needle, start)
    if pos < 0:
        return 1, 1
    line = text.count("\n", 0, pos) + 1
    col = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return line, col


def load_json(text: str, name: str) -> Any:
    """Decode JSON, turning a syntax error into a located :class:`TacosError`."""
    from tacos.inputs import check_json_nesting, json_nesting_error

    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise error_at(name, text, exc.lineno, exc.colno, f"not JSON: {exc.msg}") from None
    except RecursionError:
        raise json_nesting_error(text, name) from None
    check_json_nesting(doc, name)
    return doc


def quantity(value: Any, kind: str, what: str, default_unit: str | None = None) -> float:
    """A bandwidth/time/size given as a number in base units or as a text with a unit."""
    return as_quantity(value, kind, what, default_unit)


def _short(x: float, scale: float) -> str:
    """The shortest decimal text t with float(t) * scale == x (so TDL reads back x)."""
    for digits in range(6, 18):
        text = f"{x / scale:.{digits}g}"
        if float(text) * scale == x:
            return text
    return repr(x / scale)


def bw(x: float) -> str:
    """A bandwidth in TDL (GB/s, read back exactly)."""
    return _short(x, 1e9) + "GB/s"


def lat(x: float) -> str:
    """A latency in TDL (us, read back exactly)."""
    return _short(x, 1e-6) + "us"


def tdl_name(text: str) -> str:
    """A TDL string literal."""
    return '"' + text.replace('"', "'") + '"'


def fabric_lines(nodes: int, nic_gpus: list[int], gpu_ref: str, nic_bw: float,
                 nic_alpha: float) -> list[str]:
    """TDL joining ``nodes`` copies by their NICs: NIC r of node n sits at GPU
    ``nic_gpus[r]``.  One NIC per node: one IB switch, unwound as a ring over the nodes; more:
    rail-optimized, NIC r of every node on switch ``rail[r]`` (unwound as a ring) - the shapes
    of the ``ndv2`` and ``dgx_a100`` presets.  ``gpu_ref`` formats a GPU reference from
    ``{n}`` (node) and ``{g}`` (GPU)."""
    if nodes <= 1 or not nic_gpus:
        return []
    out = [f"# {len(nic_gpus)} NIC(s) per node, {bw(nic_bw)} and {lat(nic_alpha)} each"]
    if len(nic_gpus) == 1:
        ends = ", ".join(gpu_ref.format(n=n, g=nic_gpus[0]) for n in range(nodes))
        out.append(f"switch ib unwind ring attach {ends} {bw(nic_bw)} {lat(nic_alpha)} tag ib")
        return out
    out.append(f"switch rail[{len(nic_gpus)}] unwind ring")
    for r, g in enumerate(nic_gpus):
        for n in range(nodes):
            out.append(f"link {gpu_ref.format(n=n, g=g)} <-> rail[{r}] {bw(nic_bw)} "
                       f"{lat(nic_alpha)} tag nic")
    return out
