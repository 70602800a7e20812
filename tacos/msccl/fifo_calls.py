"""How msccl-executor-nccl cuts a step into primitive calls, and the FIFO slots each call takes.

Facts (Azure/msccl-executor-nccl, ``msccl_kernel_impl.h`` and NCCL's ``prims_*.h``):

* one MSCCL chunk is ``nbytes / nchunksperloop`` bytes; the kernel walks it in slices of the
  protocol's chunk size (Simple: ``MSCCL_CHUNKSTEPS`` = 4 FIFO steps of 512 KiB; LL and LL128
  one step), running the whole program once per slice;
* inside one such iteration a step of ``cnt`` chunks is ``ceil(cnt / maxAllowedCount)``
  primitive calls, ``maxAllowedCount = max(1, chunkSize / sizePerMscclChunk)`` (below
  ``MSCCL_MAX_COUNT``): one call per chunk as soon as a chunk fills a slice;
* a Simple call always takes ``SlicePerChunk x StepPerSlice`` = 4 of the connection's
  ``NCCL_STEPS`` = 8 slots (empty slices still post), an LL or LL128 call one;
* a send waits for a free slot before each slice (it blocks on the receiver once 8 slots are
  in flight); a receive waits for each slot's data.

So a step whose calls need more than 8 slots cannot finish before its receiver has started
draining it; the FIFO execution (:mod:`tacos.msccl.verify_fifo`) runs such steps call by
call.  The size the split is judged at is the one verified, else the top of the plan's
``maxBytes`` window; a plan without an upper bound may run at any size, where every chunk
fills a slice (one call per chunk).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tacos.msccl.program import Program

NCCL_STEPS = 8
"""FIFO slots per connection (``devcomm.h``)."""
SIMPLE_CHUNK_STEPS = 4
"""Slots one Simple call takes (``MSCCL_CHUNKSTEPS = NCCL_STEPS / 2``)."""
CHUNK_BYTES = {"Simple": 4 * (4 << 20) // NCCL_STEPS, "LL": 32768, "LL128": 576000}
"""Payload bytes of one call at full size (Simple 4 x 512 KiB; LL, LL128 one step)."""
MAX_ALLOWED_COUNT = 71
"""Largest ``maxAllowedCount`` (below the runtime's ``MSCCL_MAX_COUNT`` = 72)."""
WINDOW_REACH = 2
"""How far above the size it is chosen for a plan's emitted window may reach."""
UNBOUNDED = 1 << 62
"""``maxBytes`` at or above this is "no upper bound" (the XML writes 2^64 - 1)."""


@dataclass(frozen=True)
class CallSplit:
    """How the steps of one program are cut: ``max_count`` chunks per call and
    ``slots`` FIFO slots per call (``capacity`` slots per connection)."""

    max_count: int = 1
    slots: int = SIMPLE_CHUNK_STEPS
    capacity: int = NCCL_STEPS
    nbytes: int | None = None

    def calls(self, cnt: int) -> int:
        """Primitive calls of a step of ``cnt`` chunks (1 for a step that moves nothing)."""
        return max(1, math.ceil(cnt / self.max_count))

    def overflows(self, cnt: int) -> bool:
        """True when a step of ``cnt`` chunks needs more slots than a connection holds."""
        return self.calls(cnt) * self.slots > self.capacity

    def describe(self) -> str:
        """``'1 chunk per call at 1073741824 bytes'``."""
        at = f"at {self.nbytes} bytes" if self.nbytes else "at the largest sizes"
        per = "chunk" if self.max_count == 1 else "chunks"
        return f"{self.max_count} {per} per call {at}"


def slots_per_call(proto: str) -> int:
    """FIFO slots one primitive call takes in ``proto``."""
    return SIMPLE_CHUNK_STEPS if proto == "Simple" else 1


def judged_size(program: Program, nbytes: int | None = None) -> int | None:
    """The size the split is judged at: ``nbytes``, else the top of the plan's window
    (None: no upper bound, any size)."""
    if nbytes is not None:
        return int(nbytes)
    hi = int(program.maxBytes or 0)
    return hi if 0 < hi < UNBOUNDED else None


def widest_size(program: Program, nbytes: int) -> int:
    """The largest size a program chosen for ``nbytes`` is judged at: the top of its window
    when it has one, else ``WINDOW_REACH x nbytes`` (the window it is then emitted with, the
    geometric means to the neighbouring sizes of a sweep of sizes up to 4x apart or of
    ``tacosc shape``, ends there); calls only get more numerous with the size."""
    top = judged_size(program)
    return max(int(nbytes), top if top is not None else WINDOW_REACH * int(nbytes))


def call_split(program: Program, nbytes: int | None = None) -> CallSplit:
    """The split of ``program``'s steps at ``nbytes`` (default :func:`judged_size`)."""
    return split_for(program.proto, program.nchunksperloop, judged_size(program, nbytes))


def split_for(proto: str | None, nchunksperloop: int, size: int | None) -> CallSplit:
    """The split in ``proto`` with ``nchunksperloop`` chunks at ``size`` bytes (None: any
    size, so one chunk per call)."""
    proto = proto or "Simple"
    per_call = CHUNK_BYTES.get(proto, CHUNK_BYTES["Simple"])
    if size is None:
        count = 1
    else:
        chunk = size / max(1, nchunksperloop)
        count = max(1, min(MAX_ALLOWED_COUNT, int(per_call // max(chunk, 1.0))))
    return CallSplit(count, slots_per_call(proto), NCCL_STEPS, size)


def split_matters(program: Program, split: CallSplit) -> bool:
    """True when some step of ``program`` needs more slots than a connection holds (the
    FIFO execution must then run it call by call)."""
    return any(split.overflows(st.cnt) for g in program.gpus for tb in g.tbs
               for st in tb.steps if st.sends or st.receives)
