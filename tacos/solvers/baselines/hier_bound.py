"""A lower bound on the hierarchical baseline's link-model time, known before it is built.

The hierarchical all-gather (:func:`tacos.solvers.baselines.hier.hierarchical_program`) runs
one stage per dimension, from the last dimension to the first; at the stage of dimension
``d`` every group of that dimension runs its own all-gather, and member ``y``'s block is
the chunks whose owner agrees with ``y`` on dimensions ``0..d``.
:class:`~tacos.solvers.lowering.program.Lowering` times the program: a message waits until
every chunk it carries has reached its sender (``ready`` is the latest arrival of those
chunks there), then crosses its route hop by hop, each hop after the previous one, a hop of
``n`` bytes taking ``Σ α + n / bandwidth`` of its route
(:meth:`tacos.model.routes.Route.time`).  Congestion only delays.

:func:`hierarchical_floor` adds, over the stages, a term that every member's data waits for:

* ``t(n) = α_min + n / bw_max``, with the least α and the largest lane bandwidth of any link
  of the topology, is at most the time of any hop of ``n`` bytes (a route has at least one
  link, its α is a sum of link α's, its bandwidth the narrowest of its links').
* **Ring stage of a group of k** (``algos.ring_allgather``): member ``o[i]`` receives the block
  of ``o[i+1]`` at the end of a chain of ``k - 1`` messages, each sent by the receiver of the
  one before and carrying that block (the program lists step ``s`` of every path before step
  ``s + 1``, so each message's ``ready`` is at least the end of the one before); each message is
  at least one hop of the block's bytes: the term is ``(k - 1) t(B)``.
* **Fully-connected stage** (``algos.direct_allgather``): every member receives the block of
  every other member in one message: the term is ``t(B)``.
* **Switch stage** (recursive doubling with folding): the term is 0 (no claim).

``B`` is the smallest block of the stage over its members.  Why the terms add up, by
induction over the stages: say every member ``m`` holds, before the stage of dimension ``d``,
some chunk whose arrival there ends no earlier than ``S``, the sum of the terms of the stages
before (before the first stage, ``S = 0`` and any chunk ``m`` owns will do).  That chunk is in
``m``'s block at stage ``d``: it is ``m``'s own, or it came at an earlier stage ``e > d`` in the
block of a member ``x`` of ``m``'s group there, so its owner agrees with ``x`` on dimensions
``0..e``, hence on ``0..d``, where ``x`` agrees with ``m`` (they differ on ``e`` only).  So every
message carrying ``m``'s block at stage ``d`` is ready no earlier than ``S``, and by the terms
above every member receives at this stage a block, ending no earlier than ``S`` + the term.
With every member owning at least one chunk, no block is empty and every message of the
program is sent.  The plan's makespan is at least the sum of the terms (less
:data:`ROUNDING`).

The bound holds for the all-gather of one group (no tenants, no failed member); reductions
(reduce-scatter, all-reduce) get none: their lowering may drop sends after timing.
``tests/test_hier_bound.py`` checks it against the built plan on many small shapes.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from tacos.errors import TacosError
from tacos.model.collective import Collective
from tacos.model.topology import Topology

ROUNDING = 1e-9
"""Relative margin taken off the sum: the lowering adds the same hop times in another order,
and on a torus of equal links the bound is the plan's time (up to the last bit)."""


@dataclass(frozen=True)
class Stage:
    """One stage of the bound: the dimension's ``kind``, its group size, the smallest block's
    bytes and the stage's term (s)."""

    kind: str
    size: int
    block: float
    term: float


@dataclass(frozen=True)
class HierFloor:
    """The bound (``time``, s) and its stages, in the order the plan runs them."""

    time: float
    stages: tuple[Stage, ...]

    def describe(self) -> str:
        """E.g. ``ring(16) 12 us + ring(16) 81 us + ring(16) 1.179 ms``."""
        from tacos.model.units import format_time

        return " + ".join(f"{s.kind}({s.size}) {format_time(s.term)}" for s in self.stages)


def hierarchical_floor(topology: Topology, collective: Collective,
                       relays: str = "members") -> HierFloor | None:
    """A lower bound on the link-model makespan of the hierarchical baseline's plan for
    ``collective`` (see module doc), or None where it makes no claim: not an all-gather of
    one group, a failed member, a member without data, or a topology the baseline refuses."""
    from tacos.solvers.baselines.hier import analyse
    from tacos.solvers.lowering.hops import NpuGraph

    if collective.kind != "allgather" or not topology.links:
        return None
    members = list(collective.group)
    if any(topology.npus[v].failed for v in members):
        return None
    owned: dict[int, float] = defaultdict(float)
    for c in collective.chunks:
        if len(c.pre) != 1:
            return None
        (owner,) = c.pre
        owned[owner] += c.size
    if any(owned.get(v, 0.0) <= 0 for v in members):
        return None
    try:
        graph = NpuGraph(topology, collective.relay_npus(relays))
        grid = analyse(topology, members, graph)
    except (TacosError, ValueError):
        return None
    alpha = min(lk.alpha for lk in topology.links)
    bandwidth = max(lk.bandwidth for lk in topology.links)
    stages: list[Stage] = []
    for dim in reversed(grid.dims):
        size = len(dim.groups[0])
        if size <= 1:
            continue
        by_prefix: dict[tuple[int, ...], float] = defaultdict(float)
        for v in members:
            by_prefix[grid.coords[v][: dim.index + 1]] += owned[v]
        block = min(by_prefix[grid.coords[v][: dim.index + 1]] for v in members)
        hop = alpha + block / bandwidth
        term = {"ring": (size - 1) * hop, "fc": hop}.get(dim.kind, 0.0)
        stages.append(Stage(dim.kind, size, block, term))
    return HierFloor(sum(s.term for s in stages) * (1 - ROUNDING), tuple(stages))
