"""Discretization of link costs into integer time steps (for TEN-based solvers).

Each link's α-β time for one chunk is rounded *up* to a whole number of steps, so no transfer
is ever shorter in the discrete model than in reality.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tacos.model.topology import Topology


@dataclass(frozen=True)
class Discretization:
    """Step length in seconds and, per link index, the steps one chunk takes on it."""

    step: float
    link_steps: tuple[int, ...]

    def to_seconds(self, steps: int) -> float:
        """Convert a step count to seconds."""
        return steps * self.step


def discretize(topology: Topology, chunk_bytes: float, factor: int = 1) -> Discretization:
    """Choose step = (fastest link's chunk time) / ``factor`` and round every link up.

    A larger ``factor`` gives a finer grid (less rounding, bigger TENs).
    """
    if not topology.links:
        return Discretization(1.0, ())
    times = [lk.time(chunk_bytes) for lk in topology.links]
    step = min(times) / max(1, int(factor))
    # tolerate floating noise so that an exact multiple is not rounded one step up
    steps = tuple(max(1, math.ceil(t / step - 1e-9)) for t in times)
    return Discretization(step, steps)
