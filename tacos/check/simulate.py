"""α-β replay of a schedule on the physical links.

:func:`simulate` replays the transfers of a :class:`~tacos.model.schedule.Schedule` as early as the
model allows, keeping the schedule's decisions (which chunks go over which route, in which order
per link) and dropping its idle time:

* a transfer lasts ``alpha + bytes/bandwidth`` of its route (cut-through: Σ α of the route's
  links, the narrowest link's bandwidth; :mod:`tacos.model.routes`);
* it holds one lane of every link of its route for its whole duration; a link with
  multiplicity m runs at most m transfers at once, started in the original order by
  ``(start, index)`` (a transfer waits, on every link of its route, for every earlier one on
  that link to have started and for a free lane);
* a transfer from u waits for every transfer into u that carries one of its chunks and ended no
  later than its start in the original schedule (data dependence);
* for reduction chunks, a transfer into u does not start before every transfer out of u carrying
  that chunk that started before it ended in the original: the value u sends must not pick up a
  contribution that originally arrived later (it would be counted twice downstream);
* the members of an in-switch group (``Transfer.group``) move as one *unit*: they start
  together once every member may start, hold each link of their routes once, and end together
  after the slowest member's time.

The schedule may have overlapping transfers on a link (e.g. congestion-oblivious synthesis):
they are serialized.  For a schedule that verifies, the replay verifies too and no transfer
starts later than in the original, so it is never slower.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from tacos.check.tables import (
    HopTable,
    early,
    hop_table,
    range_join,
    route_costs,
    route_table,
    transfer_units,
    unit_array,
)
from tacos.errors import VerificationError
from tacos.model.columns import TransferColumns
from tacos.model.schedule import Schedule, Transfer
from tacos.nogc import paused_gc


@dataclass(frozen=True)
class SimResult:
    """Outcome of :func:`simulate`.

    ``time`` is the collective time in seconds, ``algbw`` = ``collective.size / time`` and
    ``busbw`` = ``algbw`` × the nccl-tests factor of the collective (B/s).
    ``link_utilization[i]`` is the busy time of physical link ``i`` (every transfer whose route
    crosses it) divided by ``time`` × multiplicity.
    ``schedule`` is the replayed schedule (the input when ``retime=False``).
    """

    time: float
    algbw: float
    busbw: float
    link_utilization: tuple[float, ...]
    schedule: Schedule
    original_time: float
    warnings: tuple[str, ...] = ()

    @property
    def busiest_link(self) -> int | None:
        """Index of the link with the highest utilization (None without links)."""
        if not self.link_utilization:
            return None
        return max(range(len(self.link_utilization)), key=self.link_utilization.__getitem__)


def busbw_factor(kind: str, n: int) -> float:
    """nccl-tests bus-bandwidth factor: (N-1)/N for all-gather, reduce-scatter and all-to-all,
    2(N-1)/N for all-reduce, 1 otherwise (nccl-tests ``doc/PERFORMANCE.md``)."""
    if n <= 0:
        return 1.0
    if kind in ("allgather", "reducescatter", "alltoall"):
        return (n - 1) / n
    if kind == "allreduce":
        return 2 * (n - 1) / n
    return 1.0


def simulate(schedule: Schedule, *, retime: bool = True, order: str = "planned") -> SimResult:
    """Replay ``schedule`` under the α-β model (see the module docstring).

    With ``retime=False`` the schedule's own times are measured as they are.  ``order`` says
    how transfers that compete for a link's lanes are started: ``'planned'`` (default) keeps
    the schedule's order on every link, which is never slower than a valid schedule;
    ``'ready'`` is work-conserving -- a transfer starts as soon as its data is there and every
    link of its route has a free lane (ties in original order), which fills the idle gaps a
    schedule made on another model (an unwound view) leaves on the physical links.
    """
    if order not in ("planned", "ready"):
        raise ValueError(f"unknown replay order {order!r} (planned or ready)")
    warnings: tuple[str, ...] = ()
    out = schedule
    if retime and schedule.transfers:
        with paused_gc():
            replay = _replay if order == "planned" else _replay_ready
            starts, ends, warnings = replay(schedule)
            if isinstance(schedule.transfers, TransferColumns):
                transfers = schedule.transfers.with_times(starts, ends)
            else:
                transfers = tuple(
                    Transfer(s, e, t.src, t.dst, t.route, t.chunks, t.op, t.group)
                    for t, s, e in zip(schedule.transfers, starts, ends, strict=True)
                )
        meta = dict(schedule.meta)
        meta["retimed"] = True
        out = Schedule(schedule.topology, schedule.collective, transfers, meta)
    time = out.makespan
    coll = schedule.collective
    algbw = coll.size / time if time > 0 else math.inf
    busbw = algbw * busbw_factor(coll.kind, len(coll.group))
    return SimResult(time, algbw, busbw, _utilization(out, time), out, schedule.makespan,
                     warnings)


def _utilization(schedule: Schedule, time: float) -> tuple[float, ...]:
    links = schedule.topology.links
    if time <= 0 or not schedule.transfers:
        return tuple(0.0 for _ in links)
    rt = route_table(schedule)
    if isinstance(schedule.transfers, TransferColumns):
        span = schedule.transfers.end - schedule.transfers.start
    else:
        span = np.fromiter((t.end - t.start for t in schedule.transfers), dtype=np.float64,
                           count=len(schedule.transfers))
    link = rt.link
    ok = (link >= 0) & (link < len(links))
    unit = unit_array(schedule)[rt.tr[ok]]
    pairs = np.unique(np.stack([link[ok], unit]), axis=1)  # a group holds a shared link once
    busy = np.bincount(pairs[0], weights=np.maximum(span[pairs[1]], 0.0),
                       minlength=len(links))
    mult = schedule.topology.link_arrays.multiplicity
    return tuple((busy / (time * mult)).tolist())


def _dependencies(schedule: Schedule, h: HopTable | None = None
                  ) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """Data dependences and read blockers as ``(waiter, predecessor)`` index arrays."""
    h = hop_table(schedule) if h is None else h
    coll = schedule.collective
    n_chunks = max(1, coll.n_chunks)
    n = len(schedule.transfers)
    into = h.dst.astype(np.int64) * n_chunks + h.chunk
    out_of = h.src.astype(np.int64) * n_chunks + h.chunk
    w, p = range_join(into, early(h.end), h.tr, out_of, h.start, h.tr, inclusive=True)
    raw = _unique_pairs(w, p, n)
    is_reduce = np.fromiter((c.reduce for c in coll.chunks), dtype=bool, count=coll.n_chunks)
    red = is_reduce[h.chunk] if coll.n_chunks else np.zeros(len(h.chunk), dtype=bool)
    w, p = range_join(out_of[red], h.start[red], h.tr[red], into[red], early(h.end[red]),
                      h.tr[red], inclusive=False)
    war = _unique_pairs(w, p, n)
    return raw, war


def _unique_pairs(w: np.ndarray, p: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Drop self-pairs.  Duplicates (several shared chunks) may stay: a waiter counts each
    copy in ``pending`` and each copy is released once, so they cancel."""
    keep = w != p
    return w[keep], p[keep]


