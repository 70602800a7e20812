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
round first, then the one with the deepest subtree below it (or, for trees that give their
edges steps, ``Tree.order``, the earliest step, edges into leaves last).  With ``batch`` it
takes every other ready transfer of the same round (other trees crossing the route) into the
same transfer, so α is paid once per round and route, at the price of longer pipeline stages;
the solver tries both.  With ``batch='steps'`` (:func:`step_groups`) slices of different trees
and rounds that share a hop at the same step go as one transfer: trees built to share hops
(:mod:`~tacos.solvers.forest.shared`) then pay α once per step and hop instead of once per tree.
:func:`make_transfer` is the one place that turns a hop into a
:class:`~tacos.model.schedule.Transfer`.  Large schedules without step merging run the same
list schedule compiled (:mod:`~tacos.solvers.forest.jit_emit`, :func:`compiled`), which returns
the same transfers as :class:`~tacos.model.columns.TransferColumns`.
"""

from __future__ import annotations

import heapq
import math
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from tacos.model.schedule import Transfer
from tacos.solvers.forest.pack import Tree
from tacos.solvers.forest.split import Path
from tacos.solvers.forest.steps import StepTable, step_groups, step_table

__all__ = ["Hop", "compiled", "emit", "localize", "make_transfer", "slice_count", "step_groups"]


@dataclass(frozen=True)
class Hop:
    """How a tree edge travels: for each link of its route the parallel link ids it may take
    (``links[h]``), the route's α (sum) and bandwidth (narrowest link)."""

    links: tuple[tuple[int, ...], ...]
    alpha: float
    bandwidth: float


def make_transfer(start: float, end: float, src: int, dst: int, route: tuple[int, ...],
                  chunks: tuple[int, ...], op: str = "copy") -> Transfer:
    """The transfer of one slice over one route (the only place transfers are built): the
    same object as ``Transfer(start, end, src, dst, route, chunks, op)``, without a frozen
    dataclass's per-field ``object.__setattr__`` (as
    :func:`~tacos.model.schedule.transfers_from_columns`)."""
    t = _new(Transfer)
    t.__dict__.update(start=start, end=end, src=src, dst=dst, route=route, chunks=chunks, op=op,
                      group=None)
    return t


_new = object.__new__


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
    if max(map(len, tree.paths), default=2) == 2:  # direct links only: nothing to cut
        ys = [y for _, y in tree.edges]  # a tree's children: each node once, in edge order
        where = dict(zip(ys, range(1, len(ys) + 1), strict=True))
        where[tree.root] = 0
        edges = list(zip(map(where.__getitem__, [x for x, _ in tree.edges]),
                         range(1, len(ys) + 1), strict=True))
        return (Tree(0, tree.mult, edges, list(tree.paths), order=tree.order),
                [tree.root, *ys])
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
    same = len(edges) == len(tree.edges)
    steps = tree.steps if tree.steps and same else None
    return Tree(0, tree.mult, edges, paths, steps, tree.order if same else None), npus


def localize(trees: list[Tree], is_switch: Callable[[int], bool] | None
             ) -> list[tuple[Tree, list[int]]]:
    """Every tree on local node ids, with each local node's NPU (what :func:`emit` schedules;
    the same for every slicing of the same trees)."""
    return [_local(t, is_switch) for t in trees]


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
LEAF_LAST = 1 << 20
"""Added to the step of an edge into a leaf (``Tree.order``): within a round such transfers
feed nothing and wait for every transfer that does (1x MI250, 64 MiB, rounds 3, 1: 87.1% of
the optimum without it, 89.9% with it)."""
TIE = 1e-9
"""Transfers ending within this many seconds of each other free their links together (the
later time), so that chunks a byte apart do not let a low-priority transfer take a port a
moment before a higher-priority one is ready: the list schedule's choices then depend on the
priorities, not on rounding (all-reduce's phases on 2x DGX-A100 differed by 7% from an
all-gather of the same shards without it)."""


