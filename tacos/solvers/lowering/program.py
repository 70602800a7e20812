"""Lower a baseline's logical program onto the physical topology and time it.

A *program* is an ordered list of :class:`Msg` (``src -> dst`` carrying some chunks as one
transfer, paying α once per hop).  The order is a dependency order: a message may only forward
chunks that reached its sender through earlier messages (or that the sender starts with).

Lowering does three things:

1. **Routing** (:mod:`tacos.solvers.lowering.hops`): a message between NPUs without a hop
   becomes a chain of hops, store-and-forward at the relay NPUs; a hop through switches is
   cut-through and holds every physical link of its route (:mod:`tacos.model.routes`).
2. **Timing**: messages are placed in program order, each hop at the earliest time its data is
   there and every physical link it needs has a free parallel link for the whole transfer
   (first fit, so later messages may fill earlier gaps).  Congestion is therefore counted.
   Among a hop's candidate routes (ECMP in a multi-switch fabric) the one that finishes first
   is taken, and among those the least loaded (the least time already booked on its busiest
   link per lane), so simultaneous messages spread over the spines.
3. **Reduction semantics**: for reduction chunks the ``op`` of every transfer is derived by
   replaying the timed transfers with symbolic contribution sets: an arriving partial value is
   reduced into a receiver that still holds unsent contributions and copied over one whose
   value has already been sent on (or is complete).  A relay that has already forwarded its
   merged value has nothing new to send; such a send is dropped, so messages of the same chunk
   that meet at a relay are combined there (in-network aggregation).  Where every logical send
   is one hop (a baseline on its home topology) nothing is dropped and the textbook algorithm
   is reproduced exactly.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from operator import itemgetter

from tacos.errors import InfeasibleError, ToolFailure
from tacos.model.collective import Collective
from tacos.model.routes import Route
from tacos.model.schedule import Schedule, Transfer
from tacos.model.topology import Topology
from tacos.solvers.lowering.hops import NpuGraph

EPS = 1e-13
COPIES_AT_ONCE = True
"""Rows without reduction chunks or in-switch groups all get their copy op at once (what
replaying them gives), without the replay."""


@dataclass(frozen=True)
class Msg:
    """A logical send of ``chunks`` (chunk ids) from NPU ``src`` to NPU ``dst``.

    ``parts`` optionally splits ``chunks`` into groups that have travelled together so far
    (e.g. the blocks merged by recursive halving).  A multi-hop message with reduction chunks
    is sent part by part, because relays may hold the parts in different states.
    """

    src: int
    dst: int
    chunks: tuple[int, ...]
    parts: tuple[tuple[int, ...], ...] | None = None


class _Server:
    """Busy intervals of one physical link, merged when they touch."""

    __slots__ = ("starts", "ends")

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []

    def earliest(self, t: float, d: float) -> float:
        i = bisect_right(self.ends, t)
        cand = t
        starts, ends = self.starts, self.ends
        while i < len(starts):
            if starts[i] >= cand + d - EPS * (cand + d):
                return cand
            cand = max(cand, ends[i])
            i += 1
        return cand

    def book(self, s: float, e: float) -> None:
        starts, ends = self.starts, self.ends
        i = bisect_left(starts, s)
        tol = EPS * e
        if i > 0 and ends[i - 1] >= s - tol:
            i -= 1
            s = starts[i]
            e = max(e, ends[i])
            del starts[i], ends[i]
        while i < len(starts) and starts[i] <= e + tol:
            e = max(e, ends[i])
            del starts[i], ends[i]
        starts.insert(i, s)
        ends.insert(i, e)


class _Resource:
    """A physical link: ``multiplicity`` servers."""

    __slots__ = ("servers", "busy")

    def __init__(self, multiplicity: int) -> None:
        self.servers = [_Server() for _ in range(max(1, multiplicity))]
        self.busy = 0.0  # time booked, per lane

    def earliest(self, t: float, d: float) -> float:
        if len(self.servers) == 1:
            return self.servers[0].earliest(t, d)
        return min(s.earliest(t, d) for s in self.servers)

    def book(self, s: float, d: float) -> None:
        self.busy += d / len(self.servers)
        for srv in self.servers:
            if srv.earliest(s, d) <= s:
                srv.book(s, s + d)
                return
        self.servers[0].book(s, s + d)  # unreachable when called after a successful fit


class LinkCalendar:
    """The lanes of a topology's physical links and when each is busy: first-fit booking of
    transfers that hold every link of their route (shared by the baselines' lowering and
    :class:`tacos.reshard.timeline.Timeline`)."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self._res: dict[int, _Resource] = {}

    def lanes(self, li: int) -> _Resource:
        """The lanes of physical link ``li``."""
        res = self._res.get(li)
        if res is None:
            res = self._res[li] = _Resource(self.topology.links[li].multiplicity)
        return res

    def fit(self, links: tuple[int, ...], ready: float, d: float) -> float:
        """Earliest start ≥ ``ready`` at which every link of ``links`` has a lane free for
        ``d`` seconds."""
        if len(links) == 1:
            return self.lanes(links[0]).earliest(ready, d)
        t = ready
        while True:
            nxt = max(self.lanes(li).earliest(t, d) for li in links)
            if nxt <= t:
                return t
            t = nxt

    def book(self, links: tuple[int, ...], start: float, d: float) -> None:
        """Hold a lane of every link of ``links`` during ``[start, start + d]``."""
        for li in links:
            self.lanes(li).book(start, d)