def _csr(waiter: np.ndarray, pred: np.ndarray, n: int) -> tuple[list[int], list[int]]:
    """For each predecessor, the transfers waiting on it: ``targets[ptr[j]:ptr[j+1]]``."""
    order = np.argsort(pred, kind="stable")
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(pred, minlength=n), out=ptr[1:])
    return ptr.tolist(), waiter[order].tolist()


@dataclass
class _Prepared:
    """What both replay orders need: durations, routes, dependency lists and counters, all
    per *unit* (a transfer, or an in-switch group under its first member's index; ``reps``
    lists the units, ``unit[i]`` is transfer i's)."""

    transfers: tuple[Transfer, ...]
    dur: list[float]
    route_of: list[tuple[int, ...]]
    order: list[int]
    pending: list[int]
    end_ptr: list[int]
    end_targets: list[int]
    start_ptr: list[int]
    start_targets: list[int]
    war: tuple[np.ndarray, np.ndarray]
    unit: list[int]
    reps: list[int]

    def expand(self, start: list[float], end: list[float]) -> tuple[list[float], list[float]]:
        """Per-unit times given to every member."""
        return [start[u] for u in self.unit], [end[u] for u in self.unit]


def _prepare(schedule: Schedule) -> _Prepared:
    transfers: tuple[Transfer, ...] = schedule.transfers
    links = schedule.topology.links
    n = len(transfers)
    coll = schedule.collective
    try:
        h = hop_table(schedule)
        rt = route_table(schedule)
    except (TypeError, ValueError, OverflowError):
        raise VerificationError("schedule cannot be replayed: non-numeric transfer fields",
                                hint="run the verifier on the schedule") from None
    bad_route = np.zeros(n, dtype=bool)
    bad_route[rt.tr[(rt.link < 0) | (rt.link >= len(links))]] = True
    bad_route |= (rt.counts == 0) | (h.counts == 0)
    bad_route |= np.fromiter((len(set(t.route)) != len(t.route) for t in transfers), dtype=bool,
                             count=n)
    bad_chunk = (h.chunk < 0) | (h.chunk >= coll.n_chunks)
    if bad_route.any() or bad_chunk.any():
        i = int(np.flatnonzero(bad_route)[0]) if bad_route.any() else int(h.tr[bad_chunk][0])
        raise VerificationError(f"transfer {i} cannot be replayed: bad route "
                                f"{list(transfers[i].route)} or chunks "
                                f"{list(transfers[i].chunks)}",
                                hint="run the verifier on the schedule")
    sizes = np.fromiter((c.size for c in coll.chunks), dtype=np.int64, count=coll.n_chunks)
    nbytes = np.add.reduceat(sizes[h.chunk], h.offsets)
    alpha, bw = route_costs(schedule, rt)
    member_dur = (alpha + nbytes / bw).tolist()
    # units: a transfer, or an in-switch group moving as one (links held once, slowest member)
    unit = transfer_units(schedule)
    members: dict[int, list[int]] = defaultdict(list)
    for i, u in enumerate(unit):
        members[u].append(i)
    dur = list(member_dur)
    route_of = [t.route for t in transfers]
    for u, ms in members.items():
        if len(ms) > 1:
            dur[u] = max(member_dur[i] for i in ms)
            route_of[u] = tuple(dict.fromkeys(li for i in ms for li in transfers[i].route))
    (raw_w, raw_p), (war_w, war_p) = _dependencies(schedule, h)
    ua = np.asarray(unit, dtype=np.int64)
    raw_w, raw_p = ua[raw_w], ua[raw_p]
    war_w, war_p = ua[war_w], ua[war_p]
    keep = raw_w != raw_p
    raw_w, raw_p = raw_w[keep], raw_p[keep]
    keep = war_w != war_p
    war_w, war_p = war_w[keep], war_p[keep]
    pending = (np.bincount(raw_w, minlength=n) + np.bincount(war_w, minlength=n)).tolist()
    end_ptr, end_targets = _csr(raw_w, raw_p, n)
    start_ptr, start_targets = _csr(war_w, war_p, n)
    starts = h.start[h.offsets] if n else np.zeros(0)
    order = [i for i in np.lexsort((np.arange(n), starts)).tolist()  # by (start, index)
             if unit[i] == i]
    return _Prepared(transfers, dur, route_of, order, pending, end_ptr, end_targets,
                     start_ptr, start_targets, (war_w, war_p), unit, sorted(members))