class _GroupView:
    """What :func:`emit`'s list schedule needs of step merging's groups (:func:`step_table`),
    as Python lists: each group's route id, priority (step, -(tallest subtree below a member)),
    the groups it feeds, and its transfer (first member, sorted chunks, bytes)."""

    def __init__(self, table: StepTable, trees: list[Tree], hop_ids: list[list[int]],
                 tall: dict[tuple, dict[int, int]], rounds: list[list[tuple[int, ...]]],
                 chunk_bytes: list[int], round_bytes: list[list[int]]) -> None:
        self.table = table
        self.rounds = rounds
        self.round_bytes = round_bytes
        first = table.first
        n_edges = np.array([len(t.edges) for t in trees], dtype=np.int64)
        edge_start = np.concatenate(([0], np.cumsum(n_edges)[:-1])).astype(np.int64)
        flat_edge = edge_start[table.tree] + table.edge  # member -> tree edge
        hops = np.concatenate([np.asarray(h, dtype=np.int64) for h in hop_ids])
        lows: dict[tuple, np.ndarray] = {}  # -height of each edge's child, by shape
        neg = []
        for tree in trees:
            shape = tuple(tree.edges)
            if shape not in lows:
                h = tall[shape]
                lows[shape] = np.array([-h[y] for _, y in tree.edges], dtype=np.int64)
            neg.append(lows[shape])
        neg_height = np.concatenate(neg)[flat_edge]
        self.hop = hops[flat_edge[first]].tolist()
        self.step = table.step.tolist()
        self.tallest = np.minimum.reduceat(neg_height[table.order], table.start[:-1]).tolist()
        self.ptr = table.feed_ptr.tolist()
        self.to = table.feed_group.tolist()
        self.count = table.feed_count.tolist()
        self.tree, self.edge, self.rnd = (table.tree[first].tolist(), table.edge[first].tolist(),
                                          table.rnd[first].tolist())
        self.size = table.size.tolist()
        # every group's chunks, sorted, back to back (its members' rounds' chunks)
        round_start = np.concatenate(([0], np.cumsum([len(r) for r in rounds])[:-1]))
        lengths = np.array([len(c) for r in rounds for c in r], dtype=np.int64)
        flat = np.array([c for r in rounds for cs in r for c in cs], dtype=np.int64)
        chunk_start = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
        member_round = (round_start.astype(np.int64)[table.tree] + table.rnd)[table.order]
        take = lengths[member_round]
        ends = np.cumsum(take)
        pos = np.arange(int(ends[-1]) if len(ends) else 0, dtype=np.int64)
        pos += np.repeat(chunk_start[member_round] - (ends - take), take)
        owner = np.repeat(table.group[table.order], take)
        top = int(flat.max()) + 1 if len(flat) else 1
        self.chunks = (np.sort(owner * top + flat[pos]) % top) if len(pos) else pos
        sizes = np.asarray(chunk_bytes, dtype=np.int64)
        self.sums = np.concatenate(([0], np.cumsum(sizes[self.chunks]))).tolist()
        counts = np.bincount(owner, minlength=table.n_groups)
        self.at = np.concatenate(([0], np.cumsum(counts))).tolist()

    def initial(self) -> list[int]:
        """The groups whose slices are all at their senders from the start (the roots')."""
        return np.flatnonzero(self.table.waits == 0).tolist()

    def feeds(self, g: int) -> zip:
        """(group, members) pairs of the groups whose members group g's arrival brings."""
        lo, hi = self.ptr[g], self.ptr[g + 1]
        return zip(self.to[lo:hi], self.count[lo:hi], strict=True)

    def transfer(self, g: int) -> tuple[int, int, int, tuple[int, ...], int]:
        """Group g's first member (tree, round, edge), chunks and bytes."""
        i, j, e = self.tree[g], self.rnd[g], self.edge[g]
        if self.size[g] == 1:
            return i, j, e, self.rounds[i][j], self.round_bytes[i][j]
        lo, hi = self.at[g], self.at[g + 1]
        return i, j, e, tuple(self.chunks[lo:hi].tolist()), self.sums[hi] - self.sums[lo]


