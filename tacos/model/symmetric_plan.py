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

A **mixed** phase (``Phase.scatter``, all-reduce plans) is an all-gather along a of the parts it
moves and, in the same template, a reduce-scatter along a of the parts in ``scatter``: template
chunks 0..r-1 are the all-gather's (chunk j: the pieces of the moved parts whose digit a is j),
chunks r..2r-1 the reduce-scatter's (chunk r + j: the scatter parts' pieces whose digit a is j;
:func:`mixed_collective`).  Its template sends both payloads to a partner as one joint transfer
(a group of one route, ``docs/machine-model.md``), paying the route's α once.

A **rooted** pair (all-reduce plans on systems whose switches reduce, :mod:`tacos.scale.sharp`):
a ``reduce`` phase along a reduces every group's held range into its member 0 (template: the
reduce of the held range, root 0, one chunk: the whole range), and the part's next phase is the
``broadcast`` along a from member 0 (the broadcast of the same range), after which every member
holds the range reduced over a.  Between the two only member 0 of each group holds the part, so
no other phase of that part may run.
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
ROOTED = ("reduce", "broadcast")
PHASE_KINDS = ("reducescatter", "allgather", "allreduce", "reduce", "broadcast")


@dataclass(frozen=True)
class Phase:
    """Every group of ``axis`` runs ``template`` (a reduce-scatter, all-gather or all-reduce
    of its members, :data:`PHASE_KINDS`, in the template's own ids) on ``part`` of the buffer,
    starting at ``start``; ``joint``: further parts the same template moves with it (a joint
    phase); ``scatter``: parts the template reduce-scatters while it all-gathers the others
    (a mixed phase, ``kind`` 'allgather'; see the module docstring)."""

    part: int
    axis: int
    kind: str
    template: Schedule
    start: float
    joint: tuple[int, ...] = ()
    scatter: tuple[int, ...] = ()

    @property
    def moved(self) -> tuple[int, ...]:
        """Every part the phase moves with its ``kind``: ``part``, then ``joint``."""
        return (self.part, *self.joint)

    @property
    def every_part(self) -> tuple[int, ...]:
        """Every part the phase touches: :attr:`moved`, then the mixed phase's ``scatter``
        parts (reduce-scattered in the same template)."""
        return (self.part, *self.joint, *self.scatter)

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


def mixed_collective(r: int, gather: int, scatter: int) -> Collective:
    """The collective of a mixed template on ``r`` members: the all-gather of ``gather`` bytes
    (chunks 0..r-1), then the reduce-scatter of ``scatter`` bytes (chunks r..2r-1, chunk
    r + j owned by member j)."""
    from dataclasses import replace

    from tacos.model.patterns import build

    ag = build("allgather", range(r), size=gather)
    rs = build("reducescatter", range(r), size=scatter)
    chunks = ag.chunks + tuple(replace(c, id=c.id + r, index=c.index + r) for c in rs.chunks)
    return Collective("mixed", chunks, tuple(range(r)), gather + scatter, 2)


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
                                             "op", "group")}
    next_group = 0
    for ph in sorted(plan.phases, key=lambda p: (p.start, p.part)):
        emb = system.embed(ph.axis)
        r = int(radices[ph.axis])
        t = ph.template
        n_groups = 1 + max((tr.group for tr in t.transfers if tr.group is not None),
                           default=-1)
        for c in range(len(emb.nodes)):
            own = emb.coords[c]
            by_digit: dict[int, tuple[int, ...]] = {}
            # the parts a joint phase moves are in one state (the verifier), and so are a
            # mixed phase's scatter parts: template chunk j (+ r) is their pieces of digit j
            for off, qs in ((0, ph.moved), (r, ph.scatter)):
                if not qs:
                    continue
                others = [a for a in sorted(fixed[qs[0]]) if a != ph.axis]
                cand = np.flatnonzero(np.all(every[:, others] == own[others], axis=1))
                if ph.kind in ROOTED:   # one chunk: the whole held range
                    by_digit[0] = tuple(int(q * n + i) for q in qs for i in cand)
                    continue
                for j in range(r):
                    by_digit[off + j] = tuple(int(q * n + i) for q in qs for i in cand
                                              if every[i, ph.axis] == j)
            for tr in t.transfers:
                cols["start"].append(ph.start + tr.start)
                cols["end"].append(ph.start + tr.end)
                cols["src"].append(int(emb.nodes[c, tr.src]))
                cols["dst"].append(int(emb.nodes[c, tr.dst]))
                cols["route"].append(tuple(int(emb.links[c, k]) for k in tr.route))
                cols["chunks"].append(tuple(sorted(x for j in tr.chunks
                                                   for x in by_digit.get(j, ()))))
                cols["op"].append(tr.op)
                cols["group"].append(None if tr.group is None else next_group + tr.group)
            next_group += n_groups
        for q in ph.moved:
            if ph.kind == "reducescatter":
                fixed[q].add(ph.axis)
            elif ph.kind == "allgather":
                fixed[q].discard(ph.axis)
        for q in ph.scatter:
            fixed[q].add(ph.axis)
    transfers = transfers_from_columns(cols["start"], cols["end"], cols["src"], cols["dst"],
                                       cols["route"], cols["chunks"], cols["op"], cols["group"])
    coll = global_collective(system, plan.kind, plan.parts)
    meta = {k: v for k, v in plan.meta.items() if k != "synthesis_cpu"}  # no clocks in output
    return Schedule(system.topology(), coll, tuple(sorted(transfers)),
                    {**meta, "solver": "symmetric"})
