"""NPU-level view of a topology for the baseline algorithms: hops, relay chains and ring orders.

Baselines think in logical sends ``u -> v`` between NPUs.  This module says how such a send
travels physically, on the machine model's routes (:mod:`tacos.model.routes`, the one owner of
routing):

* a *hop* is one route between two NPUs: a direct link, or a cut-through path through switches
  that holds every physical link on its way (a switch port is shared in time by whatever goes
  through it; there is no static bandwidth split as in switch unwinding).  Between two NPUs
  the hop's candidates are ``topology.routing.routes(u, v)`` -- in a multi-switch fabric every
  equal-cost route (ECMP); the lowering picks one per message at placement time;
* NPUs without a hop between them are joined by the shortest chain of hops (store-and-forward
  at the relay NPUs), fewest hops first, then fastest.  Relays are restricted to ``members``
  when given (a process group relays through its own NPUs only, unless relays through other
  NPUs are allowed).

:func:`ring_order` picks the order in which a ring algorithm visits NPUs: a Hamiltonian cycle
over hops when one is found, else a Hamiltonian path whose ends are close, else NPU order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence

import networkx as nx

from tacos.model.routes import Route
from tacos.model.topology import Topology

HAMILTON_BUDGET = 200_000


class NpuGraph:
    """Hops between the live NPUs of ``topology`` (only between ``members`` when given) and
    shortest relay chains over them."""

    def __init__(self, topology: Topology, members: Iterable[int] | None = None) -> None:
        self.topology = topology
        self.members = None if members is None else frozenset(members)
        self._hops: dict[int, dict[int, tuple[Route, ...]]] = {}
        self._routes: dict[int, dict[int, int]] = {}

    def hops(self, u: int) -> dict[int, tuple[Route, ...]]:
        """NPU → candidate routes of one hop from ``u`` (best first)."""
        got = self._hops.get(u)
        if got is None:
            keep = self.members
            if keep is not None and u not in keep:
                got = {}
            else:
                got = {v: rs for v, rs in self.topology.routing.from_npu(u).items()
                       if keep is None or v in keep}
            self._hops[u] = got
        return got

    # -- queries ---------------------------------------------------------------------------
    def neighbours(self, u: int) -> list[int]:
        """NPUs one hop away from ``u`` (sorted)."""
        return sorted(self.hops(u))

    def has_hop(self, u: int, v: int) -> bool:
        """True when ``u -> v`` is a single hop."""
        return v in self.hops(u)

    def route(self, u: int, v: int) -> list[int] | None:
        """NPUs on the chosen shortest route ``u .. v`` (both ends included), or None.

        Fewest hops; among equally short routes each NPU is entered by its fastest hop from
        the previous BFS layer (ties by NPU id), so routes are deterministic.
        """
        if u == v:
            return [u]
        if v in self.hops(u):
            return [u, v]
        parent = self._routes.get(u)
        if parent is None:
            parent = self._routes[u] = self._bfs_parents(u)
        if v not in parent:
            return None
        path = [v]
        while path[-1] != u:
            path.append(parent[path[-1]])
        return path[::-1]

    def _bfs_parents(self, u: int) -> dict[int, int]:
        dist = {u: 0}
        parent: dict[int, int] = {}
        best: dict[int, float] = {}
        layer = [u]
        while layer:
            nxt: list[int] = []
            for x in layer:
                for y, hs in sorted(self.hops(x).items()):
                    if y in dist and dist[y] <= dist[x]:
                        continue
                    bw = max(h.bandwidth * h.lanes for h in hs)
                    if y not in dist:
                        dist[y] = dist[x] + 1
                        nxt.append(y)
                    if bw > best.get(y, 0.0):
                        best[y] = bw
                        parent[y] = x
            layer = nxt
        return parent

    def hop_distance(self, u: int) -> dict[int, int]:
        """Hop counts from ``u`` to every reachable NPU (BFS)."""
        dist = {u: 0}
        queue = deque([u])
        while queue:
            x = queue.popleft()
            for y in self.hops(x):
                if y not in dist:
                    dist[y] = dist[x] + 1
                    queue.append(y)
        return dist


def ring_order(graph: NpuGraph, members: Sequence[int],
               budget: int = HAMILTON_BUDGET) -> tuple[list[int], str]:
    """An order of ``members`` for a ring algorithm and how it was found.

    Returns ``(order, kind)`` with kind ``'cycle'`` (every consecutive pair, the last back to
    the first, is one hop), ``'path'`` (one hop between consecutive members; the closing edge
    is routed) or ``'npu-order'`` (members sorted by id).
    """
    nodes = sorted(members)
    if len(nodes) <= 2:
        return nodes, "cycle" if all(graph.has_hop(a, b) for a, b in _pairs(nodes)) else "path"
    succ = {v: [w for w in graph.neighbours(v) if w in set(nodes)] for v in nodes}
    und = nx.Graph((v, w) for v in nodes for w in succ[v] if v in succ[w])
    und.add_nodes_from(nodes)
    balanced = True
    if nx.is_connected(und) and nx.is_bipartite(und):
        left, right = nx.bipartite.sets(und)
        balanced = len(left) == len(right)
    start = nodes[0]
    if balanced:
        found = _hamilton(nodes, succ, start, lambda last: start in succ[last], budget)
        if found:
            return found, "cycle"
    dist = graph.hop_distance(start)
    for limit in (2, 3, 4):
        found = _hamilton(nodes, succ, start,
                          lambda last, lim=limit: dist.get(last, lim + 1) <= lim, budget // 3)
        if found:
            return found, "path"
    return nodes, "npu-order"


def _pairs(order: Sequence[int]) -> list[tuple[int, int]]:
    return [(order[i], order[(i + 1) % len(order)]) for i in range(len(order))]


def _hamilton(nodes: list[int], succ: dict[int, list[int]], start: int, close, budget: int):
    """Depth-first search for a Hamiltonian path from ``start`` whose last node satisfies
    ``close`` (Warnsdorff order: fewest onward options first); None when the budget runs out."""

    def options(path: list[int], on_path: set[int]) -> list[int]:
        cand = [w for w in succ[path[-1]] if w not in on_path]
        return sorted(cand, key=lambda w: (sum(1 for x in succ[w] if x not in on_path), w))

    return hamiltonian_path(len(nodes), start, options, lambda path: close(path[-1]), budget)


def hamiltonian_path(n: int, start: int, options, accept, budget: int) -> list[int] | None:
    """Depth-first search for a path of ``n`` nodes from ``start``: ``options(path, on_path)``
    lists the next nodes to try in order, ``accept(path)`` says whether a full path will do;
    None when none is found within ``budget`` steps."""
    on_path = {start}
    path = [start]
    stack = [iter(options(path, on_path))]
    steps = 0
    while stack:
        if len(path) == n and accept(path):
            return list(path)
        nxt = next(stack[-1], None) if len(path) < n else None
        if nxt is None:
            stack.pop()
            on_path.discard(path.pop())
            continue
        steps += 1
        if steps > budget:
            return None
        path.append(nxt)
        on_path.add(nxt)
        stack.append(iter(options(path, on_path)))
    return None