class Lowering:
    """Turns programs into a timed, verified-shape :class:`~tacos.model.schedule.Schedule`."""

    def __init__(self, topology: Topology, collective: Collective,
                 graph: NpuGraph | None = None) -> None:
        self.topology = topology
        self.collective = collective
        self.graph = graph or NpuGraph(topology)
        self.calendar = LinkCalendar(topology)
        self._avail: dict[tuple[int, int], float] = {}
        self._rows: list[list] = []  # [start, end, src, dst, link, chunks]

    # -- timing ----------------------------------------------------------------------------
    def run(self, program: Iterable[Msg]) -> None:
        """Route and time every message of ``program`` in order.

        When some multi-part reduction message needs relays, every multi-part reduction
        message is sent part by part (relays leave the parts in different states, and a
        transfer has a single op).
        """
        chunks = self.collective.chunks
        routed = []
        known: dict[tuple[int, int], list[int] | None] = {}  # the graph's routes are fixed
        for msg in program:
            if msg.src == msg.dst or not msg.chunks:
                continue
            key = (msg.src, msg.dst)
            if key in known:
                route = known[key]
            else:
                route = known[key] = self.graph.route(msg.src, msg.dst)
            if route is None:
                raise InfeasibleError(
                    f"NPU {self.topology.node_name(msg.dst)} cannot be reached from NPU "
                    f"{self.topology.node_name(msg.src)}",
                    hint="the baseline needs a path between every pair of NPUs it uses")
            multi = bool(msg.parts and len(msg.parts) > 1
                         and any(chunks[c].reduce for c in msg.chunks))
            routed.append((msg, route, multi))
        split = any(multi and len(route) > 2 for _, route, multi in routed)
        sends = [(route, part) for msg, route, multi in routed
                 for part in ((msg.parts or ()) if split and multi else (msg.chunks,))]
        from tacos.solvers.lowering import place_jit

        own = type(self)._send is Lowering._send and type(self)._place is Lowering._place
        if own and place_jit.usable(self, sends):  # large programs: the same loop, compiled
            place_jit.place_compiled(self, sends)
            return
        for route, chunks in sends:
            self._send(route, chunks)

    def _send(self, route: list[int], chunks: tuple[int, ...]) -> None:
        sizes = self.collective.chunks
        avail = self._avail
        nbytes = sum(sizes[c].size for c in chunks)
        ready = max((avail.get((route[0], c), 0.0) for c in chunks), default=0.0)
        for a, b in zip(route, route[1:], strict=False):
            ready = self._place(a, b, nbytes, ready, chunks)
        for c in chunks:
            key = (route[-1], c)
            if avail.get(key, 0.0) < ready:
                avail[key] = ready

    def _place(self, a: int, b: int, nbytes: float, ready: float,
               chunks: tuple[int, ...]) -> float:
        best: tuple[float, float, float, Route] | None = None
        for hop in self.graph.hops(a)[b]:
            d = hop.time(nbytes)
            s = self.calendar.fit(hop.links, ready, d)
            load = max(self.calendar.lanes(li).busy for li in hop.links)
            if best is None or s + d < best[0] + best[1] - EPS * (s + d) or (
                    s + d <= best[0] + best[1] + EPS * (s + d) and load < best[2]):
                best = (s, d, load, hop)
        assert best is not None
        s, d, _, hop = best
        self.calendar.book(hop.links, s, d)
        self._rows.append([s, s + d, a, b, hop.links, chunks])
        return s + d

    # -- result ----------------------------------------------------------------------------
    def schedule(self, meta: dict) -> Schedule:
        """Assign copy/reduce ops and build the schedule on the physical topology (each
        transfer on the physical route of its hop)."""
        rows = self._assign_ops()
        topo = self.topology
        rows.sort(key=itemgetter(0, 1, 2, 3, 4, 5, 6))
        transfers = tuple(Transfer(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7])
                          for r in rows)
        return Schedule(topo, self.collective, transfers, dict(meta))

    def _assign_ops(self) -> list[list]:
        coll = self.collective
        rows = self._rows
        if COPIES_AT_ONCE and all(len(r) == 6 for r in rows) \
                and not any(c.reduce for c in coll.chunks):
            # copies only, no in-switch groups: what the replay below gives every row
            return [[r[0], r[1], r[2], r[3], r[4], tuple(r[5]), "copy", None] for r in rows]
        by_chunk: dict[int, list[int]] = defaultdict(list)
        for i, r in enumerate(rows):
            for c in r[5]:
                if coll.chunks[c].reduce:
                    by_chunk[c].append(i)
        tol = 1e-12 * max((r[1] for r in rows), default=0.0)
        decision = _decisions(coll, rows, by_chunk, tol)
        out = []
        for i, r in enumerate(rows):
            kept, ops = [], set()
            for c in r[5]:
                op = decision.get((i, c), "copy")
                if op == "drop":
                    continue
                kept.append(c)
                if op != "either":
                    ops.add(op)
            if not kept:
                continue
            group = r[6] if len(r) > 6 else None  # in-switch group id (nccl_lower)
            if len(ops) > 1 or (group is not None and len(kept) != len(r[5])):
                raise ToolFailure(
                    f"baseline lowering mixed copy and reduce in one transfer {r[2]}->{r[3]}",
                    hint="please report this with the topology and collective")
            reduce = "reduce" in ops or (group is not None and len(r) > 7 and r[7] == "reduce")
            out.append([r[0], r[1], r[2], r[3], r[4], tuple(kept),
                        "reduce" if reduce else "copy", group])
        return out


