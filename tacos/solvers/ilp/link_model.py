"""The link-level model: CP-SAT schedules every (chunk, link) send on an integer clock.

The problem is the one the greedy solves on a switch-free (or unwound) topology, at its
granularity: the collective's chunks, each send one chunk over one link, holding one lane of
the link for ``α + size / bandwidth`` (:class:`~tacos.solvers.ilp.link_grid.LinkGrid`), no time
rounded to a coarse step.  For every chunk ``c`` and usable link ``l = (u, v)``:

* ``p[c,l]`` (bool): the send happens; ``s[c,l]`` its start tick; an optional interval of the
  send's length on ``l`` (``NoOverlap`` per link, ``Cumulative`` with the link's multiplicity);
* ``a[c,v]``: the tick ``v`` holds ``c`` (the end of the one send that brings it);
* an NPU that needs ``c`` receives it exactly once, a relay at most once, and only from an
  NPU that holds it (``p[c,(u,v)] <= received(c,u)``, ``s[c,l] >= a[c,u]``);
* the makespan ``M >= a[c,d]`` for every destination and ``M >=`` every send's end; minimize.

Merged transfers (``max_merge > 1``): ``lead[c,l]`` says ``c`` opens a transfer on ``l`` and
``member[c,c0,l]`` (``c0 < c``) that it rides in ``c0``'s; ``p = lead + Σ member``.  Only
leaders have intervals, as long as α plus the wire times of their chunks; members start and end
with their leader (so they must be held by its start and arrive at its end).  The lowest chunk
of a transfer leads it, so each set of chunks has one representation.

Redundant constraints that only tighten the proven bound: arrivals no earlier than the chunk's
tick distance; per link, the sends' total length fits between the earliest time anything can
be at its source and ``M``; per NPU, one mandatory "receive" interval per chunk it needs (the
last ``d_min`` ticks before the arrival, ``d_min`` its fastest in-link; merged, a piece of the
transfer that brings it, see :func:`_ingress_cumulative`) under a cumulative as wide as its
in-lanes (CP-SAT's energetic reasoning then sees the ingress bound with release times); per
source and without merging, the same for the first send of each chunk it alone holds (egress).

Warm start: a complete hint (every variable) from a schedule on the grid, usually the greedy's
(:func:`~tacos.solvers.ilp.link_grid.replay_in_ticks`), and ``M <=`` its makespan.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tacos.solvers.ilp.link_grid import INF, LinkGrid, Move, prune_dead_ends

BUILD_SHARE = 0.5  # most of the time limit building the model may take


class BuildTimeout(Exception):
    """Building the model ran past its share of the time limit."""


@dataclass
class LinkResult:
    """Outcome of one CP-SAT solve of the link model (times in ticks)."""

    status: str  # "optimal", "feasible" (stopped at the gap limit), "time_limit", "infeasible"
    moves: list[Move]
    objective: int | None
    bound: int
    seconds: float
    stats: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Vars:
    horizon: int
    merge: bool
    p: dict[tuple[int, int], Any] = field(default_factory=dict)  # chunk crosses link
    lead: dict[tuple[int, int], Any] = field(default_factory=dict)  # ... and leads its transfer
    s: dict[tuple[int, int], Any] = field(default_factory=dict)  # transfer start
    e: dict[tuple[int, int], Any] = field(default_factory=dict)  # transfer end
    member: dict[tuple[int, int, int], Any] = field(default_factory=dict)  # (c, leader, link)
    a: dict[tuple[int, int], Any] = field(default_factory=dict)  # arrival of chunk at NPU
    lo: dict[tuple[int, int], int] = field(default_factory=dict)  # domain floors for hints
    first: dict[int, Any] = field(default_factory=dict)
    received: dict[tuple[int, int], Any] = field(default_factory=dict)
    pieces: list[Any] = field(default_factory=list)  # (var, chunk, npu) of ingress pieces
    size: dict[tuple[int, int], Any] = field(default_factory=dict)  # leader's transfer length
    makespan: Any = None


def merge_pairs(grid: LinkGrid) -> int:
    """Member variables the model would have with merging on (chunk pairs x links)."""
    n = len(grid.collective.chunks)
    return n * (n - 1) // 2 * len(grid.topology.links)


def solve_link_model(grid: LinkGrid, *, hint: Sequence[Move] | None, horizon: int,
                     lower: int = 0, time_limit: float, seed: int = 0, threads: int = 1,
                     gap_limit: float = 0.0, max_merge: int = 1,
                     fixed: Sequence[Move] = ()) -> LinkResult:
    """Minimize the makespan (ticks) of the link model within ``horizon`` ticks.

    ``hint``: a complete schedule on the grid to start from (its makespan at most
    ``horizon``); ``lower``: a makespan bound proven elsewhere (ticks); ``gap_limit``: stop
    once the relative gap between incumbent and bound is at most this; ``max_merge``: most
    chunks one transfer may carry (1: one chunk per transfer); ``fixed``: moves that must
    happen exactly so (time clustering fixes the moves before its window).  The result's
    ``bound`` is CP-SAT's proven lower bound on the makespan (``lower`` at least), for
    schedules whose transfers carry at most ``max_merge`` chunks.
    """
    from ortools.sat.python import cp_model

    t0 = time.perf_counter()
    cp = cp_model.CpModel()
    try:
        v = _build(cp, grid, horizon, lower, max(1, int(max_merge)), fixed,
                   t0 + time_limit * BUILD_SHARE)
    except BuildTimeout:
        return LinkResult("time_limit", [], None, lower, time.perf_counter() - t0,
                          {"build_timeout": True})
    if hint:
        _hint(cp, grid, v, hint)
    cp.minimize(v.makespan)
    solver = cp_model.CpSolver()
    prm = solver.parameters
    prm.max_time_in_seconds = max(0.01, time_limit - (time.perf_counter() - t0))
    prm.random_seed = int(seed)
    prm.num_workers = max(1, int(threads))
    if gap_limit > 0:
        prm.relative_gap_limit = float(gap_limit)
    st = solver.solve(cp)
    seconds = time.perf_counter() - t0
    stats = {"send_vars": len(v.p), "merge_vars": len(v.member),
             "cpsat_status": solver.status_name(st), "branches": solver.num_branches,
             "conflicts": solver.num_conflicts,
             "build_seconds": round(seconds - solver.wall_time, 4),
             "cpsat_seconds": round(solver.wall_time, 4)}
    if st == cp_model.INFEASIBLE:
        return LinkResult("infeasible", [], None, horizon + 1, seconds, stats)
    if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return LinkResult("time_limit", [], None, max(lower, int(solver.best_objective_bound)),
                          seconds, stats)
    moves = prune_dead_ends(grid, _moves(solver, v))
    obj = grid.makespan(moves)
    bound = min(obj, max(lower, int(round(solver.best_objective_bound))))
    if st == cp_model.OPTIMAL:
        status = "optimal" if bound >= obj else "feasible"
    else:
        status = "time_limit"
    return LinkResult(status, moves, obj, bound, seconds, stats)


def _moves(solver, v: _Vars) -> list[Move]:
    """The transfers a solution switches on: each leader with its members."""
    groups: dict[tuple[int, int], list[int]] = {}
    for (c, li), lead in v.lead.items():
        if solver.boolean_value(lead):
            groups[(c, li)] = [c]
    for (c, c0, li), m in v.member.items():
        if solver.boolean_value(m):
            groups[(c0, li)].append(c)
    return [(tuple(sorted(cs)), li, int(solver.value(v.s[(c0, li)])))
            for (c0, li), cs in groups.items()]


def _build(cp, grid: LinkGrid, horizon: int, lower: int, max_merge: int,
           fixed: Sequence[Move], deadline: float) -> _Vars:
    topo, coll = grid.topology, grid.collective
    links = topo.links
    v = _Vars(horizon=horizon, merge=max_merge > 1)
    v.makespan = cp.new_int_var(max(0, lower), horizon, "M")
    est = [INF] * len(links)  # earliest tick anything can start on each link
    ingress: dict[int, list[tuple[Any, int, int]]] = {}
    incoming_of: dict[int, dict[int, list[int]]] = {}
    for ch in coll.chunks:
        c = ch.id
        need = ch.post - ch.pre
        if not need:
            continue
        if time.perf_counter() > deadline:
            raise BuildTimeout
        dist = grid.distances(c)
        back = _reverse_distances(grid, c, need)
        # NPUs that may receive c: destinations, and relays that can reach one in time
        recv_ok = {u for u in range(topo.n_nodes) if u not in ch.pre and dist[u] < INF
                   and (u in need or (grid.can_relay(u) and dist[u] + back[u] <= horizon))}
        holders = set(ch.pre) | recv_ok
        incoming: dict[int, list[int]] = {}
        for li, lk in enumerate(links):
            if lk.src not in holders or lk.dst not in recv_ok:
                continue
            d = grid.d(c, li)
            lo = dist[lk.src]
            hi = horizon - d - (back[lk.dst] if lk.dst not in need else 0)
            if lo > hi:
                continue
            v.p[(c, li)] = cp.new_bool_var(f"p{c}_{li}")
            v.s[(c, li)] = cp.new_int_var(lo, hi, f"s{c}_{li}")
            v.lo[(c, li)] = lo
            est[li] = min(est[li], lo)
            incoming.setdefault(lk.dst, []).append(li)
        incoming_of[c] = incoming
        for node, lis in incoming.items():
            a = cp.new_int_var(dist[node], horizon, f"a{c}_{node}")
            v.a[(c, node)] = a
            v.lo[(c, -1 - node)] = dist[node]
            ps = [v.p[(c, li)] for li in lis]
            if node in need:
                cp.add_exactly_one(ps)
                cp.add(v.makespan >= a)
                piece = min((grid.w(c, li) if v.merge else grid.d(c, li)) for li in lis)
                ingress.setdefault(node, []).append((a, piece, c))
            else:
                cp.add_at_most_one(ps)
        if any(node not in incoming for node in need):  # unreachable within the horizon
            cp.add_bool_or([])
    if time.perf_counter() > deadline:
        raise BuildTimeout
    _transfers(cp, grid, v, max_merge, deadline)
    for c, incoming in incoming_of.items():
        ch = coll.chunks[c]
        for node, lis in incoming.items():
            for li in lis:
                cp.add(v.a[(c, node)] == v.e[(c, li)]).only_enforce_if(v.p[(c, li)])
        for (cc, li), p in v.p.items():  # send only what you hold, after it arrives
            if cc != c or links[li].src in ch.pre:
                continue
            u = links[li].src
            cp.add_implication(p, _received(cp, v, c, u, incoming))
            cp.add(v.s[(c, li)] >= v.a[(c, u)]).only_enforce_if(p)
        if len(ch.pre) == 1 and not v.merge:  # the only holder sends c at least once
            (src,) = ch.pre
            outs = [li for li in topo.out_links[src] if (c, li) in v.p]
            if outs:
                _egress_first(cp, grid, v, c, outs)
    for chunks, li, s0 in fixed:  # moves the model cannot express are left free
        c = min(chunks)
        others = [(x, c, li) for x in chunks if x != c]
        if (c, li) not in v.lead or any(key not in v.member for key in others):
            continue
        cp.add(v.lead[(c, li)] == 1)
        cp.add(v.s[(c, li)] == s0)
        for key in others:
            cp.add(v.member[key] == 1)
    _link_energy(cp, grid, v, est)
    _ingress_cumulative(cp, grid, v, ingress, incoming_of)
    _egress_cumulative(cp, grid, v)
    return v


def _transfers(cp, grid: LinkGrid, v: _Vars, max_merge: int, deadline: float) -> None:
    """Transfer intervals on each link: one per leading chunk, members riding along."""
    per_link: dict[int, list[int]] = {}
    for c, li in v.p:
        per_link.setdefault(li, []).append(c)
    for li, chunks in per_link.items():
        if time.perf_counter() > deadline:
            raise BuildTimeout
        chunks.sort()
        ivs = []
        for i, c in enumerate(chunks):
            p, s = v.p[(c, li)], v.s[(c, li)]
            if not v.merge:
                v.lead[(c, li)] = p
                v.e[(c, li)] = s + grid.d(c, li)
                ivs.append(cp.new_optional_fixed_size_interval_var(s, grid.d(c, li), p, ""))
                cp.add(s + grid.d(c, li) <= v.makespan).only_enforce_if(p)
                continue
            lead = cp.new_bool_var(f"l{c}_{li}")
            v.lead[(c, li)] = lead
            joins = []
            for c0 in chunks[:i]:
                m = cp.new_bool_var(f"m{c}_{c0}_{li}")
                v.member[(c, c0, li)] = m
                joins.append(m)
            cp.add(p == lead + sum(joins))
            size_max = grid.alpha[li] + sum(grid.w(x, li) for x in chunks[i:])
            size = cp.new_int_var(grid.d(c, li), size_max, f"z{c}_{li}")
            e = cp.new_int_var(v.lo[(c, li)] + grid.d(c, li), v.horizon, f"e{c}_{li}")
            v.e[(c, li)] = e
            v.size[(c, li)] = size
            ivs.append(cp.new_optional_interval_var(s, size, e, lead, ""))
            cp.add(e <= v.makespan).only_enforce_if(p)
        if v.merge:
            for i, c in enumerate(chunks):
                size = v.size[(c, li)]
                members = [(c2, v.member[(c2, c, li)]) for c2 in chunks[i + 1:]]
                cp.add(size == grid.d(c, li) + sum(grid.w(c2, li) * m for c2, m in members))
                if members:
                    cp.add(sum(m for _c2, m in members) <= (max_merge - 1) * v.lead[(c, li)])
                for c2, m in members:
                    cp.add(v.s[(c2, li)] == v.s[(c, li)]).only_enforce_if(m)
                    cp.add(v.e[(c2, li)] == v.e[(c, li)]).only_enforce_if(m)
        m_lanes = grid.topology.links[li].multiplicity
        if m_lanes == 1:
            cp.add_no_overlap(ivs)
        else:
            cp.add_cumulative(ivs, [1] * len(ivs), m_lanes)


def _link_energy(cp, grid: LinkGrid, v: _Vars, est: list[int]) -> None:
    """Per link: the transfers' total length fits between its earliest start and ``M``."""
    load: dict[int, list[Any]] = {}
    for (c, li), p in v.p.items():
        load.setdefault(li, []).append(grid.w(c, li) * p + grid.alpha[li] * v.lead[(c, li)])
    for li, terms in load.items():
        m = grid.topology.links[li].multiplicity
        cp.add(sum(terms) <= m * (v.makespan - est[li]))


