"""A lower bound, from the schedule alone, on the channels its MSCCL lowering uses; and the
refusal of an instance count whose lowering that bound shows must fail ("N channels > 32").

The lowering (:mod:`tacos.msccl.lower`, :mod:`tacos.msccl.lower_channels`) gives every run the
channel key ``(hint, piece, group, segment, lane)`` and numbers the distinct keys densely;
``segment`` counts the cuts the step limit put on the run's FIFO lane ``conn = (src, dst,
piece, lane)``.  Why :func:`channel_floor` never exceeds the channel count of any round of that
lowering, for a schedule without per-transfer channel hints (``meta['channel_of_transfer']``)
that is not pipelined (a pipelined schedule is lowered as its first round):

1. *Runs.*  Every transfer becomes at least one run per piece (``build_flow`` splits each
   piece of it into contiguous runs, never joins two transfers), and from two instances on
   at least one per chunk its receiver keeps (:func:`split_applies`), on the lane
   :func:`tacos.msccl.lower_order.lanes` gives it (first-fit colouring of the ordered pair's
   transfers by time; computed here the same way).  So a conn carries at least ``k`` runs,
   ``k`` the transfers of its pair on its lane (from two instances on, their kept chunks,
   at least one per transfer).
2. *Round 1.*  Without cuts and hints, every run of a conn has the same key, so one channel,
   and its sends are all in one thread block of the sender (``plan_tbs`` keys a send's tb by
   rank, channel and send peer).  A unit of ``_long_sequences`` (one event, or a receive with
   the send fused to it) holds at most one send, so that tb has ``U >= k`` units.  When
   ``k > S`` (``max_steps_per_tb``) the tb is too long and ``_cut`` splits its ``U`` units into
   ``P = max(2, ceil(U / max(1, 0.9 S)))`` parts at the cumulative bounds ``ceil(j U / P)``, so
   no part holds more than ``ceil(U / P) <= m = ceil(max(1, 0.9 S))`` units, and cuts the conn
   at its first run in every part after the part of its first run (the tb's sends of the conn
   are in the order of ``conn_index``, which counts the conn's sends in the global order the
   sequence follows).  The conn's runs fill at least ``ceil(k / m)`` parts: it gets at least
   ``ceil(k / m) - 1`` distinct cuts, each at an existing run, so ``ceil(k / m)`` non-empty
   segments.
3. *Later rounds* only add cuts (``_cut`` takes the union), and every segment stays non-empty
   (a cut is an existing run's ``conn_index``; the conn's indices are ``0..k'-1``).  The group
   of a pair does not depend on the cuts.  So from round 2 on, the conn's runs hold at least
   ``g(k) = ceil(k / m)`` (``k > S``; else 1) distinct keys ``(0, piece, group, s, lane)``.
4. *Counting.*  Keys of different pieces or lanes differ; so for every piece the keys number
   at least ``max over pairs of the sum over the pair's lanes of g(k)``, and the lowering with
   ``I`` instances has at least ``I`` times that many distinct keys in every round from the
   second on.  ``assign_channels`` raises when a round's keys outnumber ``max_channels``, and a
   lowering that succeeds returns the channels of its last round: if the floor is over
   ``max_channels`` no program comes out (the lowering raises, at the latest at the round that
   would succeed).

With channel hints (the runs of one conn may sit on several channels from round 1 on) the floor
is the weaker one every finished program obeys: a tb holds at most ``S`` steps and the sends
of one pair, piece and channel share a tb, so a pair with ``T`` transfers needs ``ceil(T / S)``
channels per piece.  Pipelined schedules get no floor (0).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from tacos.model.schedule import Schedule
from tacos.msccl.lower_flow import time_tol
from tacos.msccl.lower_order import lanes


@dataclass(frozen=True)
class PairLanes:
    """The busiest ordered pair of a schedule for the channel floor: its ends (NPU ids), the
    transfers on each of its lanes, and the channels one piece of it needs at least."""

    src: int
    dst: int
    per_lane: tuple[int, ...]
    channels: int


def _part_size(max_steps: int) -> int:
    """``m``: the most units a part of a tb cut by the lowering holds (``ceil(0.9 S)``, with
    room for the rounding of the lowering's float division)."""
    return math.ceil(max(1.0, 0.9 * max_steps) * (1 + 1e-9))


def busiest_pair(schedule: Schedule, max_steps: int, *, kept_runs: bool = False
                 ) -> PairLanes | None:
    """The :class:`PairLanes` of the pair whose one piece needs the most channels (see the
    module doc), or None for a pipelined schedule or one without transfers.  ``kept_runs``
    (for two instances or more, where :func:`split_applies`): a transfer counts as the chunks
    its receiver keeps (at least 1), each a run of its own (``per_lane`` then counts runs)."""
    if not isinstance(schedule, Schedule) or not schedule.transfers or int(
            (schedule.meta.get("pipeline") or {}).get("slices", 1)) > 1:
        return None
    hints = schedule.meta.get("channel_of_transfer")
    hinted = isinstance(hints, list) and len(hints) == len(schedule.transfers)
    if kept_runs:
        post = {c.id: c.post for c in schedule.collective.chunks}
        weight = [max(1, sum(1 for c in t.chunks if t.dst in post[c]))
                  for t in schedule.transfers]
    else:
        weight = [1] * len(schedule.transfers)
    per_pair: dict[tuple[int, int], int] = defaultdict(int)
    for i, t in enumerate(schedule.transfers):
        per_pair[(t.src, t.dst)] += weight[i]
    if hinted:
        (src, dst), n = max(per_pair.items(), key=lambda kv: (kv[1], -kv[0][0], -kv[0][1]))
        return PairLanes(src, dst, (n,), max(1, math.ceil(n / max_steps)))
    if max(per_pair.values()) <= max_steps:  # every lane is at most one segment long
        (src, dst), _ = min(per_pair.items())
        return PairLanes(src, dst, (per_pair[(src, dst)],), 1)
    lane, _ = lanes(schedule, time_tol(schedule))
    counts: dict[tuple[int, int], dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for i, t in enumerate(schedule.transfers):
        if per_pair[(t.src, t.dst)] > max_steps:
            counts[(t.src, t.dst)][lane[i]] += weight[i]
    m = _part_size(max_steps)
    best: PairLanes | None = None
    for (src, dst), by_lane in sorted(counts.items()):
        ks = tuple(by_lane[ln] for ln in sorted(by_lane))
        need = sum(math.ceil(k / m) if k > max_steps else 1 for k in ks)
        if best is None or need > best.channels:
            best = PairLanes(src, dst, ks, need)
    return best


def split_applies(schedule: Schedule | Any, instances: int, *, inplace: bool) -> bool:
    """Whether from ``instances`` on every chunk a transfer's receiver keeps is a run of its
    own (:func:`tacos.msccl.shape_refuse.receipts_per_rank`'s argument: two such chunks of
    one piece land ``instances`` or more output slots apart): two instances or more, a
    schedule, and not an in-place all-to-all (whose output slots can hold another chunk)."""
    return (instances >= 2 and isinstance(schedule, Schedule)
            and not (schedule.collective.kind == "alltoall" and inplace))


def channel_floor(schedule: Schedule | Any, instances: int, max_steps: int, *,
                  inplace: bool = False) -> int:
    """Channels every MSCCL lowering of ``schedule`` with ``instances`` instances and
    ``max_steps`` steps per thread block has at least (module doc: the proof); 0 when no
    bound applies (a program family, a pipelined schedule)."""
    if not isinstance(schedule, Schedule):
        return 0
    got = busiest_pair(schedule, max_steps,
                       kept_runs=split_applies(schedule, instances, inplace=inplace))
    return 0 if got is None else instances * got.channels


def channels_refusal(schedule: Schedule | Any, instances: int, max_steps: int,
                     max_channels: int, *, inplace: bool = False,
                     busiest: PairLanes | None = None) -> str:
    """Why ``schedule`` lowered with ``instances`` instances cannot fit ``max_channels``
    channels (or ''): its :func:`channel_floor` is over them, so the lowering would fail.
    ``busiest``: the schedule's :func:`busiest_pair` for that instance count (``kept_runs``
    as :func:`split_applies`), when already known."""
    if not isinstance(schedule, Schedule):
        return ""
    split = split_applies(schedule, instances, inplace=inplace)
    got = busiest if busiest is not None else busiest_pair(schedule, max_steps,
                                                           kept_runs=split)
    if got is None or instances * got.channels <= max_channels:
        return ""
    lanes_text = " + ".join(str(k) for k in got.per_lane)
    what = "runs (a chunk its receiver keeps is one)" if split else "transfers"
    return (f"refused before lowering: at {instances} instances it needs at least "
            f"{instances * got.channels} channels > {max_channels} (NPU {got.src} -> "
            f"{got.dst}: {lanes_text} {what} per lane, a thread block of at most "
            f"{max_steps} steps per piece and segment)")
