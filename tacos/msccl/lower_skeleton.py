"""The runs and event order of a lowering without buffer locations, for schedules whose every
transfer carries one chunk: enough to run the lowering's first rounds of channel assignment
and lane cuts, and to raise their "N channels" error before the flow's locations are placed.

:func:`skeleton_flow` returns a :class:`~tacos.msccl.lower_flow.Flow` whose runs, event order
and ``conn_index`` numbers are those :func:`~tacos.msccl.lower_flow.build_flow` gives, field by
field, for every field the rounds before the first step build read, and no copies, readers or
locations.  Why they are equal, when every transfer carries one chunk:

* ``build_flow`` takes the transfers in the order of their receive position (``pos_r`` of the
  shared event order, :func:`tacos.msccl.lower_flow._ordered`, which this module uses too) and
  makes, per piece, one run per group of contiguous chunks; a transfer of one chunk is one
  group (the "one chunk: one run" path), so run ``k`` is piece ``p`` of the ``k // I``-th
  transfer in that order, with part 0, ``src``/``dst`` its ranks, its lane, the version it
  reads and the one it creates (``read``/``created`` of the replay), ``prevs`` the reduced
  version when it reduces (its location is never None: every version is placed), the conn
  ``(src, dst, p, lane)`` and the keys ``(pos_s, 0, p, 0, 0)``/``(pos_r, 0, p, 0, 0)``.
* The flow's order sorts these keys together with the final copies' (local ``cpy`` events);
  without the copies the sends and receives keep their relative order, and positions are
  unique per node, so sorting by ``(position, piece)`` gives it.  ``conn_index`` counts a
  conn's sends in that order, which the copies do not change.
* What the rounds read: ``channel_keys`` the runs' ends, conn, ``conn_index``, transfer,
  piece and lane; ``plan_tbs`` (with nothing forbidden, as before any build) the runs' ends,
  pieces, read and created versions and the send/receive events in order (its ``unstored``
  set also reads readers and final values: it only changes step types, which no round before
  a build uses); ``_long_sequences`` and ``_cut`` the plan's sequences and fusions and the
  runs' conns and ``conn_index``.  So every round up to the first build numbers the same
  channel keys and makes the same cuts as the full lowering.
* ``build_flow`` raises before any round when a transfer leaves the group (checked first
  here too), when the replay or the order fails (shared: raised here too, as it would be),
  when a later part of a run can be overwritten (a one-chunk transfer has no later part) or
  when a rank never receives a chunk it must hold: the first and the last return None here
  (and :func:`likely_over` False for the first), and the full lowering raises them itself.

So when these rounds raise "the plan needs N channels", the full lowering raises that same
error (its port order, computed between the flow and the rounds, raises nothing).
"""

from __future__ import annotations

import math
from collections import defaultdict

from tacos.model.schedule import Schedule
from tacos.msccl.lower_flow import TIME_RTOL, Flow, Run, _ordered
from tacos.msccl.lower_layout import Layout

#: the location the runs of a skeleton carry in place of a placed one (never read)
NOWHERE = ("s", -1)


def one_chunk_transfers(schedule: Schedule) -> bool:
    """Whether every transfer of ``schedule`` carries exactly one chunk."""
    return all(len(t.chunks) == 1 for t in schedule.transfers)


def _members_only(schedule: Schedule, layout: Layout) -> bool:
    """Whether every transfer runs between ranks of the collective's group."""
    ranks = layout.ranks
    return all(t.src in ranks and t.dst in ranks for t in schedule.transfers)


def likely_over(schedule: Schedule, layout: Layout, max_steps: int, max_channels: int) -> bool:
    """Whether the skeleton's rounds are worth running: the one-sided channel floor of
    :mod:`tacos.msccl.channel_floor` (per pair, the segments its lanes need on one side),
    doubled for the cuts the receivers add, is over ``max_channels``.  A guess only: the
    skeleton is exact either way, this just keeps it off lowerings likely to fit."""
    ts = schedule.transfers
    if not _members_only(schedule, layout):
        return False  # build_flow refuses it before ordering anything
    tol = TIME_RTOL * max((abs(t.end) for t in ts), default=0.0)
    lane = _ordered(schedule, layout, tol)[0]
    per_lane: dict[tuple[int, int, int], int] = defaultdict(int)
    for t, ln in zip(ts, lane, strict=True):
        per_lane[(t.src, t.dst, ln)] += 1
    m = math.ceil(max(1.0, 0.9 * max_steps) * (1 + 1e-9))
    per_pair: dict[tuple[int, int], int] = defaultdict(int)
    for (u, v, _), k in per_lane.items():
        per_pair[(u, v)] += math.ceil(k / m) if k > max_steps else 1
    floor = layout.instances * max(per_pair.values(), default=0)
    return 2 * floor > max_channels


def skeleton_flow(schedule: Schedule, layout: Layout) -> Flow | None:
    """The flow of ``schedule`` as the rounds before the first step build see it (module doc),
    or None when a transfer carries more than one chunk or the full flow would raise."""
    ts = schedule.transfers
    if not one_chunk_transfers(schedule):
        return None
    ranks = layout.ranks
    if not _members_only(schedule, layout):
        return None  # build_flow raises: leave it to the full lowering
    tol = TIME_RTOL * max((abs(t.end) for t in ts), default=0.0)
    lane, versions, read, created, cur, pos_s, pos_r = _ordered(schedule, layout, tol)
    nchunks = len(layout.post)
    if any(cur[r * nchunks + c] < 0 for c, owners in enumerate(layout.post) for r in owners):
        return None  # a rank never receives a chunk: build_flow raises
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
    order = [ev for ev in slots if ev is not None]
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