JIT_MIN_WORK = 20_000
"""Slices (tree edges times rounds) of one schedule below which :func:`emit` stays in Python
while the compiled list schedule is not loaded yet.  Loading numba and the cached kernel costs
about 0.5-0.7 s of CPU, what the Python list schedule spends on some 60,000 slices: a solve
with one schedule this large on :data:`JIT_MIN_NODES` NPUs or more times about 200,000 in all
(2x DGX-2, 2x MI250: the second schedule has 29,000-36,000); the solves that stay in Python
time fewer (2x/4x DGX-A100 and DGX-H100: 40,000-118,000, no schedule above 15,000)."""
JIT_MIN_NODES = 16
"""NPUs a tree spans below which :func:`emit` stays in Python while the kernel is not loaded
(small groups' solves time few large schedules: a 3x3 torus with one slow link has one of
24,000 slices)."""


def compiled(work: int, nodes: int = JIT_MIN_NODES) -> bool:
    """Whether :func:`emit` runs the compiled list schedule
    (:mod:`~tacos.solvers.forest.jit_emit`): numba is there, ``TACOS_JIT`` does not turn it
    off, and the kernel is loaded already or a schedule of ``work`` slices over trees of
    ``nodes`` NPUs pays for loading it."""
    loaded = "tacos.solvers.forest.jit_emit" in sys.modules
    if LOOKAHEAD or not loaded and (work < JIT_MIN_WORK or nodes < JIT_MIN_NODES):
        return False  # (small solves never look for numba)
    from tacos.solvers.greedy import jit  # (the greedy's switch: numba there, TACOS_JIT)

    return jit.available()


