"""The link-level problem on an integer clock: what the CP-SAT model of
:mod:`tacos.solvers.ilp.link_model` schedules.

A send moves one chunk over one link and holds one lane of it for ``α + size / bandwidth``
seconds (the α-β rule of :meth:`tacos.model.topology.Link.time`), store-and-forward.  Times
become integer *ticks*: the coarsest of 1 ns, 100 ps, 10 ps and 1 ps in which every send's
duration is a whole number (``exact``); when none is, 1 ps with durations rounded up, and
:attr:`LinkGrid.bound_scale` says how much a bound proven on the grid must shrink to stay a
bound in continuous time.

:func:`replay_in_ticks` turns any schedule of the topology (merged transfers included) into
sends on the grid: one send per (chunk, link) in the schedule's order, as early as links and
arrivals allow.  That is how the greedy's schedules become the model's warm start.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tacos.model.collective import Collective
from tacos.model.schedule import Transfer
from tacos.model.topology import Topology

TICKS = (1e-9, 1e-10, 1e-11, 1e-12)  # candidate clock periods, coarsest first
EXACT_TOL = 1e-6  # a duration within this many ticks of a whole number is whole
INF = 1 << 62

Move = tuple[tuple[int, ...], int, int]  # (chunks, link index, start tick): one transfer


@dataclass(frozen=True)
class LinkGrid:
    """Durations in ticks of every (chunk size, link), who may relay, and the clock period."""

    topology: Topology
    collective: Collective
    tick: float
    exact: bool
    alpha: tuple[int, ...]  # per link: α in ticks
    wire: dict[tuple[int, int], int]  # (chunk size, link) -> size / bandwidth in ticks
    relays: frozenset[int] | None  # NPUs that may store and forward (None: any)

    @classmethod
    def of(cls, topology: Topology, collective: Collective,
           relays: frozenset[int] | None = None) -> LinkGrid:
        """The grid for ``collective`` on ``topology`` (see the module docstring)."""
        sizes = sorted({c.size for c in collective.chunks})
        alphas = [lk.alpha for lk in topology.links]
        wires = {(s, li): s / lk.bandwidth for s in sizes for li, lk in enumerate(topology.links)}
        tick, exact = choose_tick([*alphas, *wires.values()])
        alpha = tuple(_ticks(a, tick, exact) for a in alphas)
        wire = {k: max(1, _ticks(v, tick, exact)) for k, v in wires.items()}
        return cls(topology, collective, tick, exact, alpha, wire, relays)

    def w(self, chunk: int, link: int) -> int:
        """Ticks chunk ``chunk``'s bytes take on link ``link`` (without α)."""
        return self.wire[(self.collective.chunks[chunk].size, link)]

    def d(self, chunk: int, link: int) -> int:
        """Ticks a send of chunk ``chunk`` alone holds link ``link`` (α included)."""
        return self.alpha[link] + self.w(chunk, link)

    def batch(self, chunks: Sequence[int], link: int) -> int:
        """Ticks one transfer of ``chunks`` holds ``link`` (α paid once)."""
        return self.alpha[link] + sum(self.w(c, link) for c in chunks)

    def seconds(self, chunks: Sequence[int], link: int) -> float:
        """Exact α-β seconds of one transfer of ``chunks`` over ``link``."""
        lk = self.topology.links[link]
        return lk.alpha + sum(self.collective.chunks[c].size for c in chunks) / lk.bandwidth

    @property
    def bound_scale(self) -> float:
        """Factor that keeps a bound proven on the grid valid in continuous time.

        1 when the grid is exact; otherwise the smallest ratio of exact to rounded time of
        any α or wire time (scaling every duration scales the optimum by the same factor).
        """
        if self.exact:
            return 1.0
        ratios = [lk.alpha / (a * self.tick) for lk, a in zip(self.topology.links, self.alpha,
                                                             strict=True) if a]
        ratios += [s / self.topology.links[li].bandwidth / (t * self.tick)
                   for (s, li), t in self.wire.items()]
        return min(ratios, default=1.0)

    def can_relay(self, npu: int) -> bool:
        """Whether ``npu`` may hold a chunk it does not need and pass it on."""
        return self.relays is None or npu in self.relays

    def distances(self, chunk: int) -> list[int]:
        """Fewest ticks from the chunk's holders to every NPU, relaying only where allowed."""
        ch = self.collective.chunks[chunk]
        topo = self.topology
        dist = [INF] * topo.n_nodes
        heap = [(0, v) for v in ch.pre]
        for v in ch.pre:
            dist[v] = 0
        heapq.heapify(heap)
        while heap:
            t, u = heapq.heappop(heap)
            if t > dist[u] or (u not in ch.pre and not self.can_relay(u)):
                continue
            for li in topo.out_links[u]:
                v = topo.links[li].dst
                nt = t + self.d(chunk, li)
                if nt < dist[v]:
                    dist[v] = nt
                    heapq.heappush(heap, (nt, v))
        return dist

    def transfers(self, moves: Iterable[Move]) -> list[Transfer]:
        """Moves as :class:`Transfer` objects, each as long as its exact α-β time."""
        out = []
        for chunks, li, s in moves:
            lk = self.topology.links[li]
            start = s * self.tick
            out.append(Transfer(start, start + self.seconds(chunks, li), lk.src, lk.dst, (li,),
                                tuple(sorted(chunks))))
        return sorted(out)

    def makespan(self, moves: Iterable[Move]) -> int:
        """Ticks until the last of ``moves`` ends."""
        return max((s + self.batch(ch, li) for ch, li, s in moves), default=0)


