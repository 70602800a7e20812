"""Chunks per NPU chosen by synthesis: enough pieces for store-and-forward to pipeline.

The greedy moves whole chunks and forwards a chunk only once it has fully arrived, so a large
message cut into one chunk per NPU cannot pipeline: a GPU behind a NIC waits for the whole
shard before passing it on over NVLink, and a chunk relayed over three xGMI hops pays its wire
time three times.  More chunks pipeline better but pay α more often (merging recovers part of
it) and make synthesis slower.  Which count is best depends on the topology and the size, so
:func:`synthesize_chunked` does not guess: it synthesizes with ``k = 1, 2, 4, ...`` chunks per
NPU and keeps the fastest schedule (a larger count must be faster by more than
:data:`MIN_GAIN` to be preferred), stopping

* after :data:`PATIENCE` doublings in a row that did not improve on the best,
* when the best is within :data:`CLOSE_TO_BOUND` of the bandwidth lower bound (min-cut,
  ingress/egress: what no chunking can beat),
* before a chunk would be smaller than :data:`MIN_CHUNK_BYTES`, the count would pass
  :data:`MAX_CHUNKS`, or the collective would need more than :data:`DELIVERY_BUDGET`
  (chunk, NPU) deliveries.

Everything is deterministic: the same seed gives the same bytes.  The chosen count and the time
of each count tried are in ``schedule.meta`` (``chunks_per_npu``, ``chunks_tried``).  Only
standard collectives (``tacos.model.patterns.build``) can be re-chunked; any other is synthesized as
given.
"""

from __future__ import annotations

import time
from typing import Any

from tacos.model.collective import STANDARD_COLLECTIVES, Collective
from tacos.model.patterns import build
from tacos.model.schedule import Schedule
from tacos.model.topology import Topology

MAX_CHUNKS = 64
"""Largest number of chunks per NPU tried."""

MIN_CHUNK_BYTES = 256 * 1024
"""No chunk smaller than this (below it α dominates every transfer)."""

DELIVERY_BUDGET = 40_000
"""Most (chunk, NPU) deliveries a tried collective may need (synthesis time grows with it)."""

PATIENCE = 2
"""Doublings in a row without a faster schedule before the search stops."""

CLOSE_TO_BOUND = 1.01
"""The search stops once the best schedule is within this factor of the bandwidth bound."""

MIN_GAIN = 0.005
"""A larger count replaces the best only if it is faster by more than this fraction."""


def rechunk(collective: Collective, k: int) -> Collective:
    """The same standard collective with ``k`` chunks per NPU."""
    return build(collective.kind, collective.group, size=collective.size, chunks_per_npu=k,
                 root=collective.root, name=collective.name)


def _deliveries(collective: Collective) -> int:
    return sum(len(c.post) if c.reduce else len(c.post - c.pre) for c in collective.chunks)


def chunk_counts(collective: Collective) -> list[int]:
    """The counts :func:`synthesize_chunked` may try, smallest first."""
    if collective.kind not in STANDARD_COLLECTIVES or collective.tenants:
        return [collective.chunks_per_npu]
    per_one = _deliveries(rechunk(collective, 1))
    parts = max(1, len(collective.chunks) // max(1, collective.chunks_per_npu))
    out = []
    k = 1
    while k <= MAX_CHUNKS:
        if k > 1 and (collective.size // (parts * k) < MIN_CHUNK_BYTES
                      or per_one * k > DELIVERY_BUDGET):
            break
        out.append(k)
        k *= 2
    return out


def synthesize_chunked(topology: Topology, collective: Collective, *, solver: str = "greedy",
                       **options: Any) -> Schedule:
    """Synthesize ``collective`` with the chunks per NPU that give the fastest schedule.

    ``options`` go to :func:`tacos.synthesize` for every count tried.  The returned schedule's
    collective is ``collective`` re-chunked (its ``chunks_per_npu`` says how).
    """
    from tacos.check.bounds import lower_bound
    from tacos.synthesize import check_request, synthesize

    check_request(topology, collective, solver=solver, **options)  # before the bound's cuts
    counts = chunk_counts(collective)
    if len(counts) <= 1:
        return synthesize(topology, collective, solver=solver, **options)
    floor = lower_bound(topology, rechunk(collective, 1)).bandwidth
    best: Schedule | None = None
    tried: dict[int, float] = {}
    misses = 0
    limit = options.get("time_limit")
    start = time.perf_counter()
    for k in counts:
        opts = options
        if limit is not None and best is not None:  # one time limit for all the counts
            left = limit - (time.perf_counter() - start)
            if left <= 0:
                break
            opts = {**options, "time_limit": max(left, 1e-3)}
        sched = synthesize(topology, rechunk(collective, k), solver=solver, **opts)
        tried[k] = sched.makespan
        if best is None or sched.makespan < best.makespan * (1 - MIN_GAIN):
            best, misses = sched, 0
        else:
            misses += 1
        if misses >= PATIENCE or best.makespan <= CLOSE_TO_BOUND * floor:
            break
    assert best is not None
    best.meta["chunks_per_npu"] = best.collective.chunks_per_npu
    best.meta["chunks_tried"] = tried
    return best
