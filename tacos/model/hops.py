"""Hop distances without an all-pairs table: eccentricities and the diameter in linear memory.

An all-pairs distance table takes memory quadratic in the number of nodes (2.45 GB at 8192
NPUs).  Here breadth-first search runs from many sources at once, one bit per source
(bit-parallel BFS on ``uint64`` words with numpy): a batch of ``64·W`` sources costs
``nodes × W`` words for the visited sets and ``links × W`` for one level's gather, with ``W``
chosen so that a batch stays within :data:`BATCH_WORDS` words.  Peak memory is therefore linear
in the number of links, and the work is ``sources × diameter × links / 64`` word operations.

When that work would exceed ``budget`` (long rings and paths of thousands of NPUs), the
diameter is bracketed instead: the largest eccentricity seen from a few sources bounds it from
below, ``ecc_out(v) + ecc_in(v)`` from above.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from tacos.model.topology import Topology

BATCH_WORDS = 1_000_000
"""Largest ``links × W`` (64-bit words) one batch may gather: 8 MB."""
DEFAULT_BUDGET = 2e9
"""Word operations an exact diameter may take before bounds are reported instead."""


@dataclass(frozen=True)
class Diameter:
    """The hop diameter among some NPUs: ``low == high`` when exact; None when disconnected."""

    low: int | None
    high: int | None

    @property
    def exact(self) -> int | None:
        """The diameter when known exactly (None when only bounded or disconnected)."""
        return self.low if self.low == self.high else None

    @property
    def connected(self) -> bool:
        """False when some NPU cannot reach another."""
        return self.low is not None


class _Graph:
    """A directed graph laid out for gathering BFS frontiers with ``np.take``.

    Nodes are renumbered by in-degree, highest first.  The few nodes with more than
    :data:`SLOTS` in-links (switches) gather with one ``reduceat``; the others by slot: the
    k-th in-link of every node that has one, a prefix of the low-degree block.
    """

    SLOTS = 16

    def __init__(self, n: int, src: np.ndarray, dst: np.ndarray) -> None:
        self.n = n
        self.edges = (src, dst)
        deg = np.bincount(dst, minlength=n)
        order = np.argsort(-deg, kind="stable")  # new id -> old id
        self.new = np.empty(n, dtype=np.int64)
        self.new[order] = np.arange(n)
        deg = deg[order]
        nsrc, ndst = self.new[src], self.new[dst]
        by_dst = np.lexsort((nsrc, ndst))
        nsrc, ndst = nsrc[by_dst], ndst[by_dst]
        first = np.searchsorted(ndst, np.arange(n))
        self.n_high = int(np.count_nonzero(deg > self.SLOTS))
        high_end = first[self.n_high] if self.n_high < n else len(nsrc)
        self.high_src = nsrc[:high_end]
        self.high_starts = first[:self.n_high]
        self.n_low = int(np.count_nonzero(deg > 0)) - self.n_high
        low = np.arange(self.n_high, self.n_high + self.n_low)
        self.slots = []
        for k in range(min(self.SLOTS, int(deg[self.n_high]) if self.n_low else 0)):
            count = int(np.count_nonzero(deg[low] > k))
            self.slots.append(nsrc[first[low[:count]] + k])

    def _gather(self, frontier: np.ndarray) -> np.ndarray:
        """Rows 0 .. n_high + n_low - 1: the OR of the frontier rows of each node's in-links."""
        out = np.zeros((self.n_high + self.n_low, frontier.shape[1]), dtype=np.uint64)
        if self.n_high:
            out[:self.n_high] = np.bitwise_or.reduceat(
                np.take(frontier, self.high_src, axis=0), self.high_starts, axis=0)
        low = out[self.n_high:]
        for src in self.slots:
            low[:len(src)] |= np.take(frontier, src, axis=0)
        return out

    def bfs(self, sources: Sequence[int], targets: np.ndarray) -> tuple[int, bool]:
        """Multi-source BFS, one bit per source: (largest level at which a target is first
        reached by some source, whether every target is reached by every source)."""
        words = (len(sources) + 63) // 64
        full = np.zeros(words, dtype=np.uint64)
        seen = np.zeros((self.n, words), dtype=np.uint64)
        for k, s in enumerate(sources):
            bit = np.uint64(1) << np.uint64(k % 64)
            seen[self.new[s], k // 64] |= bit
            full[k // 64] |= bit
        rows = self.n_high + self.n_low
        frontier = seen.copy()
        watch = np.zeros(rows, dtype=bool)
        mapped = self.new[targets]
        watch[mapped[mapped < rows]] = True
        watch_all = bool(watch.all())
        level, last = 0, 0
        while rows:
            level += 1
            got = self._gather(frontier)
            got &= ~seen[:rows]
            if not got.any():
                break
            seen[:rows] |= got
            frontier[:rows] = got
            if watch_all or got[watch].any():
                last = level
        reached = bool(np.all((seen[mapped] & full) == full))
        return last, reached


def _graph(topology: Topology) -> _Graph:
    pairs = np.array(sorted({(lk.src, lk.dst) for lk in topology.links}), dtype=np.int64)
    if not len(pairs):
        pairs = np.zeros((0, 2), dtype=np.int64)
    return _Graph(topology.n_nodes, pairs[:, 0], pairs[:, 1])


def eccentricity(graph: _Graph, source: int, targets: np.ndarray, *, reverse: bool = False
                 ) -> int | None:
    """Hops from ``source`` to the farthest target (to ``source`` from the farthest target
    when ``reverse``); None if some target is unreachable.  Plain BFS, O(nodes + links)."""
    src, dst = graph.edges if not reverse else graph.edges[::-1]
    order = np.argsort(src, kind="stable")
    starts = np.searchsorted(src[order], np.arange(graph.n + 1)).tolist()
    adj = dst[order].tolist()
    dist = [-1] * graph.n
    dist[source] = 0
    queue = [source]
    for u in queue:
        du = dist[u] + 1
        for v in adj[starts[u]:starts[u + 1]]:
            if dist[v] < 0:
                dist[v] = du
                queue.append(v)
    far = [dist[t] for t in targets.tolist()]
    return None if min(far) < 0 else max(far)


LEVEL_COST = 20_000
"""Fixed cost of one BFS level, in words (numpy call overhead), for the work estimate."""


def diameter(topology: Topology, among: Iterable[int] | None = None, *,
             budget: float = DEFAULT_BUDGET) -> Diameter:
    """Largest hop distance between live NPUs (or ``among``), switches counted as hops.

    Exact when the estimated work (``sources × eccentricity × links / 64`` words plus a fixed
    cost per BFS level) stays within ``budget``, else bounds (see the module docstring).
    """
    nodes = sorted(set(topology.live_npus if among is None else among))
    if len(nodes) < 2:
        return Diameter(0, 0)
    g = _graph(topology)
    targets = np.array(nodes, dtype=np.int64)
    out = eccentricity(g, nodes[0], targets)
    back = eccentricity(g, nodes[0], targets, reverse=True)
    if out is None or back is None:
        return Diameter(None, None)
    edges = max(1, len(g.edges[0]))
    batch = 64 * max(1, min(len(nodes) // 64 + 1, BATCH_WORDS // edges))
    batches = -(-len(nodes) // batch)
    levels = max(out, back, 1) + 1
    work = len(nodes) * levels * (edges + topology.n_nodes) / 64 + batches * levels * LEVEL_COST
    if work > budget:
        low = max([out, back] + [eccentricity(g, v, targets) or 0
                                 for v in (nodes[len(nodes) // 2], nodes[-1])])
        return Diameter(low, max(low, out + back))
    best = 0
    for start in range(0, len(nodes), batch):
        last, reached = g.bfs(nodes[start:start + batch], targets)
        if not reached:
            return Diameter(None, None)
        best = max(best, last)
    return Diameter(best, best)
