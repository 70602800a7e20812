"""The route of every tree edge on the physical topology.

A tree edge between two NPUs joined by a link is a one-link route.  A tree edge that edge
splitting made out of a path through switches (``x → w … → y``) is the cut-through route along
that path (:mod:`tacos.model.routes`): it pays the links' α once, runs at the narrowest link's
bandwidth and holds one lane of every link it crosses for its whole duration, so transfers of
different trees that share a switch port take turns on it at the port's full rate.  Splitting
guarantees that, summed over the whole collective, no port carries more than its bandwidth.

Reduction phases pack trees on the reversed topology; :meth:`RouteView.hop` takes ``reverse``
and gives the real links of a reversed path in the order the reversed transfer crosses them
(:func:`tacos.passes.inversion.invert_transfers` flips the route back).
"""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

from tacos.model.links import route_cost
from tacos.model.topology import Topology
from tacos.solvers.forest.pipeline import Hop
from tacos.solvers.forest.split import Path


class RouteView:
    """Physical link choices for tree-edge paths (see the module docstring)."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self.pairs: dict[tuple[int, int], tuple[int, ...]] = {}
        pairs: dict[tuple[int, int], list[int]] = defaultdict(list)
        for i, lk in enumerate(topology.links):
            pairs[(lk.src, lk.dst)].append(i)
        self.pairs = {k: tuple(v) for k, v in pairs.items()}
        self._hops: dict[tuple[Path, bool], Hop] = {}

    def hop(self, path: Path, reverse: bool) -> Hop:
        """The hop of a tree edge whose node path is ``path`` (in the phase's direction)."""
        key = (path, reverse)
        hop = self._hops.get(key)
        if hop is None:
            real = tuple(reversed(path)) if reverse else path
            choices = [self.pairs[(a, b)] for a, b in zip(real, real[1:], strict=False)]
            if reverse:
                choices.reverse()
            links = self.topology.links
            # parallel links between two nodes: the hop may take any, so a step costs its
            # lowest α and its widest bandwidth; the route rule then adds and narrows
            best = [SimpleNamespace(alpha=min(links[i].alpha for i in c),
                                    bandwidth=max(links[i].bandwidth for i in c),
                                    multiplicity=max(links[i].multiplicity for i in c))
                    for c in choices]
            alpha, bandwidth, _ = route_cost(best)
            hop = self._hops[key] = Hop(tuple(choices), alpha, bandwidth)
        return hop
