"""Buffer locations and runs of a schedule in MSCCL terms, on top of the global event order of
:mod:`tacos.msccl.lower_order`.

Each version of a chunk is placed in the rank's output slot when the rank needs the chunk at
the end (unless an in-place alias still holds another chunk that will be read later; then in
scratch, copied into place after that read), and in a scratch slot when the chunk only passes
through.  Every ordering edge the later stages add (program order, dependencies, FIFO slots)
points forward in the global order, which is what makes the lowered program deadlock-free.

A transfer whose chunks are not contiguous on both sides becomes several *runs* (one MSCCL
step pair each).  Run ``k >= 1`` of a transfer is sent right after run ``k-1`` is received, so a
capacity-1 FIFO never blocks the sender on data the order has not produced yet.  Final ``cpy``
steps move values that did not land in their output slot (out-of-place local shares, in-place
alltoall slots that were busy).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from tacos.errors import TacosError
from tacos.model.schedule import Schedule
from tacos.msccl.lower_layout import Layout, Loc
from tacos.msccl.lower_order import Version, lanes, order_transfers, replay_versions
from tacos.msccl.program import MAX_COUNT

TIME_RTOL = 1e-12


def time_tol(schedule: Schedule) -> float:
    """The time tolerance of a schedule's lowering: :data:`TIME_RTOL` of its latest end."""
    return TIME_RTOL * max((abs(t.end) for t in schedule.transfers), default=0.0)

SEND, PREV, CPY = 0, 1, 2  #: kinds of the reader references in :attr:`Flow.readers`
Key = tuple[int, int, int, int, int]


@dataclass(slots=True)
class Run:
    """Contiguous chunks of one transfer piece: one sending step and one receiving step.

    ``conn`` is ``(src, dst, piece, lane)``, the FIFO lane the run travels on (before
    channels); ``cnt`` the number of MSCCL chunks it moves."""

    id: int
    transfer: int
    piece: int
    part: int
    src: int
    dst: int
    lane: int
    chunks: tuple[int, ...]
    reads: tuple[int, ...]
    creates: tuple[int, ...]
    prevs: tuple[int, ...] | None
    sloc: Loc
    rsrc: Loc | None
    rdst: Loc
    conn: tuple[int, int, int, int]
    cnt: int
    send_key: Key = (0, 0, 0, 0, 0)
    recv_key: Key = (0, 0, 0, 0, 0)
    send_pos: int = 0
    recv_pos: int = 0
    conn_index: int = 0


@dataclass(slots=True)
class Copy:
    """A local ``cpy`` that moves a final value into its output slot."""

    id: int
    rank: int
    src: Loc
    dst: Loc
    cnt: int
    reads: tuple[tuple[int, int], ...]
    key: Key = (0, 0, 0, 0, 0)
    pos: int = 0


@dataclass
class Flow:
    """Everything the thread-block assignment needs, independent of channels.

    ``readers[vid * pieces + piece]`` (:meth:`vp`) are the events that read a version's piece,
    as ``3 * id + kind``: kind :data:`SEND` (run ``id`` sends it), :data:`PREV` (run ``id``
    reduces into it) or :data:`CPY` (copy ``id`` moves it)."""

    layout: Layout
    runs: list[Run]
    copies: list[Copy]
    order: list[tuple[str, int]]
    readers: dict[int, list[int]]
    final: frozenset[int]
    cache: dict = field(default_factory=dict, repr=False)  # facts the rounds share

    def vp(self, vid: int, piece: int) -> int:
        """The index of version ``vid``'s piece ``piece`` in ``loc`` and ``readers``."""
        return vid * self.layout.instances + piece

    def rank_events(self) -> dict[int, list[tuple[str, int]]]:
        """Per rank, its events (``send``/``recv``/``cpy``) in global order."""
        out: dict[int, list[tuple[str, int]]] = defaultdict(list)
        for kind, idx in self.order:
            if kind == "cpy":
                out[self.copies[idx].rank].append((kind, idx))
            elif kind == "send":
                out[self.runs[idx].src].append((kind, idx))
            else:
                out[self.runs[idx].dst].append((kind, idx))
        return out


def _split(entries: list[tuple], limit: int = MAX_COUNT) -> list[list[tuple]]:
    """Split entries ``(chunk, sloc, rsrc, rdst)`` (sorted) into contiguous runs."""
    if len(entries) == 1:
        return [entries]

    def nxt(a: Loc | None, b: Loc | None) -> bool:
        if a is None or b is None:
            return a is None and b is None
        return a[0] == b[0] and b[1] == a[1] + 1

    runs: list[list[tuple]] = []
    for e in entries:
        if runs:
            last = runs[-1][-1]
            if (len(runs[-1]) < limit and nxt(last[1], e[1]) and nxt(last[2], e[2])
                    and nxt(last[3], e[3])):
                runs[-1].append(e)
                continue
        runs.append([e])
    return runs


