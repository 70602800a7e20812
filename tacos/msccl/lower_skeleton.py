"""The runs and event order of a lowering, for the rounds before its first step build, without
the flow's placement: for schedules whose every transfer carries one chunk (no locations at
all), and for all-reduces whose transfers carry no two chunks of adjacent slots (every version
in its chunk's slot).  Enough to run the lowering's first rounds of channel assignment and
lane cuts, and to raise their "N channels" error before the full flow is built.

:func:`skeleton_flow` returns a :class:`~tacos.msccl.lower_flow.Flow` whose runs, event order
and ``conn_index`` numbers are those :func:`~tacos.msccl.lower_flow.build_flow` gives, field by
field, for every field the rounds before the first step build read (the all-reduce's also
their locations), and no copies or readers.  Why they are equal:

* ``build_flow`` takes the transfers in the order of their receive position (``pos_r`` of the
  shared event order, :func:`tacos.msccl.lower_flow._ordered`, which this module uses too) and
  makes, per piece, one run per group of contiguous chunks, its chunks taken in the order of
  their read locations; ``_split`` joins two only when their sending, reduced and landing
  locations are all adjacent.  A transfer of one chunk is one group (the "one chunk: one run"
  path).  In an all-reduce every rank must end with every chunk, so a landing version goes to
  the output slot of its chunk and piece when the version there is of the same chunk: by
  induction over the transfers, only versions of chunk ``c`` are ever placed in ``c``'s slot
  (in place, the input slot is that slot; out of place, the output slot starts empty), so
  every landing version goes there, never to scratch, and every version sits in the input slot
  (initial) or output slot (landed) of its chunk, the same on every rank.  Two landing slots
  ``y·I + p`` and ``y'·I + p`` are adjacent only at one instance with ``y' = y + 1``; without
  such a pair in a transfer no two chunks join, and every chunk of a transfer is a run of its
  own.  So run ``k`` of transfer ``i`` and piece ``p`` is its ``k``-th chunk in the order of
  the read locations, part ``k``, with ``src``/``dst`` the transfer's ranks, its lane, the
  version it reads and the one it creates (``read``/``created`` of the replay), ``prevs`` the
  reduced version when it reduces, the conn ``(src, dst, p, lane)`` and the keys
  ``(pos_s, 0, p, 0, 0)`` (part 0) or ``(pos_r, 0, p, 2k - 1, 0)`` and ``(pos_r, 0, p, 2k,
  0)``, as ``build_flow`` writes them.
* The flow's order sorts these keys together with the final copies' (local ``cpy`` events);
  without the copies the sends and receives keep their relative order.  ``conn_index``
  counts a conn's sends in that order, which the copies do not change.
* What the rounds read: ``channel_keys`` the runs' ends, conn, ``conn_index``, transfer,
  piece and lane; ``plan_tbs`` (with nothing forbidden, as before any build) the runs' ends,
  pieces, read and created versions and the send/receive events in order (its ``unstored``
  set also reads readers and final values: it only changes step types, which no round before
  a build uses); ``_long_sequences`` and ``_cut`` the plan's sequences and fusions and the
  runs' conns and ``conn_index``.  So every round up to the first build numbers the same
  channel keys and makes the same cuts as the full lowering.
* ``build_flow`` raises before any round when a transfer leaves the group (checked first
  here too), when the replay or the order fails (shared: raised here too, as it would be),
  when a later part of a run can be overwritten (the same check, on the same runs, here) or
  when a rank never receives a chunk it must hold: the first and the last return None here
  (and :func:`likely_over` False for the first), and the full lowering raises them itself.

So when these rounds raise "the plan needs N channels", the full lowering raises that same
error (its port order, computed between the flow and the rounds, raises nothing).
"""

from __future__ import annotations

import math
from collections import defaultdict

from tacos.model.schedule import Schedule
from tacos.msccl.lower_flow import Flow, Run, _ordered, check_later_parts, time_tol
from tacos.msccl.lower_layout import Layout, Loc
from tacos.msccl.lower_order import Version

#: the location the runs of a skeleton carry in place of a placed one (never read)
NOWHERE = ("s", -1)


