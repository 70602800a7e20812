"""Plans on systems of isomorphic groups: one schedule per group shape, run by every copy.

A :class:`SymmetricPlan` moves a collective's buffer in **parts**; each part goes through a
sequence of :class:`Phase` s, and a phase is a reduce-scatter or all-gather along one axis of the
system (:mod:`tacos.model.symmetry`) that every group of that axis runs at once, each with the
same ``template`` schedule (made on the axis's template topology) shifted to ``start``.

Buffer layout: a part of ``size`` bytes is cut into ``N`` equal pieces indexed in mixed radix
by the axes (``N`` = the system's NPU count).  A reduce-scatter along axis a gives member j of
every group the piece range whose digit a is j (template chunk j); an all-gather along a undoes
it.  So an all-reduce is the reduce-scatters along every axis, then the all-gathers back, and an
all-gather is the all-gathers along every axis (any order: the torus plan rotates it per part so
the parts keep different axes busy).  :func:`tacos.check.symmetric.verify_symmetric` checks a plan
without expanding it; :func:`expand` writes it out as an ordinary :class:`Schedule` for small
systems (the full verifier then judges it).

An all-reduce along axis a (a **fused digit**: the reduce-scatter along a and the all-gather
back, as one exchange) leaves the held range as it is and reduces it over a: template chunk j
is again the held pieces whose digit a is j, but every member ends with every chunk.  An
all-reduce plan may end its reduce-scatters with such phases (the innermost digits) and skip
their all-gathers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tacos.model.collective import Chunk, Collective
from tacos.model.schedule import Schedule
from tacos.model.symmetry import SymmetricSystem
from tacos.model.transfer import transfers_from_columns

PLAN_KINDS = ("allgather", "reducescatter", "allreduce")
PHASE_KINDS = ("reducescatter", "allgather", "allreduce")


@dataclass(frozen=True)
class Phase:
    """Every group of ``axis`` runs ``template`` (a reduce-scatter, all-gather or all-reduce
    of its members, :data:`PHASE_KINDS`, in the template's own ids) on ``part`` of the buffer,
    starting at ``start``; ``joint``: further parts the same template moves with it (a joint
    phase, see the module docstring)."""

    part: int
    axis: int
    kind: str
    template: Schedule
    start: float
    joint: tuple[int, ...] = ()

    @property
    def moved(self) -> tuple[int, ...]:
        """Every part the phase moves: ``part``, then ``joint``."""
        return (self.part, *self.joint)

    @property
    def end(self) -> float:
        """When the last copy's last transfer ends."""
        return self.start + self.template.makespan


@dataclass(frozen=True)
class SymmetricPlan:
    """A collective ``kind`` of ``size`` bytes (nccl-tests convention) on ``system``, as
    ``parts`` (bytes of each) and ``phases``; ``meta`` holds solver facts."""

    system: SymmetricSystem
    kind: str
    size: int
    parts: tuple[int, ...]
    phases: tuple[Phase, ...]
    meta: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def makespan(self) -> float:
        """End of the last phase."""
        return max((p.end for p in self.phases), default=0.0)

    @property
    def n_transfers(self) -> int:
        """Transfers the plan stands for (template transfers x copies)."""
        total = 0
        for p in self.phases:
            copies = self.system.n_npus // self.system.axes[p.axis].size
            total += len(p.template.transfers) * copies
        return total


def global_collective(system: SymmetricSystem, kind: str, parts: tuple[int, ...]) -> Collective:
    """The plan's collective on the whole system with one chunk per (part, piece): chunk
    ``q * N + i`` is piece i (mixed-radix index) of part q, ``parts[q] / N`` bytes."""
    n = system.n_npus
    everyone = frozenset(range(n))
    chunks = []
    for size in parts:
        for i in range(n):
            one = frozenset({i})
            pre, post, red = {"allgather": (one, everyone, False),
                              "reducescatter": (everyone, one, True),
                              "allreduce": (everyone, everyone, True)}[kind]
            chunks.append(Chunk(len(chunks), size // n, pre, post, red, index=len(chunks)))
    return Collective(kind, tuple(chunks), tuple(range(n)), sum(parts), len(parts))


def initial_fixed(kind: str, n_axes: int) -> frozenset[int]:
    """Axes whose digit a part's held range is pinned to at the start (all for all-gather)."""
    return frozenset(range(n_axes)) if kind == "allgather" else frozenset()


def expand(plan: SymmetricPlan) -> Schedule:
    """The plan as an ordinary :class:`Schedule` on ``plan.system.topology()`` (every copy of
    every phase written out; for systems small enough to check transfer by transfer)."""
    system = plan.system
    n = system.n_npus
    radices = system.radices
    every = system.coords_of(np.arange(n))          # piece index -> digits
    fixed = {q: set(initial_fixed(plan.kind, len(system.axes))) for q in range(len(plan.parts))}
    cols: dict[str, list] = {k: [] for k in ("start", "end", "src", "dst", "route", "chunks",
                                             "op")}
    for ph in sorted(plan.phases, key=lambda p: (p.start, p.part)):
        emb = system.embed(ph.axis)
        held = fixed[ph.part]  # the parts a joint phase moves are in one state (the verifier)
        pinned = sorted(held | {ph.axis})
        t = ph.template
        for c in range(len(emb.nodes)):
            own = emb.coords[c]
            others = [a for a in pinned if a != ph.axis]
            cand = np.flatnonzero(np.all(every[:, others] == own[others], axis=1))
            by_digit = {j: tuple(int(q * n + i) for q in ph.moved for i in cand
                                 if every[i, ph.axis] == j)
                        for j in range(int(radices[ph.axis]))}
            for tr in t.transfers:
                cols["start"].append(ph.start + tr.start)
                cols["end"].append(ph.start + tr.end)
                cols["src"].append(int(emb.nodes[c, tr.src]))
                cols["dst"].append(int(emb.nodes[c, tr.dst]))
                cols["route"].append(tuple(int(emb.links[c, k]) for k in tr.route))
                cols["chunks"].append(tuple(sorted(x for j in tr.chunks for x in by_digit[j])))
                cols["op"].append(tr.op)
        for q in ph.moved:
            if ph.kind == "reducescatter":
                fixed[q].add(ph.axis)
            elif ph.kind == "allgather":
                fixed[q].discard(ph.axis)
    transfers = transfers_from_columns(cols["start"], cols["end"], cols["src"], cols["dst"],
                                       cols["route"], cols["chunks"], cols["op"])
    coll = global_collective(system, plan.kind, plan.parts)
    meta = {k: v for k, v in plan.meta.items() if k != "synthesis_cpu"}  # no clocks in output
    return Schedule(system.topology(), coll, tuple(sorted(transfers)),
                    {**meta, "solver": "symmetric"})
