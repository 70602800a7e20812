"""One phase's packing of trees (:class:`Forest`), what every forest candidate builds and the
pipeline times, and the group's part of a topology the trees live on."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tacos.model.topology import Topology
from tacos.solvers.forest.pack import Tree
from tacos.solvers.forest.rate import Rate
from tacos.solvers.forest.split import SplitGraph


@dataclass
class Forest:
    """One phase's packing: trees on the topology (reversed for a reduction phase)."""

    phase: str
    reverse: bool
    roots: tuple[int, ...]
    rate: Rate
    unit: float
    split: SplitGraph
    trees: list[Tree]
    tests: int
    seconds: dict[str, float] = field(default_factory=dict)
    packing: str = "lovasz"
    """How the trees were packed: ``lovasz`` (:mod:`~tacos.solvers.forest.pack`),
    ``symmetric`` (:mod:`~tacos.solvers.forest.symmetric`), ``dims`` (the dimension-ordered
    trees of tori, :mod:`~tacos.solvers.forest.torus`) or ``timed`` (step-timed trees,
    :mod:`~tacos.solvers.forest.timed`)."""

    def optimal_time(self, data_per_root: float) -> float:
        """Bandwidth-optimal time for ``data_per_root`` bytes from every root (x* · data)."""
        return float(self.rate.x) / self.unit * data_per_root

    def facts(self, data_per_root: float) -> dict[str, Any]:
        """JSON-safe summary for ``meta``."""
        return {"phase": self.phase, "k": self.rate.k, "U": str(self.rate.u),
                "exact": self.rate.exact, "rate_loss": self.rate.slowdown - 1,
                "trees": len(self.trees), "depth": max((t.depth() for t in self.trees),
                                                       default=0),
                "optimal_time": self.optimal_time(data_per_root),
                "max_flows": self.rate.checks + self.split.flows + self.tests,
                "packing": self.packing}


def group_topology(topology: Topology, group: tuple[int, ...]) -> Topology:
    """The topology without links touching NPUs outside ``group`` (trees relay only through
    group members and switches)."""
    members = set(group)

    def keep(v: int) -> bool:
        return topology.is_switch(v) or v in members

    return topology.with_links(lk for lk in topology.links if keep(lk.src) and keep(lk.dst))
