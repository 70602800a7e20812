"""Independent schedule verifier.

:func:`verify_schedule` checks a :class:`~tacos.model.schedule.Schedule` against the physical α-β
model (``docs/machine-model.md``: cut-through routes, store-and-forward at NPUs) without
trusting any solver.  Each problem found is a :class:`Violation` tagged with one of these rules
(the names are part of the API):

``link``
    the transfer's route is a valid route of the topology (:meth:`tacos.model.routes.Routing.make`:
    existing links that join up from ``src`` to ``dst``, only switches in between, no node
    twice), its endpoints are live NPUs, and a ``via`` link passes through a real switch.
``duration``
    ``end - start >= alpha + bytes/bandwidth`` of the route (Σ α of its links, the narrowest
    bandwidth; relative tolerance 1e-9), ``start >= 0``, finite times; chunk lists non-empty,
    valid, without duplicates; ``op`` in ``{copy, reduce}`` and ``reduce`` only on reduction
    chunks.
``overlap``
    at no instant more than ``link.multiplicity`` transfers are active on one physical link,
    counting every transfer whose route crosses it -- a switch port or an uplink included
    (intervals are half-open ``[start, end)``); the members of an in-switch group hold a link
    they share once.
``group``
    transfers with the same ``group`` id form one in-switch operation
    (:func:`tacos.check.in_switch.group_shape`): one source fanning out through switches that
    declare ``multicast``, or one destination reduced into through switches that declare ``reduce``,
    or a **joint** transfer (one source, destination and route; disjoint chunks, each member
    its own ``op``; its duration must cover α plus all members' bytes, rule ``duration``);
    the members start and end together.
``causality``
    the sender holds (a value of) every chunk it sends when the transfer starts.
``postcondition``
    at the end every post NPU holds every chunk (for a reduction chunk: holds some value).
``contribution``
    for reduction chunks, values are symbolic multisets of contributions: every ``pre`` NPU
    starts with ``{itself: 1}``, a copy sets the destination's value to the sender's value at the
    transfer start, a reduce adds that snapshot to the destination's value.  At the end every
    post NPU must hold exactly ``pre``, each contribution once.

Events at the same instant: arrivals are applied before sends (a chunk may leave the instant it
arrives).  Times are compared with a rounding slack relative to their own magnitude
(:data:`tacos.check.tables.TIME_EPS`, about 1.4e-14 × |t|; the duration rule also allows that
slack on ``end - start``), so schedules with huge latencies verify.  A reduce into an NPU that
holds no value of the chunk yet treats the missing value as empty.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tacos.check.in_switch import JOINT, GroupError, group_shape
from tacos.check.tables import (
    DURATION_RTOL,
    HopTable,
    duration_slack,
    early,
    hop_table,
    overlap_suspects,
    route_table,
    screen_copies,
    screen_reductions,
    transfer_suspects,
    transfer_units,
    unit_array,
)
from tacos.errors import VerificationError
from tacos.model.columns import TransferColumns
from tacos.model.routes import RouteError, link_name
from tacos.model.schedule import Schedule
from tacos.model.transfer import OPS, Transfer
from tacos.nogc import paused_gc

RULES = ("link", "duration", "overlap", "group", "causality", "postcondition", "contribution")
MAX_PER_RULE = 200


@dataclass(frozen=True)
class Violation:
    """One broken rule; ``transfer`` indexes ``schedule.transfers``."""

    rule: str
    message: str
    transfer: int | None = None
    chunk: int | None = None
    npu: int | None = None

    def text(self) -> str:
        """One line: ``[rule] message``."""
        return f"[{self.rule}] {self.message}"

    def as_dict(self) -> dict[str, Any]:
        """JSON-safe dict."""
        return {"rule": self.rule, "message": self.message, "transfer": self.transfer,
                "chunk": self.chunk, "npu": self.npu}


@dataclass(frozen=True)
class VerifyReport:
    """Outcome of :func:`verify_schedule`.

    ``omitted`` counts violations dropped after the first ``MAX_PER_RULE`` of a rule.
    """

    ok: bool
    violations: tuple[Violation, ...] = ()
    omitted: int = 0

    def rules(self) -> set[str]:
        """The set of rule names violated."""
        return {v.rule for v in self.violations}

    def text(self, limit: int | None = None) -> str:
        """Human-readable summary, one violation per line (first ``limit`` if given)."""
        if self.ok:
            return "schedule verified: no violations"
        shown = self.violations if limit is None else self.violations[:limit]
        total = len(self.violations) + self.omitted
        lines = [f"schedule has {total} violation{'s' if total != 1 else ''}:"]
        lines += [f"  {v.text()}" for v in shown]
        rest = total - len(shown)
        if rest > 0:
            lines.append(f"  ... and {rest} more")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        """JSON-safe dict ``{ok, violations: [...], omitted}``."""
        return {"ok": self.ok, "violations": [v.as_dict() for v in self.violations],
                "omitted": self.omitted}

    def raise_if_failed(self, limit: int = 10) -> VerifyReport:
        """Raise :class:`~tacos.errors.VerificationError` listing the first violations."""
        if not self.ok:
            raise VerificationError(
                self.text(limit),
                hint="the schedule is wrong; report it with the solver name and seed",
            )
        return self


@dataclass
class _Collector:
    items: list[Violation] = field(default_factory=list)
    per_rule: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    omitted: int = 0

    def add(self, rule: str, message: str, *, transfer: int | None = None,
            chunk: int | None = None, npu: int | None = None) -> None:
        if self.per_rule[rule] >= MAX_PER_RULE:
            self.omitted += 1
            return
        self.per_rule[rule] += 1
        self.items.append(Violation(rule, message, transfer, chunk, npu))


def verify_schedule(schedule: Schedule) -> VerifyReport:
    """Check every correctness rule of ``schedule``; never raises for a bad schedule."""
    out = _Collector()
    with paused_gc():
        try:
            hops: HopTable | None = hop_table(schedule)
        except (TypeError, ValueError, OverflowError):
            hops = None
        usable = _check_transfers(schedule, out, hops)
        _check_groups(schedule, usable, out)
        _check_overlap(schedule, usable, out)
        _check_data(schedule, usable, out, hops)
    return VerifyReport(not out.items and not out.omitted, tuple(out.items), out.omitted)


def _finite(x: object) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def _check_transfers(schedule: Schedule, out: _Collector, h: HopTable | None) -> np.ndarray:
    """Per-transfer rules (link, duration); returns which transfers are usable downstream (a
    boolean array)."""
    suspects = transfer_suspects(schedule, h)
    usable = np.ones(len(schedule.transfers), dtype=bool)
    for i in np.flatnonzero(suspects).tolist():
        usable[i] = _check_one(schedule, i, schedule.transfers[i], out)
    return usable


def _check_one(schedule: Schedule, i: int, t: Transfer, out: _Collector) -> bool:
    """Every per-transfer rule for transfer ``i``, with messages; True if usable downstream."""
    topo, coll = schedule.topology, schedule.collective
    n_chunks = coll.n_chunks
    good = True
    route = None
    try:
        if not isinstance(t.route, tuple):
            raise RouteError(f"expected a tuple of link indices, got {t.route!r}")
        route = topo.routing.make(t.route)
    except RouteError as exc:
        out.add("link", f"transfer {i}: route {_route_text(t.route)} is not valid: {exc}",
                transfer=i, npu=t.src if isinstance(t.src, int) else None)
        good = False
    if route is not None:
        if (t.src, t.dst) != (route.src, route.dst):
            out.add("link", f"transfer {i}: goes {t.src}->{t.dst} but its route "
                    f"{topo.routing.describe(route.links)} goes {route.src}->{route.dst}",
                    transfer=i, npu=t.src)
            good = False
        for li in route.links:
            via = topo.links[li].via
            if via is not None and not (isinstance(via, int) and topo.is_switch(via)
                                        and via < topo.n_nodes):
                out.add("link", f"transfer {i}: link {li} passes via node {via}, "
                        "which is not a switch", transfer=i)
        for end in (t.src, t.dst):
            if not isinstance(end, int) or not 0 <= end < topo.n_nodes:
                out.add("link", f"transfer {i}: node {end!r} does not exist", transfer=i)
                good = False
            elif topo.is_switch(end):
                out.add("link", f"transfer {i}: endpoint {topo.node_name(end)} is a switch; "
                        "transfers join two NPUs (routes pass through switches)",
                        transfer=i, npu=end)
                good = False
            elif topo.npus[end].failed:
                out.add("link", f"transfer {i}: NPU {topo.node_name(end)} has failed",
                        transfer=i, npu=end)
    chunks_ok = True
    if not t.chunks:
        out.add("duration", f"transfer {i}: carries no chunk", transfer=i)
        chunks_ok = False
    if len(set(t.chunks)) != len(t.chunks):
        out.add("duration", f"transfer {i}: carries a chunk twice: {list(t.chunks)}",
                transfer=i)
    for c in t.chunks:
        if not isinstance(c, int) or not 0 <= c < n_chunks:
            out.add("duration", f"transfer {i}: chunk {c!r} does not exist", transfer=i)
            chunks_ok = False
    if t.op not in OPS:
        out.add("duration", f"transfer {i}: unknown op {t.op!r} (expected copy or reduce)",
                transfer=i)
        good = False
    elif t.op == "reduce" and chunks_ok:
        for c in t.chunks:
            if not coll.chunks[c].reduce:
                out.add("duration", f"transfer {i}: reduces chunk {c}, which is not a "
                        "reduction chunk", transfer=i, chunk=c)
    if not (_finite(t.start) and _finite(t.end)):
        out.add("duration", f"transfer {i}: non-finite time [{t.start}, {t.end}]",
                transfer=i)
        return False
    if t.start < 0:
        out.add("duration", f"transfer {i}: starts at negative time {t.start!r}",
                transfer=i)
    if route is not None and chunks_ok:
        need = route.time(sum(coll.chunks[c].size for c in t.chunks))
        if t.end - t.start < need * (1 - DURATION_RTOL) - duration_slack(t.start, t.end):
            what = (f"link {route.links[0]}" if len(route.links) == 1 else
                    f"route {topo.routing.describe(route.links)}")
            out.add("duration", f"transfer {i}: lasts {t.end - t.start:.6g} s but {what} "
                    f"needs {need:.6g} s (alpha + bytes/bandwidth)", transfer=i)
    return good and chunks_ok


def _route_text(route: object) -> str:
    if isinstance(route, tuple):
        return "[" + ", ".join(repr(x) for x in route) + "]"
    return repr(route)


def _check_groups(schedule: Schedule, usable: np.ndarray, out: _Collector) -> None:
    """Every group of transfers is one valid in-switch operation (:mod:`tacos.check.in_switch`)."""
    groups: dict[object, list[int]] = defaultdict(list)
    cols = schedule.transfers if isinstance(schedule.transfers, TransferColumns) else None
    if cols is not None:  # the group column: ids are integers; members in transfer order
        if cols.has_groups:
            grouped = np.flatnonzero(cols.group >= 0)
            order = np.argsort(cols.group[grouped], kind="stable")
            ids = cols.group[grouped][order].tolist()
            for g, i in zip(ids, grouped[order].tolist(), strict=True):
                groups[g].append(i)
    for i, t in enumerate(() if cols is not None else schedule.transfers):
        if t.group is None:
            continue
        if not isinstance(t.group, int) or isinstance(t.group, bool):
            out.add("group", f"transfer {i}: group id {t.group!r} is not an integer",
                    transfer=i)
            continue
        groups[t.group].append(i)
    topo = schedule.topology
    for g, idxs in sorted(groups.items()):
        if len(idxs) < 2 or not all(usable[i] for i in idxs):
            continue
        members = [schedule.transfers[i] for i in idxs]
        first = idxs[0]
        if (early(max(t.start for t in members)) > min(t.start for t in members)
                or early(max(t.end for t in members)) > min(t.end for t in members)):
            out.add("group", f"group {g} (transfers {_short(idxs)}): its transfers do not start "
                    "and end together; an in-switch operation moves as one", transfer=first)
            continue
        try:
            shape = group_shape(topo, members)
        except GroupError as exc:
            out.add("group", f"group {g} (transfers {_short(idxs)}): {exc}", transfer=first,
                    npu=members[0].src)
            continue
        if shape.kind == JOINT:
            _check_joint_duration(schedule, g, idxs, members, out)


def _check_joint_duration(schedule: Schedule, g: object, idxs: list[int],
                          members: list[Transfer], out: _Collector) -> None:
    """A joint group (one route, several payloads) lasts at least the route's α plus all its
    members' bytes over the route's bandwidth: the payloads share one lane."""
    coll = schedule.collective
    route = schedule.topology.routing.make(members[0].route)
    need = route.time(sum(coll.chunks[c].size for t in members for c in t.chunks))
    t = members[0]
    if t.end - t.start < need * (1 - DURATION_RTOL) - duration_slack(t.start, t.end):
        out.add("duration", f"group {g} (transfers {_short(idxs)}): a joint transfer lasts "
                f"{t.end - t.start:.6g} s but its payloads together need {need:.6g} s "
                "(alpha + bytes/bandwidth)", transfer=idxs[0])


def _check_overlap(schedule: Schedule, usable: np.ndarray, out: _Collector) -> None:
    """No more than ``multiplicity`` transfers active at once on any physical link (a group
    counts once on a link its members share)."""
    suspects = overlap_suspects(schedule, usable)
    if not suspects:
        return
    per_link: dict[int, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    if isinstance(schedule.transfers, TransferColumns):  # the route table, not the objects
        rt = route_table(schedule)
        keep = np.isin(rt.link, np.fromiter(suspects, dtype=np.int64)) & usable[rt.tr]
        tr = rt.tr[keep]
        for i, u, li in zip(tr.tolist(), unit_array(schedule)[tr].tolist(),
                            rt.link[keep].tolist(), strict=True):
            per_link[li][u].append(i)
    else:
        unit = transfer_units(schedule)
        for i, t in enumerate(schedule.transfers):
            if usable[i]:
                for li in t.route:
                    if li in suspects:
                        per_link[li][unit[i]].append(i)
    topo = schedule.topology
    for li, units in sorted(per_link.items()):
        cap = topo.links[li].multiplicity
        events: list[tuple[float, int, int]] = []
        for u, idxs in units.items():
            start = min(schedule.transfers[i].start for i in idxs)
            end = max(schedule.transfers[i].end for i in idxs)
            done = float(early(end))
            if done <= start:
                continue
            events.append((start, 1, u))
            events.append((done, 0, u))
        events.sort()
        active: set[int] = set()
        for _, kind, i in events:
            if kind == 0:
                active.discard(i)
                continue
            if len(active) >= cap:
                others = sorted(active)[:3]
                out.add("overlap", f"transfer {i} overlaps transfer(s) {others} on link {li} "
                        f"{link_name(topo, li)} (capacity {cap})", transfer=i,
                        npu=schedule.transfers[i].src)
            active.add(i)


def _check_data(schedule: Schedule, usable: np.ndarray, out: _Collector,
                h: HopTable | None) -> None:
    """Causality, postconditions and reduction contributions.

    Chunks are screened in bulk (copies: earliest arrival per (NPU, chunk); reductions: a
    hashed replay); the suspect ones are replayed exactly, one at a time, with messages.
    """
    coll = schedule.collective
    if h is None:
        exact = {c.id for c in coll.chunks}
    else:
        exact, missing = screen_copies(schedule, usable, h)
        for cid, v in missing:
            out.add("postcondition", f"NPU {v} never receives chunk {cid}", chunk=cid, npu=v)
        exact |= screen_reductions(schedule, usable, h)
    if not exact:
        return
    by_chunk: dict[int, list[int]] = defaultdict(list)
    if h is not None:  # the hop table's (transfer, chunk) rows, in transfer order
        keep = np.isin(h.chunk, np.fromiter(exact, dtype=np.int64)) & usable[h.tr]
        chunk, tr = h.chunk[keep], h.tr[keep]
        order = np.argsort(chunk, kind="stable")
        for c, i in zip(chunk[order].tolist(), tr[order].tolist(), strict=True):
            by_chunk[c].append(i)
    else:
        for i, t in enumerate(schedule.transfers):
            if usable[i]:
                for c in t.chunks:
                    if c in exact:
                        by_chunk[c].append(i)
    for cid in sorted(exact):
        chunk = coll.chunks[cid]
        events = _events(schedule.transfers, by_chunk.get(cid, []))
        if chunk.reduce:
            _replay_reduce(chunk, schedule.transfers, events, out)
        else:
            _replay_copy(chunk, schedule.transfers, events, out)


def _events(transfers: tuple[Transfer, ...], idxs: list[int]
            ) -> list[tuple[float, int, float, int]]:
    """Sends at ``start`` and arrivals at ``end``; an arrival within rounding of a send's
    start (:func:`~tacos.check.tables.early`) comes first."""
    ev: list[tuple[float, int, float, int]] = []
    for i in idxs:
        t = transfers[i]
        ev.append((t.start, 1, t.start, i))
        ev.append((float(early(t.end)), 0, t.start, i))
    ev.sort()
    return ev


def _replay_copy(chunk, transfers, events, out: _Collector) -> None:
    held = set(chunk.pre)
    sent: dict[int, bool] = {}
    for _, kind, _, i in events:
        t = transfers[i]
        if kind == 1:
            ok = t.src in held
            sent[i] = ok
            if not ok:
                out.add("causality", f"transfer {i}: NPU {t.src} sends chunk {chunk.id} at "
                        f"t={t.start:.6g} s before holding it", transfer=i, chunk=chunk.id,
                        npu=t.src)
        elif sent.get(i):
            held.add(t.dst)
    for v in sorted(chunk.post - held):
        out.add("postcondition", f"NPU {v} never receives chunk {chunk.id}", chunk=chunk.id,
                npu=v)


def _replay_reduce(chunk, transfers, events, out: _Collector) -> None:
    contributors = sorted(chunk.pre)
    pos = {v: k for k, v in enumerate(contributors)}
    n = len(contributors)
    value: dict[int, np.ndarray] = {}
    for v in contributors:
        vec = np.zeros(n, dtype=np.int64)
        vec[pos[v]] = 1
        value[v] = vec
    snap: dict[int, np.ndarray | None] = {}
    for _, kind, _, i in events:
        t = transfers[i]
        if kind == 1:
            cur = value.get(t.src)
            snap[i] = cur
            if cur is None:
                out.add("causality", f"transfer {i}: NPU {t.src} sends chunk {chunk.id} at "
                        f"t={t.start:.6g} s before holding any value of it", transfer=i,
                        chunk=chunk.id, npu=t.src)
            continue
        got = snap.get(i)
        if got is None:
            continue
        if t.op == "reduce":
            prev = value.get(t.dst)
            value[t.dst] = got.copy() if prev is None else prev + got
        else:
            value[t.dst] = got  # values are never mutated in place, so sharing is safe
    expected = np.ones(n, dtype=np.int64)
    for v in sorted(chunk.post):
        vec = value.get(v)
        if vec is None:
            out.add("postcondition", f"NPU {v} never receives reduction chunk {chunk.id}",
                    chunk=chunk.id, npu=v)
            continue
        if np.array_equal(vec, expected):
            continue
        missing = [contributors[k] for k in np.flatnonzero(vec == 0)]
        extra = [(contributors[k], int(vec[k])) for k in np.flatnonzero(vec > 1)]
        parts = []
        if missing:
            parts.append(f"missing contribution(s) of NPU {_short(missing)}")
        if extra:
            parts.append("contribution(s) counted more than once: " + ", ".join(
                f"NPU {u} x{c}" for u, c in extra[:8]) + (" ..." if len(extra) > 8 else ""))
        out.add("contribution", f"NPU {v} ends with chunk {chunk.id} " + "; ".join(parts),
                chunk=chunk.id, npu=v)


def _short(items: list[int], limit: int = 8) -> str:
    text = ", ".join(str(x) for x in items[:limit])
    return text + (f", ... ({len(items)} in all)" if len(items) > limit else "")