def choose_tick(durations: Iterable[float]) -> tuple[float, bool]:
    """``(tick, exact)``: the coarsest period of :data:`TICKS` in which all ``durations`` are
    whole numbers, else the finest one (not exact)."""
    values = list(durations)
    for tick in TICKS:
        if all(abs(v / tick - round(v / tick)) <= EXACT_TOL for v in values):
            return tick, True
    return TICKS[-1], False


def _ticks(seconds: float, tick: float, exact: bool) -> int:
    q = seconds / tick
    return round(q) if exact else math.ceil(q - EXACT_TOL)


def replay_in_ticks(grid: LinkGrid, transfers: Sequence[Transfer], max_merge: int = 1
                    ) -> list[Move]:
    """``transfers`` (one-link routes) as moves on the grid, in their order (by start).

    A transfer keeps its chunks together when ``max_merge`` allows (else it becomes one move
    per chunk, in the order it lists them); a chunk an NPU already received (or holds from the
    start) is not sent to it again.  Every move starts as soon as its source holds all its
    chunks and a lane of its link is free after the moves before it on that link, so the
    result is a valid schedule on the grid whatever rounding the grid did.
    """
    topo, coll = grid.topology, grid.collective
    order: list[tuple[tuple[int, ...], int]] = []
    for t in sorted(transfers, key=lambda t: (t.start, t.end)):
        if len(t.route) != 1:
            raise ValueError("replay_in_ticks takes one-link routes only")
        cs = tuple(t.chunks)
        parts = [cs[i:i + max_merge] for i in range(0, len(cs), max(1, max_merge))]
        order.extend((part, t.route[0]) for part in parts)
    have: dict[tuple[int, int], int] = {}
    for ch in coll.chunks:
        for v in ch.pre:
            have[(ch.id, v)] = 0
    lanes: dict[int, list[int]] = {}
    moves: list[Move] = []
    pending = order
    while pending:  # moves whose source gets a chunk later wait for the next round
        waiting = []
        progressed = False
        for chunks, li in pending:
            lk = topo.links[li]
            todo = tuple(c for c in chunks if (c, lk.dst) not in have)
            if not todo:
                progressed = True
                continue
            ready = [have.get((c, lk.src)) for c in todo]
            if None in ready:
                waiting.append((chunks, li))
                continue
            free = lanes.setdefault(li, [0] * lk.multiplicity)
            lane = min(range(len(free)), key=free.__getitem__)
            start = max(max(ready), free[lane])
            end = start + grid.batch(todo, li)
            free[lane] = end
            for c in todo:
                have[(c, lk.dst)] = end
            moves.append((todo, li, start))
            progressed = True
        if not progressed:
            break  # the rest never reach their sources
        pending = waiting
    return sorted(moves)


def prune_dead_ends(grid: LinkGrid, moves: Iterable[Move]) -> list[Move]:
    """Drop chunks sent to NPUs that do not need them and pass them on to nobody
    (repeatedly); a move left with no chunk disappears.  Times are kept (the moves that
    remain only get shorter)."""
    coll, topo = grid.collective, grid.topology
    kept = [(tuple(ch), li, s) for ch, li, s in moves]
    while True:
        forwarded = {(c, topo.links[li].src) for ch, li, _ in kept for c in ch}
        out, changed = [], False
        for ch, li, s in kept:
            dst = topo.links[li].dst
            live = tuple(c for c in ch if dst in coll.chunks[c].post or (c, dst) in forwarded)
            changed |= len(live) != len(ch)
            if live:
                out.append((live, li, s))
        kept = out
        if not changed:
            return sorted(kept)