#: The event order of the last few schedules lowered (by identity, with the layout facts it
#: depends on): the instance count, channels and thread blocks do not change it, so the
#: shapes a search lowers one schedule into share it.  Nothing downstream mutates it.
_ORDERED: dict[int, tuple[Schedule, tuple, tuple]] = {}
_ORDERED_MAX = 4


def _ordered(schedule: Schedule, layout: Layout, tol: float) -> tuple:
    """``(lane, versions, read, created, cur, pos_s, pos_r)`` of :func:`lanes`,
    :func:`replay_versions` and :func:`order_transfers`, remembered per schedule."""
    key = (len(schedule.transfers), tol, layout.ngpus, tuple(layout.ranks.items()),
           layout.pre)
    got = _ORDERED.get(id(schedule))
    if got is not None and got[0] is schedule and got[1] == key:
        return got[2]
    lane, prev_on_lane = lanes(schedule, tol)
    versions, read, created, cur = replay_versions(schedule, layout, tol)
    pos_s, pos_r = order_transfers(schedule, versions, prev_on_lane, tol)
    out = (lane, versions, read, created, cur, pos_s, pos_r)
    if len(_ORDERED) >= _ORDERED_MAX:
        _ORDERED.pop(next(iter(_ORDERED)))
    _ORDERED[id(schedule)] = (schedule, key, out)
    return out


#: Flows of the last few schedules lowered (by identity), per layout and run size: the shapes a
#: search lowers one schedule into with the same instance count (paired peers or not, port
#: order or not, any protocol) share one flow.  The later stages only read a flow (its
#: ``cache`` memoizes pure functions of it), so sharing cannot change a program.  Flows are
#: kept while their runs total at most :data:`_FLOWS_MAX_RUNS` (large plans are not kept).
_FLOWS: dict[int, tuple[Schedule, dict[tuple, Flow]]] = {}
_FLOWS_MAX_RUNS = 200_000


def kept_flow(schedule: Schedule, layout: Layout, max_count: int = MAX_COUNT) -> Flow | None:
    """The flow :func:`shared_flow` keeps for these arguments, if any (nothing is built)."""
    got = _FLOWS.get(id(schedule))
    if got is None or got[0] is not schedule:
        return None
    return got[1].get((len(schedule.transfers), layout, max_count))


def shared_flow(schedule: Schedule, layout: Layout, max_count: int = MAX_COUNT) -> Flow:
    """:func:`build_flow`, remembered for the schedule (by identity) while the kept flows are
    small (see :data:`_FLOWS`)."""
    key = (len(schedule.transfers), layout, max_count)
    got = _FLOWS.get(id(schedule))
    if got is not None and got[0] is schedule:
        flow = got[1].get(key)
        if flow is not None:
            return flow
    flow = build_flow(schedule, layout, max_count)
    if len(flow.runs) > _FLOWS_MAX_RUNS:
        return flow
    if got is None or got[0] is not schedule:
        got = (schedule, {})
    kept = got[1]
    kept[key] = flow
    _FLOWS.pop(id(schedule), None)
    _FLOWS[id(schedule)] = got  # most recent last
    total = sum(len(f.runs) for _, flows in _FLOWS.values() for f in flows.values())
    while total > _FLOWS_MAX_RUNS:
        sid = next(iter(_FLOWS))
        sched, flows = _FLOWS[sid]
        old = next(iter(flows))
        total -= len(flows.pop(old).runs)
        if not flows:
            del _FLOWS[sid]
    return flow


