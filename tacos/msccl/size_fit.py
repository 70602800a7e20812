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

from tacos.msccl.program import Program
from tacos.msccl.verify_report import Violation

__all__ = ["xml_size_problems"]

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
