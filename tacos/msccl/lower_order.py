"""Global event order of a schedule's transfers and the versions of every chunk.

Time semantics follow :mod:`tacos.verify`: a transfer snapshots the sender's value when it
starts and lands when it ends (arrivals at an instant come before sends).  Each landing creates
a new :class:`Version` of the chunk on the receiver (for ``op='reduce'`` it also reads the
receiver's previous version).  :func:`order_transfers` then gives every send (node ``2i``) and
receive (node ``2i+1``) a position in one topological order of

* a transfer's send before its receive,
* the previous transfer on the same lane (FIFO) received before the next one is sent,
* a version created before it is read, and read before the next version of the same chunk on the
  same rank is created,

with ties broken by time.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from tacos.errors import TacosError
from tacos.model.schedule import Schedule
from tacos.model.transfer import Transfer
from tacos.msccl.lower_layout import Layout


@dataclass(slots=True)
class Version:
    """One value of a chunk on a rank: initial (``creator`` None) or landed by a transfer.

    ``readers`` are the order's nodes that read it: ``2i`` the send of transfer i, ``2i+1``
    its receive (a reduction reads the receiver's previous version)."""

    id: int
    rank: int
    chunk: int
    creator: int | None
    prev: int | None = None
    readers: list[int] = field(default_factory=list)
    next: int | None = None


def lanes(schedule: Schedule, tol: float) -> tuple[list[int], list[int | None]]:
    """First-fit interval colouring per ordered NPU pair; also each transfer's lane predecessor."""
    by_pair: dict[tuple[int, int], list[int]] = defaultdict(list)
    ts = schedule.transfers
    for i, t in enumerate(ts):
        by_pair[(t.src, t.dst)].append(i)
    lane = [0] * len(ts)
    prev: list[int | None] = [None] * len(ts)
    starts = [t.start for t in ts]
    ends = [t.end for t in ts]
    for idxs in by_pair.values():
        idxs.sort(key=lambda i: (starts[i], ends[i], i))
        last: list[int] = []
        for i in idxs:
            free = starts[i] + tol
            for ln, j in enumerate(last):
                if ends[j] <= free:
                    lane[i], prev[i], last[ln] = ln, j, i
                    break
            else:
                lane[i] = len(last)
                last.append(i)
    return lane, prev


def replay_versions(schedule: Schedule, layout: Layout, tol: float):
    """Versions per the verifier's time semantics; returns ``(versions, read, created, cur)``:
    per transfer the version it reads and creates of each chunk, and the last version of chunk
    c on rank r at ``cur[r * nchunks + c]`` (-1: none)."""
    versions: list[Version] = []
    nchunks = len(layout.pre)
    cur = [-1] * (layout.ngpus * nchunks)
    for c in range(nchunks):
        for r in sorted(layout.pre[c]):
            versions.append(Version(len(versions), r, c, None))
            cur[r * nchunks + c] = versions[-1].id
    ts = schedule.transfers
    ev = []
    for i, t in enumerate(ts):
        ev.append((t.start, 1, t.start, i))
        ev.append((t.end - tol, 0, t.start, i))
    ev.sort()
    read: list[dict[int, int]] = [{} for _ in ts]
    created: list[dict[int, int]] = [{} for _ in ts]
    ranks = layout.ranks
    for _, kind, _, i in ev:
        t = ts[i]
        if kind == 1:
            base = ranks[t.src] * nchunks
            ri = read[i]
            for c in t.chunks:
                vid = cur[base + c]
                if vid < 0:
                    raise TacosError(f"transfer {i} sends chunk {c} from NPU {t.src} before it "
                                     "holds it", hint="verify the schedule first "
                                     "(tacos.verify.verify_schedule)")
                ri[c] = vid
                versions[vid].readers.append(2 * i)
            continue
        v = ranks[t.dst]
        base = v * nchunks
        reduce = t.op == "reduce"
        ci = created[i]
        for c in t.chunks:
            old = cur[base + c]
            prev = old if reduce and old >= 0 else None
            x = Version(len(versions), v, c, i, prev)
            versions.append(x)
            if prev is not None:
                versions[prev].readers.append(2 * i + 1)
            if old >= 0:
                versions[old].next = x.id
            cur[base + c] = x.id
            ci[c] = x.id
    return versions, read, created, cur


def node_priority_order(transfers: Sequence[Transfer], tol: float) -> list[int]:
    """The send (``2i``) and receive (``2i+1``) nodes of ``transfers`` sorted by their
    priority ``(start, 1, start, i)`` for a send and ``(end - tol, 0, start, i)`` for a
    receive (unique: ``i`` and the kind tell the nodes apart), as the tuples would sort."""
    m = len(transfers)
    starts = np.fromiter((t.start for t in transfers), dtype=np.float64, count=m)
    ends = np.fromiter((t.end - tol for t in transfers), dtype=np.float64, count=m)
    when = np.empty(2 * m, dtype=np.float64)
    when[0::2] = starts
    when[1::2] = ends
    kind = np.tile(np.array([1, 0], dtype=np.int8), m)
    index = np.repeat(np.arange(m, dtype=np.int64), 2)
    return np.lexsort((index, np.repeat(starts, 2), kind, when)).tolist()


def order_transfers(schedule: Schedule, versions: list[Version], prev_on_lane: list[int | None],
           tol: float) -> tuple[list[int], list[int]]:
    """Topological order of send (2i) / receive (2i+1) nodes, ties broken by time."""
    ts = schedule.transfers
    n = 2 * len(ts)
    # Successor lists may repeat an edge: a repeated edge adds to the in-degree as often as it
    # is taken away, and the heap's (unique) priorities alone fix the order.
    succ: list[list[int]] = []
    for i in range(len(ts)):
        succ.append([2 * i + 1])  # a send before its receive
        succ.append([])
    for i, j in enumerate(prev_on_lane):
        if j is not None:
            succ[2 * j + 1].append(2 * i)
    for x in versions:
        made = 2 * x.creator + 1 if x.creator is not None else None
        nxt = 2 * versions[x.next].creator + 1 if x.next is not None else None
        for r in x.readers:
            if made is not None and r != made:
                succ[made].append(r)
            if nxt is not None and r != nxt:
                succ[r].append(nxt)
    indeg = [0] * n
    for s in succ:
        for b in s:
            indeg[b] += 1
    # the heap holds each node's rank in the order of its priority, unique per node
    node = node_priority_order(ts, tol)
    rank = [0] * n
    for r, a in enumerate(node):
        rank[a] = r
    heap = [rank[a] for a in range(n) if indeg[a] == 0]
    heapq.heapify(heap)
    pos = [-1] * n
    k = 0
    pop, push = heapq.heappop, heapq.heappush
    while heap:
        a = node[pop(heap)]
        pos[a] = k
        k += 1
        for b in succ[a]:
            indeg[b] -= 1
            if indeg[b] == 0:
                push(heap, rank[b])
    if k != n:
        raise TacosError("the schedule's data dependencies form a cycle; it cannot be lowered",
                         hint="verify the schedule first (tacos.verify.verify_schedule)")
    return [pos[2 * i] for i in range(len(ts))], [pos[2 * i + 1] for i in range(len(ts))]