def build_flow(schedule: Schedule, layout: Layout, max_count: int = MAX_COUNT) -> Flow:
    """Order, version, place and split the schedule's transfers (see the module docstring);
    no run moves more than ``max_count`` chunks."""
    ts = schedule.transfers
    members = set(layout.group)
    for i, t in enumerate(ts):
        for end in (t.src, t.dst):
            if end not in members:
                raise TacosError(f"transfer {i} passes through NPU {end}, which is not a rank of "
                                 f"the {layout.coll} group; MSCCL can only use the ranks of "
                                 "the communicator")
    tol = time_tol(schedule)
    lane, versions, read, created, cur, pos_s, pos_r = _ordered(schedule, layout, tol)
    pieces = layout.instances
    ngpus = layout.ngpus
    post = layout.post
    ranks = layout.ranks
    nv = len(versions)
    uses = [-2] * nv  # last position a version is read at (-2: not computed yet)

    def last_use(vid: int) -> int:
        u = uses[vid]
        if u == -2:
            u = uses[vid] = max((pos_r[n >> 1] for n in versions[vid].readers), default=-1)
        return u

    interned: dict[Loc, Loc] = {}  # one tuple per location, shared by every rank and version

    # where each chunk piece ends: one tuple per (chunk, piece) unless in-place aliasing makes
    # it depend on the rank (reducescatter and scatter)
    same_everywhere = not layout.inplace or layout.coll not in ("reducescatter", "scatter")
    out_table = ([interned.setdefault(w, w) for c in range(len(post)) for p in range(pieces)
                  for w in (layout.output_loc(0, c, p),)] if same_everywhere else [])

    def out_loc(rank: int, chunk: int, piece: int) -> Loc:
        if same_everywhere:
            return out_table[chunk * pieces + piece]
        want = layout.output_loc(rank, chunk, piece)
        return interned.setdefault(want, want)

    loc: list[Loc | None] = [None] * (nv * pieces)
    hist: dict[tuple[int, Loc], list[int]] = defaultdict(list)
    occ: dict[tuple[int, Loc], int] = {}
    scratch: dict[tuple[int, int, int], Loc] = {}
    nscratch = [0] * ngpus
    for x in versions:
        if x.creator is None:
            for p in range(pieces):
                where = layout.input_loc(x.rank, x.chunk, p)
                where = interned.setdefault(where, where)
                loc[x.id * pieces + p] = where
                occ[(x.rank, where)] = x.id
                hist[(x.rank, where)].append(x.id)

    runs: list[Run] = []
    for i in sorted(range(len(ts)), key=pos_r.__getitem__):
        t = ts[i]
        u, v = ranks[t.src], ranks[t.dst]
        ri, ci, pr, ps, ln = read[i], created[i], pos_r[i], pos_s[i], lane[i]
        for p in range(pieces):
            if len(t.chunks) == 1:
                order = t.chunks
            else:
                order = [c for _, c in sorted((loc[ri[c] * pieces + p], c) for c in t.chunks)]
            entries = []
            for c in order:
                x = versions[ci[c]]
                xid = x.id
                target = None
                if v in post[c]:
                    want = out_table[c * pieces + p] if same_everywhere else out_loc(v, c, p)
                    at = (v, want)
                    o = occ.get(at)
                    if o is None or versions[o].chunk == c or last_use(o) <= pr:
                        target = want
                        occ[at] = xid
                        hist[at].append(xid)
                if target is None:
                    target = scratch.get((v, c, p))
                    if target is None:
                        target = ("s", nscratch[v])
                        target = scratch[(v, c, p)] = interned.setdefault(target, target)
                        nscratch[v] += 1
                    hist[(v, target)].append(xid)
                loc[xid * pieces + p] = target
                prev = x.prev
                entries.append((c, loc[ri[c] * pieces + p],
                                None if prev is None else loc[prev * pieces + p], target))
            conn = (u, v, p, ln)
            if len(entries) == 1:  # one chunk: one run (what _split gives, without it)
                c, sl, rsrc, target = entries[0]
                vid = ci[c]
                runs.append(Run(len(runs), i, p, 0, u, v, ln, (c,), (ri[c],), (vid,),
                                None if rsrc is None else (versions[vid].prev,), sl, rsrc,
                                target, conn, 1, (ps, 0, p, 0, 0), (pr, 0, p, 0, 0)))
                continue
            for part, group in enumerate(_split(entries, max_count)):
                if len(group) == 1:  # one chunk (the common case): the fields below, directly
                    c, sl, rsrc, target = group[0]
                    vid = ci[c]
                    runs.append(Run(len(runs), i, p, part, u, v, ln, (c,), (ri[c],), (vid,),
                                    None if rsrc is None else (versions[vid].prev,), sl, rsrc,
                                    target, conn, 1,
                                    (ps, 0, p, 0, 0) if part == 0
                                    else (pr, 0, p, 2 * part - 1, 0), (pr, 0, p, 2 * part, 0)))
                    continue
                cs = tuple(e[0] for e in group)
                creates = tuple(ci[c] for c in cs)
                prevs = tuple(versions[vid].prev for vid in creates)
                runs.append(Run(len(runs), i, p, part, u, v, ln, cs, tuple(ri[c] for c in cs),
                                creates, None if group[0][2] is None else prevs,
                                group[0][1], group[0][2], group[0][3], conn, len(cs),
                                (ps, 0, p, 0, 0) if part == 0
                                else (pr, 0, p, 2 * part - 1, 0), (pr, 0, p, 2 * part, 0)))
    del occ, scratch
    interned.clear()
    uses.clear()

    readers: dict[int, list[int]] = defaultdict(list)
    made_by = [-1] * (nv * pieces)
    for run in runs:
        p = run.piece
        for vid in run.reads:
            readers[vid * pieces + p].append(3 * run.id + SEND)
        for vid in run.prevs or ():
            readers[vid * pieces + p].append(3 * run.id + PREV)
        for vid in run.creates:
            made_by[vid * pieces + p] = run.id
    check_later_parts(runs, versions, made_by, pieces)

    copies = _final_copies(layout, versions, cur, loc, hist, runs, readers, made_by)
    del hist, made_by
    for cp in copies:
        for vid, p in cp.reads:
            readers[vid * pieces + p].append(3 * cp.id + CPY)
    keyed: list[tuple[Key, str, int]] = []
    for run in runs:
        keyed.append((run.send_key, "send", run.id))
        keyed.append((run.recv_key, "recv", run.id))
    for cp in copies:
        keyed.append((cp.key, "cpy", cp.id))
    keyed.sort()
    order: list[tuple[str, int]] = []
    for n, (_, kind, idx) in enumerate(keyed):
        order.append((kind, idx))
        if kind == "send":
            runs[idx].send_pos = n
        elif kind == "recv":
            runs[idx].recv_pos = n
        else:
            copies[idx].pos = n
    del keyed
    sent: dict[tuple[int, int, int, int], int] = defaultdict(int)  # sends so far per lane
    for kind, idx in order:
        if kind == "send":
            run = runs[idx]
            run.conn_index = sent[run.conn]
            sent[run.conn] += 1
    nchunks = len(layout.post)
    final = frozenset(cur[r * nchunks + c] for c, ranks_c in enumerate(layout.post)
                      for r in ranks_c if cur[r * nchunks + c] >= 0)
    return Flow(layout, runs, copies, order, dict(readers), final)


