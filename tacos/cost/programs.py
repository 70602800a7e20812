"""Step programs of the textbook algorithms on one process group.

Each function returns the :class:`~tacos.cost.steps.Step` list of an algorithm for a collective
of kind ``kind`` on the group ``members`` (in the order the algorithm visits them), with byte
counts as fractions of the collective's size ``M`` (nccl-tests convention, see
``docs/tdl.md``).  They mirror the logical programs of :mod:`tacos.solvers.baselines.algos`
step for step, so a model and its baseline move the same bytes between the same NPUs.

``scale`` multiplies every fraction (a hierarchical stage works on ``M / Π P_j``); ``k`` is the
number of chunks per NPU, which only pipelined algorithms (rooted rings, trees) use.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence

from tacos.cost.steps import Send, Step
from tacos.errors import TacosError
from tacos.solvers.baselines.algos import _tree_adjacency, dtree_parents, tree_root

Program = list[Step]


def _edges(pairs: Sequence[tuple[int, int]], frac: float, load: int = 1) -> tuple[Send, ...]:
    return tuple(Send(u, v, frac, load) for u, v in pairs)


def _ring_pairs(order: Sequence[int], step: int = 1) -> list[tuple[int, int]]:
    n = len(order)
    return [(order[i], order[(i + step) % n]) for i in range(n)]


def _rotate(order: Sequence[int], root: int) -> list[int]:
    r = list(order).index(root)
    return list(order[r:]) + list(order[:r])


def unsupported(algorithm: str, kind: str) -> TacosError:
    """The error for a collective an algorithm has no form for."""
    return TacosError(f"the {algorithm} model has no form for {kind}")


# -- ring ------------------------------------------------------------------------------------
def ring(order: Sequence[int], kind: str, *, root: int | None = None, k: int = 1,
         scale: float = 1.0) -> Program:
    """Unidirectional ring along ``order``."""
    n = len(order)
    pairs = _ring_pairs(order)
    cycle = (tuple(range(n)),)
    if kind in ("allgather", "reducescatter"):
        return [Step(_edges(pairs, scale / n, n - 1), "ring", cycles=cycle)]
    if kind == "allreduce":
        return [Step(_edges(pairs, scale / n, 2 * (n - 1)), "ring", cycles=cycle)]
    if kind in ("broadcast", "reduce"):
        chain = list(zip(_rotate(order, root), _rotate(order, root)[1:], strict=False))
        if kind == "reduce":
            chain = [(v, u) for u, v in reversed(chain)]
        sends = _edges(chain, scale / k, k)
        return [Step(sends, "ring pipeline", ((tuple(range(len(sends))),),), "pipeline")]
    if kind in ("scatter", "gather"):
        rot = _rotate(order, root)
        chain = list(zip(rot, rot[1:], strict=False))
        sends = tuple(Send(u, v, scale / n, n - 1 - i) for i, (u, v) in enumerate(chain))
        if kind == "gather":
            sends = tuple(Send(s.dst, s.src, s.frac, s.load) for s in sends)
        return [Step(sends, "ring " + kind)]
    if kind == "alltoall":
        return [Step(_edges(pairs, scale * (n - s) / n), f"ring shift {s}") for s in range(1, n)]
    raise unsupported("ring", kind)


def biring(order: Sequence[int], kind: str, *, root: int | None = None, k: int = 1,
           scale: float = 1.0) -> Program:
    """Bidirectional ring: each block covers ⌊N/2⌋ hops one way and ⌊(N−1)/2⌋ the other."""
    n = len(order)
    cw, ccw = n // 2, (n - 1) // 2
    fwd, back = _ring_pairs(order, 1), _ring_pairs(order, -1)
    if kind in ("allgather", "reducescatter", "allreduce"):
        rings = (tuple(range(n)), tuple(range(n, 2 * n)))
        both = Step(_edges(fwd, scale / n, ccw) + _edges(back, scale / n, ccw), "biring",
                    cycles=rings)
        half = Step(_edges(fwd, scale / n, cw - ccw), "biring", cycles=rings[:1])
        one = [s for s in (both, half) if s.sends and s.sends[0].load > 0]
        return one * (2 if kind == "allreduce" else 1)
    if kind in ("broadcast", "reduce"):
        rot = _rotate(order, root)
        legs = [rot[: cw + 1], [rot[0]] + rot[::-1][:ccw]]
        sends: list[Send] = []
        paths = []
        for leg in legs:
            chain = list(zip(leg, leg[1:], strict=False))
            if kind == "reduce":
                chain = [(v, u) for u, v in reversed(chain)]
            paths.append(tuple(range(len(sends), len(sends) + len(chain))))
            sends.extend(_edges(chain, scale / k, k))
        return [Step(tuple(sends), "biring pipeline", (tuple(p for p in paths if p),),
                     "pipeline")]
    raise unsupported("biring", kind)


# -- direct ----------------------------------------------------------------------------------
def direct(members: Sequence[int], kind: str, *, root: int | None = None, k: int = 1,
           scale: float = 1.0) -> Program:
    """Every member sends straight to every member that needs its data, all at once."""
    n = len(members)
    pairs = [(u, v) for u in members for v in members if u != v]
    if kind in ("allgather", "reducescatter", "alltoall"):
        return [Step(_edges(pairs, scale / n), "direct")]
    if kind == "allreduce":
        return [Step(_edges(pairs, scale / n), "direct")] * 2
    others = [v for v in members if v != root]
    frac = scale if kind in ("broadcast", "reduce") else scale / n
    if kind in ("broadcast", "scatter"):
        return [Step(_edges([(root, v) for v in others], frac), "direct " + kind)]
    if kind in ("reduce", "gather"):
        return [Step(_edges([(v, root) for v in others], frac), "direct " + kind)]
    raise unsupported("direct", kind)


# -- halving-doubling ------------------------------------------------------------------------
def _fold(members: Sequence[int]) -> tuple[list[int], dict[int, int], dict[int, int]]:
    """Core (a power of two), extra -> partner, and how many blocks each core NPU carries."""
    n = len(members)
    p2 = 1 << (n.bit_length() - 1)
    r = n - p2
    extra = {members[2 * i + 1]: members[2 * i] for i in range(r)}
    core = [members[2 * i] for i in range(r)] + list(members[2 * r:])
    carry = {q: 1 + sum(1 for p in extra.values() if p == q) for q in core}
    return core, extra, carry


def _hd_rounds(core: list[int], carry: dict[int, int], n: int, scale: float,
               halving: bool) -> Program:
    p2 = len(core)
    dists = []
    d = p2 // 2 if halving else 1
    while 1 <= d < p2:
        dists.append(d)
        d = d // 2 if halving else d * 2
    out = []
    for d in dists:
        sends = []
        for i, q in enumerate(core):
            lo = ((i ^ d) // d) * d if halving else (i // d) * d
            blocks = sum(carry[core[x]] for x in range(lo, lo + d))
            sends.append(Send(q, core[i ^ d], scale * blocks / n))
        out.append(Step(tuple(sends), f"distance {d}"))
    return out


def halving_doubling(members: Sequence[int], kind: str, *, root: int | None = None,
                     k: int = 1, scale: float = 1.0) -> Program:
    """Recursive halving (reduce-scatter) / doubling (all-gather); binomial trees for rooted
    collectives; Bruck's algorithm for all-to-all.  Non-powers of two fold the extra NPUs."""
    members = sorted(members)
    n = len(members)
    core, extra, carry = _fold(members)
    fold = [Step(_edges(list(extra.items()), scale), "fold")] if extra else []
    if kind in ("reducescatter", "allreduce"):
        rs = (fold + _hd_rounds(core, carry, n, scale, True)
              + ([Step(_edges([(q, e) for e, q in extra.items()], scale / n), "unfold")]
                 if extra else []))
        if kind == "reducescatter":
            return rs
    if kind in ("allgather", "allreduce"):
        ag = ([Step(_edges(list(extra.items()), scale / n), "fold")] if extra else [])
        ag += _hd_rounds(core, carry, n, scale, False)
        if extra:
            ag.append(Step(_edges([(q, e) for e, q in extra.items()], scale * (n - 1) / n),
                           "unfold"))
        return ag if kind == "allgather" else rs + ag
    rot = _rotate(members, root) if root is not None else members
    if kind in ("broadcast", "reduce"):
        rounds = []
        d = 1
        while d < n:
            rounds.append([(rot[p], rot[p + d]) for p in range(d) if p + d < n])
            d *= 2
        if kind == "reduce":
            rounds = [[(b, a) for a, b in r] for r in reversed(rounds)]
        return [Step(_edges(r, scale), "binomial") for r in rounds]
    if kind in ("scatter", "gather"):
        rounds = []
        d = 1 << max(0, (n - 1).bit_length() - 1)
        while d >= 1:
            rounds.append([Send(rot[p], rot[p + d], scale * (min(p + 2 * d, n) - p - d) / n)
                           for p in range(0, n, 2 * d) if p + d < n])
            d //= 2
        if kind == "gather":
            rounds = [[Send(s.dst, s.src, s.frac) for s in r] for r in reversed(rounds)]
        return [Step(tuple(r), "binomial " + kind) for r in rounds]
    if kind == "alltoall":
        out = []
        bit = 1
        while bit < n:
            count = sum(1 for j in range(n) if j & bit)
            out.append(Step(_edges([(members[r], members[(r + bit) % n]) for r in range(n)],
                                   scale * count / n), f"Bruck {bit}"))
            bit *= 2
        return out
    raise unsupported("halving-doubling", kind)