def _ingress_cumulative(cp, grid: LinkGrid, v: _Vars, ingress, incoming_of) -> None:
    """Per NPU: a piece of every chunk it needs, within the transfer that brings it, under a
    cumulative as wide as its in-lanes.  Unmerged, the piece is the last ``d_min`` ticks
    before the arrival; merged, a free piece before it, ``w_min`` ticks long plus ``α_min``
    when the chunk leads its transfer (the pieces of one transfer's chunks fit side by side
    inside it: α + the chunks' wire times)."""
    topo = grid.topology
    for node, items in ingress.items():
        lanes = sum(topo.links[li].multiplicity for li in topo.in_links[node])
        ivs = []
        for a, d, c in items:
            if v.merge:
                lis = incoming_of[c][node]
                lo = min(v.lo[(c, li)] for li in lis)
                amin = min(grid.alpha[li] for li in lis)
                r = cp.new_int_var(lo, v.horizon, f"q{c}_{node}")
                z = cp.new_int_var(d, d + amin, f"qz{c}_{node}")
                cp.add(z == d + amin * sum(v.lead[(c, li)] for li in lis))
                end = cp.new_int_var(lo + d, v.horizon, f"qe{c}_{node}")
                cp.add(end <= a)
                v.pieces.append((r, z, end, c, node, d, amin))
                ivs.append(cp.new_interval_var(r, z, end, ""))
            else:
                ivs.append(cp.new_fixed_size_interval_var(a - d, d, ""))
        cp.add_cumulative(ivs, [1] * len(ivs), max(1, lanes))


