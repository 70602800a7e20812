"""Pipelining packed trees into a timed schedule.

Each tree of root r carries ``mult`` of the root's k tree units, i.e. ``mult/k`` of its shard.
The shard is cut into ``q·K·s`` equal chunks (q = the user's chunks per NPU, K = lcm of the
phases' k, s = slices): a tree owns ``q·mult·K/k`` *base* chunks and sends them in s rounds; round j
carries slice j of each of its base chunks as one transfer (MSCCL's ``cnt``), so α is paid once
per round and hop.  A relay forwards slice j as soon as it has it (store-and-forward per slice).

**Slice count.**  With s rounds, the busiest link l spends ``bytes_l/b_l + s·n_l·α_l`` (n_l
trees cross it; n_l = 1 when a round's slices travel together, see ``batch``) and the last slice
needs the pipeline's fill and drain, about
``(Σ_h d/b_h − max_h d/b_h)/s`` along the deepest root-to-leaf path (d = the tree's bytes, b_h the
hop bandwidths; the slowest hop is the pipeline's own pace, the others are paid once per slice).
Minimizing ``s·A + F/s`` with ``A = max_l n_l·α_l`` and ``F`` the largest such fill gives

    s* = sqrt(F / A)

and an overhead of ``2·sqrt(A·F)`` over the bandwidth-optimal time.  :func:`slice_count`
returns s* (clipped to [1, ``max_slices``]); the solver also times s*/2 and 2·s* and keeps the
fastest.

**Timing** (:func:`emit`) is a list schedule: a transfer is ready when its slice is at the sender;
a link (``multiplicity`` parallel copies) starts ready transfers lowest round first, then the
one with the deepest subtree below it.  With ``batch`` it takes every other ready transfer of
the same round (other trees crossing the link) into the same transfer, so α is paid once per
round and link, at the price of longer pipeline stages; the solver tries both.
:func:`make_transfer` is the one place that turns a hop into a :class:`~tacos.schedule.Transfer`.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from tacos.schedule import Schedule, Transfer
from tacos.solvers.forest_pack import Tree
from tacos.solvers.forest_split import Path


@dataclass(frozen=True)
class Hop:
    """How a tree edge travels: the schedule links it may use (parallel choices), their α and
    per-copy bandwidth, and how many transfers each can carry at once."""

    links: tuple[int, ...]
    alpha: float
    bandwidth: float
    slots: tuple[int, ...]


def make_transfer(start: float, end: float, src: int, dst: int, link: int,
                  chunks: tuple[int, ...], op: str = "copy") -> Transfer:
    """The transfer of one slice over one hop (the only place transfers are built)."""
    return Transfer(start, end, src, dst, link, chunks, op)


def _heights(tree: Tree) -> dict[int, int]:
    children: dict[int, list[int]] = defaultdict(list)
    for x, y in tree.edges:
        children[x].append(y)
    h: dict[int, int] = {}
    for _, y in reversed(tree.edges):
        h[y] = 1 + max((h[c] for c in children[y]), default=0)
    return h


def slice_count(trees: list[Tree], tree_bytes: list[float], hop_of: Callable[[Path], Hop],
                max_slices: int, batch: bool = True) -> int:
    """s* = sqrt(F/A) from the module docstring, clipped to ``[1, max_slices]``; without
    ``batch`` a link pays α once per tree crossing it: A = max_l n_l·α_l."""
    alpha: dict[int, float] = {}
    per_link: dict[int, int] = defaultdict(int)
    fill = 0.0
    for tree, d in zip(trees, tree_bytes, strict=True):
        times: dict[int, list[float]] = {tree.root: []}
        for (x, y), path in zip(tree.edges, tree.paths, strict=True):
            hop = hop_of(path)
            for li in hop.links[:1]:
                alpha[li] = hop.alpha / max(1, hop.slots[0])
                per_link[li] += 1
            times[y] = times[x] + [d / hop.bandwidth]
            fill = max(fill, sum(times[y]) - max(times[y]))
    a = max((a * (1 if batch else per_link[li]) for li, a in alpha.items()), default=0.0)
    if a <= 0 or fill <= 0:
        return 1 if fill <= 0 else max_slices
    return max(1, min(max_slices, round(math.sqrt(fill / a))))


def emit(trees: list[Tree], rounds: list[list[tuple[int, ...]]], chunk_bytes: list[int],
         hop_of: Callable[[Path], Hop], op: str = "copy", batch: bool = True) -> list[Transfer]:
    """List-schedule every (tree, round) along its tree; ``rounds[i][j]`` = chunk ids tree i
    sends in round j; ``batch`` merges a round's ready slices on a link into one transfer.
    Returns the timed transfers."""
    # transfer id -> (tree, round, edge index)
    resources: dict[tuple[int, ...], list[int]] = {}
    free: dict[tuple[int, ...], list[tuple[int, int]]] = {}
    children = []
    height = []
    for tree in trees:
        ch: dict[int, list[int]] = defaultdict(list)
        for e, (x, _) in enumerate(tree.edges):
            ch[x].append(e)
        children.append(ch)
        height.append(_heights(tree))
    ready: dict[tuple[int, ...], list] = defaultdict(list)
    events: list[tuple[float, int, int, tuple, tuple[int, ...], int]] = []
    out: list[Transfer] = []
    seq = 0

    def hop_key(i: int, e: int) -> tuple[tuple[int, ...], Hop]:
        hop = hop_of(trees[i].paths[e])
        key = hop.links
        if key not in free:
            free[key] = [(li, slot) for li, n in zip(hop.links, hop.slots, strict=True)
                         for slot in range(n)]
            resources[key] = list(hop.links)
        return key, hop

    def push(i: int, j: int, node: int) -> list[tuple[int, ...]]:
        touched = []
        for e in children[i][node]:
            key, _ = hop_key(i, e)
            y = trees[i].edges[e][1]
            heapq.heappush(ready[key], (j, -height[i][y], i, e))
            touched.append(key)
        return touched

    def start(key: tuple[int, ...], now: float) -> None:
        nonlocal seq
        while ready[key] and free[key]:
            j, _, i, e = heapq.heappop(ready[key])
            group = [(i, e)]
            while batch and ready[key] and ready[key][0][0] == j:  # same round: one transfer
                _, _, i2, e2 = heapq.heappop(ready[key])
                group.append((i2, e2))
            li, slot = free[key].pop()
            hop = hop_of(trees[i].paths[e])
            chunks = tuple(sorted(c for i2, _ in group for c in rounds[i2][j]))
            nbytes = sum(chunk_bytes[c] for c in chunks)
            end = now + hop.alpha + nbytes / hop.bandwidth
            x, y = trees[i].edges[e]
            out.append(make_transfer(now, end, x, y, li, chunks, op))
            seq += 1
            heapq.heappush(events, (end, seq, j, tuple(group), key, li * 1_000_003 + slot))

    touched: set[tuple[int, ...]] = set()
    for i, tree in enumerate(trees):
        for j in range(len(rounds[i])):
            touched.update(push(i, j, tree.root))
    for key in sorted(touched):
        start(key, 0.0)
    while events:
        now, _, j, done, key, code = heapq.heappop(events)
        free[key].append((code // 1_000_003, code % 1_000_003))
        keys = [key]
        for i, e in done:
            keys += push(i, j, trees[i].edges[e][1])
        for k2 in keys:
            start(k2, now)
    return out


def first_round(schedule: Schedule) -> Schedule:
    """The schedule of one pipeline round: MSCCL's runtime loops over slices of every chunk
    itself, so a pipelined schedule is lowered as its first round.

    Needs ``meta['pipeline'] = {'slices': s, 'chunks_per_npu': P}``: refined chunk i of a root is
    slice ``i % s`` of base chunk ``i // s``; the result keeps the transfers of slice 0 with
    chunks renumbered as the collective with ``P / s`` chunks per NPU.
    """
    from tacos import patterns

    info = schedule.meta.get("pipeline") or {}
    s = int(info.get("slices", 1))
    if s <= 1:
        return schedule
    coll = schedule.collective
    per = coll.chunks_per_npu
    base = patterns.build(coll.kind, coll.group, size=coll.size, chunks_per_npu=per // s,
                          root=coll.root, name=coll.name)
    keep = []
    for t in schedule.transfers:
        ids = []
        for c in t.chunks:
            idx = coll.chunks[c].index
            owner, i = divmod(idx, per)
            if i % s == 0:
                ids.append(owner * (per // s) + i // s)
        if ids:
            keep.append(Transfer(t.start, t.end, t.src, t.dst, t.link, tuple(sorted(ids)), t.op))
    meta = dict(schedule.meta)
    meta["pipeline"] = dict(info, slices=1, lowered_from_slices=s)
    return Schedule(schedule.topology, base, tuple(sorted(keep)), meta)
