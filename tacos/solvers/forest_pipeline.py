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
both.  With ``batch='steps'`` (:func:`step_groups`) slices of different trees and rounds that
share a hop at the same step go as one transfer: trees built to share hops
(:mod:`~tacos.solvers.forest_shared`) then pay α once per step and hop instead of once per tree.
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


def _simple(path: Path) -> Path:
    """``path`` without the loops edge splitting can leave in it (``a, r, b, r, c`` becomes
    ``a, r, c``): the links kept are a subset of the walk's."""
    out: list[int] = []
    at: dict[int, int] = {}
    for v in path:
        if v in at:
            for u in out[at[v] + 1:]:
                del at[u]
            del out[at[v] + 1:]
        else:
            at[v] = len(out)
            out.append(v)
    return tuple(out)


def _local(tree: Tree, is_switch: Callable[[int], bool] | None) -> tuple[Tree, list[int]]:
    """``tree`` on local node ids (0 = root) with every path cut at the NPUs it passes
    (``relays='all'``: a relay NPU stores and forwards, so its segments are separate transfers).

    Every NPU holds the tree's data at most once: a path starts from the last NPU on it that
    already has the data (a relay another path of the tree passed, or a member), and loops in a
    path are cut out.  Sending the data to an NPU twice would put a chunk twice on a link, and
    in the reversed tree of a reduction the second send would carry the first one's
    contributions again.  Only links of the packed paths are used, so the capacities the packing
    respects still hold.  Returns the local tree and each local node's NPU."""
    if all(len(path) == 2 for path in tree.paths):  # direct links only: nothing to cut
        where = {tree.root: 0}
        for _, y in tree.edges:
            where[y] = len(where)
        edges = [(where[x], where[y]) for x, y in tree.edges]
        return Tree(0, tree.mult, edges, list(tree.paths)), list(where)
    npus = [tree.root]
    where = {tree.root: 0}  # NPU -> the local node that holds the tree's data there
    edges: list[tuple[int, int]] = []
    paths: list[Path] = []
    for _, path in zip(tree.edges, tree.paths, strict=True):
        path = _simple(path)
        cut = [i for i, v in enumerate(path)
               if i in (0, len(path) - 1) or is_switch is None or not is_switch(v)]
        first = max(i for i in cut if path[i] in where)
        cur = where[path[first]]
        for a, b in zip(cut, cut[1:], strict=False):
            if a < first:
                continue
            npus.append(path[b])
            edges.append((cur, len(npus) - 1))
            paths.append(path[a:b + 1])
            cur = where[path[b]] = len(npus) - 1
    steps = tree.steps if tree.steps and len(edges) == len(tree.edges) else None
    return Tree(0, tree.mult, edges, paths, steps), npus


def slice_count(trees: list[Tree], tree_bytes: list[float], hop_of: Callable[[Path], Hop],
                max_slices: int, batch: bool = True) -> int:
    """s* = sqrt(F/A) from the module docstring, clipped to ``[1, max_slices]``; without
    ``batch`` a link pays α once per tree crossing it: A = max_l n_l·α_l."""
    alpha: dict[int, float] = {}
    per_link: dict[int, int] = defaultdict(int)
    fill = 0.0
    for tree, d in zip(trees, tree_bytes, strict=True):
        # (sum, max) of the hop times from the root down to each node
        times: dict[int, tuple[float, float]] = {tree.root: (0, 0.0)}
        for (x, y), path in zip(tree.edges, tree.paths, strict=True):
            hop = hop_of(path)
            for li in hop.links[0][:1]:
                alpha[li] = hop.alpha
                per_link[li] += 1
            total, top = times[x]
            cost = d / hop.bandwidth
            times[y] = (total + cost, max(top, cost))
            fill = max(fill, times[y][0] - times[y][1])
    a = max((a * (1 if batch else per_link[li]) for li, a in alpha.items()), default=0.0)
    if a <= 0 or fill <= 0:
        return 1 if fill <= 0 else max_slices
    return max(1, min(max_slices, round(math.sqrt(fill / a))))


LOOKAHEAD = 0.0
TIE = 1e-9
"""Transfers ending within this many seconds of each other free their links together (the
later time), so that chunks a byte apart do not let a low-priority transfer take a port a
moment before a higher-priority one is ready: the list schedule's choices then depend on the
priorities, not on rounding (all-reduce's phases on 2x DGX-A100 differed by 7% from an
all-gather of the same shards without it)."""


