"""Physical routes of logical sends, as the cost models see them.

An algorithm's step is a set of logical sends ``u -> v`` between NPUs that run at the same
time.  On the machine model (``docs/cost.md``, "Placement"), a send travels one *hop* when
``u`` and ``v`` share a direct link or a cut-through path through switches (up-port, fabric,
down-port: α is the sum of its links' α, bandwidth the narrowest link's); otherwise it is
relayed store-and-forward over the shortest chain of hops.  Every hop occupies all of its
physical links for its whole duration, and a link carries at most its multiplicity of
transfers at once.

:class:`Router` answers "which physical links does this send occupy": it reuses the NPU-level
hop view the baselines are lowered with (:class:`~tacos.solvers.baselines_route.NpuGraph`),
so a model and the matching baseline schedule route every send the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tacos.errors import InfeasibleError
from tacos.solvers.baselines_route import Hop, NpuGraph
from tacos.topology import Topology


@dataclass(frozen=True)
class Leg:
    """One hop of a routed send: its physical links, α (s), bandwidth (B/s), multiplicity and
    the dimension every one of its links belongs to (None when they differ or carry none)."""

    links: tuple[int, ...]
    alpha: float
    bandwidth: float
    dim: int | None


class Router:
    """Candidate hops between the NPUs of one topology (cached)."""

    def __init__(self, topology: Topology, graph: NpuGraph | None = None) -> None:
        self.topology = topology
        self.graph = graph or NpuGraph(topology)
        self._chains: dict[tuple[int, int], list[tuple[int, int]]] = {}

    def chain(self, u: int, v: int) -> list[tuple[int, int]]:
        """The NPU pairs a send ``u -> v`` hops through (one pair when they are neighbours)."""
        key = (u, v)
        hit = self._chains.get(key)
        if hit is None:
            path = self.graph.route(u, v)
            if path is None:
                topo = self.topology
                raise InfeasibleError(
                    f"NPU {topo.node_name(v)} cannot be reached from NPU {topo.node_name(u)}",
                    hint="every pair of NPUs an algorithm sends between needs a route")
            hit = self._chains[key] = list(zip(path, path[1:], strict=False))
        return hit

    def candidates(self, a: int, b: int) -> list[Hop]:
        """Parallel hops ``a -> b`` (direct links and cut-through switch paths)."""
        return self.graph.hops[a][b]

    def leg(self, hop: Hop) -> Leg:
        """The :class:`Leg` of a hop."""
        links = self.topology.links
        dims = {links[i].dim for i in hop.links}
        dim = dims.pop() if len(dims) == 1 else None
        return Leg(hop.links, hop.alpha, hop.bandwidth, dim)


def assign_routes(router: Router, pairs: Sequence[tuple[int, int]]
                  ) -> tuple[list[list[Leg]], dict[int, int]]:
    """Route concurrent sends and count how many of them use each physical link.

    Among parallel candidate hops the one whose links are least used so far is taken (ties:
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
                hop = cands[0]
            else:
                hop = min(cands, key=lambda h: (max((use.get(i, 0) + 1) / mult[i]
                                                    for i in h.links), -h.bandwidth))
            for i in hop.links:
                use[i] = use.get(i, 0) + 1
            legs.append(router.leg(hop))
        routed.append(legs)
    return routed, use
