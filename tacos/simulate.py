"""α-β store-and-forward replay of a schedule.

:func:`simulate` replays the transfers of a :class:`~tacos.schedule.Schedule` as early as the
model allows, keeping the schedule's decisions (which chunks go over which link, in which order
per link) and dropping its idle time:

* a transfer lasts ``alpha + bytes/bandwidth`` of its link;
* a link with multiplicity m runs at most m transfers at once, started in the original order
  by ``(start, index)`` (a transfer waits for every earlier one on its link to have started and
  for a free copy of the link);
* a transfer from u waits for every transfer into u that carries one of its chunks and ended no
  later than its start in the original schedule (data dependence);
* for reduction chunks, a transfer into u does not start before every transfer out of u carrying
  that chunk that started before it ended in the original: the value u sends must not pick up a
  contribution that originally arrived later (it would be counted twice downstream).

The schedule may have overlapping transfers on a link (e.g. congestion-oblivious synthesis):
they are serialized.  For a schedule that verifies, the replay verifies too and no transfer
starts later than in the original, so it is never slower.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import defaultdict
from dataclasses import dataclass, replace

from tacos.errors import VerificationError
from tacos.schedule import Schedule, Transfer

_TIME_RTOL = 1e-12


@dataclass(frozen=True)
class SimResult:
    """Outcome of :func:`simulate`.

    ``time`` is the collective time in seconds, ``algbw`` = ``collective.size / time`` and
    ``busbw`` = ``algbw`` × the nccl-tests factor of the collective (B/s).
    ``link_utilization[i]`` is the busy time of link ``i`` divided by ``time`` × multiplicity.
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
    """nccl-tests bus-bandwidth factor: (N-1)/N for (reduce-)scatter-gathers, 2(N-1)/N for
    all-reduce, 1 otherwise."""
    if n <= 0:
        return 1.0
    if kind in ("allgather", "reducescatter"):
        return (n - 1) / n
    if kind == "allreduce":
        return 2 * (n - 1) / n
    return 1.0