def _reverse_distances(grid: LinkGrid, c: int, need: frozenset[int]) -> list[int]:
    """Fewest ticks from every NPU to its nearest NPU in ``need`` (for pruning relays)."""
    import heapq

    topo = grid.topology
    dist = [INF] * topo.n_nodes
    heap = [(0, u) for u in need]
    for u in need:
        dist[u] = 0
    heapq.heapify(heap)
    while heap:
        t, u = heapq.heappop(heap)
        if t > dist[u]:
            continue
        for li in topo.in_links[u]:
            w = topo.links[li].src
            nt = t + grid.d(c, li)
            if nt < dist[w] and (w in need or grid.can_relay(w)
                                 or w in grid.collective.chunks[c].pre):
                dist[w] = nt
                heapq.heappush(heap, (nt, w))
    return dist


def _received(cp, v: _Vars, c: int, u: int, incoming: dict[int, list[int]]):
    """A literal true when ``u`` receives chunk ``c`` (the sum of its incoming sends)."""
    key = (c, u)
    if key not in v.received:
        lits = [v.p[(c, li)] for li in incoming.get(u, [])]
        r = cp.new_bool_var(f"r{c}_{u}")
        cp.add(sum(lits) == r) if lits else cp.add(r == 0)
        v.received[key] = r
    return v.received[key]


