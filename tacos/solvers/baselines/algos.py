"""Logical programs of the classic collective algorithms.

Every function returns a list of :class:`~tacos.solvers.lowering.program.Msg` in dependency
order.  All-gather and reduce-scatter style functions take ``members`` (the NPUs, in the order
the algorithm uses) and ``blocks`` (member -> chunk ids it owns: the chunks it starts with for
an all-gather, the chunks it must end with for a reduce-scatter).  Whether a transfer copies or
reduces is decided later by the lowering, from the chunk's kind and the data already there.

* ring: block j travels the ring ``j, j+1, ...`` (all-gather) or is accumulated along
  ``j+1, ..., j-1`` into ``j`` (reduce-scatter); N-1 steps, one block per link per step.
* bidirectional ring: each block covers half the ring in each direction (so one chunk per NPU
  still works), about (N-1)/2 steps.
* direct: every member sends to every other one, in N-1 shift rounds.
* recursive halving / doubling: log2 N exchanges with partners at distance N/2 .. 1 (halving,
  sizes halve) and 1 .. N/2 (doubling, sizes double).  A non-power-of-two count first folds
  the r extra members into partners and unfolds them at the end.
* double binary tree: NCCL's pair of complementary in-order binary trees; chunks alternate
  between the trees and are pipelined one chunk per message.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from tacos.solvers.lowering.program import Msg

Blocks = dict[int, tuple[int, ...]]


# -- paths (ring family) ---------------------------------------------------------------------
def paths_program(paths: Sequence[tuple[Sequence[int], tuple[int, ...]]]) -> list[Msg]:
    """Messages moving each ``chunks`` along its node ``path``, one hop per step."""
    longest = max((len(p) for p, _ in paths), default=0)
    out = []
    for s in range(longest - 1):
        for p, chunks in paths:
            if s + 1 < len(p) and chunks:
                out.append(Msg(p[s], p[s + 1], chunks))
    return out


def _arc(order: Sequence[int], start: int, length: int, step: int) -> list[int]:
    n = len(order)
    return [order[(start + step * i) % n] for i in range(length + 1)]


def ring_allgather(order: Sequence[int], blocks: Blocks) -> list[Msg]:
    """Unidirectional ring all-gather along ``order``."""
    n = len(order)
    return paths_program([(_arc(order, j, n - 1, 1), blocks[m]) for j, m in enumerate(order)])


def ring_reducescatter(order: Sequence[int], blocks: Blocks) -> list[Msg]:
    """Unidirectional ring reduce-scatter: block j is summed along j+1, ..., j-1 into j."""
    n = len(order)
    return paths_program([(_arc(order, j + 1, n - 1, 1), blocks[m])
                          for j, m in enumerate(order)])


def biring_allgather(order: Sequence[int], blocks: Blocks) -> list[Msg]:
    """Bidirectional ring all-gather: each block goes ceil((N-1)/2) hops one way and
    floor((N-1)/2) hops the other way."""
    n = len(order)
    cw, ccw = n // 2, (n - 1) // 2
    paths = []
    for j, m in enumerate(order):
        paths.append((_arc(order, j, cw, 1), blocks[m]))
        if ccw:
            paths.append((_arc(order, j, ccw, -1), blocks[m]))
    return paths_program(paths)


def biring_reducescatter(order: Sequence[int], blocks: Blocks) -> list[Msg]:
    """Bidirectional ring reduce-scatter: the two halves of the ring are summed toward j."""
    n = len(order)
    cw, ccw = n // 2, (n - 1) // 2
    paths = []
    for j, m in enumerate(order):
        paths.append((_arc(order, j - cw, cw, 1), blocks[m]))
        if ccw:
            paths.append((_arc(order, j + ccw, ccw, -1), blocks[m]))
    return paths_program(paths)


def ring_rooted(order: Sequence[int], root: int, chunks: Sequence[int], *,
                reduce: bool, bidirectional: bool = False) -> list[Msg]:
    """Pipelined ring broadcast from ``root`` (or reduce into it), one chunk per message."""
    n = len(order)
    r = list(order).index(root)
    legs = [(n // 2, 1), ((n - 1) // 2, -1)] if bidirectional else [(n - 1, 1)]
    paths = []
    for length, step in legs:
        if not length:
            continue
        arc = _arc(order, r, length, step)
        for c in chunks:
            paths.append((arc[::-1] if reduce else arc, (c,)))
    return paths_program(paths)


# -- direct ----------------------------------------------------------------------------------
def direct_allgather(members: Sequence[int], blocks: Blocks) -> list[Msg]:
    """Every member sends its block to every other member (shift rounds 1..N-1)."""
    n = len(members)
    return [Msg(members[j], members[(j + s) % n], blocks[members[j]])
            for s in range(1, n) for j in range(n)]


def direct_reducescatter(members: Sequence[int], blocks: Blocks) -> list[Msg]:
    """Every member sends its partial of block v straight to v."""
    n = len(members)
    return [Msg(members[j], members[(j + s) % n], blocks[members[(j + s) % n]])
            for s in range(1, n) for j in range(n)]


def direct_pairs(members: Sequence[int], pair_chunks: dict[tuple[int, int], tuple[int, ...]]
                 ) -> list[Msg]:
    """All-to-all style: ``pair_chunks[(u, v)]`` goes straight from u to v."""
    n = len(members)
    out = []
    for s in range(1, n):
        for j in range(n):
            u, v = members[j], members[(j + s) % n]
            if pair_chunks.get((u, v)):
                out.append(Msg(u, v, pair_chunks[(u, v)]))
    return out


# -- recursive halving / doubling --------------------------------------------------------------
def _fold(members: Sequence[int]) -> tuple[list[int], dict[int, int]]:
    """Core members (a power of two) and extra -> partner for the rest."""
    n = len(members)
    p2 = 1 << (n.bit_length() - 1)
    r = n - p2
    extra = {members[2 * i + 1]: members[2 * i] for i in range(r)}
    core = [members[2 * i] for i in range(r)] + list(members[2 * r:])
    return core, extra


def _union(blocks: Blocks, owners: Sequence[int]) -> tuple[int, ...]:
    return tuple(sorted(c for m in owners for c in blocks[m]))


def _merged(src: int, dst: int, blocks: Blocks, owners: Sequence[int]) -> Msg:
    """One message carrying the blocks of ``owners`` (each block remembered as a part)."""
    return Msg(src, dst, _union(blocks, owners),
               tuple(blocks[m] for m in owners if blocks[m]))


def rhd_reducescatter(members: Sequence[int], blocks: Blocks) -> list[Msg]:
    """Recursive-halving reduce-scatter (with folding for non-powers of two)."""
    core, extra = _fold(members)
    carry = {q: [q] + [e for e, p in extra.items() if p == q] for q in core}
    out = [_merged(e, q, blocks, members) for e, q in extra.items()]
    p2 = len(core)
    d = p2 // 2
    while d >= 1:
        for i, q in enumerate(core):
            partner = i ^ d
            lo = (partner // d) * d
            owners = [o for x in range(lo, lo + d) for o in carry[core[x]]]
            out.append(_merged(q, core[partner], blocks, owners))
        d //= 2
    out += [Msg(q, e, blocks[e]) for e, q in extra.items()]
    return out


def rhd_allgather(members: Sequence[int], blocks: Blocks) -> list[Msg]:
    """Recursive-doubling all-gather (with folding for non-powers of two)."""
    core, extra = _fold(members)
    carry = {q: [q] + [e for e, p in extra.items() if p == q] for q in core}
    out = [Msg(e, q, blocks[e]) for e, q in extra.items()]
    p2 = len(core)
    d = 1
    while d < p2:
        for i, q in enumerate(core):
            lo = (i // d) * d
            owners = [o for x in range(lo, lo + d) for o in carry[core[x]]]
            out.append(_merged(q, core[i ^ d], blocks, owners))
        d *= 2
    out += [_merged(q, e, blocks, [m for m in members if m != e]) for e, q in extra.items()]
    return out


def binomial_rooted(members: Sequence[int], root: int, chunks: tuple[int, ...], *,
                    reduce: bool) -> list[Msg]:
    """Binomial-tree broadcast from ``root`` (doubling) or reduce into it (reversed)."""
    r = list(members).index(root)
    rot = list(members[r:]) + list(members[:r])
    n = len(rot)
    steps = []
    d = 1
    while d < n:
        steps.append([(rot[p], rot[p + d]) for p in range(d) if p + d < n])
        d *= 2
    if reduce:
        return [Msg(b, a, chunks) for step in reversed(steps) for a, b in step]
    return [Msg(a, b, chunks) for step in steps for a, b in step]


# -- double binary tree ----------------------------------------------------------------------
def btree_parents(n: int) -> list[int | None]:
    """NCCL's in-order binary tree over ranks 0..n-1 (root 0 with one child)."""
    parents: list[int | None] = [None] * n
    for r in range(1, n):
        bit = r & -r
        up = (r ^ bit) | (bit << 1)
        parents[r] = up if up < n else r ^ bit
    return parents