def check_later_parts(runs: list[Run], versions: list[Version], made_by: list[int],
                      pieces: int) -> None:
    """Raise when a run after the first of its transfer sends a value its rank overwrites
    before that run leaves (``made_by[vid * pieces + p]``: the run creating version ``vid``'s
    piece ``p``)."""
    for run in runs:
        if run.part == 0:
            continue
        for vid in run.reads:
            nxt = versions[vid].next
            if (nxt is not None
                    and runs[made_by[nxt * pieces + run.piece]].recv_key < run.send_key):
                raise TacosError(
                    f"transfer {run.transfer} carries chunks that are not contiguous in the "
                    f"MSCCL buffers and rank {run.src} overwrites one of them before the last "
                    "piece can leave; split the transfer in the schedule")


def _final_copies(layout: Layout, versions: list[Version], cur: list[int],
                  loc: list[Loc | None], hist: dict[tuple[int, Loc], list[int]],
                  runs: list[Run], readers: dict[int, list[int]],
                  made_by: list[int]) -> list[Copy]:
    """``cpy`` steps for ranks whose final value is not in its output slot yet."""
    start: Key = (-1, 0, 0, 0, 0)
    pieces = layout.instances
    pending: dict[tuple[int, Key], list[tuple[Loc, Loc, tuple[int, int]]]] = defaultdict(list)
    for c in range(len(layout.post)):
        for v in sorted(layout.post[c]):
            vid = cur[v * len(layout.post) + c]
            if vid < 0:
                raise TacosError(f"rank {v} (NPU {layout.group[v]}) never receives chunk {c}",
                                 hint="verify the schedule first (tacos.verify.verify_schedule)")
            for p in range(layout.instances):
                want = layout.output_loc(v, c, p)
                have = loc[vid * pieces + p]
                if have == want:
                    continue
                anchor = start
                if versions[vid].creator is not None:
                    anchor = max(anchor, runs[made_by[vid * pieces + p]].recv_key)
                for other in hist.get((v, want), ()):
                    if versions[other].chunk == c:
                        continue
                    if versions[other].creator is not None:
                        anchor = max(anchor, runs[made_by[other * pieces + p]].recv_key)
                    for ref in readers.get(other * pieces + p, ()):
                        r = runs[ref // 3]
                        anchor = max(anchor, r.send_key if ref % 3 == SEND else r.recv_key)
                pending[(v, anchor)].append((have, want, (vid, p)))
    copies: list[Copy] = []
    seq = 0
    for (v, anchor), items in sorted(pending.items()):
        items.sort()
        groups: list[list[tuple[Loc, Loc, tuple[int, int]]]] = []
        for it in items:
            if groups:
                a = groups[-1][-1]
                if (len(groups[-1]) < MAX_COUNT and a[0][0] == it[0][0]
                        and it[0][1] == a[0][1] + 1 and a[1][0] == it[1][0]
                        and it[1][1] == a[1][1] + 1):
                    groups[-1].append(it)
                    continue
            groups.append([it])
        for g in groups:
            seq += 1
            key = anchor[:4] + (seq,)
            copies.append(Copy(len(copies), v, g[0][0], g[0][1], len(g),
                               tuple(it[2] for it in g), key))
    return copies
