"""File positions for limit errors found after parsing.

Most limits are checked while a TDL file is read, at the statement that exceeds them.  Some can
only be checked once the topology and the collective exist (switch unwinding's link count, the
chunks and arrivals of a collective given on the command line); those errors are located here
at the statement responsible: the switch whose fabric unwinds into too many links, the
collective's own declaration, else the declaration of the NPUs its group spans.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tacos.errors import Span
from tacos.limits import LimitError

if TYPE_CHECKING:
    from tacos.model.collective import Collective
    from tacos.model.topology import Topology


def _source_line(span: Span) -> str | None:
    """The text of ``span``'s line when its file is a readable TDL file (else None)."""
    from tacos.inputs import decode_text, read_capped

    if span.file.startswith("<"):
        return None
    try:
        text = decode_text(read_capped(span.file, limit="tdl_bytes", what="TDL file"),
                           span.file, "TDL file")
    except Exception:  # noqa: BLE001 - the position alone still locates the error
        return None
    lines = text.splitlines()
    return lines[span.line - 1] if 0 < span.line <= len(lines) else None


def _at(error: LimitError, span: Span | None, note: str = "") -> LimitError:
    if span is None:
        return error
    out = LimitError(error.message + note, span=span, hint=error.hint,
                     source_line=_source_line(span))
    return out


def locate_links(error: LimitError, topology: Topology) -> LimitError:
    """``error`` (too many unwound links) at the declaration of the switch with most ports."""
    if error.span is not None or not topology.switches:
        return error
    ports = {i: len(topology.in_links[topology.n_npus + i]) for i in
             range(len(topology.switches))}
    biggest = max(ports, key=lambda i: (ports[i], -i))
    return _at(error, topology.switches[biggest].span)


def locate_group(error: LimitError, topology: Topology, group: Sequence[int],
                 collective: Collective | None = None) -> LimitError:
    """``error`` (a collective's chunks or arrivals) at the collective's declaration, else at
    the statement declaring the last NPU of its ``group`` (what makes the group that big)."""
    if error.span is not None:
        return error
    if collective is not None and collective.span is not None:
        return _at(error, collective.span)
    spans = [topology.npus[k].span for k in reversed(group) if 0 <= k < topology.n_npus]
    span = next((s for s in spans if s is not None), None)
    return _at(error, span, f" (its group of {len(group):,} NPUs: the NPUs declared here)")
