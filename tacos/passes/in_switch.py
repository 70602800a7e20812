"""Use a switch's multicast and reduce in any synthesized schedule.

A solver that knows nothing about in-switch operations sends a chunk from one NPU to several
peers through a switch as separate transfers, each taking the sender's up-port again, and
reduces into one NPU as separate transfers, each taking its down-port again.  Where the switch
declares ``multicast`` (``reduce``), :func:`fuse_in_switch` joins such transfers into one group
(``Transfer.group``, :mod:`tacos.check.in_switch`):

* copies of the same chunks from one NPU whose routes enter the same multicast switch by the
  same up-port become one multicast group (start: the earliest of them);
* reduces of the same chunks into one NPU whose routes leave the same reduce switch by the
  same down-port become one reduction group (start: the latest of them, so every sender has
  what it sent before);

then replays the result with :func:`tacos.check.simulate.simulate` (the group moves as one, the up-
or down-port carries the bytes once; the faster of the planned and the work-conserving replay
order) and verifies it.  The fused schedule is returned only when it
verifies; whether it is faster is the caller's choice (``tacos.solvers.auto`` keeps the faster).
"""

from __future__ import annotations

from collections import defaultdict

from tacos.check.in_switch import GroupError, group_shape
from tacos.check.simulate import simulate
from tacos.check.verify_once import verified
from tacos.errors import TacosError
from tacos.model.schedule import Schedule, Transfer


def _capable(schedule: Schedule, switch: int, capability: str) -> bool:
    topo = schedule.topology
    return topo.is_switch(switch) and \
        capability in topo.switches[switch - topo.n_npus].capabilities


def fuse_in_switch(schedule: Schedule) -> Schedule | None:
    """``schedule`` with multicast/reduce groups where its switches allow them, replayed and
    verified; None when nothing can be fused or the fused schedule does not verify."""
    topo = schedule.topology
    if not any(s.capabilities for s in topo.switches):
        return None
    links = topo.links
    keys: dict[tuple, list[int]] = defaultdict(list)
    for i, t in enumerate(schedule.transfers):
        if t.group is not None or len(t.route) < 2:
            continue
        if t.op == "copy" and _capable(schedule, links[t.route[0]].dst, "multicast"):
            keys[("multicast", t.src, tuple(sorted(t.chunks)), t.route[0])].append(i)
        elif t.op == "reduce" and _capable(schedule, links[t.route[-1]].src, "reduce"):
            keys[("reduce", t.dst, tuple(sorted(t.chunks)), t.route[-1])].append(i)
    transfers = list(schedule.transfers)
    next_id = 1 + max((t.group for t in transfers if t.group is not None), default=-1)
    fused = 0
    for (kind, _, _, _), idxs in sorted(keys.items(), key=lambda kv: kv[1][0]):
        seen: set[int] = set()
        members = []
        for i in idxs:  # one member per peer
            peer = transfers[i].dst if kind == "multicast" else transfers[i].src
            if peer not in seen:
                seen.add(peer)
                members.append(i)
        if len(members) < 2:
            continue
        ts = [transfers[i] for i in members]
        try:
            group_shape(topo, [Transfer(0, 1, t.src, t.dst, t.route, t.chunks, t.op, 0)
                               for t in ts])
        except GroupError:
            continue
        start = min(t.start for t in ts) if kind == "multicast" else max(t.start for t in ts)
        dur = max(t.end - t.start for t in ts)
        for i, t in zip(members, ts, strict=True):
            transfers[i] = Transfer(start, start + dur, t.src, t.dst, t.route, t.chunks, t.op,
                                    next_id)
        next_id += 1
        fused += 1
    if not fused:
        return None
    meta = dict(schedule.meta, in_switch_groups=fused)
    grouped = Schedule(topo, schedule.collective, tuple(sorted(
        transfers, key=lambda t: (t.start, t.end, t.src, t.dst))), meta)
    best = None
    for order in ("planned", "ready"):  # keep the faster replay that verifies
        try:
            out = simulate(grouped, order=order).schedule
        except TacosError:
            continue
        if (best is None or out.makespan < best.makespan) and verified(out).ok:
            best = out
    return best
