"""Physical routes of logical sends, as the cost models see them.

An algorithm's step is a set of logical sends ``u -> v`` between NPUs that run at the same
time.  On the machine model (``docs/machine-model.md``) a send whose ends are one route apart
(a direct link, or up-port -> fabric -> down-port through switches) is one cut-through transfer
on a route of :mod:`tacos.routes`: α is the sum of its links' α, the bandwidth its narrowest
link's, and it holds every link of the route for its whole duration.  Ends further apart are
joined by a chain of such hops, store-and-forward at the relay NPUs, chosen as the baselines
choose them (:meth:`~tacos.solvers.baselines_route.NpuGraph.route`: fewest hops, then fastest),
so a model and the matching baseline schedule relay through the same NPUs.

:func:`assign_routes` picks one candidate route per hop (the least used so far, so parallel
links and equal-cost switch paths share the load) and counts the sends on every link.

:class:`RoutedGraph` is the baselines' NPU-level view (relay chains, ring orders, neighbours)
with its hops taken from :mod:`tacos.routes`, built per NPU on first use, so the cost models
route everything on one structure and only for the NPUs they touch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tacos.errors import InfeasibleError
from tacos.routes import Route
from tacos.solvers.baselines_route import Hop, NpuGraph
from tacos.topology import Topology


class _HopsFromRoutes(dict):
    """``hops[u][v]``: the candidate routes ``u -> v`` as :class:`Hop`, filled per ``u``."""

    def __init__(self, topology: Topology) -> None:
        super().__init__()
        self.topology = topology

    def __missing__(self, u: int) -> dict[int, list[Hop]]:
        topo = self.topology
        out: dict[int, list[Hop]] = {}
        for v, routes in topo.routing.from_npu(u).items():
            out[v] = [Hop(u, v, r.links, r.alpha, r.bandwidth, r.lanes,
                          topo.links[r.links[0]].dst if r.switched else None) for r in routes]
        self[u] = out
        return out


class RoutedGraph(NpuGraph):
    """:class:`~tacos.solvers.baselines_route.NpuGraph` over :mod:`tacos.routes`, lazily."""

    def __init__(self, topology: Topology) -> None:  # noqa: D107 - no eager build
        self.topology = topology
        self.hops = _HopsFromRoutes(topology)
        self._routes = {}


@dataclass(frozen=True)
class Leg:
    """One hop of a routed send: its physical links, α (s), bandwidth (B/s) and the dimension
    every one of its links belongs to (None when they differ or carry none)."""

    links: tuple[int, ...]
    alpha: float
    bandwidth: float
    dim: int | None


class Router:
    """Candidate routes between the NPUs of one topology, and relay chains (cached)."""

    def __init__(self, topology: Topology, graph: NpuGraph | None = None) -> None:
        self.topology = topology
        self.routing = topology.routing
        self.graph = graph or RoutedGraph(topology)
        self._chains: dict[tuple[int, int], list[tuple[int, int]]] = {}
        self._legs: dict[tuple[int, ...], Leg] = {}

    def chain(self, u: int, v: int) -> list[tuple[int, int]]:
        """The NPU pairs a send ``u -> v`` hops through (one pair when they are neighbours)."""
        key = (u, v)
        hit = self._chains.get(key)
        if hit is None:
            path = [u, v] if self.routing.routes(u, v) else self.graph.route(u, v)
            if path is None:
                topo = self.topology
                raise InfeasibleError(
                    f"NPU {topo.node_name(v)} cannot be reached from NPU {topo.node_name(u)}",
                    hint="every pair of NPUs an algorithm sends between needs a route")
            hit = self._chains[key] = list(zip(path, path[1:], strict=False))
        return hit

    def candidates(self, a: int, b: int) -> tuple[Route, ...]:
        """Candidate routes ``a -> b`` (direct links and fewest-link switch paths)."""
        return self.routing.routes(a, b)

    def leg(self, route: Route) -> Leg:
        """The :class:`Leg` of a route."""
        hit = self._legs.get(route.links)
        if hit is None:
            links = self.topology.links
            dims = {links[i].dim for i in route.links}
            dim = dims.pop() if len(dims) == 1 else None
            hit = self._legs[route.links] = Leg(route.links, route.alpha, route.bandwidth, dim)
        return hit


def assign_routes(router: Router, pairs: Sequence[tuple[int, int]]
                  ) -> tuple[list[list[Leg]], dict[int, int]]:
    """Route concurrent sends and count how many of them use each physical link.

    Among a hop's candidate routes the one whose links are least used so far is taken (ties:
    the faster, then the first), so parallel links and equal-cost switch paths share the load.
    Returns the legs of every send and ``use[link] = number of sends occupying it``.
    """
    use: dict[int, int] = {}
    mult = [lk.multiplicity for lk in router.topology.links]
    routed: list[list[Leg]] = []
    for u, v in pairs:
        legs = []
        for a, b in router.chain(u, v):
            cands = router.candidates(a, b)
            if len(cands) == 1:
                route = cands[0]
            else:
                route = min(cands, key=lambda r: (max((use.get(i, 0) + 1) / mult[i]
                                                      for i in r.links), -r.bandwidth))
            for i in route.links:
                use[i] = use.get(i, 0) + 1
            legs.append(router.leg(route))
        routed.append(legs)
    return routed, use
