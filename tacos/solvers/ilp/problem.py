"""The ILP's problem on the step grid: a topology and collective discretized into link steps
(:mod:`tacos.passes.discretize`), with the chunks' pre/postconditions and sizes."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tacos.model.collective import Collective
from tacos.model.schedule import Transfer
from tacos.model.topology import Topology
from tacos.passes.discretize import Discretization, discretize
from tacos.solvers.ilp.model import Send, sends_to_transfers
from tacos.solvers.ilp.recovery import complete_schedule


@dataclass(frozen=True)
class TenProblem:
    """A problem on the step grid: topology, chunks' pre/post sets and sizes, discretization."""

    topology: Topology
    collective: Collective
    disc: Discretization
    pre: tuple[frozenset[int], ...]
    post: tuple[frozenset[int], ...]
    sizes: tuple[int, ...]

    @classmethod
    def of(cls, topology: Topology, collective: Collective, factor: int = 1) -> TenProblem:
        """Discretize for the largest chunk (so every chunk fits its steps)."""
        size = max((c.size for c in collective.chunks), default=1)
        return cls(topology, collective, discretize(topology, size, factor),
                   tuple(c.pre for c in collective.chunks),
                   tuple(c.post for c in collective.chunks),
                   tuple(c.size for c in collective.chunks))

    @property
    def steps(self) -> tuple[int, ...]:
        """Steps per link."""
        return self.disc.link_steps

    def transfers(self, sends: list[Send]) -> list[Transfer]:
        """Sends as timed transfers (seconds)."""
        return sends_to_transfers(sends, self.disc.step, self.steps, self.topology, self.sizes)

    def complete(self, sends: list[Send]) -> list[Transfer]:
        """Sends as transfers, completed by shortest-path recovery where they fall short."""
        return complete_schedule(self.topology, self.collective, self.transfers(sends))

    def exact(self) -> bool:
        """True when every link's chunk time is a whole number of steps (lossless rounding)."""
        size = max(self.sizes, default=1)
        return all(
            math.isclose(lk.time(size), w * self.disc.step, rel_tol=1e-9)
            for lk, w in zip(self.topology.links, self.steps, strict=True)
        )