def step_groups(trees: list[Tree], npu_of: list[list[int]], hop_ids: list[list[int]],
                n_rounds: list[int], labels: bool = True, whole: bool = True,
                ) -> tuple[dict[tuple[int, int, int], int], list[list], list[int]]:
    """Step merging (:func:`emit` with ``batch='steps'``): every (tree, edge, round) with the
    same sender, receiver, route and step forms one group, sent as one transfer once all its
    slices are at the sender.  Slice j of a tree edge e = (x, y) travels at step
    ``depth(x) + j``, or, where the tree labels its edges (``Tree.steps``, e.g. the binomial
    stars of :mod:`~tacos.solvers.forest_shared`), at step (family, b) of round j.  Slices
    arrive by groups of earlier steps, so with depth steps groups never wait on each other in
    a cycle; labelled steps are checked, and if their groups would wait in a cycle the depth
    steps are used instead (``labels=False``).  Returns the group of every (tree, edge, round),
    each group's members and its priority (lower first: the step, counted from the round)."""
    index: dict[tuple, int] = {}
    group_of: dict[tuple[int, int, int], int] = {}
    members: list[list] = []
    step_of: list[int] = []
    shapes: dict[tuple, tuple[dict[int, int], list[bool]]] = {}  # trees of one shape (tori)
    for i, tree in enumerate(trees):
        marks = tree.steps if labels and tree.steps else [None] * len(tree.edges)
        shape = (tree.root, tuple(tree.edges), id(tree.steps) if labels and tree.steps else 0)
        if shape not in shapes:
            depth = {tree.root: 0}
            for x, y in tree.edges:
                depth[y] = depth[x] + 1
            shapes[shape] = depth, _last_stage(tree, marks)
        depth, last = shapes[shape]
        for e, ((x, y), mark) in enumerate(zip(tree.edges, marks, strict=True)):
            for j in range(n_rounds[i]):
                ends = (npu_of[i][x], npu_of[i][y], hop_ids[i][e])
                if mark is None:
                    key, when = (*ends, -1, -1, depth[x] + j), depth[x] + j
                elif mark[0] == 0 and whole and last[e]:  # the root's own last stage:
                    key, when = (*ends, *mark, -1), mark[1]
                else:
                    key, when = (*ends, *mark, j), mark[0] + mark[1] + j
                g = index.get(key)
                if g is None:
                    g = index[key] = len(members)
                    members.append([])
                    step_of.append(when)
                members[g].append((i, j, e))
                group_of[i, e, j] = g
    if labels and any(t.steps for t in trees) and _cyclic(trees, group_of, members):
        return step_groups(trees, npu_of, hop_ids, n_rounds, labels=False, whole=whole)
    return group_of, members, step_of


def _last_stage(tree: Tree, marks: list) -> list[bool]:
    """Per edge: whether it and every edge below it belong to the root's own family of
    labelled steps (family 0).  Such edges carry data the root has from the start and feed
    nothing else, so all rounds of a step may go as one transfer (the pipeline gains nothing
    from slicing them)."""
    ok = [m is not None and m[0] == 0 for m in marks]
    below: dict[int, bool] = defaultdict(lambda: True)  # node -> all edges below are ok
    for e in range(len(tree.edges) - 1, -1, -1):  # children after parents (BFS order)
        x, y = tree.edges[e]
        ok[e] = ok[e] and below[y]
        below[x] = below[x] and ok[e]
    return ok


def _cyclic(trees: list[Tree], group_of: dict[tuple[int, int, int], int],
            members: list[list]) -> bool:
    """Whether some groups wait on each other in a cycle (a group waits for the groups that
    bring its members' slices to the sender)."""
    parent_edge = [{y: e for e, (_, y) in enumerate(t.edges)} for t in trees]
    after: list[set[int]] = [set() for _ in members]
    needs = [0] * len(members)
    for g, mem in enumerate(members):
        for i, j, e in mem:
            p = parent_edge[i].get(trees[i].edges[e][0])
            if p is not None:
                h = group_of[i, p, j]
                if g not in after[h]:
                    after[h].add(g)
                    needs[g] += 1
    todo = [g for g in range(len(members)) if needs[g] == 0]
    seen = 0
    while todo:
        h = todo.pop()
        seen += 1
        for g in after[h]:
            needs[g] -= 1
            if needs[g] == 0:
                todo.append(g)
    return seen < len(members)