def dtree_parents(n: int) -> tuple[list[int | None], list[int | None]]:
    """The two complementary trees: tree 1 mirrors tree 0 (even n) or shifts it (odd n)."""
    t0 = btree_parents(n)
    if n % 2 == 0:
        t1 = [None if t0[n - 1 - r] is None else n - 1 - t0[n - 1 - r] for r in range(n)]
    else:
        t1 = [None if t0[(r - 1) % n] is None else (t0[(r - 1) % n] + 1) % n
              for r in range(n)]
    return t0, t1


def _tree_adjacency(parents: list[int | None]) -> list[list[int]]:
    adj: list[list[int]] = [[] for _ in parents]
    for r, p in enumerate(parents):
        if p is not None:
            adj[r].append(p)
            adj[p].append(r)
    return adj


def _bfs(adj: list[list[int]], src: int) -> list[tuple[int, int, int]]:
    """Tree edges (depth, parent, child) oriented away from ``src``."""
    seen = {src}
    out = []
    queue = deque([(src, 0)])
    while queue:
        x, depth = queue.popleft()
        for y in adj[x]:
            if y not in seen:
                seen.add(y)
                out.append((depth, x, y))
                queue.append((y, depth + 1))
    return out


def tree_flows(order: Sequence[int], flows: Sequence[tuple[int, int, int]], *,
               toward: bool) -> list[Msg]:
    """Per-chunk flows over the double binary tree.

    ``flows`` holds ``(tree, rank, chunk)``: the chunk spreads out from ``rank`` along tree
    ``tree`` (``toward=False``) or is summed toward ``rank`` (``toward=True``).
    """
    adj = [_tree_adjacency(t) for t in dtree_parents(len(order))]
    edges = []
    for tree, rank, chunk in flows:
        for depth, a, b in _bfs(adj[tree], rank):
            if toward:
                edges.append((-depth, order[b], order[a], chunk))
            else:
                edges.append((depth, order[a], order[b], chunk))
    edges.sort(key=lambda e: e[0])
    return [Msg(a, b, (c,)) for _, a, b, c in edges]


def tree_root(n: int, tree: int) -> int:
    """Rank at the root of tree 0 or tree 1."""
    parents = dtree_parents(n)[tree]
    return next(r for r, p in enumerate(parents) if p is None)
