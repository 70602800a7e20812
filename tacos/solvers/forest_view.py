"""The links a forest schedule's transfers use, and the hop of every tree edge.

A tree edge between two NPUs joined by a link uses that link (any of its parallel entries).  A
tree edge that edge splitting made out of a path through switches (``x → w … → y``) uses a
*virtual link* ``x → y`` with ``via`` = the first switch, α = the α summed along the path and the
bandwidth of the capacity the split gave that path (``units / U`` bandwidth units): the ports'
bandwidth divided among the paths exactly as the split did, so no port carries more than its
bandwidth.  Physical links keep their indices; virtual links are appended after them.

Reduction phases pack trees on the reversed topology; :meth:`LinkView.hop` takes ``reverse`` and
registers the real link ``y → x`` for a reversed path, so one link list serves both phases
(``Topology.reversed`` keeps link indices).  Each phase has its own virtual links (its own split;
the phases never overlap in time).
"""

from __future__ import annotations

from collections import defaultdict
from fractions import Fraction

from tacos.solvers.forest_pipeline import Hop
from tacos.solvers.forest_split import Path, SplitGraph
from tacos.topology import Link, Topology


class LinkView:
    """Physical links plus one virtual link per switch path used (see the module docstring)."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self.links: list[Link] = list(topology.links)
        self.pairs: dict[tuple[int, int], list[int]] = defaultdict(list)
        for i, lk in enumerate(topology.links):
            self.pairs[(lk.src, lk.dst)].append(i)
        self.virtual: dict[tuple[Path, bool], int] = {}
        self.path_bw: dict[tuple[Path, bool], float] = {}

    def add_paths(self, split: SplitGraph, u: Fraction, unit: float, reverse: bool) -> None:
        """Record the bandwidth of every switch path of ``split`` (units → bytes/s)."""
        units: dict[Path, int] = defaultdict(int)
        for pool in split.paths.values():
            for path, n in pool:
                if len(path) > 2:
                    units[path] += n
        for path, n in units.items():
            self.path_bw[(path, reverse)] = float(n / u * Fraction(unit))

    def hop(self, path: Path, reverse: bool) -> Hop:
        """The hop of a tree edge with physical node path ``path`` (in the phase's direction)."""
        real = tuple(reversed(path)) if reverse else path
        if len(real) == 2:
            ids = self.pairs[real]
            lk = self.links[ids[0]]
            return Hop(tuple(ids), lk.alpha, lk.bandwidth,
                       tuple(self.links[i].multiplicity for i in ids))
        if (real, reverse) not in self.virtual:
            alpha = sum(self.links[self.pairs[(a, b)][0]].alpha
                        for a, b in zip(real, real[1:], strict=False))
            first = self.links[self.pairs[(real[0], real[1])][0]]
            bw = self.path_bw[(path, reverse)]
            self.links.append(Link(real[0], real[-1], alpha, bw, 1, first.dim,
                                   first.tag or "switch", real[1], first.span))
            self.virtual[(real, reverse)] = len(self.links) - 1
        i = self.virtual[(real, reverse)]
        lk = self.links[i]
        return Hop((i,), lk.alpha, lk.bandwidth, (1,))

    def result(self) -> Topology:
        """The schedule's topology: the original with the virtual links appended."""
        return self.topology.with_links(self.links)
