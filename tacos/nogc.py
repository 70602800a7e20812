"""Pausing Python's cyclic garbage collector during allocation-heavy phases.

Lowering, verifying and parsing large schedules and MSCCL programs allocate millions of small
objects that stay alive until the phase ends and form no reference cycles; each full collection
would walk all of them again, which made these phases grow faster than their work (40% of a 216-NPU
lowering).  Reference counting still frees everything as usual.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused_gc(*, aged: bool = False) -> Iterator[None]:
    """Run the block with the cyclic collector off (restored afterwards, also on errors).

    ``aged``: what the block allocated and kept joins the oldest generation when it ends, so
    the next young collection does not walk all of it at once (0.4 s after a 64-NPU portfolio);
    full collections still reach it, cyclic garbage included."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if aged:
            gc.freeze()  # every tracked object to the permanent generation ...
            gc.unfreeze()  # ... and back, into the oldest one: no walk
        if was:
            gc.enable()


BATCH_THRESHOLDS = (100_000, 50, 50)
"""The collector's thresholds for a ``tacosc`` process: a young collection every 100,000 net
allocations of container objects instead of 700.  A compile builds millions of long-lived
objects (schedules, flows, programs), and with the default thresholds it collected about 55,000
times: 25.6 of 169.5 s of CPU for the 512-NPU torus all-reduce written as MSCCL XML, 17.5 of
125.4 s for the greedy alone.  With these, 9.7 of 148.4 s and 5.5 of 112.5 s, the same XML
(``docs/benchmarks/scale-default.md``).  Cyclic garbage is still collected, later."""


def batch_thresholds() -> tuple[int, int, int]:
    """Set :data:`BATCH_THRESHOLDS` and return the thresholds they replace.  Only an entry
    point that owns its process calls this (never a library function, nor a CLI call made
    in-process): the setting is process-wide."""
    was = gc.get_threshold()
    gc.set_threshold(*BATCH_THRESHOLDS)
    return was


def freeze_for_exit() -> None:
    """Put every object the process holds in the collector's permanent generation, for a
    process that exits next: the interpreter's shutdown then frees what reference counting
    frees without one more full collection over the whole heap.  After a default compile of
    the 64-NPU TPU-v4-like cube (about two million objects: plans, lowerings, their timing
    models) that last collection took 1.5 s of CPU; frozen, the shutdown takes 0.2 s.  What
    is frozen is never collected, so only an entry point that returns to the interpreter's
    exit calls this (never a library function, nor a test calling the CLI in-process)."""
    gc.freeze()