def one_chunk_transfers(schedule: Schedule) -> bool:
    """Whether every transfer of ``schedule`` carries exactly one chunk."""
    return all(len(t.chunks) == 1 for t in schedule.transfers)


def _apart(schedule: Schedule, layout: Layout) -> bool:
    """Whether no transfer of an all-reduce carries two chunks of adjacent slots (at two
    instances or more no two pieces' slots are adjacent)."""
    if layout.instances >= 2:
        return True
    slot = layout.out_slot
    for t in schedule.transfers:
        if len(t.chunks) > 1:
            xs = sorted(slot[c] for c in t.chunks)
            if any(b - a == 1 for a, b in zip(xs, xs[1:], strict=False)):
                return False
    return True


def skeleton_applies(schedule: Schedule, layout: Layout) -> bool:
    """Whether :func:`skeleton_flow` knows every run of ``schedule``'s flow: every transfer
    carries one chunk, or the collective is an all-reduce whose transfers carry no two
    chunks of adjacent slots (module doc)."""
    return one_chunk_transfers(schedule) or (layout.coll == "allreduce"
                                             and _apart(schedule, layout))


def _members_only(schedule: Schedule, layout: Layout) -> bool:
    """Whether every transfer runs between ranks of the collective's group."""
    ranks = layout.ranks
    return all(t.src in ranks and t.dst in ranks for t in schedule.transfers)


def likely_over(schedule: Schedule, layout: Layout, max_steps: int, max_channels: int) -> bool:
    """Whether the skeleton's rounds are worth running: the one-sided channel floor of
    :mod:`tacos.msccl.channel_floor` (per pair, the segments its lanes need on one side, a
    run per chunk as :func:`skeleton_flow` makes them), doubled for the cuts the receivers
    add, reaches ``max_channels``.  A guess only: the skeleton is exact either way, this just
    keeps it off lowerings likely to fit."""
    ts = schedule.transfers
    if not _members_only(schedule, layout):
        return False  # build_flow refuses it before ordering anything
    tol = time_tol(schedule)
    lane = _ordered(schedule, layout, tol)[0]
    per_lane: dict[tuple[int, int, int], int] = defaultdict(int)
    for t, ln in zip(ts, lane, strict=True):
        per_lane[(t.src, t.dst, ln)] += len(t.chunks)
    m = math.ceil(max(1.0, 0.9 * max_steps) * (1 + 1e-9))
    per_pair: dict[tuple[int, int], int] = defaultdict(int)
    for (u, v, _), k in per_lane.items():
        per_pair[(u, v)] += math.ceil(k / m) if k > max_steps else 1
    floor = layout.instances * max(per_pair.values(), default=0)
    return 2 * floor >= max_channels


def skeleton_flow(schedule: Schedule, layout: Layout) -> Flow | None:
    """The flow of ``schedule`` as the rounds before the first step build see it (module doc),
    or None when :func:`skeleton_applies` does not hold or the full flow would raise (one of
    its later parts excepted: raised here as there)."""
    if not skeleton_applies(schedule, layout) or not _members_only(schedule, layout):
        return None  # build_flow raises for a transfer out of the group: leave it to it
    tol = time_tol(schedule)
    lane, versions, read, created, cur, pos_s, pos_r = _ordered(schedule, layout, tol)
    nchunks = len(layout.post)
    if any(cur[r * nchunks + c] < 0 for c, owners in enumerate(layout.post) for r in owners):
        return None  # a rank never receives a chunk: build_flow raises
    if one_chunk_transfers(schedule):
        return _one_chunk_flow(schedule, layout, lane, versions, read, created, pos_s, pos_r)
    return _allreduce_flow(schedule, layout, lane, versions, read, created, pos_s, pos_r)