# -- double binary tree ----------------------------------------------------------------------
def _bfs_parent(adj: list[list[int]], src: int) -> dict[int, int]:
    parent = {src: src}
    queue = deque([src])
    while queue:
        x = queue.popleft()
        for y in adj[x]:
            if y not in parent:
                parent[y] = x
                queue.append(y)
    return parent


def path_to_root(parent: dict[int, int], node: int) -> list[tuple[int, int]]:
    """Edges from ``node`` up to the root of ``parent`` (the node that is its own parent)."""
    out = []
    while parent[node] != node:
        out.append((node, parent[node]))
        node = parent[node]
    return out


class Flows:
    """Blocks flowing over tree edges: loads per directed (tree, a, b) and pipeline paths."""

    def __init__(self) -> None:
        self.load: dict[tuple[int, int, int], int] = {}
        self.paths: list[tuple[tuple[int, int, int], ...]] = []

    def add(self, tree: int, edges: Sequence[tuple[int, int]], count: int = 1,
            path: bool = True) -> None:
        """``count`` blocks cross every edge of ``edges`` (a path when ``path``)."""
        keyed = tuple((tree, a, b) for a, b in edges)
        for key in keyed:
            self.load[key] = self.load.get(key, 0) + count
        if path and keyed:
            self.paths.append(keyed)

    def spread(self, tree: int, parent: dict[int, int], count: int = 1) -> None:
        """``count`` blocks spreading from the BFS source of ``parent`` over the whole tree;
        the path to the deepest node is the pipeline's fill."""
        for r, p in parent.items():
            if p != r:
                self.add(tree, [(p, r)], count, path=False)
        deepest = max(parent, key=lambda r: len(path_to_root(parent, r)))
        self.add(tree, [(b, a) for a, b in reversed(path_to_root(parent, deepest))], 0)

    def up_and_down(self, tree: int, parent: dict[int, int], count: int) -> None:
        """``count`` chunks reduced up to the root of ``parent`` and broadcast back down; the
        deepest leaf's way up and down is the pipeline's fill."""
        for r, p in parent.items():
            if p != r:
                self.add(tree, [(r, p), (p, r)], count, path=False)
        deepest = max(parent, key=lambda r: len(path_to_root(parent, r)))
        up = path_to_root(parent, deepest)
        self.add(tree, up + [(b, a) for a, b in reversed(up)], 0)

    def step(self, order: Sequence[int], frac: float, label: str, *, mode: str = "pipeline",
             reverse: bool = False, split: bool = False) -> Step:
        """One pipelined step; ``reverse`` turns every flow around (reductions); ``split``
        cuts each path in halves that fill one after the other (reduce then broadcast)."""
        keys = list(self.load)
        index = {key: i for i, key in enumerate(keys)}
        sends = tuple(Send(order[b], order[a], frac, self.load[(t, a, b)]) if reverse else
                      Send(order[a], order[b], frac, self.load[(t, a, b)]) for t, a, b in keys)
        paths = sorted({tuple(index[e] for e in (p[::-1] if reverse else p))
                        for p in self.paths})
        if not split:
            return Step(sends, label, (tuple(paths),), mode)
        ups = sorted({p[: len(p) // 2] for p in paths})
        downs = sorted({p[len(p) // 2:] for p in paths})
        return Step(sends, label, (tuple(ups), tuple(downs)), mode)


def tree(order: Sequence[int], kind: str, *, root: int | None = None, k: int = 1,
         scale: float = 1.0) -> Program:
    """NCCL's double binary tree over ``order``; chunks alternate between the two trees and
    are pipelined one chunk per message.  All-reduce reduces up both trees and broadcasts back
    down; all-gather, scatter and all-to-all spread each block from its owner over its tree
    (the mirror-image reductions run the same flows reversed)."""
    n = len(order)
    rank = {v: r for r, v in enumerate(order)}
    adj = [_tree_adjacency(t) for t in dtree_parents(n)]
    flows = Flows()
    reverse = kind in ("reduce", "reducescatter", "gather")
    if kind == "allreduce":
        total = n * k
        for t in (0, 1):
            count = (total + 1 - t) // 2
            if count:
                flows.up_and_down(t, _bfs_parent(adj[t], tree_root(n, t)), count)
        return [flows.step(order, scale / total, "double binary tree", split=True)]
    if kind in ("broadcast", "reduce"):
        for t in (0, 1):
            count = (k + 1 - t) // 2
            if count:
                flows.spread(t, _bfs_parent(adj[t], rank[root]), count)
        frac = scale / k
    elif kind in ("allgather", "reducescatter"):
        for r in range(n):
            for i in range(k):
                t = (r + i) % 2
                flows.spread(t, _bfs_parent(adj[t], r))
        frac = scale / (n * k)
    elif kind in ("scatter", "gather"):
        for j in range(n):
            if j != rank[root]:
                flows.add(j % 2, path_to_root(_bfs_parent(adj[j % 2], j), rank[root]))
        frac = scale / n
    elif kind == "alltoall":
        for u in range(n):
            for v in range(n):
                if u != v:
                    t = (u + v) % 2
                    flows.add(t, path_to_root(_bfs_parent(adj[t], v), u))
        frac = scale / n
    else:
        raise unsupported("tree", kind)
    mode = "pipeline" if kind in ("broadcast", "reduce") else "flows"
    return [flows.step(order, frac, "double binary tree", mode=mode, reverse=reverse)]


Builder = Callable[..., Program]

#: algorithm name -> (step-program builder, member order: 'ring' | 'sorted' | 'given')
ALGORITHMS: dict[str, tuple[Builder, str]] = {
    "ring": (ring, "ring"),
    "biring": (biring, "ring"),
    "direct": (direct, "given"),
    "halving-doubling": (halving_doubling, "sorted"),
    "tree": (tree, "ring"),
}