def _replay(schedule: Schedule) -> tuple[list[float], list[float], tuple[str, ...]]:
    """In-order replay: on every link, transfers start in their original order."""
    links = schedule.topology.links
    p = _prepare(schedule)
    transfers, dur, route_of, pending = p.transfers, p.dur, p.route_of, p.pending
    end_ptr, end_targets, start_ptr, start_targets = (p.end_ptr, p.end_targets, p.start_ptr,
                                                      p.start_targets)
    n = len(transfers)
    dropped: set[tuple[int, int]] = set()
    queue: dict[int, list[int]] = defaultdict(list)
    for i in p.order:
        for li in route_of[i]:
            queue[li].append(i)
    head = dict.fromkeys(queue, 0)
    free = {li: links[li].multiplicity for li in queue}
    start = [math.nan] * n
    end = [math.nan] * n
    heap: list[tuple[float, int]] = []
    warnings: list[str] = []

    def startable(i: int) -> bool:
        """Dependencies met, and first in line with a free lane on every link of its route."""
        if pending[i] or not math.isnan(start[i]):
            return False
        for li in route_of[i]:
            q = queue[li]
            if free[li] <= 0 or head[li] >= len(q) or q[head[li]] != i:
                return False
        return True

    def try_start(cands: list[int], now: float) -> None:
        """Start every transfer of ``cands`` (and of the queues they unblock) that can."""
        work = list(cands)
        while work:
            i = work.pop()
            if not startable(i):
                continue
            start[i] = now
            heapq.heappush(heap, (now + dur[i], i))
            for li in route_of[i]:
                head[li] += 1
                free[li] -= 1
                if head[li] < len(queue[li]):
                    work.append(queue[li][head[li]])
            for k in start_targets[start_ptr[i]:start_ptr[i + 1]]:
                if dropped and (i, k) in dropped:
                    continue
                pending[k] -= 1
                if pending[k] == 0:
                    work.append(k)

    def heads() -> list[int]:
        return [q[head[li]] for li, q in queue.items() if head[li] < len(q)]

    try_start(heads(), 0.0)
    done = 0
    while done < len(p.reps):
        if not heap:
            now = max((e for e in end if not math.isnan(e)), default=0.0)
            if not _release_read_blockers(transfers, start, p.war, pending, dropped,
                                          warnings):
                raise VerificationError(
                    "schedule cannot be replayed: its transfers wait on each other in a cycle",
                    hint="check the schedule with the verifier (zero-length transfers?)")
            try_start(heads(), now)
            continue
        now, i = heapq.heappop(heap)
        end[i] = now
        done += 1
        woken: list[int] = []
        for li in route_of[i]:
            free[li] += 1
            if head[li] < len(queue[li]):
                woken.append(queue[li][head[li]])
        for k in end_targets[end_ptr[i]:end_ptr[i + 1]]:
            pending[k] -= 1
            if pending[k] == 0:
                woken.append(k)
        try_start(woken, now)
    return (*p.expand(start, end), tuple(warnings))


