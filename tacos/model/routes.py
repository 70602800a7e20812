"""Routes: how one transfer from NPU u to NPU v crosses the physical topology.

This module owns the machine model's notion of a route, shared by solvers, simulator, verifier
and the MSCCL timing (see ``docs/machine-model.md``):

* A **route** is a tuple of physical link indices (into ``Topology.links``) from one NPU to
  another whose intermediate nodes are switches only: one link for a direct NPU-to-NPU link, or
  up-port, fabric links and down-port through switches.  A transfer that must pass through
  another NPU is two transfers (store-and-forward), never one route.
* A route is **cut-through**: moving ``b`` bytes takes ``alpha + b / bandwidth`` where ``alpha``
  is the sum of its links' α and ``bandwidth`` the narrowest link's (per parallel lane), and the
  transfer holds one lane of **every** link of its route for that whole time.  A link with
  multiplicity m carries at most m transfers at once.
* **Candidate routes** between two NPUs (:meth:`Routing.routes`) are every direct link between
  them plus every path through switches with the fewest links (equal-cost multi-path, like ECMP
  in a leaf-spine fabric), capped at ``max_ecmp`` per pair in a deterministic order.  A solver
  may use any route of the topology, candidate or not, as long as it is a valid route
  (:meth:`Routing.make` checks one).

Routes are computed lazily per source NPU and cached on the :class:`Routing` object, which a
:class:`~tacos.model.topology.Topology` creates once (``topology.routing``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tacos.model.links import route_cost
from tacos.model.topology import Topology

MAX_ECMP = 64
"""Most equal-cost switch routes kept per NPU pair (the first ones in link-id order)."""


@dataclass(frozen=True)
class Route:
    """A route ``links`` from NPU ``src`` to NPU ``dst`` with its cut-through cost.

    ``alpha`` is Σ α of the links (s), ``bandwidth`` the smallest per-lane bandwidth (B/s),
    ``lanes`` the smallest multiplicity: how many transfers may use this route at once when
    nothing else shares its links.
    """

    src: int
    dst: int
    links: tuple[int, ...]
    alpha: float
    bandwidth: float
    lanes: int

    def time(self, nbytes: float) -> float:
        """Cut-through α-β time of ``nbytes`` over the route (:func:`tacos.model.links.route_cost`
        made ``alpha`` and ``bandwidth``)."""
        return self.alpha + nbytes / self.bandwidth

    @property
    def switched(self) -> bool:
        """True when the route passes through at least one switch."""
        return len(self.links) > 1


class RouteError(ValueError):
    """A link sequence that is not a valid route (the message says why)."""


class Routing:
    """Candidate routes between the live NPUs of ``topology``."""

    def __init__(self, topology: Topology, *, max_ecmp: int = MAX_ECMP) -> None:
        self.topology = topology
        self.max_ecmp = max_ecmp
        self._from: dict[int, dict[int, tuple[Route, ...]]] = {}
        self._made: dict[tuple[int, ...], Route] = {}

    # -- candidate routes ------------------------------------------------------------------
    def from_npu(self, u: int) -> dict[int, tuple[Route, ...]]:
        """Every NPU one route away from ``u`` → its candidate routes (best first)."""
        got = self._from.get(u)
        if got is None:
            got = self._from[u] = self._build(u)
        return got

    def routes(self, u: int, v: int) -> tuple[Route, ...]:
        """Candidate routes ``u -> v`` (empty when v is not one route away)."""
        return self.from_npu(u).get(v, ())

    def best(self, u: int, v: int, nbytes: float = 0.0) -> Route | None:
        """The fastest candidate for ``nbytes`` (ties: fewer links, then link ids)."""
        cands = self.routes(u, v)
        if not cands:
            return None
        return min(cands, key=lambda r: (r.time(nbytes), len(r.links), r.links))

    def neighbours(self, u: int) -> list[int]:
        """NPUs one route away from ``u``, sorted."""
        return sorted(self.from_npu(u))

    def _build(self, u: int) -> dict[int, tuple[Route, ...]]:
        topo = self.topology
        if not 0 <= u < topo.n_npus or topo.npus[u].failed:
            return {}
        links = topo.links
        found: dict[int, list[tuple[int, ...]]] = {}
        # BFS over switches; paths[node] = the fewest-link paths from u reaching ``node``
        paths: dict[int, list[tuple[int, ...]]] = {}
        frontier: list[int] = []
        for li in topo.out_links[u]:
            w = links[li].dst
            if topo.is_switch(w):
                if w not in paths:
                    paths[w] = []
                    frontier.append(w)
                paths[w].append((li,))
            elif w != u:
                found.setdefault(w, []).append((li,))
        depth = {w: 1 for w in frontier}
        level = 1
        while frontier:
            nxt: list[int] = []
            reach: dict[int, list[tuple[int, ...]]] = {}
            for s in sorted(frontier):
                for li in topo.out_links[s]:
                    w = links[li].dst
                    if w == u:
                        continue
                    ext = [p + (li,) for p in paths[s]]
                    if topo.is_switch(w):
                        if depth.get(w, level + 1) <= level:
                            continue  # reached on a shorter path already
                        if w not in depth:
                            depth[w] = level + 1
                            paths[w] = []
                            nxt.append(w)
                        room = self.max_ecmp - len(paths[w])
                        paths[w].extend(ext[:max(0, room)])
                    else:
                        reach.setdefault(w, []).extend(ext)
            for w, ps in reach.items():
                # a switch route counts only at the fewest links for that destination
                have = found.get(w)
                if have is not None and any(len(p) > 1 for p in have):
                    continue
                found.setdefault(w, []).extend(sorted(ps)[:self.max_ecmp])
            frontier = nxt
            level += 1
        out: dict[int, tuple[Route, ...]] = {}
        for w, ps in found.items():
            if topo.npus[w].failed:
                continue
            routes = [self._route(u, w, p) for p in ps]
            routes.sort(key=lambda r: (len(r.links), r.alpha, -r.bandwidth, r.links))
            out[w] = tuple(routes)
        return out

    def _route(self, u: int, v: int, path: tuple[int, ...]) -> Route:
        r = self._made.get(path)
        if r is None:
            r = Route(u, v, path, *route_cost(self.topology.links[i] for i in path))
            self._made[path] = r
        return r

    # -- checking and describing -----------------------------------------------------------
    def make(self, links: Sequence[int]) -> Route:
        """The :class:`Route` over ``links``; :class:`RouteError` when it is not a valid route
        (a link id out of range, links that do not join up, an NPU in the middle, a node
        visited twice, or an end that is a switch or a failed NPU)."""
        key = tuple(links)
        r = self._made.get(key)
        if r is not None:
            return r
        topo = self.topology
        if not key:
            raise RouteError("the route has no link")
        for li in key:
            if not isinstance(li, int) or isinstance(li, bool) or not 0 <= li < len(topo.links):
                raise RouteError(f"link index {li!r} does not exist "
                                 f"(the topology has {len(topo.links)} links)")
        lks = [topo.links[i] for i in key]
        nodes = [lks[0].src] + [lk.dst for lk in lks]
        for k in range(len(key) - 1):
            if lks[k].dst != lks[k + 1].src:
                raise RouteError(f"link {self.link_name(key[k])} is followed by "
                                 f"{self.link_name(key[k + 1])}, which does not start "
                                 "where it ends")
        for v in nodes[1:-1]:
            if not topo.is_switch(v):
                raise RouteError(f"the route passes through NPU {topo.node_name(v)}; a route "
                                 "may only pass through switches (relaying at an NPU is two "
                                 "transfers)")
        if len(set(nodes)) != len(nodes):
            raise RouteError("the route visits a node twice")
        for v in (nodes[0], nodes[-1]):
            if topo.is_switch(v):
                raise RouteError(f"the route ends at switch {topo.node_name(v)}; routes join "
                                 "two NPUs")
        r = self._route(nodes[0], nodes[-1], key)
        return r

    def link_name(self, li: int) -> str:
        """``src->dst`` of link ``li`` by node name."""
        return link_name(self.topology, li)

    def describe(self, links: Iterable[int]) -> str:
        """``a -> sw -> b`` for a route (node names)."""
        ids = list(links)
        if not ids:
            return "(empty route)"
        topo = self.topology
        nodes = [topo.links[ids[0]].src] + [topo.links[i].dst for i in ids]
        return " -> ".join(topo.node_name(v) for v in nodes)


def link_name(topology: Topology, li: int) -> str:
    """``src->dst`` of link ``li`` by node name, ``(port of X)`` when it joins an NPU and a
    switch."""
    if not 0 <= li < len(topology.links):
        return f"link {li}"
    lk = topology.links[li]
    text = f"{topology.node_name(lk.src)}->{topology.node_name(lk.dst)}"
    if topology.is_switch(lk.src) != topology.is_switch(lk.dst):
        npu = lk.dst if topology.is_switch(lk.src) else lk.src
        text += f" (port of {topology.node_name(npu)})"
    elif lk.via is not None and 0 <= lk.via < topology.n_nodes:
        text += f" (via {topology.node_name(lk.via)})"
    return text
