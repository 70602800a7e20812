"""Verification once per plan and process.

A compile verifies the same plan several times: the portfolio verifies every candidate, the
in-switch pass verifies what it fused, the command verifies the plan it writes and the report
verifies it again.  The portfolio's output is a new :class:`~tacos.model.schedule.Schedule`
(its ``meta`` says who won) around the same transfers, collective and topology, and
:func:`~tacos.check.verify.verify_schedule` reads nothing else, so :func:`verified` keeps the
last few reports by the identity of those three objects.  Transfers held in a list may
change after a check: such plans are verified every time.
"""

from __future__ import annotations

from tacos.check.verify import VerifyReport, verify_schedule
from tacos.model.schedule import Schedule

#: (id(transfers), id(collective), id(topology)) -> ((transfers, collective, topology), report);
#: an entry keeps its objects alive, so their identities cannot be reused while it is kept
_REPORTS: dict[tuple[int, int, int], tuple[tuple, VerifyReport]] = {}
_KEEP = 16


def verified(schedule: Schedule) -> VerifyReport:
    """:func:`~tacos.check.verify.verify_schedule` of ``schedule``, computed once for the same
    transfers, collective and topology objects (see module doc)."""
    owners = (schedule.transfers, schedule.collective, schedule.topology)
    if isinstance(schedule.transfers, list):
        return verify_schedule(schedule)
    key = (id(owners[0]), id(owners[1]), id(owners[2]))
    got = _REPORTS.get(key)
    if got is not None and all(a is b for a, b in zip(got[0], owners, strict=True)):
        return got[1]
    rep = verify_schedule(schedule)
    if len(_REPORTS) >= _KEEP:
        _REPORTS.pop(next(iter(_REPORTS)))
    _REPORTS[key] = (owners, rep)
    return rep