def _egress_first(cp, grid: LinkGrid, v: _Vars, c: int, outs: list[int]) -> None:
    """``f``: the start of one send of ``c`` from its only holder, for the egress cumulative
    (unmerged model only: there every send is its own interval)."""
    f = cp.new_int_var(min(v.lo[(c, li)] for li in outs), v.horizon, f"f{c}")
    sel = [cp.new_bool_var(f"sel{c}_{li}") for li in outs]
    cp.add_exactly_one(sel)
    for b, li in zip(sel, outs, strict=True):
        cp.add_implication(b, v.p[(c, li)])
        cp.add(f == v.s[(c, li)]).only_enforce_if(b)
    v.first[c] = (f, min(grid.d(c, li) for li in outs), list(zip(sel, outs, strict=True)))


def _egress_cumulative(cp, grid: LinkGrid, v: _Vars) -> None:
    """Per only-holder NPU: the first send of each of its chunks, under its out-lanes."""
    topo, coll = grid.topology, grid.collective
    per_src: dict[int, list[tuple[Any, int]]] = {}
    for c, (f, d, _sel) in v.first.items():
        (src,) = coll.chunks[c].pre
        per_src.setdefault(src, []).append((f, d))
    for src, items in per_src.items():
        lanes = sum(topo.links[li].multiplicity for li in topo.out_links[src])
        if len(items) > 1 and lanes > 0:
            ivs = [cp.new_fixed_size_interval_var(f, d, "") for f, d in items]
            cp.add_cumulative(ivs, [1] * len(ivs), lanes)