def simulate(schedule: Schedule, *, retime: bool = True) -> SimResult:
    """Replay ``schedule`` under the α-β model (see the module docstring).

    With ``retime=False`` the schedule's own times are measured as they are.
    """
    warnings: tuple[str, ...] = ()
    out = schedule
    if retime and schedule.transfers:
        starts, ends, warnings = _replay(schedule)
        transfers = tuple(
            replace(t, start=s, end=e) for t, s, e in zip(schedule.transfers, starts, ends,
                                                          strict=True)
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
    busy = [0.0] * len(links)
    for t in schedule.transfers:
        if 0 <= t.link < len(links):
            busy[t.link] += max(0.0, t.end - t.start)
    if time <= 0:
        return tuple(0.0 for _ in links)
    return tuple(b / (time * lk.multiplicity) for b, lk in zip(busy, links, strict=True))


def _dependencies(schedule: Schedule, tol: float) -> tuple[list[list[int]], list[list[int]]]:
    """(data dependences, start blockers from reads) as lists of predecessor indices."""
    transfers = schedule.transfers
    coll = schedule.collective
    into: dict[tuple[int, int], list[tuple[float, int]]] = defaultdict(list)
    out_of: dict[tuple[int, int], list[tuple[float, int]]] = defaultdict(list)
    for i, t in enumerate(transfers):
        for c in t.chunks:
            into[(t.dst, c)].append((t.end, i))
            out_of[(t.src, c)].append((t.start, i))
    for lst in (*into.values(), *out_of.values()):
        lst.sort()
    raw: list[list[int]] = [[] for _ in transfers]
    war: list[list[int]] = [[] for _ in transfers]
    for i, t in enumerate(transfers):
        deps: set[int] = set()
        for c in t.chunks:
            arrivals = into.get((t.src, c), ())
            k = bisect.bisect_right(arrivals, (t.start + tol, math.inf))
            deps.update(j for _, j in arrivals[:k] if j != i)
        raw[i] = sorted(deps)
        blockers: set[int] = set()
        for c in t.chunks:
            if not (0 <= c < coll.n_chunks and coll.chunks[c].reduce):
                continue
            reads = out_of.get((t.dst, c), ())
            k = bisect.bisect_left(reads, (t.end - tol, -1))
            blockers.update(j for _, j in reads[:k] if j != i)
        war[i] = sorted(blockers)
    return raw, war


def _replay(schedule: Schedule) -> tuple[list[float], list[float], tuple[str, ...]]:
    transfers: tuple[Transfer, ...] = schedule.transfers
    links = schedule.topology.links
    n = len(transfers)
    n_chunks = schedule.collective.n_chunks
    for i, t in enumerate(transfers):
        if (not 0 <= t.link < len(links) or not t.chunks
                or not all(0 <= c < n_chunks for c in t.chunks)):
            raise VerificationError(f"transfer {i} cannot be replayed: bad link {t.link} or "
                                    f"chunks {list(t.chunks)}",
                                    hint="run the verifier on the schedule")
    tol = _TIME_RTOL * max((abs(t.end) for t in transfers), default=0.0)
    dur = [schedule.link_of(t).time(schedule.transfer_bytes(t)) for t in transfers]
    raw, war = _dependencies(schedule, tol)
    pending = [len(raw[i]) + len(war[i]) for i in range(n)]
    after_end: list[list[int]] = [[] for _ in range(n)]
    after_start: list[list[int]] = [[] for _ in range(n)]
    for i in range(n):
        for j in raw[i]:
            after_end[j].append(i)
        for j in war[i]:
            after_start[j].append(i)
    queue: dict[int, list[int]] = defaultdict(list)
    for i in sorted(range(n), key=lambda i: (transfers[i].start, i)):
        queue[transfers[i].link].append(i)
    head = dict.fromkeys(queue, 0)
    free = {li: links[li].multiplicity for li in queue}
    start = [math.nan] * n
    end = [math.nan] * n
    heap: list[tuple[float, int]] = []
    warnings: list[str] = []

    def try_start(li: int, now: float) -> None:
        q = queue[li]
        while head[li] < len(q) and free[li] > 0 and pending[q[head[li]]] == 0:
            i = q[head[li]]
            head[li] += 1
            free[li] -= 1
            start[i] = now
            heapq.heappush(heap, (now + dur[i], i))
            for k in after_start[i]:
                pending[k] -= 1
                if pending[k] == 0:
                    try_start(transfers[k].link, now)

    for li in queue:
        try_start(li, 0.0)
    done = 0
    while done < n:
        if not heap:
            now = max((e for e in end if not math.isnan(e)), default=0.0)
            if not _release_read_blockers(transfers, start, war, pending, after_start,
                                          warnings):
                raise VerificationError(
                    "schedule cannot be replayed: its transfers wait on each other in a cycle",
                    hint="check the schedule with the verifier (zero-length transfers?)")
            for li in queue:
                try_start(li, now)
            continue
        now, i = heapq.heappop(heap)
        end[i] = now
        done += 1
        free[transfers[i].link] += 1
        for k in after_end[i]:
            pending[k] -= 1
            if pending[k] == 0:
                try_start(transfers[k].link, now)
        try_start(transfers[i].link, now)
    return start, end, tuple(warnings)


def _release_read_blockers(transfers, start, war, pending, after_start,
                           warnings: list[str]) -> bool:
    """Break a wait cycle (only possible through read blockers): drop the blockers of the
    unstarted transfer with the earliest original start that has any."""
    waiting = [i for i in range(len(transfers))
               if math.isnan(start[i]) and any(math.isnan(start[j]) for j in war[i])]
    if not waiting:
        return False
    i = min(waiting, key=lambda k: (transfers[k].start, k))
    dropped = [j for j in war[i] if math.isnan(start[j])]
    pending[i] -= len(dropped)
    war[i] = [j for j in war[i] if j not in dropped]
    for j in dropped:
        after_start[j].remove(i)
    warnings.append(f"transfer {i}: ignored ordering after transfer(s) {dropped} "
                    "to break a wait cycle")
    return True
