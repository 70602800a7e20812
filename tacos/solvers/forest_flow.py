"""An integer max-flow network that changes a little between many max-flow calls.

The tree packer (:mod:`tacos.solvers.forest_pack`) and the switch splitter
(:mod:`tacos.solvers.forest_split`) ask thousands of max-flow questions on one graph whose
capacities change between them.  :class:`FlowNetwork` keeps the arcs once and lets callers change
capacities by arc id; each :meth:`FlowNetwork.max_flow` runs OR-Tools' C++ push-relabel
(``SimpleMaxFlow``) when it loads, else networkx's preflow-push on the same arcs (the answer is the
same, only slower).  Capacities are integers, so answers are exact.

This wrapper exists because neither library offers what the callers need as such: OR-Tools has no
multi-source/multi-sink call and networkx rebuilds its residual graph per call; both are hidden
here behind ``max_flow(sources, sinks)``.
"""

from __future__ import annotations

import networkx as nx
from networkx.algorithms.flow import preflow_push

from tacos.bounds import _has_ortools

INF = 1 << 50  # "infinite" capacity: larger than any flow the callers can push


class FlowNetwork:
    """Directed arcs with integer capacities over nodes ``0 .. n-1`` (nodes may be added)."""

    def __init__(self, n_nodes: int) -> None:
        self.n = n_nodes
        self.tail: list[int] = []
        self.head: list[int] = []
        self.cap: list[int] = []
        self._smf = None
        if _has_ortools():
            try:
                from ortools.graph.python import max_flow

                self._smf = max_flow.SimpleMaxFlow()
            except (ImportError, OSError):  # a clashing libhighs: networkx gives the same answer
                self._smf = None

    # -- building --------------------------------------------------------------------------
    def add_node(self) -> int:
        """A new node id."""
        self.n += 1
        return self.n - 1

    def add_arc(self, tail: int, head: int, cap: int) -> int:
        """Add an arc; returns its id."""
        self.tail.append(tail)
        self.head.append(head)
        self.cap.append(int(cap))
        return len(self.cap) - 1

    def set_cap(self, arc: int, cap: int) -> None:
        """Change an arc's capacity."""
        cap = int(cap)
        self.cap[arc] = cap
        if self._smf is not None and arc < self._smf.num_arcs():
            self._smf.set_arc_capacity(arc, cap)

    def _sync(self) -> None:
        smf = self._smf
        have = smf.num_arcs()
        for a in range(have, len(self.cap)):
            smf.add_arc_with_capacity(self.tail[a], self.head[a], self.cap[a])

    # -- queries ---------------------------------------------------------------------------
    def max_flow(self, sources: int | list[int], sinks: int | list[int],
                 min_cut: bool = False) -> tuple[int, frozenset[int] | None]:
        """Max-flow value from ``sources`` to ``sinks`` (lists are merged into super nodes).

        With ``min_cut`` also returns the source side of a minimum cut (without super nodes).
        """
        src = [sources] if isinstance(sources, int) else list(sources)
        dst = [sinks] if isinstance(sinks, int) else list(sinks)
        extra: list[int] = []
        s, t = src[0], dst[0]
        if len(src) > 1:
            s = self.add_node()
            extra += [self.add_arc(s, v, INF) for v in src]
        if len(dst) > 1:
            t = self.add_node()
            extra += [self.add_arc(v, t, INF) for v in dst]
        try:
            value, side = self._solve(s, t, min_cut)
        finally:
            for a in extra:  # arcs cannot be removed: close them and leave the node isolated
                self.set_cap(a, 0)
        if side is not None and len(src) > 1:
            side = side - {s}
        return value, side

    def _solve(self, s: int, t: int, min_cut: bool) -> tuple[int, frozenset[int] | None]:
        if self._smf is not None:
            self._sync()
            status = self._smf.solve(s, t)
            if status == self._smf.OPTIMAL:
                side = frozenset(self._smf.get_source_side_min_cut()) if min_cut else None
                return int(self._smf.optimal_flow()), side
        g = nx.DiGraph()
        g.add_nodes_from((s, t))
        for a, c in enumerate(self.cap):
            if c <= 0:
                continue
            u, v = self.tail[a], self.head[a]
            if g.has_edge(u, v):
                g.edges[u, v]["capacity"] += c
            else:
                g.add_edge(u, v, capacity=c)
        r = preflow_push(g, s, t)
        value = int(r.graph["flow_value"])
        if not min_cut:
            return value, None
        reach = {s}
        stack = [s]
        while stack:
            u = stack.pop()
            for v, d in r.succ[u].items():
                if v not in reach and d["capacity"] - d["flow"] > 0:
                    reach.add(v)
                    stack.append(v)
        return value, frozenset(reach)
