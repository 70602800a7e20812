"""A runtime floor of a plan's MSCCL XML lowering, taken before the program is built.

``auto`` prunes a plan that cannot win by the runtime floor of its lowering
(:mod:`tacos.solvers.auto_floor`).  On large plans most of that floor's cost is not the
lowering's decisions but writing them down: numbering the steps into a
:class:`~tacos.msccl.program.Program`, folding it into the runtime model's transmissions,
building their happens-before graph and timing it (0.8 s of a 64-NPU forest plan's 2.3 s).
:func:`plan_floor` reads the same decisions where the lowering makes them -- once the
channels, thread blocks, fusions and steps are final (:func:`tacos.msccl.lower.lower`'s
``check`` hook) -- and times a relaxation of the program's first loop iteration:

* one node per step that moves data: a run's send, its receive, or a receive fused with the
  send it feeds (``rcs``/``rrs``/``rrcs``); nops, copies and the connections' FIFO depth are
  left out;
* edges: program order between consecutive nodes of a thread block, the send of a run before
  its receive, and the receive that created exactly the values a send reads before that send
  (the lowering makes that read wait for it, through program order or dependencies);
* every duration as :func:`tacos.runtime.msccl_exec.time_iteration` computes it with every
  connection at the most it can get (as :func:`~tacos.solvers.auto_floor.runtime_floor`
  does), a receive's own rate taken as the faster of the CTA's copy and reduce rates.

Every edge is a path of the program's happens-before graph and no duration exceeds the
model's, so each node's times are at most the model's (by induction over the global event
order, which every edge follows): the figure is at most
:func:`~tacos.solvers.auto_floor.runtime_floor`'s, hence at most the runtime-model time.
:func:`steps_floor` is :func:`~tacos.solvers.auto_floor.thread_block_floor` read from the
same thread blocks.

:func:`lowered_or_floor` lowers a plan and stops before the program is built when this floor
is already above the time to beat; ``tests/test_auto_floor_early.py`` checks the floor against
:func:`~tacos.solvers.auto_floor.runtime_floor` on lowered plans.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tacos.model.schedule import Schedule
from tacos.model.topology import Topology


class _Above(Exception):
    """Raised from the lowering's hook: the plan's floor is above the time to beat."""

    def __init__(self, floor: float) -> None:
        super().__init__(floor)
        self.floor = floor


def plan_floor(flow: Any, chan: Sequence[int], plan: Any, topology: Topology, nbytes: int,
               ranks: Sequence[int] | None = None, proto: str = "Simple") -> float:
    """Seconds no runtime-model time of the program lowered from ``flow`` (a
    :class:`~tacos.msccl.lower_flow.Flow`), its runs' channels ``chan`` and thread-block
    plan ``plan`` (a :class:`~tacos.msccl.lower_channels.TbPlan`), all final, can be under
    when it moves ``nbytes`` on ``topology`` (rank r on NPU ``ranks[r]``) in ``proto`` (see
    module doc).  Raises :class:`~tacos.errors.TacosError` when two ranks have no route."""
    from tacos.msccl.lower_channels import feeders
    from tacos.msccl.ranks import resolve_ranks
    from tacos.runtime.hardware import resolve
    from tacos.runtime.msccl_exec import _route

    del chan  # a connection's rate and latency do not depend on its channel
    hw = resolve(topology, None)
    layout = flow.layout
    rank_npus, _ = resolve_ranks(topology, layout.ngpus, explicit=ranks)
    chunk = nbytes / layout.nchunksperloop
    per_call = hw.chunk_payload(proto)
    first = min(chunk, per_call)
    cpc = max(1, min(71, int(per_call // max(first, 1.0))))
    cta = hw.cta_rate[proto]
    own = max(cta, hw.cta_reduce_rate(proto))
    pay = hw.payload(proto)
    conn: dict[tuple[int, int], tuple[float, float]] = {}  # (src, dst) -> (latency, rate)
    runs = flow.runs
    for r in runs:
        key = (r.src, r.dst)
        if key in conn:
            continue
        links = _route(topology, rank_npus[r.src], rank_npus[r.dst], chunk)
        classes = {hw.classify(topology.links[i]) for i in links}
        cls = "nic" if "nic" in classes else "pcie" if "pcie" in classes else hw.link_class
        rate = cta
        for i in links:  # every port to this connection alone
            rate = min(rate, hw.link_rate(topology.links[i]) * pay)
        conn[key] = (hw.hop_latency(proto, cls), rate)
    fused = plan.fused
    absorbed = plan.absorbed
    send_tb, recv_tb = plan.send_tb, plan.recv_tb
    feeder = feeders(flow)
    n = len(runs)
    sent_start = [-1.0] * n  # the start and finish of the node that sends each run
    sent_end = [0.0] * n
    received = [-1.0] * n  # the finish of the node that receives each run
    last: dict[tuple[int, Any], float] = {}  # per thread block, its last node's finish
    end = 0.0
    ceil = math.ceil
    for kind, idx in flow.order:
        if kind == "recv":
            r = runs[idx]
            tb = (r.dst, recv_tb[idx])
            ready = last.get(tb, 0.0)
            s0 = sent_start[idx]  # -1: not sent before in the order, no edge to lean on
            sf = sent_end[idx]
            cnt = r.cnt
            nb = cnt * first
            b = fused.get(idx)
            if b is None:
                start = ready if ready > s0 else s0
                fin = max(sf, start + nb / own)
            else:  # fused: forwards while receiving (cut-through after one hop)
                rb = runs[b]
                lat, rate = conn[(rb.src, rb.dst)]
                start = ready if s0 < 0 else max(ready, s0 + conn[(r.src, r.dst)][0])
                calls = max(1, ceil(cnt / cpc)) if cnt else 0
                fin = max(sf + lat, start + calls * lat + nb / min(rate, own))
                sent_start[b] = start
                sent_end[b] = fin
            received[idx] = fin
        elif kind == "send":
            if idx in absorbed:
                continue
            r = runs[idx]
            tb = (r.src, send_tb[idx])
            ready = last.get(tb, 0.0)
            f = feeder[idx]
            if f >= 0 and runs[f].dst == r.src and received[f] > ready:
                ready = received[f]
            cnt = r.cnt
            lat, rate = conn[(r.src, r.dst)]
            calls = max(1, ceil(cnt / cpc)) if cnt else 0
            start = ready
            fin = start + calls * lat + cnt * first / rate
            sent_start[idx] = start
            sent_end[idx] = fin
        else:  # a local copy: left out (its thread block's order passes over it)
            continue
        last[tb] = fin
        if fin > end:
            end = fin
    return hw.base_latency(proto) + end


def steps_floor(tbs: dict[int, dict[Any, Any]], nchunksperloop: int, topology: Topology,
                nbytes: int, proto: str = "Simple") -> float:
    """:func:`~tacos.solvers.auto_floor.thread_block_floor` of the program the lowering
    builds from its thread blocks ``tbs`` (rank -> thread blocks under construction, as
    :func:`tacos.msccl.lower_steps.build_steps` returns them), the same figure: every step
    record becomes one step of the same type and count."""
    from tacos.runtime.hardware import resolve
    from tacos.solvers.auto_floor import _MOVING

    hw = resolve(topology, None)
    rate = max(hw.cta_rate[proto], hw.cta_reduce_rate(proto))
    moving = _MOVING
    busiest = 0
    for blocks in tbs.values():
        for tb in blocks.values():
            n = sum(rec[3] for rec in tb.steps if rec[0] in moving)
            if n > busiest:
                busiest = n
    chunk = nbytes / nchunksperloop
    return hw.base_latency(proto) + busiest * chunk / rate


def lowered_or_floor(schedule: Schedule, topology: Topology, above: float) -> tuple[Any, float]:
    """``(program, 0.0)``: the MSCCL XML lowering of ``schedule`` (as
    :func:`tacos.runtime.plans.lowering_of` gives and keeps it), or ``(None, floor)`` when a
    floor of it is above ``above``: the lowering then stops before its program is built.  The
    floor is :func:`steps_floor` (the figure :func:`~tacos.solvers.auto_floor.runtime_floor`
    would quote from the thread blocks alone) when that is above, else :func:`plan_floor`.
    Raises :class:`~tacos.errors.TacosError` where the lowering would."""
    from tacos.runtime.plans import lowering_of

    coll = schedule.collective
    nbytes = int(coll.size)

    def check(flow: Any, chan: Sequence[int], plan: Any, tbs: dict) -> None:
        floor = steps_floor(tbs, flow.layout.nchunksperloop, topology, nbytes)
        if floor > above:
            raise _Above(floor)
        floor = plan_floor(flow, chan, plan, topology, nbytes, coll.group)
        if floor > above:
            raise _Above(floor)

    try:
        return lowering_of(schedule, check=check), 0.0
    except _Above as stop:
        return None, stop.floor
