"""Whether msccl-executor-nccl would run an MSCCL XML plan at a message size.

Per call the runtime takes the first loaded algorithm whose collective matches, whose
``minBytes <= nBytes`` and (``maxBytes == 0`` or ``nBytes <= maxBytes``), and whose
``nchunksperloop`` divides ``count x sizeMultiplier`` - the call's element count over all ranks
(``docs/msccl-format.md`` §1.1).  A plan failing the test is silently skipped and NCCL runs its
own algorithm.  ``nbytes`` here is tacos' collective size (the larger of the send and receive
buffers: all-gather's output, reduce-scatter's input), which is ``count x sizeMultiplier x
element size``.
"""

from __future__ import annotations

from collections.abc import Sequence

from tacos.msccl.program import Program
from tacos.msccl.verify_report import Violation

__all__ = ["fit_windows", "smallest_served", "window_gaps", "xml_size_problems"]

#: Element sizes checked: 2 bytes (fp16/bf16, what mixed-precision training reduces) and 4.
ELEMENT_BYTES = (2, 4)


def xml_size_problems(program: Program, nbytes: int) -> list[Violation]:
    """Errors when the runtime would skip ``program`` at ``nbytes`` (for 2-byte elements, and
    so for every wider type), a warning when only 4-byte elements would be skipped."""
    out: list[Violation] = []
    lo = int(program.minBytes or 0)
    hi = int(program.maxBytes or 0)
    if nbytes < lo or (hi and nbytes > hi):
        out.append(Violation("size", f"{nbytes} bytes is outside the plan's window "
                             f"minBytes={lo} maxBytes={hi or 'unlimited'}: the runtime would "
                             "not pick it", hint="compile a plan for this size"))
    chunks = program.nchunksperloop
    for width in ELEMENT_BYTES:
        elements, rest = divmod(nbytes, width)
        if rest == 0 and chunks and elements % chunks == 0:
            continue
        severity = "error" if width == ELEMENT_BYTES[0] else "warning"
        out.append(Violation(
            "size", f"at {nbytes} bytes the {elements} elements of {width} bytes do not divide "
            f"into the plan's {chunks} chunks per loop (nchunksperloop): the runtime skips the "
            "plan and runs NCCL's own algorithm", severity=severity,
            hint="use sizes that are multiples of "
                 f"{chunks * width} bytes, or a plan with fewer chunks"))
        break
    return out


def smallest_served(chunks: int, element_bytes: int = ELEMENT_BYTES[0]) -> int | None:
    """The smallest power-of-two message (bytes) whose elements divide into ``chunks`` chunks
    per loop, and so every larger power of two too; None when ``chunks`` has an odd factor
    (no power of two divides)."""
    if chunks <= 0 or chunks & (chunks - 1):
        return None
    return max(1, chunks * element_bytes)


def fit_windows(spans: Sequence[tuple[int, int, int]]) -> list[tuple[int, int]]:
    """Windows ``(lo, hi)`` (``hi`` 0: no limit) whose boundaries move up to the smallest
    power-of-two size the upper window's plan divides (its ``nchunksperloop``, 2-byte
    elements) when the window below serves the sizes in between: ``spans`` are ``(lo, hi,
    nchunksperloop)`` in size order, disjoint and adjacent; the windows stay adjacent.  Sizes
    no window's plan serves are left where they are, for :func:`window_gaps` to name."""
    out = [[lo, hi] for lo, hi, _c in spans]
    for i in range(1, len(spans)):
        lo, hi, chunks = out[i][0], out[i][1], spans[i][2]
        fit = smallest_served(chunks)
        below = smallest_served(spans[i - 1][2])
        if fit is None or fit <= lo or (hi and fit > hi) or below is None or below > lo:
            continue
        out[i][0] = fit
        out[i - 1][1] = fit - 1  # the window below serves lo .. fit-1 too
    return [(lo, hi) for lo, hi in out]


def window_gaps(programs: Sequence[tuple[str, Program]], *, top: int = 1 << 40) -> list[str]:
    """Where a set of XML windows (``(name, program)``, e.g. one folder) leaves power-of-two
    sizes (up to ``top``) to NCCL's own algorithm, and why: no window covers the size, or the
    window's plan's chunks per loop do not divide it (2-byte elements).  Empty: gap-free."""
    wins = sorted(programs, key=lambda np: int(np[1].minBytes or 0))
    out: list[str] = []
    size = 1
    while size <= top:
        why = _why(wins, size)
        if why:
            start = size
            while size * 2 <= top and _why(wins, size * 2) == why:
                size *= 2
            span = f"{start} B" if start == size else f"{start} B .. {size} B"
            out.append(f"power-of-two sizes {span}: {why}; the runtime runs NCCL's own "
                       "algorithm there")
        size *= 2
    return out


def _why(wins: Sequence[tuple[str, Program]], size: int) -> str:
    holders = [(n, p) for n, p in wins if int(p.minBytes or 0) <= size
               and (not p.maxBytes or size <= int(p.maxBytes))]
    if not holders:
        return "no window covers it"
    name, prog = holders[0]
    bad = [v for v in xml_size_problems(prog, size) if v.severity == "error"]
    return f"{name}'s {prog.nchunksperloop} chunks per loop do not divide it" if bad else ""
