"""Shortest-path distances on the topology as arrays (``scipy.sparse.csgraph``).

The latency bound needs, for every chunk, the time its farthest destination is from its
nearest source (for a reduction: every source to every destination).  Running networkx from
every NPU costs Python work per node and edge; here the topology becomes one sparse matrix
(the cheapest of parallel links per pair, explicit zero weights kept as edges) and
:func:`scipy.sparse.csgraph.dijkstra` runs in C, from many sources per call (``min_only`` for
"nearest of several sources"), in batches whose distance rows stay within
:data:`BATCH_ENTRIES` floats.  Uniform hop counts on topologies of at most
:data:`BFS_MAX_NODES` nodes come from a breadth-first search in Python instead (no scipy).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np

from tacos.model.topology import Link, Topology

BATCH_ENTRIES = 1 << 23
"""Distance-matrix entries (8 bytes each) one batch of sources may produce: 64 MiB."""

BFS_MAX_NODES = 256
"""Largest topology whose uniform hop counts are found by breadth-first search in Python
rather than by ``csgraph.dijkstra``: on small topologies the search takes milliseconds, while
importing ``scipy.sparse`` costs 0.3-0.5 s of a compile that needs it for nothing else (a 4x4
mesh).  The counts are the same integers either way."""


class Distances:
    """Fastest times between nodes when crossing link ``l`` costs ``cost(l)``.

    When every link costs the same and there are no switches, breadth-first layers times that
    cost are used (``scale``), which is exact and cheaper than Dijkstra.  The object must stay
    alive while its ``id`` keys a cache (callers keep it in that cache).
    """

    def __init__(self, topology: Topology, cost: Callable[[Link], float]) -> None:
        n = topology.n_nodes
        links = topology.links
        src = np.fromiter((lk.src for lk in links), dtype=np.int64, count=len(links))
        dst = np.fromiter((lk.dst for lk in links), dtype=np.int64, count=len(links))
        w = np.fromiter((cost(lk) for lk in links), dtype=np.float64, count=len(links))
        uniform = len(links) > 0 and not topology.switches and bool(np.all(w == w[0]))
        self.scale = float(w[0]) if uniform else None
        if len(links):  # the cheapest of parallel links per ordered pair
            order = np.lexsort((w, dst, src))
            src, dst, w = src[order], dst[order], w[order]
            first = np.ones(len(src), dtype=bool)
            first[1:] = (src[1:] != src[:-1]) | (dst[1:] != dst[:-1])
            src, dst, w = src[first], dst[first], w[first]
        if self.scale is not None:
            w = np.ones(len(src))
        self.n = n
        self._adj: tuple[list[list[int]], list[list[int]]] | None = None
        if self.scale is not None and n <= BFS_MAX_NODES:  # hop counts by search, no scipy
            fwd: list[list[int]] = [[] for _ in range(n)]
            rev: list[list[int]] = [[] for _ in range(n)]
            for a, b in zip(src.tolist(), dst.tolist(), strict=True):
                fwd[a].append(b)
                rev[b].append(a)
            self._adj = (fwd, rev)
            return
        from scipy.sparse import csr_matrix

        self.graph = csr_matrix((w, (src, dst)), shape=(n, n))
        self.reverse_graph = self.graph.T.tocsr()

    def _layers(self, sources: Sequence[int], reverse: bool) -> np.ndarray:
        """Hop counts from the nearest of ``sources`` (to them when ``reverse``), ``inf``
        where unreachable: breadth-first search over the uniform graph."""
        assert self._adj is not None
        adj = self._adj[1 if reverse else 0]
        out = [math.inf] * self.n
        frontier = []
        for v in sources:
            if out[v] != 0.0:
                out[v] = 0.0
                frontier.append(v)
        depth = 0.0
        while frontier:
            depth += 1.0
            nxt = []
            for u in frontier:
                for v in adj[u]:
                    if out[v] == math.inf:
                        out[v] = depth
                        nxt.append(v)
            frontier = nxt
        return np.array(out, dtype=np.float64)

    def _run(self, sources: Sequence[int], reverse: bool, min_only: bool) -> np.ndarray:
        if self._adj is not None:
            if min_only:
                return self._layers(sources, reverse) * self.scale
            return np.stack([self._layers([v], reverse) for v in sources]) * self.scale \
                if len(sources) else np.zeros((0, self.n))
        from scipy.sparse.csgraph import dijkstra

        g = self.reverse_graph if reverse else self.graph
        d = dijkstra(g, directed=True, indices=np.asarray(sources, dtype=np.int64),
                     min_only=min_only, unweighted=self.scale is not None)
        return d * self.scale if self.scale is not None else d

    def nearest(self, sources: Iterable[int], *, reverse: bool = False) -> np.ndarray:
        """Time from the nearest of ``sources`` to every node (to them when ``reverse``);
        ``inf`` where unreachable."""
        return self._run(sorted(sources), reverse, True)

    def rows(self, sources: Sequence[int], *, reverse: bool = False
             ) -> Iterator[tuple[int, np.ndarray]]:
        """``(k, row)`` for each ``sources[k]``: its times to every node (from every node when
        ``reverse``), computed in batches of bounded memory."""
        batch = max(1, BATCH_ENTRIES // max(1, self.n))
        for start in range(0, len(sources), batch):
            d = self._run(sources[start:start + batch], reverse, False)
            for k, row in enumerate(d):
                yield start + k, row
