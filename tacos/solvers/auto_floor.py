"""A sound lower bound on a plan's runtime-model time, cheaper than the time itself.

``auto`` ranks synthesized plans by the runtime model's time of their MSCCL XML lowering
(:func:`tacos.runtime.msccl_exec.estimate_program`).  That model times one loop iteration event
by event with every connection at its *share* of the ports it crosses (a port split among the
connections that cross it, then re-timed with the mean number active together), and adds the
later iterations from the busiest resource's work.

:func:`runtime_floor` times the same iteration once, with every connection at the most it can
ever get -- ``min(CTA rate, line rate x efficiency x payload)`` of its slowest link, as if it
crossed every port alone -- and adds the later iterations the same way.  It is a lower bound:

* every event time of the iteration is a maximum of sums of predecessors' times and transfer
  durations, so it cannot grow when every duration shrinks; a connection's rate is never above
  that maximum (a share ``min(lanes, users) / users`` of a port is at most one lane), so every
  duration is at most the model's;
* the steady part adds, per further iteration, the largest of each thread block's busy plus
  synchronization time and each port's load over its capacity: the loads are the same, the
  busy times no larger, and the model's own pipeline trail only raises its figure.

So when the floor is above the best time already found, the plan cannot win and its full
timing (a second pass, and for multi-iteration programs a third on the doubled program) is
skipped.  The floor reuses the folded model and happens-before graph the full timing would
build (:mod:`tacos.runtime.msccl_exec` keeps the last few), so a plan that can still win
pays little more than before.

:func:`thread_block_floor` is a weaker bound that needs no timing at all, only one pass over
the program's steps: the base latency plus the bytes of the busiest thread block at the
fastest rate a thread block moves data.  :func:`runtime_floor` with ``above=`` returns it
instead of building the model and timing the iteration when it already exceeds ``above``
(the decision "cannot win" is the same; the figure quoted is the weaker one).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tacos.model.topology import Topology
from tacos.msccl.program import Program

#: step types the runtime model times as one transmission each, whose bytes its thread block
#: moves at most at the faster of its CTA's copy and reduce rates (``re`` chains are folded,
#: ``nop`` moves nothing)
_MOVING = frozenset({"s", "r", "rcs", "rrs", "rrc", "rrcs", "cpy"})


def thread_block_floor(program: Program, topology: Topology, nbytes: int) -> float:
    """Seconds no runtime-model time of ``program`` moving ``nbytes`` on ``topology`` can be
    under, from its steps alone: ``base latency + max over thread blocks of (chunks its
    s/r/rcs/rrs/rrc/rrcs/cpy steps move) x chunk bytes / max(CTA rate, CTA reduce rate)``.

    Sound (never above :func:`runtime_floor`, hence never above
    :func:`~tacos.runtime.msccl_exec.estimate_program`):

    * in :func:`~tacos.runtime.msccl_exec.time_iteration` every transmission of a thread block
      starts no earlier than the previous one of the same block finishes (program order is an
      edge of the happens-before graph) and finishes no earlier than its start plus its busy
      time; so the first iteration's makespan is at least every block's summed busy time;
    * a transmission of one of these types is one step (only ``re`` chains fold) and its busy
      time is ``cnt x slice bytes`` over a rate that is at most the CTA rate (a send's
      connection rate is ``min(CTA rate, port shares)``, a fused step's ``min(connection
      rate, own rate)``, a receive's or copy's its own rate: the CTA rate or, reducing, the
      CTA reduce rate), so at least ``cnt x slice / max(CTA, CTA reduce)``;
    * each further iteration adds at least the busiest block's busy time at that iteration's
      slice (``_steady``; the pipeline trail only raises it), so over the iterations, whose
      slices add up to the MSCCL chunk (``nbytes / nchunksperloop``), the time is at least the
      base latency plus any one block's chunk-sized busy time.

    ``tests/test_auto_floor_tb.py`` checks it against both on lowered plans."""
    from tacos.runtime.hardware import resolve

    hw = resolve(topology, None)
    proto = program.proto
    rate = max(hw.cta_rate[proto], hw.cta_reduce_rate(proto))
    moving = _MOVING
    busiest = 0
    for g in program.gpus:
        for tb in g.tbs:
            n = sum(st.cnt for st in tb.steps if st.type in moving)
            if n > busiest:
                busiest = n
    chunk = nbytes / program.nchunksperloop
    return hw.base_latency(proto) + busiest * chunk / rate


def runtime_floor(program: Program, topology: Topology, nbytes: int,
                  ranks: Sequence[int] | None = None, *, above: float | None = None) -> float:
    """Seconds no runtime-model time of ``program`` moving ``nbytes`` on ``topology`` (rank r
    on NPU ``ranks[r]``) can be under (see module doc).  Raises
    :class:`~tacos.errors.TacosError` where :func:`~tacos.runtime.msccl_exec.estimate_program`
    would.

    ``above``: a time the caller only needs to know the floor exceeds (the best plan's so
    far).  When the cheaper :func:`thread_block_floor` already exceeds it, that bound is
    returned without timing anything (and without the checks that raise: a plan the runtime
    model would refuse cannot win either)."""
    from tacos.msccl.ranks import resolve_ranks
    from tacos.runtime import msccl_exec as ex
    from tacos.runtime.hardware import resolve

    if above is not None:
        quick = thread_block_floor(program, topology, nbytes)
        if quick > above:
            return quick
    hw = resolve(topology, None)
    rank_npus, _ = resolve_ranks(topology, program.ngpus, explicit=ranks)
    proto = program.proto
    model, hb = ex._analysed(program)
    chunk = nbytes / program.nchunksperloop
    per_call = hw.chunk_payload(proto)
    iters = max(1, math.ceil(chunk / per_call))
    first = min(chunk, per_call)
    calls_per_chunk = max(1, min(71, int(per_call // max(first, 1.0))))
    alone = dict.fromkeys(range(len(topology.links)), 1.0)  # every port to itself
    conns = ex._connections(model, topology, rank_npus, hw, proto, chunk, alone)
    ex._check_ll128_net(conns, topology, hw, proto)
    it = ex.time_iteration(model, conns, hw, proto, first, calls_per_chunk, hb=hb)
    floor = hw.base_latency(proto) + it.makespan
    if iters > 1:
        last = chunk - per_call * (iters - 1)
        floor += ex._steady(it, topology, hw, proto, 1.0)[0] * (iters - 2) \
            + ex._steady(it, topology, hw, proto, last / first)[0]
    return floor