def _hint(cp, grid: LinkGrid, v: _Vars, moves: Sequence[Move]) -> None:
    """Hint every variable from ``moves`` (a complete schedule on the grid)."""
    links = grid.topology.links
    start: dict[tuple[int, int], int] = {}
    end: dict[tuple[int, int], int] = {}
    leader: dict[tuple[int, int], int] = {}
    arrive: dict[tuple[int, int], int] = {}
    for chunks, li, s0 in moves:
        e0 = s0 + grid.batch(chunks, li)
        c0 = min(chunks)
        for c in chunks:
            start[(c, li)], end[(c, li)], leader[(c, li)] = s0, e0, c0
            arrive[(c, links[li].dst)] = e0
    for key, p in v.p.items():
        on = key in start
        cp.add_hint(p, on)
        if v.merge:
            cp.add_hint(v.lead[key], on and leader[key] == key[0])
        cp.add_hint(v.s[key], start[key] if on else v.lo[key])
        if v.merge:
            c, li = key
            e0 = end[key] if on else v.lo[key] + grid.d(c, li)
            cp.add_hint(v.e[key], e0)
            if on and leader[key] == c:
                cp.add_hint(v.size[key], e0 - start[key])
            else:
                cp.add_hint(v.size[key], grid.d(c, li))
    for (c, c0, li), m in v.member.items():
        cp.add_hint(m, leader.get((c, li)) == c0 and c != c0)
    for (c, node), a in v.a.items():
        cp.add_hint(a, arrive.get((c, node), v.lo[(c, -1 - node)]))
    for (r, z, end, c, node, d, amin) in v.pieces:
        lis = [li for li in grid.topology.in_links[node] if (c, li) in start]
        if (c, node) not in arrive or not lis:
            continue
        li = lis[0]
        if leader[(c, li)] == c:  # the leader's piece (α and its wire time) opens the transfer
            r0, z0 = start[(c, li)], d + amin
        else:  # the others after it, in chunk order
            same = sorted(x for (x, l2), s0 in start.items() if l2 == li
                          and leader[(x, l2)] == leader[(c, li)])
            r0 = start[(c, li)] + grid.alpha[li] + sum(grid.w(x, li)
                                                       for x in same[:same.index(c)])
            z0 = d
        cp.add_hint(r, r0)
        cp.add_hint(z, z0)
        cp.add_hint(end, r0 + z0)
    for c, (f, _d, sel) in v.first.items():
        firsts = sorted((start[(c, li)], li) for _b, li in sel if (c, li) in start)
        pick = firsts[0][1] if firsts else None
        cp.add_hint(f, firsts[0][0] if firsts else v.lo[(c, sel[0][1])])
        for b, li in sel:
            cp.add_hint(b, li == pick)
    for key, r in v.received.items():
        cp.add_hint(r, key in arrive)
    cp.add_hint(v.makespan, grid.makespan(moves))
