"""Physical routes of logical sends, as the cost models see them.

An algorithm's step is a set of logical sends ``u -> v`` between NPUs that run at the same
time.  On the machine model (``docs/machine-model.md``) a send whose ends are one route apart
(a direct link, or up-port -> fabric -> down-port through switches) is one cut-through transfer
on a route of :mod:`tacos.model.routes`: α is the sum of its links' α, the bandwidth its narrowest
link's, and it holds every link of the route for its whole duration.  Ends further apart are
joined by a chain of such hops, store-and-forward at the relay NPUs, chosen as the baselines
choose them (:meth:`~tacos.solvers.lowering.hops.NpuGraph.route`: fewest hops, then fastest,
relaying only through the NPUs of the process groups unless any NPU is allowed), so a model
and the matching baseline schedule relay through the same NPUs.

:func:`assign_routes` picks one candidate route per hop (the least used so far, so parallel
links and equal-cost switch paths share the load) and counts the sends on every link.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tacos.errors import InfeasibleError
from tacos.model.routes import Route
from tacos.model.topology import Topology
from tacos.solvers.lowering.hops import NpuGraph


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

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self.routing = topology.routing
        self._graphs: dict[frozenset[int] | None, NpuGraph] = {}
        self._chains: dict[tuple, list[tuple[int, int]]] = {}
        self._legs: dict[tuple[int, ...], Leg] = {}

    def graph(self, relays: frozenset[int] | None = None) -> NpuGraph:
        """The NPU-level view whose relay chains pass only through ``relays`` (None: any)."""
        hit = self._graphs.get(relays)
        if hit is None:
            hit = self._graphs[relays] = NpuGraph(self.topology, relays)
        return hit

    def chain(self, u: int, v: int, relays: frozenset[int] | None = None
              ) -> list[tuple[int, int]]:
        """The NPU pairs a send ``u -> v`` hops through (one pair when they are neighbours),
        relaying only through ``relays`` (None: any NPU)."""
        key = (u, v, relays)
        hit = self._chains.get(key)
        if hit is None:
            path = [u, v] if self.routing.routes(u, v) else self.graph(relays).route(u, v)
            if path is None:
                topo = self.topology
                raise InfeasibleError(
                    f"NPU {topo.node_name(v)} cannot be reached from NPU {topo.node_name(u)}"
                    + (" through the process groups' NPUs" if relays is not None else ""),
                    hint="every pair of NPUs an algorithm sends between needs a route"
                    + ("; allow relays through any NPU (relays='all')"
                       if relays is not None else ""))
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


def assign_routes(router: Router, pairs: Sequence[tuple[int, int]],
                  relays: frozenset[int] | None = None
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
        for a, b in router.chain(u, v, relays):
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
