"""NCCL's tree refused as runtime-shaped MSCCL XML before its schedule is built.

The shape search refuses a schedule whose chunk count does not divide the message's elements
(:func:`tacos.msccl.shape_refuse.chunks_refusal`: ``nchunksperloop`` is the chunk count times
the instances).  NCCL's tree (:func:`tacos.solvers.nccl.tree.nccl_tree`) tunes a channel count
``c`` and a pipeline depth ``s`` and refines the all-reduce to ``lcm(N, c·s)`` chunks (``N``
the collective's chunks): the depths near the α-β optimum are capped by the transfer budget
(9 slices at 512 ranks, 19 at 256), odd, so the refined count does not divide a power-of-two
message, while one slice does.  Which setting the tuner keeps is decided by building every
one, and the deep one is the costly build (seconds at 512 ranks, with thousands of chunks).

:func:`refused_unbuilt` proves, without building the settings whose count does not divide,
that the tuner keeps one of them, so that the tree is refused exactly as the full path would
refuse it:

1. the settings whose count divides (``D``; one slice) are built, as the tuner builds them:
   their makespans ``M_d`` are exact;
2. every other setting ``x`` (``X``) gets an **upper bound** ``U_x`` on its makespan from
   :func:`makespan_ceiling`;
3. the tuner (:func:`tacos.solvers.nccl.lower.best_of`) keeps a setting ``h`` with
   ``M_h <= M_x / (1 - r)`` for every setting ``x`` (``r`` its tolerance: a later setting
   replaces the one held only when faster by more, an earlier one was replaced by something
   no slower than it over ``1 - r``).  When ``min U_x < M_d (1 - r)`` for every ``d`` in
   ``D``, ``h`` in ``D`` would give ``M_h <= U_x / (1 - r) < M_h``: ``h`` is in ``X``;
4. the count is the same for every setting of ``X`` (else nothing is claimed), and an upper
   bound on every rank's transfers and peers in any of them shows that the refusals checked
   first (:func:`tacos.msccl.shape_refuse.refusal`) pass, so the one that fires is the chunk
   count's, with the same words.

**Why** :func:`makespan_ceiling` **is an upper bound.**  The tree's lowering
(:class:`~tacos.solvers.lowering.program.Lowering`) places the program's messages in order,
each hop of a message's route at the earliest time at or after its ready time at which a
lane of every link of one of the hop's candidate routes is free for the hop's time, keeping
the candidate that ends first; the ready time is the latest time the source received any chunk
of the message.  At or after the last end booked on a link, every lane of it is free, so a hop
ends no later than ``max(ready, last end booked on its links) + its time`` for any candidate.
The ceiling replays the same messages in the same order, one unit per piece (the chunks of a
piece always travel together), with every hop ending at the least of those figures over the
candidates and counted as booked on every link of every candidate; by induction over the
messages every ceiling (ready times, last ends, hop ends) is at or above the lowering's, and the
schedule's makespan is its latest transfer end (rows the reduction replay drops only lower it).
Hop times are taken at the piece's exact byte count, raised by a relative 1e-9 against
rounding.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from tacos.model.collective import Collective
from tacos.msccl.shape import RuntimeLimits
from tacos.msccl.shape_refuse import RankLoads
from tacos.solvers.nccl.lower import BEST_OF_RTOL, refine_allreduce
from tacos.solvers.nccl.system import System

MARGIN = 1e-6
"""Relative room kept between a ceiling and the makespan it must be under (besides the
tuner's own tolerance)."""


@dataclass(frozen=True)
class Ceiling:
    """Of one tree setting, without its schedule: an upper bound on its makespan, its chunk
    count, and upper bounds on the busiest rank's peers and transfers."""

    makespan: float
    chunks: int
    peers: int  # most send or receive peers of a rank
    transfers: int  # most send or receive transfers of a rank
    nodes: int  # most parsed nodes of a rank (1 + gpus + peers + transfers, as refusal counts)


def tree_chunks(collective: Collective, channels: int, slices: int) -> int:
    """The chunk count of NCCL's tree schedule at ``channels`` x ``slices`` pieces."""
    return math.lcm(collective.n_chunks, channels * slices)


def makespan_ceiling(system: System, collective: Collective, channels: int, slices: int
                     ) -> Ceiling | None:
    """An upper bound on the makespan of
    :func:`~tacos.solvers.nccl.tree.tree_schedule` ``(system, collective, channels, slices)``
    and on its busiest rank's counts (module doc: the proof), or None when a message has no
    route (the build would raise)."""
    from tacos.solvers.nccl.tree import tree_program

    coll, pieces = refine_allreduce(collective, channels * slices)
    sizes = coll.chunks
    nbytes = [sum(sizes[c].size for c in piece) * (1 + 1e-9) for piece in pieces]
    program = tree_program(system, [(i,) for i in range(len(pieces))], channels, slices)
    graph = system.graph
    last: dict[int, float] = defaultdict(float)  # link -> latest end booked (a ceiling)
    avail: dict[tuple[int, int], float] = {}  # (NPU, piece) -> when it holds it (a ceiling)
    loads = RankLoads()
    routes: dict[tuple[int, int], list[int] | None] = {}
    end_all = 0.0
    for msg in program:
        if msg.src == msg.dst or not msg.chunks:
            continue
        piece = msg.chunks[0]
        key = (msg.src, msg.dst)
        if key not in routes:
            routes[key] = graph.route(msg.src, msg.dst)
        route = routes[key]
        if route is None:
            return None
        t = avail.get((msg.src, piece), 0.0)
        for a, b in zip(route, route[1:], strict=False):
            cands = graph.hops(a)[b]
            end = min(max([t, *(last[li] for li in h.links)]) + h.time(nbytes[piece])
                      for h in cands)
            end *= 1 + 1e-9
            for h in cands:
                for li in h.links:
                    last[li] = max(last[li], end)
            loads.add(a, b)
            t = end
        end_all = max(end_all, t)
        if avail.get((msg.dst, piece), 0.0) < t:
            avail[(msg.dst, piece)] = t
    ranks = loads.ranks()
    head = 1 + len(collective.group)
    peers = max((loads.peers(r) for r in ranks), default=0)
    steps = max((loads.steps(r) for r in ranks), default=0)
    nodes = max((loads.nodes(r, head) for r in ranks), default=head)
    return Ceiling(end_all, len(coll.chunks), peers, steps, nodes)


def refused_unbuilt(system: System, collective: Collective, elements: int,
                    limits: RuntimeLimits) -> tuple[str, str] | None:
    """``(refusal, why)`` when NCCL's tree, tuned as
    :func:`~tacos.solvers.nccl.tree.nccl_tree` tunes it, is provably a schedule whose chunk
    count does not divide ``elements`` and that the refusals checked before it let through
    (module doc): ``refusal`` is :func:`~tacos.msccl.shape_refuse.chunks_refusal`'s text for
    it, ``why`` says how that is known without building it.  None when that is not proved
    (the tree is then built as usual)."""
    from tacos.model.units import format_time
    from tacos.solvers.nccl.tree import tree_schedule, tree_settings

    if collective.kind != "allreduce":
        return None
    settings = tree_settings(system, collective)
    split = [s for s in settings
             if elements % tree_chunks(collective, s["channels"], s["slices"])]
    whole = [s for s in settings if s not in split]
    if not split:
        return None
    ceilings = [makespan_ceiling(system, collective, s["channels"], s["slices"]) for s in split]
    if any(c is None for c in ceilings):
        return None
    counts = {c.chunks for c in ceilings if c is not None}
    if len(counts) != 1:
        return None
    ngpus = len(collective.group)
    for c in ceilings:
        assert c is not None
        if c.peers > limits.sms or 1 + ngpus + 2 * c.peers > limits.max_nodes \
                or c.nodes > limits.max_nodes:
            return None  # another refusal might fire first
    top = min(ceilings, key=lambda c: c.makespan if c is not None else math.inf)
    assert top is not None
    built = []
    for s in sorted(whole, key=lambda x: (x["channels"] * x["slices"], x["channels"])):
        # as the tuner builds them, the cheapest first: one at or under the ceiling ends it
        m = tree_schedule(system, collective, s["channels"], s["slices"]).makespan
        if not top.makespan < m * (1 - BEST_OF_RTOL) * (1 - MARGIN):
            return None
        built.append(f"{s['channels']} channel(s) x {s['slices']} slice(s) "
                     f"{format_time(m)}")
    chunks = counts.pop()
    refusal = (f"refused before lowering: nchunksperloop ({chunks} chunks x the instances) "
               f"does not divide {elements} elements in any shape")
    kept = ", ".join(f"{s['channels']} x {s['slices']}" for s in split)
    why = (f"not built: NCCL's tuning keeps one of its {kept} channel x slice settings "
           f"({chunks} chunks), at most {format_time(top.makespan)} in the link model"
           + (f", under {'; '.join(built)}" if built else ""))
    return refusal, why
