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

**Timing** (:func:`emit`) is a list schedule on the physical links: a transfer is ready when its
slice is at the sender and starts when every link of its route has a free lane (``multiplicity``
lanes; a switch port is one link, shared by every route through it); ready transfers go lowest
round first, then the one with the deepest subtree below it.  With ``batch`` it takes every
other ready transfer of the same round (other trees crossing the route) into the same transfer,
so α is paid once per round and route, at the price of longer pipeline stages; the solver tries
both.
:func:`make_transfer` is the one place that turns a hop into a :class:`~tacos.schedule.Transfer`.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from tacos.schedule import Transfer
from tacos.solvers.forest_pack import Tree
from tacos.solvers.forest_split import Path


@dataclass(frozen=True)
class Hop:
    """How a tree edge travels: for each link of its route the parallel link ids it may take
    (``links[h]``), the route's α (sum) and bandwidth (narrowest link)."""

    links: tuple[tuple[int, ...], ...]
    alpha: float
    bandwidth: float


def make_transfer(start: float, end: float, src: int, dst: int, route: tuple[int, ...],
                  chunks: tuple[int, ...], op: str = "copy") -> Transfer:
    """The transfer of one slice over one route (the only place transfers are built)."""
    return Transfer(start, end, src, dst, route, chunks, op)


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
            for li in hop.links[0][:1]:
                alpha[li] = hop.alpha
                per_link[li] += 1
            times[y] = times[x] + [d / hop.bandwidth]
            fill = max(fill, sum(times[y]) - max(times[y]))
    a = max((a * (1 if batch else per_link[li]) for li, a in alpha.items()), default=0.0)
    if a <= 0 or fill <= 0:
        return 1 if fill <= 0 else max_slices
    return max(1, min(max_slices, round(math.sqrt(fill / a))))


def emit(trees: list[Tree], rounds: list[list[tuple[int, ...]]], chunk_bytes: list[int],
         hop_of: Callable[[Path], Hop], lanes: list[int], op: str = "copy",
         batch: bool = True) -> list[Transfer]:
    """List-schedule every (tree, round) along its tree; ``rounds[i][j]`` = chunk ids tree i
    sends in round j; ``lanes[l]`` = transfers link l carries at once; ``batch`` merges a
    round's ready slices on a route into one transfer.  Returns the timed transfers."""
    free = list(lanes)
    children = []
    height = []
    for tree in trees:
        ch: dict[int, list[int]] = defaultdict(list)
        for e, (x, _) in enumerate(tree.edges):
            ch[x].append(e)
        children.append(ch)
        height.append(_heights(tree))
    ready: dict[Hop, list] = defaultdict(list)
    users: dict[int, set[Hop]] = defaultdict(set)  # link -> hops that may wait for it
    events: list = []
    out: list[Transfer] = []
    seq = 0

    def push(i: int, j: int, node: int) -> list[Hop]:
        got = []
        for e in children[i][node]:
            hop = hop_of(trees[i].paths[e])
            if hop not in ready:
                for choice in hop.links:
                    for li in choice:
                        users[li].add(hop)
            y = trees[i].edges[e][1]
            heapq.heappush(ready[hop], (j, -height[i][y], i, e))
            got.append(hop)
        return got

    def lanes_for(hop: Hop) -> tuple[int, ...] | None:
        route = []
        for choice in hop.links:
            li = next((x for x in choice if free[x] > 0), None)
            if li is None:
                return None
            route.append(li)
        return tuple(route)

    def start(hops: set[Hop], now: float) -> None:
        nonlocal seq
        for hop in sorted((h for h in hops if ready[h]), key=lambda h: ready[h][0]):
            while ready[hop]:
                route = lanes_for(hop)
                if route is None:
                    break
                j, _, i, e = heapq.heappop(ready[hop])
                group = [(i, e)]
                while batch and ready[hop] and ready[hop][0][0] == j:  # same round: one transfer
                    _, _, i2, e2 = heapq.heappop(ready[hop])
                    group.append((i2, e2))
                for li in route:
                    free[li] -= 1
                chunks = tuple(sorted(c for i2, _ in group for c in rounds[i2][j]))
                nbytes = sum(chunk_bytes[c] for c in chunks)
                end = now + hop.alpha + nbytes / hop.bandwidth
                x, y = trees[i].edges[e]
                out.append(make_transfer(now, end, x, y, route, chunks, op))
                seq += 1
                heapq.heappush(events, (end, seq, j, tuple(group), route))

    pending: set[Hop] = set()
    for i, tree in enumerate(trees):
        for j in range(len(rounds[i])):
            pending.update(push(i, j, tree.root))
    start(pending, 0.0)
    while events:
        now, _, j, done, route = heapq.heappop(events)
        touched: set[Hop] = set()
        for li in route:
            free[li] += 1
            touched |= users[li]
        for i, e in done:
            touched.update(push(i, j, trees[i].edges[e][1]))
        while events and events[0][0] <= now:  # everything ending now frees first
            _, _, j2, done2, route2 = heapq.heappop(events)
            for li in route2:
                free[li] += 1
                touched |= users[li]
            for i, e in done2:
                touched.update(push(i, j2, trees[i].edges[e][1]))
        start(touched, now)
    return out