def _decisions(coll: Collective, rows: list[list], by_chunk: dict[int, list[int]], tol: float
               ) -> dict[tuple[int, int], str]:
    """:func:`_replay` of every reduction chunk of ``by_chunk`` (chunk -> the rows carrying
    it), as ``(row, chunk) -> op``.  A replay reads only the chunk's contributors and its rows
    (the chunk id only names it), so chunks that travel together -- the pieces of a pipelined
    tree or ring -- are replayed once per contributors and rows, in the order of their first
    chunk (an error names the same chunk as replaying each would).  A row and chunk without
    an entry is a copy."""
    groups: dict[tuple[frozenset[int], tuple[int, ...]], list[int]] = {}
    for c, idxs in by_chunk.items():
        groups.setdefault((coll.chunks[c].pre, tuple(idxs)), []).append(c)
    decision: dict[tuple[int, int], str] = {}
    for (pre, idxs), chunks in groups.items():
        got = _replay(pre, chunks[0], rows, list(idxs), tol)
        kept = [(i, op) for (i, _), op in got.items() if op != "copy"]  # "copy": the default
        for c in chunks:
            for i, op in kept:
                decision[(i, c)] = op
    return decision


def _replay(pre: frozenset[int], c: int, rows: list[list], idxs: list[int],
            tol: float) -> dict[tuple[int, int], str]:
    """Decide, for one reduction chunk, each transfer's op (or drop) by replaying in time.

    Events are ordered as :func:`tacos.check.verify.verify_schedule` orders them (arrivals within
    ``tol`` before sends; ties by start time, then the transfer's sort order), so both see
    simultaneous arrivals in the same order.
    """
    bit = {v: 1 << k for k, v in enumerate(sorted(pre))}
    complete = (1 << len(bit)) - 1
    value: dict[int, int] = dict(bit)
    spent: dict[int, bool] = {}
    def key(i: int) -> tuple:
        r = rows[i]
        return (r[0], r[1], r[2], r[3], r[4], tuple(r[5]))

    events = sorted([(rows[i][0], 1, rows[i][0], key(i), i) for i in idxs]
                    + [(rows[i][1] - tol, 0, rows[i][0], key(i), i) for i in idxs])
    carried: dict[int, int] = {}
    out: dict[tuple[int, int], str] = {}
    for _, kind, _, _, i in events:
        src, dst = rows[i][2], rows[i][3]
        if kind == 1:
            cur = value.get(src)
            if cur is None or (cur != complete and spent.get(src)):
                out[(i, c)] = "drop"
                continue
            carried[i] = cur
            if cur != complete:
                spent[src] = True
            continue
        inc = carried.get(i)
        if inc is None:
            continue
        cur = value.get(dst)
        if inc == complete:
            op = "copy"
            value[dst] = inc
        elif cur is None:
            op = "either"
            value[dst] = inc
        elif cur == complete or (not spent.get(dst) and cur & inc):
            raise ToolFailure(
                f"baseline lowering would count a contribution to chunk {c} twice at NPU {dst}",
                hint="please report this with the topology and collective")
        elif spent.get(dst):
            op = "copy"
            value[dst] = inc
        else:
            op = "reduce"
            value[dst] = cur | inc
        spent[dst] = False
        out[(i, c)] = op
    return out
