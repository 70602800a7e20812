"""An integer max-flow network that changes a little between many max-flow calls.

The tree packer (:mod:`tacos.solvers.forest.pack`) and the switch splitter
(:mod:`tacos.solvers.forest.split`) ask thousands of max-flow questions on one graph whose
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

from tacos.check.bounds import _has_ortools

INF = 1 << 50  # "infinite" capacity: larger than any flow the callers can push


class FlowNetwork:
    """Directed arcs with integer capacities over nodes ``0 .. n-1`` (nodes may be added)."""

    def __init__(self, n_nodes: int) -> None:
        self.n = n_nodes
        self.tail: list[int] = []
        self.head: list[int] = []
        self.cap: list[int] = []
        self._smf = None
        self._synced = 0  # arcs the C++ network holds (the first ones of ours)
        self._last = (0, 0, False)  # the last solve's source, sink, and whether OR-Tools did it
        self._supers: dict[str, int] = {}
        self._super_arcs: dict[tuple[str, int], int] = {}
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
        if arc < self._synced:  # (later arcs take their capacity when they are synced)
            self._smf.set_arc_capacity(arc, cap)

    def _sync(self) -> None:
        smf = self._smf
        for a in range(self._synced, len(self.cap)):
            smf.add_arc_with_capacity(self.tail[a], self.head[a], self.cap[a])
        self._synced = len(self.cap)

    # -- queries ---------------------------------------------------------------------------
    def max_flow(self, sources: int | list[int], sinks: int | list[int],
                 min_cut: bool = False) -> tuple[int, frozenset[int] | None]:
        """Max-flow value from ``sources`` to ``sinks`` (lists are merged into super nodes).

        With ``min_cut`` also returns the source side of a minimum cut (without super nodes).
        """
        src = [sources] if isinstance(sources, int) else list(sources)
        dst = [sinks] if isinstance(sinks, int) else list(sinks)
        opened: list[int] = []
        s, t = src[0], dst[0]
        if len(src) > 1:
            s = self._super("source")
            opened += [self._super_arc("source", v) for v in src]
        if len(dst) > 1:
            t = self._super("sink")
            opened += [self._super_arc("sink", v) for v in dst]
        for a in opened:
            self.set_cap(a, INF)
        try:
            value, side = self._solve(s, t, min_cut)
        finally:
            for a in opened:  # close them again; the super nodes stay for the next call
                self.set_cap(a, 0)
        if side is not None and len(src) > 1:
            side = side - {s}
        return value, side

    def _super(self, kind: str) -> int:
        node = self._supers.get(kind)
        if node is None:
            node = self._supers[kind] = self.add_node()
        return node

    def _super_arc(self, kind: str, v: int) -> int:
        key = (kind, v)
        arc = self._super_arcs.get(key)
        if arc is None:
            node = self._super(kind)
            arc = self.add_arc(node, v, 0) if kind == "source" else self.add_arc(v, node, 0)
            self._super_arcs[key] = arc
        return arc

    def last_cut(self) -> frozenset[int]:
        """The source side of a minimum cut of the last single-source :meth:`max_flow` call
        (the nodes its residual graph reaches), capacities unchanged since."""
        s, t, solved = self._last
        if solved:
            return frozenset(self._smf.get_source_side_min_cut())
        return self._solve(s, t, True)[1]

    def _solve(self, s: int, t: int, min_cut: bool) -> tuple[int, frozenset[int] | None]:
        self._last = (s, t, False)
        if self._smf is not None:
            self._sync()
            status = self._smf.solve(s, t)
            if status == self._smf.OPTIMAL:
                self._last = (s, t, True)
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