def emit(trees: list[Tree], rounds: list[list[tuple[int, ...]]], chunk_bytes: list[int],
         hop_of: Callable[[Path], Hop], lanes: list[int], op: str = "copy",
         batch: bool | str = True, is_switch: Callable[[int], bool] | None = None,
         stripe: bool = True) -> list[Transfer]:
    """List-schedule every (tree, round) along its tree; ``rounds[i][j]`` = chunk ids tree i
    sends in round j; ``lanes[l]`` = transfers link l carries at once; ``batch`` merges a
    round's ready slices on a route into one transfer, and ``batch='steps'`` merges every
    slice of the same step on a route (:func:`step_groups`: slices of different trees and
    rounds whose tree edges share sender, receiver and route, which then pay α once);
    ``is_switch`` tells relay NPUs on a path (stored and forwarded) from switches (cut
    through); ``stripe`` spreads a slice over the idle parallel lanes of its route when nothing
    else waits for them.  Returns the timed transfers."""
    local = [_local(t, is_switch) for t in trees]
    trees = [t for t, _ in local]
    npu_of = [n for _, n in local]
    steps = batch == "steps"
    free = list(lanes)
    longest = max((len(r) for r in rounds), default=1)
    scale = [longest / max(1, len(r)) for r in rounds]
    hop_index: dict[Hop, int] = {}
    hops: list[Hop] = []
    users: dict[int, list[int]] = defaultdict(list)  # link -> hops that may wait for it
    children = []  # children[i][node] = [(edge, hop id, -height of the child)]
    hop_ids: list[list[int]] = []
    by_path: dict[Path, int] = {}  # hop id of every path seen (trees share most paths)
    tall: dict[tuple, dict[int, int]] = {}  # heights by local shape (translated trees share it)
    for tree in trees:
        shape = tuple(tree.edges)
        h = tall.get(shape)
        if h is None:
            h = tall[shape] = _heights(tree)
        ch: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
        hop_ids.append([])
        for e, (x, y) in enumerate(tree.edges):
            hid = by_path.get(tree.paths[e])
            if hid is None:
                hop = hop_of(tree.paths[e])
                hid = hop_index.get(hop)
                if hid is None:
                    hid = hop_index[hop] = len(hops)
                    hops.append(hop)
                    for choice in hop.links:
                        for li in choice:
                            users[li].append(hid)
                by_path[tree.paths[e]] = hid
            ch[x].append((e, hid, -h[y]))
            hop_ids[-1].append(hid)
        children.append(ch)
    if steps:
        group_of, members, step_of = step_groups(trees, npu_of, hop_ids,
                                                 [len(r) for r in rounds])
        waiting = [len(m) for m in members]  # slices of each group not yet at the sender
        tallest = [0] * len(members)  # -(tallest subtree below a member)
    ready: list[list] = [[] for _ in hops]
    round_bytes = [[sum(chunk_bytes[c] for c in r) for r in tree_rounds] for tree_rounds in rounds]
    events: list = []
    parts: dict[int, int] = {}  # transfer group -> stripes still under way
    out: list[Transfer] = []
    seq = 0

    def push(i: int, j: int, node: int, touched: set[int]) -> None:
        key = j * scale[i]
        for e, hid, neg_height in children[i][node]:
            if steps:  # a group is ready once all its slices are
                g = group_of[i, e, j]
                waiting[g] -= 1
                tallest[g] = min(tallest[g], neg_height)
                if waiting[g]:
                    continue
                heapq.heappush(ready[hid], (step_of[g], tallest[g], g, 0, 0))
                touched.add(hid)
                continue
            heapq.heappush(ready[hid], (key + LOOKAHEAD * neg_height, neg_height, i, j, e))
            touched.add(hid)

    def lanes_for(hop: Hop) -> tuple[int, ...] | None:
        route = []
        for choice in hop.links:
            for li in choice:
                if free[li] > 0:
                    route.append(li)
                    break
            else:
                return None
        return tuple(route)

    def start(touched: set[int], now: float) -> None:
        nonlocal seq
        for hid in sorted((h for h in touched if ready[h]), key=lambda h: ready[h][0]):
            queue, hop = ready[hid], hops[hid]
            while queue:
                route = lanes_for(hop)
                if route is None:
                    break
                key, _, i, j, e = heapq.heappop(queue)
                if steps:  # the whole group: one transfer
                    group = members[i]
                    i, j, e = group[0]
                else:
                    group = [(i, j, e)]
                while batch is True and queue and queue[0][0] == key:  # same round: one transfer
                    _, _, i2, j2, e2 = heapq.heappop(queue)
                    group.append((i2, j2, e2))
                for li in route:
                    free[li] -= 1
                if len(group) == 1:
                    chunks, nbytes = rounds[i][j], round_bytes[i][j]
                else:
                    chunks = tuple(sorted(c for i2, j2, _ in group for c in rounds[i2][j2]))
                    nbytes = sum(round_bytes[i2][j2] for i2, j2, _ in group)
                routes = [route]
                while stripe and not queue and len(routes) < len(chunks):  # idle lanes too
                    more = lanes_for(hop)
                    if more is None:
                        break
                    for li in more:
                        free[li] -= 1
                    routes.append(more)
                x, y = trees[i].edges[e]
                seq += 1
                parts[seq] = len(routes)
                for q, lanes_q in enumerate(routes):
                    piece = chunks[q * len(chunks) // len(routes):
                                   (q + 1) * len(chunks) // len(routes)]
                    share = (nbytes if len(routes) == 1
                             else sum(chunk_bytes[c] for c in piece))  # sizes may differ by a byte
                    end = now + hop.alpha + share / hop.bandwidth
                    out.append(make_transfer(now, end, npu_of[i][x], npu_of[i][y], lanes_q,
                                             piece, op))
                    heapq.heappush(events, (end, seq, group, lanes_q))

    pending: set[int] = set()
    for i, tree in enumerate(trees):
        for j in range(len(rounds[i])):
            push(i, j, tree.root, pending)
    start(pending, 0.0)
    while events:
        now, key, done, route = heapq.heappop(events)
        touched: set[int] = set()
        while True:
            for li in route:
                free[li] += 1
                touched.update(users[li])
            parts[key] -= 1
            if parts[key] == 0:  # every stripe of the slice has arrived
                for i, j, e in done:
                    push(i, j, trees[i].edges[e][1], touched)
            if not events or events[0][0] > now + TIE:  # everything ending now frees first
                break
            end, key, done, route = heapq.heappop(events)
            now = max(now, end)
        start(touched, now)
    return out