def _replay_ready(schedule: Schedule) -> tuple[list[float], list[float], tuple[str, ...]]:
    """Work-conserving replay: a transfer starts as soon as its data is there and every link
    of its route has a free lane; transfers competing for a lane go in original order."""
    links = schedule.topology.links
    p = _prepare(schedule)
    transfers, dur, route_of, pending = p.transfers, p.dur, p.route_of, p.pending
    n = len(transfers)
    rank = [0] * n
    for k, i in enumerate(p.order):
        rank[i] = k
    free = [lk.multiplicity for lk in links]
    waiting: dict[int, list[int]] = defaultdict(list)  # link -> transfers blocked on it
    ready: list[tuple[int, int]] = [(rank[i], i) for i in p.reps if pending[i] == 0]
    heapq.heapify(ready)
    start = [math.nan] * n
    end = [math.nan] * n
    heap: list[tuple[float, int]] = []
    dropped: set[tuple[int, int]] = set()
    warnings: list[str] = []

    def launch(now: float) -> None:
        while ready:
            _, i = heapq.heappop(ready)
            if not math.isnan(start[i]):
                continue  # queued twice (after a wait cycle was broken)
            blocked = next((li for li in route_of[i] if free[li] <= 0), None)
            if blocked is not None:
                waiting[blocked].append(i)
                continue
            start[i] = now
            heapq.heappush(heap, (now + dur[i], i))
            for li in route_of[i]:
                free[li] -= 1
            for k in p.start_targets[p.start_ptr[i]:p.start_ptr[i + 1]]:
                if dropped and (i, k) in dropped:
                    continue
                pending[k] -= 1
                if pending[k] == 0:
                    heapq.heappush(ready, (rank[k], k))

    launch(0.0)
    done = 0
    while done < len(p.reps):
        if not heap:
            now = max((e for e in end if not math.isnan(e)), default=0.0)
            if not _release_read_blockers(transfers, start, p.war, pending, dropped,
                                          warnings):
                raise VerificationError(
                    "schedule cannot be replayed: its transfers wait on each other in a cycle",
                    hint="check the schedule with the verifier (zero-length transfers?)")
            for i in p.reps:  # duplicates are skipped when popped
                if math.isnan(start[i]) and pending[i] == 0:
                    heapq.heappush(ready, (rank[i], i))
            launch(now)
            continue
        now = heap[0][0]
        while heap and heap[0][0] == now:  # every transfer ending now frees its lanes first
            _, i = heapq.heappop(heap)
            end[i] = now
            done += 1
            for li in route_of[i]:
                free[li] += 1
                for k in waiting.pop(li, ()):
                    heapq.heappush(ready, (rank[k], k))
            for k in p.end_targets[p.end_ptr[i]:p.end_ptr[i + 1]]:
                pending[k] -= 1
                if pending[k] == 0:
                    heapq.heappush(ready, (rank[k], k))
        launch(now)
    return (*p.expand(start, end), tuple(warnings))


def _release_read_blockers(transfers, start, war, pending, dropped: set[tuple[int, int]],
                           warnings: list[str]) -> bool:
    """Break a wait cycle (only possible through read blockers): drop the blockers of the
    unstarted transfer with the earliest original start that has any."""
    blockers: dict[int, list[int]] = defaultdict(list)
    for w, p in zip(war[0].tolist(), war[1].tolist(), strict=True):
        if math.isnan(start[w]) and math.isnan(start[p]) and (p, w) not in dropped:
            blockers[w].append(p)
    if not blockers:
        return False
    i = min(blockers, key=lambda k: (transfers[k].start, k))
    for j in blockers[i]:
        dropped.add((j, i))
    pending[i] -= len(blockers[i])
    warnings.append(f"transfer {i}: ignored ordering after transfer(s) {blockers[i]} "
                    "to break a wait cycle")
    return True