def _one_chunk_flow(schedule: Schedule, layout: Layout, lane: list[int],
                    versions: list[Version], read: list[dict[int, int]],
                    created: list[dict[int, int]], pos_s: list[int],
                    pos_r: list[int]) -> Flow:
    """The skeleton of a schedule whose transfers carry one chunk each (no locations)."""
    ts = schedule.transfers
    ranks = layout.ranks
    pieces = layout.instances
    runs: list[Run] = []
    for i in sorted(range(len(ts)), key=pos_r.__getitem__):
        t = ts[i]
        u, v, ln = ranks[t.src], ranks[t.dst], lane[i]
        c = t.chunks[0]
        vid, rd = created[i][c], read[i][c]
        prev = versions[vid].prev
        prevs = None if prev is None else (prev,)
        rsrc = None if prev is None else NOWHERE
        ps, pr = pos_s[i], pos_r[i]
        for p in range(pieces):
            runs.append(Run(len(runs), i, p, 0, u, v, ln, (c,), (rd,), (vid,), prevs, NOWHERE,
                            rsrc, NOWHERE, (u, v, p, ln), 1, (ps, 0, p, 0, 0),
                            (pr, 0, p, 0, 0)))
    slots: list[tuple[str, int] | None] = [None] * (2 * len(ts) * pieces)
    for run in runs:
        slots[run.send_key[0] * pieces + run.piece] = ("send", run.id)
        slots[run.recv_key[0] * pieces + run.piece] = ("recv", run.id)
    return _numbered(layout, runs, [ev for ev in slots if ev is not None])


def _allreduce_flow(schedule: Schedule, layout: Layout, lane: list[int],
                    versions: list[Version], read: list[dict[int, int]],
                    created: list[dict[int, int]], pos_s: list[int],
                    pos_r: list[int]) -> Flow:
    """The skeleton of an all-reduce whose transfers carry no two chunks of adjacent slots:
    every version sits in its chunk's slot, every chunk of a transfer is a run."""
    ts = schedule.transfers
    ranks = layout.ranks
    pieces = layout.instances
    nc = len(layout.post)
    inputs = [layout.input_loc(0, c, p) for c in range(nc) for p in range(pieces)]
    outputs = [layout.output_loc(0, c, p) for c in range(nc) for p in range(pieces)]

    def where(vid: int, p: int) -> Loc:
        x = versions[vid]
        return (inputs if x.creator is None else outputs)[x.chunk * pieces + p]

    runs: list[Run] = []
    made_by = [-1] * (len(versions) * pieces)
    for i in sorted(range(len(ts)), key=pos_r.__getitem__):
        t = ts[i]
        u, v, ln = ranks[t.src], ranks[t.dst], lane[i]
        ri, ci, ps, pr = read[i], created[i], pos_s[i], pos_r[i]
        for p in range(pieces):
            order = sorted((where(ri[c], p), c) for c in t.chunks)
            conn = (u, v, p, ln)
            for part, (sl, c) in enumerate(order):
                vid = ci[c]
                prev = versions[vid].prev
                made_by[vid * pieces + p] = len(runs)
                runs.append(Run(len(runs), i, p, part, u, v, ln, (c,), (ri[c],), (vid,),
                                None if prev is None else (prev,), sl,
                                None if prev is None else where(prev, p),
                                outputs[c * pieces + p], conn, 1,
                                (ps, 0, p, 0, 0) if part == 0
                                else (pr, 0, p, 2 * part - 1, 0), (pr, 0, p, 2 * part, 0)))
    check_later_parts(runs, versions, made_by, pieces)
    keyed = [(r.send_key, "send", r.id) for r in runs]
    keyed.extend((r.recv_key, "recv", r.id) for r in runs)
    keyed.sort()
    return _numbered(layout, runs, [(kind, idx) for _, kind, idx in keyed])


def _numbered(layout: Layout, runs: list[Run], order: list[tuple[str, int]]) -> Flow:
    """The skeleton flow of ``runs`` in ``order``, with positions and ``conn_index``."""
    sent: dict[tuple[int, int, int, int], int] = defaultdict(int)
    for n, (kind, idx) in enumerate(order):
        run = runs[idx]
        if kind == "send":
            run.send_pos = n
            run.conn_index = sent[run.conn]
            sent[run.conn] += 1
        else:
            run.recv_pos = n
    return Flow(layout, runs, [], order, {}, frozenset())