def _emit_compiled(trees: list[Tree], npu_of: list[list[int]],
                   rounds: list[list[tuple[int, ...]]], chunk_bytes: list[int],
                   hops: list[Hop], fixed: list, users: dict[int, list[int]],
                   children: list[dict[int, list[tuple[int, int, int]]]], free: list[int],
                   scale: list[float], op: str, batch: bool, stripe: bool, ordered: bool
                   ) -> Sequence[Transfer]:
    """:func:`emit`'s list schedule run by :func:`~tacos.solvers.forest.jit_emit.run` (every
    hop's route fixed, no step merging): the same transfers as columns, in the same order
    (``ordered``: sorted as :func:`emit` sorts them)."""
    from tacos.solvers.forest import jit_emit

    i64 = np.int64
    hop_len = [len(r) for r in fixed]
    hop_ptr = np.concatenate(([0], np.cumsum(hop_len))).astype(i64)
    hop_link = np.array([li for r in fixed for li in r], dtype=i64)
    n_links = len(free)
    user_len = [len(users.get(li, ())) for li in range(n_links)]
    user_ptr = np.concatenate(([0], np.cumsum(user_len))).astype(i64)
    user_hop = np.array([h for li in range(n_links) for h in users.get(li, ())], dtype=i64)
    n_nodes = [len(t.edges) + 1 for t in trees]
    node_base = np.concatenate(([0], np.cumsum(n_nodes)[:-1])).astype(i64)
    c_len: list[int] = []
    c_edge: list[int] = []
    c_hop: list[int] = []
    c_rank: list[int] = []
    for ch, n in zip(children, n_nodes, strict=True):
        for node in range(n):
            kids = ch.get(node, ())
            c_len.append(len(kids))
            for e, hid, rank in kids:
                c_edge.append(e)
                c_hop.append(hid)
                c_rank.append(rank)
    edge_base = np.concatenate(([0], np.cumsum([len(t.edges) for t in trees])[:-1])).astype(i64)
    edge_child = np.array([y for t in trees for _, y in t.edges], dtype=i64)
    n_rounds = np.array([len(r) for r in rounds], dtype=i64)
    round_base = np.concatenate(([0], np.cumsum(n_rounds)[:-1])).astype(i64)
    flat_rounds = [r for tree_rounds in rounds for r in tree_rounds]
    rchunk_ptr = np.concatenate(([0], np.cumsum([len(r) for r in flat_rounds]))).astype(i64)
    rchunk = np.array([c for r in flat_rounds for c in r], dtype=i64)
    start, end, tree, edge, hop, cptr, chunks = jit_emit.run(
        np.array(free, dtype=i64), hop_ptr, hop_link,
        np.array([h.alpha for h in hops], dtype=np.float64),
        np.array([h.bandwidth for h in hops], dtype=np.float64), user_ptr, user_hop,
        node_base, np.concatenate(([0], np.cumsum(c_len))).astype(i64),
        np.array(c_edge, dtype=i64), np.array(c_hop, dtype=i64), np.array(c_rank, dtype=i64),
        edge_base, edge_child, round_base, n_rounds, np.array(scale, dtype=np.float64),
        rchunk_ptr, rchunk, np.asarray(chunk_bytes, dtype=i64), bool(batch), bool(stripe), TIE)
    # every transfer's sender and receiver NPUs, and its route (the hop's fixed route)
    npu_flat = np.array([n for ns in npu_of for n in ns], dtype=i64)
    edge_parent = np.array([x for t in trees for x, _ in t.edges], dtype=i64)
    at = edge_base[tree] + edge
    src = npu_flat[node_base[tree] + edge_parent[at]]
    dst = npu_flat[node_base[tree] + edge_child[at]]
    if ordered:  # by (start, end, src, dst, route, chunks): a transfer's chunks are its own
        # (no chunk crosses one tree edge twice), so the first chunk settles the rest
        routes = sorted(set(fixed))
        rank = {r: n for n, r in enumerate(routes)}
        route_rank = np.array([rank[r] for r in fixed], dtype=i64)[hop]
        first = chunks[cptr[:-1]] if len(chunks) else np.zeros(0, dtype=i64)
        keys = (first, route_rank, dst, src, end, start)
        perm = np.lexsort(keys)
        if len(perm) > 1 and bool(np.all(
                [k[perm[1:]] == k[perm[:-1]] for k in keys], axis=0).any()):
            cols = _columns(start, end, src, dst, hop, hop_ptr, hop_link, cptr, chunks, op)
            return sorted(cols, key=_sort_key)  # (a tie the keys above do not settle)
        start, end, src, dst, hop = start[perm], end[perm], src[perm], dst[perm], hop[perm]
        from tacos.model.columns import csr_take

        cptr, chunks = csr_take(cptr, chunks, perm)
        if cptr is None:
            cptr = np.arange(len(chunks) + 1, dtype=i64)
    return _columns(start, end, src, dst, hop, hop_ptr, hop_link, cptr, chunks, op)


def _sort_key(t: Transfer) -> tuple:
    return (t.start, t.end, t.src, t.dst, t.route, t.chunks, t.op)


def _columns(start: np.ndarray, end: np.ndarray, src: np.ndarray, dst: np.ndarray,
             hop: np.ndarray, hop_ptr: np.ndarray, hop_link: np.ndarray, cptr: np.ndarray,
             chunks: np.ndarray, op: str) -> Sequence[Transfer]:
    """The transfers as :class:`~tacos.model.columns.TransferColumns` (routes: their hops')."""
    from tacos.model.columns import TransferColumns, csr_take
    from tacos.model.transfer import OPS

    rptr, rlinks = csr_take(hop_ptr, hop_link, hop)
    return TransferColumns(start, end, src, dst, rptr, rlinks, cptr, chunks,
                           np.full(len(start), OPS.index(op), dtype=np.uint8))


