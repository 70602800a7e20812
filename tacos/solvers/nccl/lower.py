"""Shared machinery of the NCCL-faithful baselines: refined collectives, channel interleaving,
in-switch groups in the baseline lowering, and picking NCCL's tunables per message size.

* NCCL splits a collective's buffer over **channels** and, inside a channel, into pipelined
  **chunks**.  A baseline that does the same returns a schedule of the user's collective
  *refined* to more chunks per NPU (:func:`refine`: same buffer, same layout, each chunk cut
  into equal consecutive pieces), as the ``forest`` solver does (``refines_chunks``).
* :class:`GroupLowering` is the baseline lowering (:mod:`tacos.solvers.lowering.program`) plus
  in-switch operations: :meth:`GroupLowering.multicast` and :meth:`GroupLowering.reduce` place
  one transfer group (``Transfer.group``) through a switch that declares the capability, every
  link of the group held once.
* NCCL's tuner picks the number of channels (and the chunk size) per message size; a baseline
  here builds its schedule for each candidate setting and keeps the fastest
  (:func:`best_of`), so the model is never handicapped by a setting NCCL would not use.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from tacos.errors import TacosError
from tacos.model import patterns
from tacos.model.collective import STANDARD_COLLECTIVES, Collective
from tacos.model.schedule import Schedule
from tacos.solvers.lowering.program import Lowering, Msg

#: most transfers a candidate schedule may have (bounds the pipelining depth tried)
MAX_TRANSFERS = 20_000


def refine(collective: Collective, factor: int) -> Collective:
    """``collective`` with every chunk cut into ``factor`` consecutive pieces (chunk ``j`` of an
    NPU becomes pieces ``j*factor .. j*factor+factor-1``).  Needs a standard collective."""
    check_standard(collective)
    if factor == 1:
        return collective
    return patterns.build(collective.kind, collective.group, size=collective.size,
                          chunks_per_npu=collective.chunks_per_npu * factor,
                          root=collective.root, name=collective.name)


def refine_allreduce(collective: Collective, pieces: int
                     ) -> tuple[Collective, list[tuple[int, ...]]]:
    """An all-reduce refined just enough to cut its buffer into ``pieces`` equal runs of whole
    chunks, and those runs in buffer order (all-reduce chunks belong to no member, so a run may
    span members' shards)."""
    check_standard(collective)
    total = collective.n_chunks
    factor = pieces // math.gcd(total, pieces)
    coll = refine(collective, factor)
    return coll, split(buffer_order(coll), pieces)


def buffer_order(collective: Collective) -> list[int]:
    """Chunk ids in buffer order."""
    return [c.id for c in sorted(collective.chunks, key=lambda c: c.index)]


def check_standard(collective: Collective, algorithm: str = "the NCCL baselines") -> None:
    """Raise a :class:`~tacos.errors.TacosError` unless ``collective`` has the layout of
    :func:`tacos.model.patterns.build` for its kind, group, chunks per NPU and root."""
    if collective.kind not in STANDARD_COLLECTIVES:
        raise TacosError(f"{algorithm} run standard collectives, not {collective.label()}",
                         hint="declare one standard collective (allgather, allreduce, ...)")
    g, k, root = collective.group, collective.chunks_per_npu, collective.root
    n = len(g)
    everyone = frozenset(g)
    kind = collective.kind
    count = {"broadcast": k, "reduce": k, "alltoall": n * n * k}.get(kind, n * k)
    ok = len(collective.chunks) == count
    sizes = {c.size for c in collective.chunks}
    ok = ok and len(sizes) == 1
    for i, c in enumerate(collective.chunks if ok else ()):
        one = (frozenset({g[(i // k) % n]}) if kind == "alltoall" else
               frozenset({g[i // k]}) if n * k == count and kind != "allreduce" else None)
        pre, post, red = {
            "allgather": (one, everyone, False),
            "reducescatter": (everyone, one, True),
            "allreduce": (everyone, everyone, True),
            "alltoall": (frozenset({g[i // (n * k)]}), one, False),
            "broadcast": (frozenset({root}), everyone, False),
            "reduce": (everyone, frozenset({root}), True),
            "scatter": (frozenset({root}), one, False),
            "gather": (one, frozenset({root}), False),
        }[kind]
        if (c.pre, c.post, c.reduce) != (pre, post, red):
            ok = False
            break
    if not ok:
        raise TacosError(f"{algorithm} need the standard layout of {collective.kind}",
                         hint="declare the collective with its standard name (no custom chunks)")


def member_chunks(collective: Collective) -> dict[int, list[int]]:
    """Member -> its chunk ids in buffer order: the chunks it sources (all-gather, broadcast
    root), ends with (reduce-scatter), or the shard it owns (all-reduce: consecutive
    ``chunks_per_npu`` chunks per member in group order)."""
    kind, k = collective.kind, collective.chunks_per_npu
    out: dict[int, list[int]] = {m: [] for m in collective.group}
    for i, c in enumerate(collective.chunks):
        if kind in ("allgather", "gather", "alltoall"):
            (m,) = tuple(c.pre)
        elif kind in ("reducescatter", "scatter"):
            (m,) = tuple(c.post)
        elif kind in ("broadcast", "reduce"):
            m = collective.root
        else:
            m = collective.group[min(i // k, len(collective.group) - 1)]
        out[m].append(c.id)
    return out


def split(ids: Sequence[int], parts: int) -> list[tuple[int, ...]]:
    """``ids`` cut into ``parts`` consecutive runs of equal length (len divisible by parts)."""
    n = len(ids) // parts
    return [tuple(ids[p * n:(p + 1) * n]) for p in range(parts)]


def interleave(programs: Sequence[Sequence[Sequence[Msg]]]) -> list[Msg]:
    """Programs given as lists of steps, merged step by step (channel 0's step 0, channel 1's
    step 0, ..., channel 0's step 1, ...) so that first-fit placement shares links fairly."""
    out: list[Msg] = []
    longest = max((len(p) for p in programs), default=0)
    for s in range(longest):
        for p in programs:
            if s < len(p):
                out.extend(p[s])
    return out


def steps_of(program: Sequence[Msg], width: int) -> list[list[Msg]]:
    """A flat ring program cut into steps of ``width`` messages."""
    return [list(program[i:i + width]) for i in range(0, len(program), width)]


class GroupLowering(Lowering):
    """:class:`~tacos.solvers.lowering.program.Lowering` with in-switch transfer groups."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._groups = 0

    def multicast(self, src: int, dsts: Iterable[int], chunks: tuple[int, ...],
                  switch: int) -> None:
        """One send of ``chunks`` from ``src`` into ``switch``, copied to every ``dsts``."""
        self._group("multicast", src, list(dsts), chunks, switch)

    def reduce(self, srcs: Iterable[int], dst: int, chunks: tuple[int, ...],
               switch: int) -> None:
        """Contributions of ``srcs`` combined in ``switch`` and sent to ``dst`` once."""
        self._group("reduce", dst, list(srcs), chunks, switch)

    def _group(self, kind: str, hub: int, peers: list[int], chunks: tuple[int, ...],
               switch: int) -> None:
        peers = [p for p in peers if p != hub]
        if not peers:
            return
        if len(peers) == 1:  # a group of one is a plain send
            a, b = (hub, peers[0]) if kind == "multicast" else (peers[0], hub)
            self.run([Msg(a, b, chunks)])
            return
        nbytes = sum(self.collective.chunks[c].size for c in chunks)
        members = []
        for p in peers:
            u, v = (hub, p) if kind == "multicast" else (p, hub)
            hop = next((h for h in self.graph.hops(u).get(v, ())
                        if any(self.topology.links[li].dst == switch for li in h.links)), None)
            if hop is None:
                raise TacosError(f"no route {self.topology.node_name(u)} -> "
                                 f"{self.topology.node_name(v)} through switch "
                                 f"{self.topology.node_name(switch)}")
            members.append((u, v, hop))
        links = tuple(dict.fromkeys(li for _, _, h in members for li in h.links))
        d = max(h.time(nbytes) for _, _, h in members)
        srcs = [hub] if kind == "multicast" else peers
        ready = max((self._avail.get((u, c), 0.0) for u in srcs for c in chunks), default=0.0)
        s = self.calendar.fit(links, ready, d)
        self.calendar.book(links, s, d)
        gid = self._groups
        self._groups += 1
        for u, v, h in members:
            self._rows.append([s, s + d, u, v, h.links, chunks, gid, kind])
        for v in ([hub] if kind == "reduce" else peers):
            for c in chunks:
                if self._avail.get((v, c), 0.0) < s + d:
                    self._avail[(v, c)] = s + d


@dataclass(frozen=True)
class Candidate:
    """One setting of a baseline's tunables and the schedule it gives."""

    setting: dict
    schedule: Schedule


def best_of(settings: Iterable[dict], build: Callable[[dict], Schedule]) -> Candidate:
    """Build the schedule for every setting and keep the fastest (ties: the first)."""
    best: Candidate | None = None
    for setting in settings:
        sched = build(setting)
        if best is None or sched.makespan < best.schedule.makespan * (1 - BEST_OF_RTOL):
            best = Candidate(dict(setting), sched)
    if best is None:
        raise TacosError("no setting to try")
    return best


#: relative tolerance of :func:`best_of`'s comparison (a setting must be faster by more)
BEST_OF_RTOL = 1e-12
#: relative rounding margin of :func:`egress_floor`
FLOOR_RTOL = 1e-9


def best_of_bounded(settings: Sequence[dict], build: Callable[[dict], Schedule],
                    floor: Callable[[dict], float]) -> Candidate:
    """:func:`best_of`'s answer, without building the settings whose ``floor`` (a lower bound
    on the makespan ``build`` gives them) shows they cannot be it.

    The last setting (the most channels: the likely winner) is built first, then the others
    by increasing floor; one whose floor is above the best makespan built so far over
    ``1 - BEST_OF_RTOL`` is not built.  Why the answer is :func:`best_of`'s: let ``m`` be
    the least makespan built and ``b`` the first setting with it.  When every other setting's
    makespan (built) or floor (not built) is above ``m / (1 - BEST_OF_RTOL)``, the scan of
    :func:`best_of` replaces whatever it holds by ``b`` when it reaches ``b`` (its makespan
    is below that one's times ``1 - BEST_OF_RTOL``), and nothing after ``b`` replaces it (it
    would have to be faster than ``m``): the scan returns ``b``.  Otherwise (near-ties) the
    settings not built are built and :func:`best_of` runs on all of them, so the answer is
    always the scan's."""
    settings = list(settings)
    if len(settings) < 2:
        return best_of(settings, build)
    built: dict[int, Schedule] = {}
    floors: dict[int, float] = {}
    last = len(settings) - 1
    built[last] = build(settings[last])
    rest = [(floor(settings[i]), i) for i in range(last)]
    for lb, i in sorted(rest):
        best = min(sch.makespan for sch in built.values())
        if lb > best / (1 - BEST_OF_RTOL):
            floors[i] = lb
            continue
        built[i] = build(settings[i])
    m = min(sch.makespan for sch in built.values())
    b = min(i for i, sch in built.items() if sch.makespan == m)
    apart = m / (1 - BEST_OF_RTOL)
    if all(sch.makespan > apart for i, sch in built.items() if i != b) and \
            all(lb > apart for lb in floors.values()):
        return Candidate(dict(settings[b]), built[b])
    done = {id(settings[i]): sch for i, sch in built.items()}

    def again(setting: dict) -> Schedule:
        got = done.get(id(setting))
        return got if got is not None else build(setting)

    return best_of(settings, again)


def egress_floor(graph, topology, collective: Collective, program: Iterable[Msg]) -> float:
    """A lower bound on the makespan of ``program`` as :class:`Lowering` times it: every
    message's first hop holds a lane of a link out of its source for at least the fastest
    candidate hop's time (α + bytes / bandwidth; parts sent one by one only add α's), and the
    links those hops can start on have so many lanes, so the last of the source's first hops
    ends no earlier than their total time over those lanes.  0 when a route is missing.
    The figure is lowered by :data:`FLOOR_RTOL` of itself: the lowering adds the same times
    in another order, and a schedule bound only by its sources' egress (a ring on a torus)
    ends exactly there, up to rounding."""
    sizes = collective.chunks
    load: dict[int, float] = {}
    firsts: dict[int, set[int]] = {}
    for msg in program:
        if msg.src == msg.dst or not msg.chunks:
            continue
        route = graph.route(msg.src, msg.dst)
        if route is None or len(route) < 2:
            return 0.0
        a = route[0]
        hops = graph.hops(a).get(route[1], ())
        if not hops or any(not h.links or topology.links[h.links[0]].src != a for h in hops):
            return 0.0
        nbytes = sum(sizes[c].size for c in msg.chunks)
        load[a] = load.get(a, 0.0) + min(h.time(nbytes) for h in hops)
        firsts.setdefault(a, set()).update(h.links[0] for h in hops)
    return (1 - FLOOR_RTOL) * max((total / sum(topology.links[li].multiplicity
                                               for li in firsts[a])
                                   for a, total in load.items()), default=0.0)


def pipeline_depths(nbytes: float, depth: int, hop: tuple[float, float], cap: int
                    ) -> list[int]:
    """Pipeline depths to try for ``nbytes`` through a pipeline ``depth`` hops deep whose
    slowest hop costs ``alpha + bytes / bandwidth`` (``hop``): the power of two nearest the
    α-β optimum ``sqrt((depth - 1) · nbytes / (bandwidth · alpha))`` and its neighbours, within
    ``1 .. cap``."""
    alpha, bw = hop
    if alpha <= 0 or depth <= 1:
        best = cap
    else:
        best = math.sqrt(max(0.0, depth - 1) * nbytes / (bw * alpha))
    p = 1 << max(0, round(math.log2(max(1.0, best))))
    return sorted({max(1, min(cap, x)) for x in (1, p // 2, p, p * 2)})


def powers_of_two(limit: int, start: int = 1) -> list[int]:
    """``start, 2·start, 4·start, ...`` up to ``limit`` (``limit`` itself included)."""
    out = []
    x = max(1, start)
    while x < limit:
        out.append(x)
        x *= 2
    out.append(max(1, limit))
    return sorted(set(out))
