"""Verify a symmetric plan without expanding it: memory grows with the plan, not the system.

:func:`verify_symmetric` checks a :class:`~tacos.model.symmetric_plan.SymmetricPlan` with the
same rules :func:`tacos.check.verify.verify_schedule` applies to the transfers it stands for,
by parts that are each as small as a template or an axis's embedding:

``template``
    every distinct template schedule passes :func:`~tacos.check.verify.verify_schedule` on the
    system's template topology of its axis, and its collective is exactly the reduce-scatter,
    all-gather or all-reduce of the axis's members with the sizes the data flow expects
    (below): so within one group the links, durations, lane counts, causality and
    contributions hold.
``embedding``
    for every axis used, each copy's members are the NPUs whose coordinates differ only on that
    axis (member j at coordinate j), every NPU is a member of exactly one copy, template
    switches land on switches, a copy's nodes are distinct, and every template link lands on a
    global link with the mapped ends, the same α and bandwidth and at least its lane count
    (read from :meth:`~tacos.model.symmetry.SymmetricSystem.link_table`, the system's own
    definition); the copies of an axis use disjoint links.  So every copy runs the template
    on an isomorphic, private part of the machine.
``overlap``
    phases whose time windows overlap use disjoint global links (the links the template's
    transfers use, in every copy).
``order``
    a part's phases run one after another (a phase starts when the previous one has ended);
    a joint phase is a phase of every part it moves.
``data``
    the symbolic state of every part, the same for every NPU by symmetry: the set of axes its
    held range is pinned to (member j holds the pieces whose digit is j) and the set of axes
    its values are reduced over.  A reduce-scatter along a needs a unpinned and not yet
    reduced (each contribution counted once), an all-gather along a needs a pinned, an
    all-reduce along a (a fused digit, in all-reduce plans only) needs a unpinned and not yet
    reduced and leaves it unpinned; template chunk sizes must equal the held range's.  At the
    end, all-reduce: nothing pinned, everything reduced; reduce-scatter: everything pinned and
    reduced; all-gather: nothing pinned.  A joint phase (``Phase.joint``) needs the parts it
    moves in one state, and its template's size is their held ranges together.  A mixed
    phase (``Phase.scatter``, all-reduce plans) is an all-gather of the parts it moves and a
    reduce-scatter of its scatter parts along the same axis, each by the rules above; its
    template's collective is exactly :func:`~tacos.model.symmetric_plan.mixed_collective` of
    the two sizes (so a copy where a reduction is due, or the other way round, fails the
    template's own check).  A ``reduce`` along a (all-reduce plans; templates that reduce in
    the switches, :mod:`tacos.scale.sharp`) needs a unpinned and not reduced, and leaves the
    part reduced over a but held by member 0 of every group only (**rooted** at a): the
    part's next phase must be the ``broadcast`` along a, which leaves it unpinned; the
    templates are exactly the reduce and the broadcast of the held range with root member 0.
    A part may not end rooted.

A plan that passes stands for a schedule that :func:`verify_schedule` would accept
(:func:`tacos.model.symmetric_plan.expand` writes it out; the tests check both agree on small
systems).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tacos.check.tables import TIME_EPS
from tacos.check.verify import verify_schedule
from tacos.model.patterns import build
from tacos.model.symmetric_plan import (
    PLAN_KINDS,
    ROOTED,
    SymmetricPlan,
    initial_fixed,
    mixed_collective,
)
from tacos.model.symmetry import SymmetricSystem


@dataclass
class SymmetricReport:
    """What :func:`verify_symmetric` found: ``problems`` as ``(rule, text)``, empty when ok."""

    makespan: float
    problems: list[tuple[str, str]] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when no rule was broken."""
        return not self.problems

    def rules(self) -> set[str]:
        """The rules broken."""
        return {r for r, _ in self.problems}

    def __str__(self) -> str:
        if self.ok:
            return f"OK: symmetric plan, makespan {self.makespan:.6g} s"
        return "\n".join(f"{r}: {t}" for r, t in self.problems[:20])

    def text(self, limit: int | None = None) -> str:
        """Human-readable summary, one broken rule per line (first ``limit`` if given), in
        the words of :meth:`tacos.check.verify.VerifyReport.text`."""
        if self.ok:
            return f"symmetric plan verified: no violations (makespan {self.makespan:.6g} s)"
        shown = self.problems if limit is None else self.problems[:limit]
        total = len(self.problems)
        lines = [f"symmetric plan has {total} violation{'s' if total != 1 else ''}:"]
        lines += [f"  [{r}] {t}" for r, t in shown]
        if total > len(shown):
            lines.append(f"  ... and {total - len(shown)} more")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        """JSON-safe dict ``{ok, makespan, violations: [{rule, message}], stats}``."""
        return {"ok": self.ok, "makespan": self.makespan,
                "violations": [{"rule": r, "message": t} for r, t in self.problems],
                "stats": dict(self.stats)}

    def raise_if_failed(self, limit: int = 10) -> SymmetricReport:
        """Raise :class:`~tacos.errors.VerificationError` listing the first violations."""
        if not self.ok:
            from tacos.errors import VerificationError

            raise VerificationError(self.text(limit), hint="the symmetric plan is wrong")
        return self


