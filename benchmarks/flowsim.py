"""An independent flow-level simulator of a schedule on the physical links.

This is deliberately *not* tacos's model (``tacos.check.simulate``: every transfer holds one lane of
each link of its route exclusively, transfers on a link serialized in order).  Here every
transfer is a fluid **flow**:

* it becomes ready when the data it sends is at its source: for a copy chunk the first transfer
  that delivered the chunk there (nothing when the source starts with it), for a reduction
  chunk every transfer that delivered a contribution there before the transfer's start in the
  schedule (the partial value it forwards); and, as in an MSCCL runtime where one thread block
  serves one connection in step order, when the previous transfer from the same source to the
  same destination has finished;
* it then waits its route's latency (Σ α of the links) and moves its bytes at a rate that
  **max-min fair sharing** gives it: every physical link offers ``bandwidth × multiplicity``
  bytes/s, shared fairly by the flows crossing it, and one flow uses at most one lane
  (``bandwidth`` of the narrowest link of its route);
* by default (``release='ready'``) flows run as soon as they are ready: the schedule's start
  times are ignored, so the simulation finds out on its own how the transfers that share a
  port or an uplink interfere, as a runtime that issues every send as early as it can would;
  with ``release='planned'`` a flow also waits for its planned start time, as a runtime that
  follows the plan's timing would -- then any link the plan overloads (a congestion the
  planner's model missed) slows the flows that share it, and the plan's predicted time is
  met exactly only when it is physically feasible.

The allocation is computed by progressive filling at every event (a flow becomes active or
finishes).  Only the schedule's routes, chunks, sizes and dependencies are read.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from tacos.model.schedule import Schedule

EPS = 1e-12


@dataclass
class FlowResult:
    """Makespan (s), per-transfer finish times, and how many rate recomputations ran."""

    time: float
    finish: list[float]
    events: int


def dependencies(schedule: Schedule) -> list[list[int]]:
    """For each transfer, the transfers whose arrival it needs (see the module docstring)."""
    chunks = schedule.collective.chunks
    arrivals: dict[tuple[int, int], list[tuple[float, int]]] = {}
    for i, t in enumerate(schedule.transfers):
        for c in t.chunks:
            arrivals.setdefault((t.dst, c), []).append((t.end, i))
    for v in arrivals.values():
        v.sort()
    tol = 1e-9 * max(schedule.makespan, 1e-12)
    previous: dict[tuple[int, int], int] = {}
    before: dict[int, int] = {}
    order = sorted(range(len(schedule.transfers)),
                   key=lambda i: (schedule.transfers[i].start, schedule.transfers[i].end, i))
    for i in order:
        t = schedule.transfers[i]
        if (t.src, t.dst) in previous:
            before[i] = previous[(t.src, t.dst)]
        previous[(t.src, t.dst)] = i
    deps: list[list[int]] = []
    for k, t in enumerate(schedule.transfers):
        need: set[int] = {before[k]} if k in before else set()
        for c in t.chunks:
            got = [i for end, i in arrivals.get((t.src, c), ()) if end <= t.start + tol]
            if chunks[c].reduce:
                need.update(got)
            elif t.src not in chunks[c].pre and got:
                need.add(got[0])
        deps.append(sorted(need))
    return deps


def _max_min(active: list[int], routes: list[tuple[int, ...]], cap: list[float],
             link_cap: list[float]) -> dict[int, float]:
    """Max-min fair rates of the ``active`` flows by progressive filling."""
    rate = dict.fromkeys(active, 0.0)
    left = {}
    users: dict[int, set[int]] = {}
    for f in active:
        for li in routes[f]:
            users.setdefault(li, set()).add(f)
            left[li] = link_cap[li]
    free = set(active)
    while free:
        step = min(cap[f] - rate[f] for f in free)
        for li, us in users.items():
            n = sum(1 for f in us if f in free)
            if n:
                step = min(step, left[li] / n)
        step = max(step, 0.0)
        for f in free:
            rate[f] += step
        for li, us in users.items():
            n = sum(1 for f in us if f in free)
            left[li] -= step * n
        frozen = {f for f in free if rate[f] >= cap[f] * (1 - 1e-12)}
        for li, us in users.items():
            if left[li] <= link_cap[li] * 1e-12:
                frozen |= us & free
        if not frozen:  # numerical safety: nothing saturated, stop
            break
        free -= frozen
    return rate


def simulate_flows(schedule: Schedule, release: str = "ready") -> FlowResult:
    """Replay ``schedule`` as max-min fair fluid flows on its topology's physical links
    (``release``: ``'ready'`` or ``'planned'``, see the module docstring)."""
    if release not in ("ready", "planned"):
        raise ValueError(f"release must be 'ready' or 'planned', not {release!r}")
    planned = release == "planned"
    topo = schedule.topology
    sizes = schedule.collective.chunks
    transfers = schedule.transfers
    n = len(transfers)
    routes = [tuple(t.route) for t in transfers]
    links = topo.links
    link_cap = [lk.bandwidth * lk.multiplicity for lk in links]
    cap = [min(links[li].bandwidth for li in r) for r in routes]
    alpha = [sum(links[li].alpha for li in r) for r in routes]
    remaining = [float(sum(sizes[c].size for c in t.chunks)) for t in transfers]
    deps = dependencies(schedule)
    waiting = [len(d) for d in deps]
    after: list[list[int]] = [[] for _ in range(n)]
    for i, d in enumerate(deps):
        for j in d:
            after[j].append(i)
    finish = [0.0] * n
    def wake(g: int, at: float) -> None:
        if planned:
            at = max(at, transfers[g].start)
        heapq.heappush(pending, (at + alpha[g], g))

    def complete(f: int, at: float) -> int:
        finish[f] = at
        for g in after[f]:
            waiting[g] -= 1
            if waiting[g] == 0:
                wake(g, at)
        return 1

    total = list(remaining)
    pending: list[tuple[float, int]] = []
    for i in range(n):
        if waiting[i] == 0:
            wake(i, 0.0)
    heapq.heapify(pending)
    active: list[int] = []
    now, events, done = 0.0, 0, 0
    while done < n:
        rates = _max_min(active, routes, cap, link_cap) if active else {}
        events += 1
        t_next = pending[0][0] if pending else float("inf")
        for f in active:
            if rates[f] > 0:
                t_next = min(t_next, now + remaining[f] / rates[f])
        if t_next == float("inf"):
            raise RuntimeError("flow simulation stalled: a dependency is never met")
        for f in active:
            remaining[f] -= rates[f] * (t_next - now)
        now = t_next
        still = []
        for f in active:
            if remaining[f] <= EPS * max(1.0, total[f]):
                done += complete(f, now)
            else:
                still.append(f)
        active = still
        while pending and pending[0][0] <= now + EPS:
            _, g = heapq.heappop(pending)
            if remaining[g] <= 0:
                done += complete(g, now)
            else:
                active.append(g)
    return FlowResult(max(finish, default=0.0), finish, events)