def emit(trees: list[Tree], rounds: list[list[tuple[int, ...]]], chunk_bytes: list[int],
         hop_of: Callable[[Path], Hop], lanes: list[int], op: str = "copy",
         batch: bool | str = True, is_switch: Callable[[int], bool] | None = None,
         stripe: bool = True, local: list[tuple[Tree, list[int]]] | None = None,
         ordered: bool = False) -> Sequence[Transfer]:
    """List-schedule every (tree, round) along its tree; ``rounds[i][j]`` = chunk ids tree i
    sends in round j; ``lanes[l]`` = transfers link l carries at once; ``batch`` merges a
    round's ready slices on a route into one transfer, and ``batch='steps'`` merges every
    slice of the same step on a route (:func:`step_groups`: slices of different trees and
    rounds whose tree edges share sender, receiver and route, which then pay α once);
    ``is_switch`` tells relay NPUs on a path (stored and forwarded) from switches (cut
    through); ``stripe`` spreads a slice over the idle parallel lanes of its route when nothing
    else waits for them.  ``local`` is :func:`localize`'s result for these trees, when the
    caller keeps it across calls.  Returns the timed transfers, in the order they were started,
    or with ``ordered`` sorted by (start, end, src, dst, route, chunks).  Where every hop's
    route is fixed and slices do not merge by step, the compiled list schedule runs
    (:mod:`~tacos.solvers.forest.jit_emit`, :func:`compiled`): the same transfers, as
    :class:`~tacos.model.columns.TransferColumns`."""
    if local is None:
        local = localize(trees, is_switch)
    trees = [t for t, _ in local]
    npu_of = [n for _, n in local]
    steps = batch == "steps" and bool(trees)  # (no trees: nothing to group)
    free = list(lanes)
    longest = max((len(r) for r in rounds), default=1)
    scale = [longest / max(1, len(r)) for r in rounds]
    hop_index: dict[Hop, int] = {}
    hops: list[Hop] = []
    users: dict[int, list[int]] = defaultdict(list)  # link -> hops that may wait for it
    children = []  # children[i][node] = [(edge, hop id, rank: -height below, or the step)]
    hop_ids: list[list[int]] = []
    by_path: dict[Path, int] = {}  # hop id of every path seen (trees share most paths)
    tall: dict[tuple, dict[int, int]] = {}  # heights by local shape (translated trees share it)
    for tree in trees:
        shape = tuple(tree.edges)
        h = tall.get(shape)
        if h is None:
            h = tall[shape] = _heights(tree)
        ids = [by_path.get(path) for path in tree.paths]
        if None in ids:  # paths not seen yet, in edge order (hop ids by first use)
            for e, path in enumerate(tree.paths):
                hid = by_path.get(path)
                if hid is None:
                    hop = hop_of(path)
                    hid = hop_index.get(hop)
                    if hid is None:
                        hid = hop_index[hop] = len(hops)
                        hops.append(hop)
                        for choice in hop.links:
                            for li in choice:
                                users[li].append(hid)
                    by_path[path] = hid
                ids[e] = hid
        hop_ids.append(ids)
        if not steps:  # step merging walks groups (_GroupView), not tree children
            ch: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
            for e, (x, y) in enumerate(tree.edges):  # step order (edges into leaves after
                # the round's forwarding edges), else tallest subtree first
                ch[x].append((e, ids[e], tree.order[e] + LEAF_LAST * (h[y] == 1)
                              if tree.order else -h[y]))
            children.append(ch)
    ready: list[list] = [[] for _ in hops]
    round_bytes = [[sum(chunk_bytes[c] for c in r) for r in tree_rounds] for tree_rounds in rounds]
    if steps:
        table = step_table(trees, npu_of, hop_ids, [len(r) for r in rounds])
        groups = _GroupView(table, trees, hop_ids, tall, rounds, chunk_bytes, round_bytes)
        waiting = table.waits.tolist()  # members of each group whose slice is not at the sender
    events: list = []
    parts: dict[int, int] = {}  # transfer group -> stripes still under way
    out: list[Transfer] = []
    seq = 0

    def push(i: int, j: int, node: int, touched: set[int]) -> None:
        key = j * scale[i]
        for e, hid, rank in children[i][node]:
            heapq.heappush(ready[hid], (key + LOOKAHEAD * rank, rank, i, j, e))
            touched.add(hid)

    def arrive(g: int, touched: set[int]) -> None:
        """Group g's slices are at their receivers: the groups they feed wait for fewer."""
        for g2, count in groups.feeds(g):
            waiting[g2] -= count
            if not waiting[g2]:  # a group is ready once all its slices are
                hid = groups.hop[g2]
                heapq.heappush(ready[hid], (groups.step[g2], groups.tallest[g2], g2, 0, 0))
                touched.add(hid)

    # hops whose every link has one choice: their route is fixed (most hops)
    fixed = [tuple(c[0] for c in hop.links) if all(len(c) == 1 for c in hop.links) else None
             for hop in hops]
    if not steps and batch in (True, False) and None not in fixed and trees \
            and compiled(sum(len(t.edges) * len(r) for t, r in zip(trees, rounds, strict=True)),
                         len(set(npu_of[0]))):
        return _emit_compiled(trees, npu_of, rounds, chunk_bytes, hops, fixed, users, children,
                              free, scale, op, batch, stripe, ordered)

    def lanes_for(hid: int) -> tuple[int, ...] | None:
        route = fixed[hid]
        if route is not None:
            for li in route:
                if free[li] <= 0:
                    return None
            return route
        out = []
        for choice in hops[hid].links:
            for li in choice:
                if free[li] > 0:
                    out.append(li)
                    break
            else:
                return None
        return tuple(out)

    def start(touched: set[int], now: float) -> None:
        nonlocal seq
        # lanes only get taken while starting, so a hop blocked now stays blocked: leave it out
        # before ordering the rest (same order, fewer hops to sort and try); a fixed route's
        # check is lanes_for's, inline (the hottest loop of the list schedule)
        heads = []
        for h in touched:
            queue = ready[h]
            if not queue:
                continue
            route = fixed[h]
            if route is None:
                if lanes_for(h) is not None:
                    heads.append((queue[0], h))
                continue
            for li in route:
                if free[li] <= 0:
                    break
            else:
                heads.append((queue[0], h))
        heads.sort()  # by the head of each queue (unique: it names its tree, round and edge)
        for _, hid in heads:
            queue, hop = ready[hid], hops[hid]
            while queue:
                route = lanes_for(hid)
                if route is None:
                    break
                key, _, i, j, e = heapq.heappop(queue)
                if steps:  # the whole group i: one transfer
                    group: list | int = i
                    i, j, e, chunks, nbytes = groups.transfer(i)
                else:
                    group = [(i, j, e)]
                while batch is True and queue and queue[0][0] == key:  # same round: one transfer
                    _, _, i2, j2, e2 = heapq.heappop(queue)
                    group.append((i2, j2, e2))
                for li in route:
                    free[li] -= 1
                if steps:
                    pass
                elif len(group) == 1:
                    chunks, nbytes = rounds[i][j], round_bytes[i][j]
                else:
                    chunks = tuple(sorted(c for i2, j2, _ in group for c in rounds[i2][j2]))
                    nbytes = sum(round_bytes[i2][j2] for i2, j2, _ in group)
                routes = [route]
                while stripe and not queue and len(routes) < len(chunks):  # idle lanes too
                    more = lanes_for(hid)
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
    if steps:
        for g in groups.initial():
            heapq.heappush(ready[groups.hop[g]], (groups.step[g], groups.tallest[g], g, 0, 0))
            pending.add(groups.hop[g])
    else:
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
            if parts[key] == 0 and steps:  # every stripe of the group has arrived
                arrive(done, touched)
            elif parts[key] == 0:  # every stripe of the slice has arrived
                for i, j, e in done:
                    push(i, j, trees[i].edges[e][1], touched)
            if not events or events[0][0] > now + TIE:  # everything ending now frees first
                break
            end, key, done, route = heapq.heappop(events)
            now = max(now, end)
        start(touched, now)
    if ordered:
        out.sort(key=_sort_key)
    return out