def _late(a: float, b: float) -> bool:
    """True when time ``a`` is before ``b`` beyond rounding."""
    return a < b - TIME_EPS * max(abs(a), abs(b), 1e-30)


def check_embedding(system: SymmetricSystem, axis: int) -> list[str]:
    """Problems with the copies of ``axis``'s template (rule ``embedding``)."""
    out: list[str] = []
    tp = system.template(axis)
    emb = system.embed(axis)
    r, n = system.axes[axis].size, system.n_npus
    if tp.n_npus != r or emb.nodes.shape[1] != tp.n_nodes or emb.links.shape[1] != len(tp.links):
        return [f"axis {axis}: the embedding has the wrong shape for its template"]
    members = emb.nodes[:, :r]
    if np.bincount(members.ravel(), minlength=n)[:n].tolist() != [1] * n or members.max() >= n:
        out.append(f"axis {axis}: the copies' members are not every NPU exactly once")
    want = np.repeat(np.asarray(emb.coords)[:, None, :], r, axis=1).copy()
    want[:, :, axis] = np.arange(r)
    if not np.array_equal(system.coords_of(members.ravel()).reshape(want.shape), want):
        out.append(f"axis {axis}: a copy's member j is not the NPU at coordinate j")
    if (emb.nodes[:, r:] < n).any():
        out.append(f"axis {axis}: a template switch lands on an NPU")
    srt = np.sort(emb.nodes, axis=1)
    if (srt[:, 1:] == srt[:, :-1]).any():
        out.append(f"axis {axis}: a copy maps two template nodes to one node")
    ids = emb.links.ravel()
    if ids.min() < 0 or ids.max() >= system.n_links:
        return out + [f"axis {axis}: a template link lands outside the system's links"]
    table = system.link_table(ids)
    shape = emb.links.shape
    t_src = np.array([lk.src for lk in tp.links])
    t_dst = np.array([lk.dst for lk in tp.links])
    rows = np.arange(shape[0])[:, None]
    if not (np.array_equal(table.src.reshape(shape), emb.nodes[rows, t_src])
            and np.array_equal(table.dst.reshape(shape), emb.nodes[rows, t_dst])):
        out.append(f"axis {axis}: a template link lands on a link with other ends")
    for what, got, ref in (("alpha", table.alpha, [lk.alpha for lk in tp.links]),
                           ("bandwidth", table.bandwidth, [lk.bandwidth for lk in tp.links])):
        if not np.array_equal(got.reshape(shape), np.broadcast_to(np.array(ref), shape)):
            out.append(f"axis {axis}: a template link lands on a link of another {what}")
    if (table.multiplicity.reshape(shape) < np.array([lk.multiplicity for lk in tp.links])).any():
        out.append(f"axis {axis}: a template link lands on a link with fewer lanes")
    if len(np.unique(ids)) != len(ids):
        out.append(f"axis {axis}: two copies (or two template links) share a link")
    return out


