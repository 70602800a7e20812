"""Shortest-path distances on the topology as arrays (``scipy.sparse.csgraph``).

The latency bound needs, for every chunk, the time its farthest destination is from its
nearest source (for a reduction: every source to every destination).  Running networkx from
every NPU costs Python work per node and edge; here the topology becomes one sparse matrix
(the cheapest of parallel links per pair, explicit zero weights kept as edges) and
:func:`scipy.sparse.csgraph.dijkstra` runs in C, from many sources per call (``min_only`` for
"nearest of several sources"), in batches whose distance rows stay within
:data:`BATCH_ENTRIES` floats.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np

from tacos.model.topology import Link, Topology

BATCH_ENTRIES = 1 << 23
"""Distance-matrix entries (8 bytes each) one batch of sources may produce: 64 MiB."""


class Distances:
    """Fastest times between nodes when crossing link ``l`` costs ``cost(l)``.

    When every link costs the same and there are no switches, breadth-first layers times that
    cost are used (``scale``), which is exact and cheaper than Dijkstra.  The object must stay
    alive while its ``id`` keys a cache (callers keep it in that cache).
    """

    def __init__(self, topology: Topology, cost: Callable[[Link], float]) -> None:
        from scipy.sparse import csr_matrix

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
        self.graph = csr_matrix((w, (src, dst)), shape=(n, n))
        self.reverse_graph = self.graph.T.tocsr()

    def _run(self, sources: Sequence[int], reverse: bool, min_only: bool) -> np.ndarray:
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
