"""The busiest pair of a schedule (:func:`tacos.msccl.channel_floor.busiest_pair`), computed
once per schedule while it lives.

At 512 ranks one plan has about a million transfers and its busiest pair takes seconds; the
portfolio's ranking (:mod:`tacos.solvers.scale_shaped`: the channel refusal, then the shape
search) and the file written (the shape search again) each asked for the same plan's.  The
answer is a function of the schedule's transfers, its metadata and the arguments, so it is
kept for the last :data:`KEEP` schedules, each held by a weak reference and checked to be the
same object with the same transfer list before its answer is reused.
"""

from __future__ import annotations

import weakref
from typing import Any

from tacos.model.schedule import Schedule
from tacos.msccl.channel_floor import PairLanes, busiest_pair

KEEP = 8
"""Schedules whose answers are kept (the oldest is dropped first)."""

_MEMO: dict[int, tuple[Any, Any, dict[tuple[int, bool], PairLanes | None]]] = {}


def busiest_pair_once(schedule: Schedule | Any, max_steps: int, *, kept_runs: bool = False
                      ) -> PairLanes | None:
    """:func:`~tacos.msccl.channel_floor.busiest_pair` of ``schedule``, computed once per live
    schedule and arguments (see module doc); anything not a :class:`Schedule` is passed on."""
    if not isinstance(schedule, Schedule):
        return busiest_pair(schedule, max_steps, kept_runs=kept_runs)
    key = id(schedule)
    got = _MEMO.get(key)
    if got is None or got[0]() is not schedule or got[1] is not schedule.transfers:
        ref = weakref.ref(schedule, lambda _r, k=key: _drop(k, _r))
        got = _MEMO[key] = (ref, schedule.transfers, {})
        while len(_MEMO) > KEEP:
            del _MEMO[next(iter(_MEMO))]
    answers = got[2]
    args = (max_steps, kept_runs)
    if args not in answers:
        answers[args] = busiest_pair(schedule, max_steps, kept_runs=kept_runs)
    return answers[args]


def share(old: Schedule, new: Schedule) -> None:
    """Let ``new`` -- the same transfers and collective as ``old``, with metadata that only
    adds keys :func:`~tacos.msccl.channel_floor.busiest_pair` does not read (the portfolio's
    winner as it is returned) -- reuse what ``old`` computed."""
    got = _MEMO.get(id(old))
    if got is None or got[0]() is not old or new.transfers is not old.transfers \
            or new.collective is not old.collective or any(
                new.meta.get(k) is not old.meta.get(k) for k in ("pipeline",
                                                                 "channel_of_transfer")):
        return
    key = id(new)
    ref = weakref.ref(new, lambda _r, k=key: _drop(k, _r))
    _MEMO[key] = (ref, new.transfers, got[2])


def _drop(key: int, ref: Any) -> None:
    """Forget a schedule that was freed (its id may be reused)."""
    got = _MEMO.get(key)
    if got is not None and got[0] is ref:
        del _MEMO[key]