def verify_symmetric(plan: SymmetricPlan) -> SymmetricReport:
    """Check ``plan`` by the rules in the module docstring; never expands it."""
    system = plan.system
    rep = SymmetricReport(plan.makespan)
    add = rep.problems.append
    n, n_axes = system.n_npus, len(system.axes)
    if plan.kind not in PLAN_KINDS:
        add(("data", f"unknown collective {plan.kind!r}"))
        return rep
    if sum(plan.parts) != plan.size or any(p % n or p <= 0 for p in plan.parts):
        add(("data", f"parts {list(plan.parts)} do not split {plan.size} bytes into whole "
                     f"pieces for {n} NPUs"))
        return rep
    bad_axis = sorted({p.axis for p in plan.phases if not 0 <= p.axis < n_axes})
    if bad_axis:
        add(("embedding", f"no axis {bad_axis[0]}"))
        return rep
    for axis in sorted({p.axis for p in plan.phases}):
        add_all = [("embedding", t) for t in check_embedding(system, axis)]
        rep.problems.extend(add_all)
    rep.stats["axes"] = len({p.axis for p in plan.phases})
    # templates, each distinct one once
    checked: dict[int, bool] = {}
    for ph in plan.phases:
        t = ph.template
        if id(t) in checked:
            continue
        ok = t.topology == system.template(ph.axis)
        if not ok:
            add(("template", f"part {ph.part}: the template of axis {ph.axis} is not on the "
                             "axis's group"))
        else:
            report = verify_schedule(t)
            if not report.ok:
                ok = False
                first = report.text(1).splitlines()[1].strip()   # the first violation
                add(("template", f"part {ph.part} axis {ph.axis}: {first}"))
        checked[id(t)] = ok
    rep.stats["templates"] = len(checked)
    # data flow and order: every part's state, phases in time order
    n_parts = len(plan.parts)
    fixed = [set(initial_fixed(plan.kind, n_axes)) for _ in range(n_parts)]
    reduced = [set(range(n_axes)) if plan.kind == "allgather" else set()
               for _ in range(n_parts)]
    region = [p // n if plan.kind == "allgather" else p for p in plan.parts]
    rooted: list[int | None] = [None] * n_parts   # the axis a part is reduced into member 0 of
    prev_end = [0.0] * n_parts
    for ph in sorted(plan.phases, key=lambda p: (p.start, p.part)):
        moved, every = ph.moved, ph.every_part
        q = ph.part
        if len(set(every)) != len(every) or not all(0 <= x < n_parts for x in every):
            add(("data", f"a phase along axis {ph.axis} moves parts {list(every)}: not "
                         f"distinct parts of the plan's {n_parts}"))
            continue
        for qs in (moved, ph.scatter):
            if len({(frozenset(fixed[x]), frozenset(reduced[x])) for x in qs}) > 1:
                add(("data", f"the joint phase of parts {list(qs)} along axis {ph.axis} "
                             "moves parts in different states"))
        a, r = ph.axis, system.axes[ph.axis].size
        for x in every:
            if _late(ph.start, prev_end[x]):
                add(("order", f"part {x}: the {ph.kind} along axis {a} starts at {ph.start} "
                              f"before the previous phase ends ({prev_end[x]})"))
            prev_end[x] = max(prev_end[x], ph.end)
        for x in every:
            if rooted[x] is not None and not (ph.kind == "broadcast" and a == rooted[x]):
                add(("data", f"part {x}: a {ph.kind} along axis {a} while only member 0 of "
                             f"axis {rooted[x]} holds the part (reduced into it, not yet "
                             "broadcast)"))
        if ph.kind in ROOTED and (ph.joint or ph.scatter or plan.kind != "allreduce"):
            add(("data", f"part {q}: a {ph.kind} phase moves one part of an all-reduce plan"))
            continue
        if ph.scatter and (ph.kind != "allgather" or plan.kind != "allreduce"):
            add(("data", f"part {q}: a mixed phase (parts {list(ph.scatter)} reduce-scattered "
                         f"in it) is a {ph.kind} in a {plan.kind} plan, not an all-gather in "
                         "an all-reduce plan"))
            continue
        scattered = 0
        if ph.scatter:
            s0 = ph.scatter[0]
            if a in fixed[s0] or a in reduced[s0]:
                add(("data", f"part {s0}: reduce-scatter along axis {a} twice (in the mixed "
                             f"phase of part {q})"))
            scattered = sum(region[x] for x in ph.scatter)
            for x in ph.scatter:
                fixed[x].add(a)
                reduced[x].add(a)
                region[x] //= r
        if ph.kind == "reducescatter":
            if a in fixed[q] or a in reduced[q]:
                add(("data", f"part {q}: reduce-scatter along axis {a} twice"))
            want = (sum(region[x] for x in moved), "reducescatter")
            for x in moved:
                fixed[x].add(a)
                reduced[x].add(a)
                region[x] //= r
        elif ph.kind == "allgather":
            if a not in fixed[q]:
                add(("data", f"part {q}: all-gather along axis {a}, whose range is whole"))
            for x in moved:
                region[x] *= r
                fixed[x].discard(a)
            want = (sum(region[x] for x in moved), "allgather")
        elif ph.kind == "allreduce" and plan.kind == "allreduce":
            if a in fixed[q] or a in reduced[q]:
                add(("data", f"part {q}: all-reduce along axis {a}, already reduced "
                             "over it or pinned to it"))
            want = (sum(region[x] for x in moved), "allreduce")
            for x in moved:
                reduced[x].add(a)
        elif ph.kind == "reduce":
            if a in fixed[q] or a in reduced[q]:
                add(("data", f"part {q}: reduce along axis {a}, already reduced over it or "
                             "pinned to it"))
            want = (region[q], "reduce")
            reduced[q].add(a)
            rooted[q] = a
        elif ph.kind == "broadcast":
            if rooted[q] != a:
                add(("data", f"part {q}: broadcast along axis {a}, whose range was not "
                             "reduced into member 0"))
            want = (region[q], "broadcast")
            rooted[q] = None
        else:
            add(("data", f"part {q}: unknown phase kind {ph.kind!r}"))
            continue
        split = want[0] % r if ph.kind not in ROOTED else 0   # rooted: one chunk
        if (split or want[0] <= 0 or any(region[x] <= 0 for x in every)
                or (ph.scatter and (scattered % r or scattered <= 0))):
            add(("data", f"part {q}: {want[0]} bytes do not split over {r} members"))
            continue
        if ph.scatter:
            ref_chunks = mixed_collective(r, want[0], scattered).chunks
            what = (f"mixed all-gather of {want[0]} bytes and reduce-scatter of {scattered} "
                    "bytes")
        elif ph.kind in ROOTED:
            ref_chunks = build(want[1], range(r), size=want[0], root=0).chunks
            what = f"{want[1]} of {want[0]} bytes (root: member 0)"
        else:
            ref_chunks = build(want[1], range(r), size=want[0]).chunks
            what = f"{want[1]} of {want[0]} bytes"
        if ph.template.collective.chunks != ref_chunks:
            add(("data", f"part {q}: the {ph.kind} along axis {a} is not the {what} its "
                         "range needs"))
    done = {"allreduce": (set(), set(range(n_axes))),
            "reducescatter": (set(range(n_axes)), set(range(n_axes))),
            "allgather": (set(), set(range(n_axes)))}[plan.kind]
    for q in range(n_parts):
        if rooted[q] is not None:
            add(("data", f"part {q} ends reduced into member 0 of axis {rooted[q]}, never "
                         "broadcast"))
        elif (fixed[q], reduced[q]) != done:
            add(("data", f"part {q} ends pinned to axes {sorted(fixed[q])} and reduced over "
                         f"{sorted(reduced[q])}, not a finished {plan.kind}"))
    # link classes of phases that overlap in time
    used: dict[tuple[int, tuple[int, ...]], np.ndarray] = {}

    def links_of(ph) -> np.ndarray:
        key = (ph.axis, tuple(sorted({li for t in ph.template.transfers for li in t.route})))
        if key not in used:
            emb = system.embed(ph.axis)
            used[key] = np.unique(emb.links[:, list(key[1])]) if key[1] else \
                np.zeros(0, dtype=np.int64)
        return used[key]

    order = sorted(plan.phases, key=lambda p: p.start)
    clash: dict[tuple, bool] = {}
    pairs = 0
    for i, a in enumerate(order):
        for b in order[i + 1:]:
            if not _late(b.start, a.end):
                break
            pairs += 1
            ka = (a.axis, id(a.template))
            kb = (b.axis, id(b.template))
            key = (ka, kb)
            if key not in clash:
                clash[key] = bool(np.intersect1d(links_of(a), links_of(b),
                                                 assume_unique=True).size)
            if clash[key]:
                add(("overlap", f"part {a.part} axis {a.axis} ({a.start:.6g}-{a.end:.6g} s) and "
                                f"part {b.part} axis {b.axis} ({b.start:.6g}-{b.end:.6g} s) "
                                "share links"))
    rep.stats["overlapping_pairs"] = pairs
    rep.stats["phases"] = len(plan.phases)
    return rep
