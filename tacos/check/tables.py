"""Vectorized screens over large schedules, shared by the verifier and the simulator.

A schedule is flattened into a :class:`HopTable` (one row per (transfer, chunk) pair), read
straight from the columns of a column-backed schedule
(:class:`~tacos.model.columns.TransferColumns`: no ``Transfer`` object is built) or from the
``Transfer`` objects of a tuple.  The screens below find, in bulk with numpy, the few transfers,
links and chunks that *may* break a rule; the verifier then runs its exact, message-producing
checks on those only.  Each screen is conservative: anything it lets through provably passes
the exact check.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from itertools import chain

import numpy as np

from tacos.model.columns import TransferColumns
from tacos.model.schedule import Schedule
from tacos.model.transfer import OPS

DURATION_RTOL = 1e-9
TIME_EPS = 64 * float(np.finfo(np.float64).eps)
"""Relative slack of time comparisons (about 1.4e-14).  Times come out of α-β arithmetic
(sums of latencies and bytes/bandwidth, tick conversions) with a rounding error of a few ulps of
their own magnitude, so two times closer than ``TIME_EPS × |t|`` are the same instant: an
arrival at ``t`` counts from :func:`early` ``(t)``.  Relative, not a fraction of the makespan, so
a schedule with huge latencies verifies and a short transfer late in a long one is not taken
for a zero-length one."""


def early(t):
    """``t`` less its rounding slack (float or array): when an arrival at ``t`` counts."""
    return t - TIME_EPS * np.abs(t)


def duration_slack(start, end):
    """Rounding slack of ``end - start`` (float or array), for the duration rule."""
    return TIME_EPS * np.maximum(np.abs(start), np.abs(end))


@dataclass(frozen=True)
class HopTable:
    """One row per (transfer, chunk) pair of a schedule, as numpy arrays.

    ``tr`` is the transfer index; ``offsets[i]`` the first row of transfer ``i``.  Built from
    columns, ``src``/``dst``/``chunk`` may be ``int32`` and ``counts`` a read-only broadcast:
    widen before multiplying.
    """

    tr: np.ndarray
    chunk: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    start: np.ndarray
    end: np.ndarray
    counts: np.ndarray
    offsets: np.ndarray


def _columns(schedule: Schedule) -> TransferColumns | None:
    """The schedule's columns when it is column-backed (else None: read the objects)."""
    ts = schedule.transfers
    return ts if isinstance(ts, TransferColumns) else None


def hop_table(schedule: Schedule) -> HopTable:
    """Build the :class:`HopTable`; raises ``TypeError``/``ValueError`` on non-numeric fields."""
    c = _columns(schedule)
    if c is not None:
        return _hop_table_columns(c)
    ts = schedule.transfers
    n = len(ts)
    counts = np.fromiter((len(t.chunks) for t in ts), dtype=np.int64, count=n)
    total = int(counts.sum())
    tr = np.repeat(np.arange(n, dtype=np.int64), counts)
    chunk = np.fromiter(chain.from_iterable(t.chunks for t in ts), dtype=np.int64, count=total)
    src = np.fromiter((t.src for t in ts), dtype=np.int64, count=n)
    dst = np.fromiter((t.dst for t in ts), dtype=np.int64, count=n)
    start = np.fromiter((t.start for t in ts), dtype=np.float64, count=n)
    end = np.fromiter((t.end for t in ts), dtype=np.float64, count=n)
    offsets = np.cumsum(counts) - counts
    return HopTable(tr, chunk, src[tr], dst[tr], start[tr], end[tr], counts, offsets)


def _hop_table_columns(c: TransferColumns) -> HopTable:
    n = len(c)
    ar = np.arange(n, dtype=np.int64)
    if c.single_chunk:  # one row per transfer: the columns themselves
        return HopTable(ar, c.chunk_ids, c.src, c.dst, c.start, c.end, c.chunk_counts(), ar)
    counts = c.chunk_counts()
    tr = np.repeat(ar, counts)
    return HopTable(tr, c.chunk_ids, c.src[tr], c.dst[tr], c.start[tr], c.end[tr], counts,
                    c.chunk_ptr[:-1])


def transfer_fields(schedule: Schedule, h: HopTable) -> tuple[np.ndarray, ...]:
    """Per transfer ``(src, dst, start, end)`` arrays (views of a column-backed schedule)."""
    c = _columns(schedule)
    if c is not None:
        return c.src, c.dst, c.start, c.end
    if not len(h.offsets):
        return h.src, h.dst, h.start, h.end
    return h.src[h.offsets], h.dst[h.offsets], h.start[h.offsets], h.end[h.offsets]


def op_column(schedule: Schedule) -> np.ndarray | None:
    """Per transfer, its op's index in :data:`~tacos.model.schedule.OPS` (``len(OPS)`` for an
    unknown op); None when every transfer copies."""
    c = _columns(schedule)
    if c is not None:
        return np.asarray(c.op) if c.has_reduce else None
    index = {o: i for i, o in enumerate(OPS)}
    ops = np.fromiter((index.get(t.op, len(OPS)) if isinstance(t.op, str) else len(OPS)
                       for t in schedule.transfers), dtype=np.int64,
                      count=len(schedule.transfers))
    return ops if ops.any() else None


@dataclass(frozen=True)
class RouteTable:
    """One row per (transfer, route link) pair: ``tr`` the transfer, ``link`` the physical link;
    ``offsets[i]`` the first row of transfer ``i``, ``counts[i]`` its route length."""

    tr: np.ndarray
    link: np.ndarray
    counts: np.ndarray
    offsets: np.ndarray


def route_table(schedule: Schedule) -> RouteTable:
    """Build the :class:`RouteTable`.  A route that is not a tuple of integers counts as empty
    (the verifier's route rule reports it)."""
    c = _columns(schedule)
    if c is not None:
        n = len(c)
        if c.single_link:
            ar = np.arange(n, dtype=np.int64)
            return RouteTable(ar, c.route_links, c.route_counts(), ar)
        counts = c.route_counts()
        return RouteTable(np.repeat(np.arange(n, dtype=np.int64), counts), c.route_links,
                          counts, c.route_ptr[:-1])
    ts = schedule.transfers
    n = len(ts)
    routes = [_route(t.route) for t in ts]
    counts = np.fromiter((len(r) for r in routes), dtype=np.int64, count=n)
    total = int(counts.sum())
    link = np.fromiter(chain.from_iterable(routes), dtype=np.int64, count=total)
    tr = np.repeat(np.arange(n, dtype=np.int64), counts)
    return RouteTable(tr, link, counts, np.cumsum(counts) - counts)


def _route(route: object) -> tuple[int, ...]:
    if type(route) is tuple and all(type(x) is int for x in route):
        return route
    return ()


def route_costs(schedule: Schedule, rt: RouteTable) -> tuple[np.ndarray, np.ndarray]:
    """Per transfer, its route's Σ α and narrowest bandwidth (cut-through cost).

    Links out of range count as α 0 and bandwidth 1 B/s, and an empty route as bandwidth
    1 B/s; the route checks report them.
    """
    return schedule.topology.link_arrays.route_costs(rt.tr, rt.link, len(schedule.transfers))


def range_join(a_key: np.ndarray, a_val: np.ndarray, a_id: np.ndarray, q_key: np.ndarray,
               q_val: np.ndarray, q_id: np.ndarray, *, inclusive: bool
               ) -> tuple[np.ndarray, np.ndarray]:
    """All pairs ``(q_id[i], a_id[j])`` with ``a_key[j] == q_key[i]`` and ``a_val[j] <= q_val[i]``
    (``<`` when not ``inclusive``), vectorized: sort ``a`` by key, find each query's key block
    by binary search, then walk all blocks in lock-step (blocks are short: one per
    (node, chunk) pair)."""
    empty = np.zeros(0, dtype=np.int64)
    if len(a_key) == 0 or len(q_key) == 0:
        return empty, empty
    order = np.argsort(a_key, kind="stable")
    keys = a_key[order]
    lo = np.searchsorted(keys, q_key, "left")
    hi = np.searchsorted(keys, q_key, "right")
    live = np.flatnonzero(hi > lo)
    out_q, out_a = [empty], [empty]
    offset = 0
    while len(live):
        idx = lo[live] + offset
        ok = idx < hi[live]
        live, idx = live[ok], idx[ok]
        j = order[idx]
        hit = a_val[j] <= q_val[live] if inclusive else a_val[j] < q_val[live]
        out_q.append(q_id[live[hit]])
        out_a.append(a_id[j[hit]])
        offset += 1
    return np.concatenate(out_q), np.concatenate(out_a)


SCREEN_BLOCK = 1 << 20
"""Transfers per block of the per-transfer screen on a large column-backed schedule (its
temporaries are a few dozen bytes per transfer: screened a block at a time they stay small)."""


def transfer_suspects(schedule: Schedule, h: HopTable | None) -> np.ndarray:
    """Vectorized pre-screen: True for transfers that may break a per-transfer rule."""
    cols = _columns(schedule)
    if cols is None or h is None or len(cols) <= SCREEN_BLOCK:
        return _transfer_suspects(schedule, h)
    bad = np.zeros(len(cols), dtype=bool)
    for a in range(0, len(cols), SCREEN_BLOCK):
        b = min(len(cols), a + SCREEN_BLOCK)
        part = Schedule(schedule.topology, schedule.collective, cols[a:b])
        bad[a:b] = _transfer_suspects(part, hop_table(part))
    return bad


def _transfer_suspects(schedule: Schedule, h: HopTable | None) -> np.ndarray:
    ts = schedule.transfers
    n = len(ts)
    if h is None:
        return np.ones(n, dtype=bool)
    cols = _columns(schedule)
    topo, coll = schedule.topology, schedule.collective
    try:
        rt = route_table(schedule)
    except (TypeError, ValueError, OverflowError):
        return np.ones(n, dtype=bool)
    links = topo.links
    n_links, n_nodes = len(links), topo.n_nodes
    bad = (rt.counts == 0) | (h.counts == 0)
    out_of_range = (rt.link < 0) | (rt.link >= n_links)
    bad[rt.tr[out_of_range]] = True
    li = np.where(out_of_range, 0, rt.link)
    src, dst, start, end = transfer_fields(schedule, h)
    is_switch = np.array([False] * topo.n_npus + [True] * len(topo.switches), dtype=bool)
    if n_links and len(rt.link):
        lsrc = np.array([lk.src for lk in links], dtype=np.int64)
        ldst = np.array([lk.dst for lk in links], dtype=np.int64)
        bad_via = np.array([lk.via is not None and not (topo.is_switch(lk.via)
                                                        and lk.via < n_nodes) for lk in links])
        bad[rt.tr[bad_via[li]]] = True
        nonempty = rt.counts > 0
        first = rt.offsets[nonempty]
        last = first + rt.counts[nonempty] - 1
        idx = np.flatnonzero(nonempty)
        bad[idx[lsrc[li[first]] != src[idx]]] = True
        bad[idx[ldst[li[last]] != dst[idx]]] = True
        # consecutive links join up, and every inner node is a switch
        inner = np.ones(len(li), dtype=bool)
        inner[rt.offsets[nonempty]] = False
        pos = np.flatnonzero(inner)
        broken = (ldst[li[pos - 1]] != lsrc[li[pos]]) | ~is_switch[lsrc[li[pos]]]
        bad[rt.tr[pos[broken]]] = True
        multi = np.flatnonzero(rt.counts > 1)
        if len(multi) and cols is not None:  # a link used twice: checked exactly on suspects
            sel = (rt.counts > 1)[rt.tr]
            r, lk = rt.tr[sel], rt.link[sel]
            order = np.lexsort((lk, r))
            r, lk = r[order], lk[order]
            bad[r[1:][(r[1:] == r[:-1]) & (lk[1:] == lk[:-1])]] = True
        elif len(multi):  # a node visited twice: checked exactly on the suspects
            bad[multi] |= np.fromiter((len(set(ts[i].route)) != len(ts[i].route)
                                       for i in multi.tolist()), dtype=bool, count=len(multi))
    bad_node = np.array([n.failed for n in topo.npus] + [True] * len(topo.switches), dtype=bool)
    for ends in (src, dst):
        out_of_range = (ends < 0) | (ends >= n_nodes)
        bad |= out_of_range | bad_node[np.where(out_of_range, 0, ends)]
    chunk_bad = (h.chunk < 0) | (h.chunk >= coll.n_chunks)
    bad[h.tr[chunk_bad]] = True
    one_each = len(h.tr) == n and bool(np.all(h.counts == 1))
    if not one_each:  # a chunk carried twice by one transfer
        order = np.lexsort((h.chunk, h.tr))
        dup = (h.tr[order][1:] == h.tr[order][:-1]) & (h.chunk[order][1:] == h.chunk[order][:-1])
        bad[h.tr[order][1:][dup]] = True
    ch = np.where(chunk_bad, 0, h.chunk)
    is_reduce = np.fromiter((c.reduce for c in coll.chunks), dtype=bool, count=coll.n_chunks)
    sizes = np.fromiter((c.size for c in coll.chunks), dtype=np.float64, count=coll.n_chunks)
    ops = op_column(schedule)
    if ops is not None:
        bad |= ops >= len(OPS)
    if coll.n_chunks:
        if ops is not None:
            reduce_op = ops == OPS.index("reduce")
            bad[h.tr[reduce_op[h.tr] & ~is_reduce[ch]]] = True
        if one_each:
            nbytes = sizes[ch]
        else:
            nbytes = np.bincount(h.tr, weights=sizes[ch], minlength=n)
        alpha, bw = route_costs(schedule, rt)
        need = alpha + nbytes / bw
        with np.errstate(invalid="ignore"):
            bad |= ~((end - start) >= need * (1 - DURATION_RTOL)
                     - duration_slack(start, end))
    bad |= ~np.isfinite(start) | ~np.isfinite(end) | (start < 0)
    return bad


DENSE_PER_ROW, DENSE_SLACK = 4, 4096
""":func:`screen_copies` keeps one slot per (node, chunk) key when there are at most this many
per (transfer, chunk) row plus this many (9 bytes a slot), else sorts and searches."""


def screen_copies(schedule: Schedule, usable: list[bool], h: HopTable
                  ) -> tuple[set[int], list[tuple[int, int]]]:
    """Bulk check of copy chunks: ``(ids that need an exact replay, missing (chunk, npu))``.

    If every send finds its chunk at the sender (in ``pre`` or by the earliest arrival of any
    transfer), every arrival is valid, so the earliest arrivals are the real ones and the
    postconditions can be checked against them.
    """
    coll = schedule.collective
    n_chunks = coll.n_chunks
    copies = [c for c in coll.chunks if not c.reduce]
    if not copies:
        return set(), []
    is_reduce = np.fromiter((c.reduce for c in coll.chunks), dtype=bool, count=n_chunks)
    ok = np.asarray(usable, dtype=bool)[h.tr] if len(h.tr) else np.zeros(0, dtype=bool)
    ok &= ~is_reduce[np.where(ok, h.chunk, 0)]
    if bool(ok.all()):  # nothing to drop: no copies of the (large) columns
        chunk, src, dst, start, end = h.chunk, h.src, h.dst, h.start, h.end
    else:
        chunk, src, dst = h.chunk[ok], h.src[ok], h.dst[ok]
        start, end = h.start[ok], h.end[ok]
    del ok
    pre_keys = np.unique(np.fromiter(
        chain.from_iterable((v * n_chunks + c.id for v in c.pre) for c in copies),
        dtype=np.int64))
    space = schedule.topology.n_nodes * n_chunks
    if space <= DENSE_PER_ROW * len(chunk) + DENSE_SLACK:  # a slot per (node, chunk) key
        return _screen_copies_dense(coll, copies, pre_keys, space, chunk, src, dst, start, end)
    keys_in = dst.astype(np.int64) * n_chunks
    keys_in += chunk
    order = np.lexsort((end, keys_in))
    ks = keys_in[order]
    del keys_in
    first = np.ones(len(ks), dtype=bool)
    first[1:] = ks[1:] != ks[:-1]
    arrived = ks[first]
    del ks
    first_end = end[order[first]]
    del order, first
    bad: set[int] = set()
    for a in range(0, len(chunk), SCREEN_BLOCK):  # a block of sends at a time: small temporaries
        sl = slice(a, a + SCREEN_BLOCK)
        sender = src[sl].astype(np.int64) * n_chunks
        sender += chunk[sl]
        st = start[sl]
        if len(arrived):
            pos = np.minimum(np.searchsorted(arrived, sender), len(arrived) - 1)
            has = (arrived[pos] == sender) & (early(first_end[pos]) <= st)
        else:
            has = np.zeros(len(sender), dtype=bool)
        fail = ~(_member(sender, pre_keys) | has)
        fail |= early(end[sl]) <= st  # zero-length: the exact replay drops its delivery
        bad.update(np.unique(chunk[sl][fail]).tolist())
    required = np.fromiter(
        chain.from_iterable((v * n_chunks + c.id for v in sorted(c.post - c.pre))
                            for c in copies if c.id not in bad), dtype=np.int64)
    missing = [(key % n_chunks, key // n_chunks)
               for key in required[~_member(required, arrived)].tolist()]
    return bad, missing


def _screen_copies_dense(coll, copies, pre_keys, space, chunk, src, dst, start, end
                         ) -> tuple[set[int], list[tuple[int, int]]]:
    """:func:`screen_copies` with one slot per (node, chunk) key: the earliest arrival by
    ``numpy.minimum.at`` instead of a sort, lookups by index instead of binary search (the same
    verdicts; for collectives whose keys are mostly used, such as an all-gather)."""
    n_chunks = coll.n_chunks
    first_end = np.full(space, np.inf)
    for a in range(0, len(chunk), SCREEN_BLOCK):
        sl = slice(a, a + SCREEN_BLOCK)
        key = dst[sl].astype(np.int64) * n_chunks
        key += chunk[sl]
        np.minimum.at(first_end, key, end[sl])
    arrived = np.isfinite(first_end)
    with np.errstate(invalid="ignore"):
        ready = early(first_end)  # when each earliest arrival counts (NaN where none)
    held = np.zeros(space, dtype=bool)
    held[pre_keys] = True
    bad: set[int] = set()
    for a in range(0, len(chunk), SCREEN_BLOCK):
        sl = slice(a, a + SCREEN_BLOCK)
        sender = src[sl].astype(np.int64) * n_chunks
        sender += chunk[sl]
        st = start[sl]
        fail = ~(held[sender] | (arrived[sender] & (ready[sender] <= st)))
        fail |= early(end[sl]) <= st  # zero-length: the exact replay drops its delivery
        bad.update(np.unique(chunk[sl][fail]).tolist())
    del ready, held
    required = np.fromiter(
        chain.from_iterable((v * n_chunks + c.id for v in sorted(c.post - c.pre))
                            for c in copies if c.id not in bad), dtype=np.int64)
    missing = [(key % n_chunks, key // n_chunks)
               for key in required[~arrived[required]].tolist()]
    return bad, missing


def _member(x: np.ndarray, table: np.ndarray) -> np.ndarray:
    """``numpy.isin(x, table)`` for a sorted, duplicate-free ``table``, by binary search (no
    sort of ``x``: its temporaries are one index per element)."""
    if not len(table):
        return np.zeros(len(x), dtype=bool)
    pos = np.searchsorted(table, x)
    np.minimum(pos, len(table) - 1, out=pos)
    return table[pos] == x


def transfer_units(schedule: Schedule) -> list[int]:
    """For every transfer, the index of the *unit* that holds links: itself, or the first member
    of its in-switch group (members of a group hold a link they share once)."""
    if _columns(schedule) is not None:
        return unit_array(schedule).tolist()
    first: dict[object, int] = {}
    out = []
    for i, t in enumerate(schedule.transfers):
        g = t.group
        if g is None or not isinstance(g, int) or isinstance(g, bool):
            out.append(i)
        else:
            out.append(first.setdefault(g, i))
    return out


def unit_array(schedule: Schedule) -> np.ndarray:
    """:func:`transfer_units` as an ``int64`` array (read from the group column of a
    column-backed schedule)."""
    c = _columns(schedule)
    if c is None:
        return np.asarray(transfer_units(schedule), dtype=np.int64)
    unit = np.arange(len(c), dtype=np.int64)
    if c.has_groups:
        grouped = np.flatnonzero(c.group >= 0)
        ids, first = np.unique(c.group[grouped], return_index=True)
        unit[grouped] = grouped[first[np.searchsorted(ids, c.group[grouped])]]
    return unit


def overlap_suspects(schedule: Schedule, usable: list[bool]) -> set[int]:
    """Physical links that may carry more than ``multiplicity`` transfers at once (a transfer
    occupies every link of its route; an in-switch group holds a shared link once).

    On a single-lane link, units sorted by start never overlap iff each starts no earlier
    than the previous one ends (up to :func:`early`); links with multiplicity > 1 are always
    returned when used.
    """
    ts = schedule.transfers
    if not ts:
        return set()
    rt = route_table(schedule)
    cols = _columns(schedule)
    if cols is not None and not cols.has_groups:
        return _overlap_plain(schedule, cols, rt, np.asarray(usable, dtype=bool))
    ok = np.asarray(usable, dtype=bool)[rt.tr]
    unit = unit_array(schedule)
    tr, link = unit[rt.tr[ok]], rt.link[ok]
    del ok
    if len(tr) == 0:
        return set()
    n = len(ts)
    cols = _columns(schedule)
    if cols is not None:
        t_start, t_end = cols.start, cols.end
    else:
        t_start = np.fromiter((t.start for t in ts), dtype=np.float64, count=n)
        t_end = np.fromiter((t.end for t in ts), dtype=np.float64, count=n)
    u_start, u_end = t_start, t_end
    grouped = np.flatnonzero(unit != np.arange(n))
    if len(grouped):
        u_start, u_end = t_start.copy(), t_end.copy()
        np.minimum.at(u_start, unit[grouped], t_start[grouped])
        np.maximum.at(u_end, unit[grouped], t_end[grouped])
        pairs = np.unique(np.stack([link, tr]), axis=1)
        link, tr = pairs[0], pairs[1]
    start, end = u_start[tr], u_end[tr]
    order = np.lexsort((tr, start, link))
    lk, st, en = link[order], start[order], end[order]
    clash = (lk[1:] == lk[:-1]) & (st[1:] < early(en[:-1]))
    out = set(np.unique(lk[1:][clash]).tolist())
    multi = {li for li, x in enumerate(schedule.topology.links) if x.multiplicity > 1}
    return out | (multi & set(np.unique(lk).tolist()))


def _overlap_plain(schedule: Schedule, cols: TransferColumns, rt: RouteTable,
                   usable: np.ndarray) -> set[int]:
    """:func:`overlap_suspects` for a column-backed schedule without groups (every transfer
    its own unit), without copies of the columns where it can: ``rt.tr`` ascends, so a stable
    sort by (link, start) is the (link, start, transfer) order; adjacent pairs are compared a
    block at a time."""
    every = bool(usable.all())
    if every:
        tr, link = rt.tr, rt.link
    else:
        ok = usable[rt.tr]
        tr, link = rt.tr[ok], rt.link[ok]
    if len(tr) == 0:
        return set()
    if every and cols.single_link:  # one row per transfer, in order
        start, end = cols.start, cols.end
    else:
        start, end = cols.start[tr], cols.end[tr]
    del tr
    order = np.lexsort((start, link))
    out: set[int] = set()
    for a in range(0, len(order) - 1, SCREEN_BLOCK):
        o = order[a:a + SCREEN_BLOCK + 1]
        lk, st, en = link[o], start[o], end[o]
        clash = (lk[1:] == lk[:-1]) & (st[1:] < early(en[:-1]))
        out.update(np.unique(lk[1:][clash]).tolist())
    links = schedule.topology.links
    multi = {li for li, x in enumerate(links) if x.multiplicity > 1}
    if multi:
        used = np.bincount(link, minlength=len(links))
        out |= {li for li in multi if used[li]}
    return out


def screen_reductions(schedule: Schedule, usable: list[bool], h: HopTable) -> set[int]:
    """Reduction chunks whose replay may break causality or contributions.

    The same replay as the verifier's, with each NPU's contribution a random 64-bit number and a
    multiset their sum mod 2^64: a wrong multiset passes only with probability about 2^-64.
    """
    coll = schedule.collective
    n_chunks = coll.n_chunks
    reduce_ids = [c.id for c in coll.chunks if c.reduce]
    if not reduce_ids:
        return set()
    mask64 = (1 << 64) - 1
    rng = random.Random(0x7AC05)
    weight = [rng.getrandbits(64) for _ in range(schedule.topology.n_nodes)]
    is_reduce = np.fromiter((c.reduce for c in coll.chunks), dtype=bool, count=n_chunks)
    ok = np.asarray(usable, dtype=bool)[h.tr] if len(h.tr) else np.zeros(0, dtype=bool)
    ok &= is_reduce[np.where(ok, h.chunk, 0)]
    tr, chunk = h.tr[ok], h.chunk[ok]
    start, end, src, dst = h.start[ok], h.end[ok], h.src[ok], h.dst[ok]
    ops = op_column(schedule)
    red_op = (np.zeros(len(tr), dtype=bool) if ops is None
              else (ops == OPS.index("reduce"))[tr])
    m = len(tr)
    ev_chunk = np.concatenate([chunk, chunk])
    ev_time = np.concatenate([start, early(end)])
    ev_kind = np.concatenate([np.ones(m, dtype=np.int64), np.zeros(m, dtype=np.int64)])
    ev_start = np.concatenate([start, start])
    ev_tr = np.concatenate([tr, tr])
    order = np.lexsort((ev_tr, ev_start, ev_kind, ev_time, ev_chunk))
    sorted_chunk = ev_chunk[order]
    cols = [x[order].tolist() for x in (ev_kind, ev_tr, np.concatenate([src, src]),
                                         np.concatenate([dst, dst]),
                                         np.concatenate([red_op, red_op]))]
    kind_l, tr_l, src_l, dst_l, red_l = cols
    bounds = np.searchsorted(sorted_chunk, np.asarray(reduce_ids), "left").tolist()
    bounds_hi = np.searchsorted(sorted_chunk, np.asarray(reduce_ids), "right").tolist()
    bad: set[int] = set(np.unique(chunk[early(end) <= start]).tolist())  # zero-length
    for cid, lo, hi in zip(reduce_ids, bounds, bounds_hi, strict=True):
        c = coll.chunks[cid]
        value = {u: weight[u] for u in c.pre}
        snap: dict[int, int] = {}
        broken = False
        for k in range(lo, hi):
            i = tr_l[k]
            if kind_l[k] == 1:
                v = value.get(src_l[k])
                if v is None:
                    broken = True
                    break
                snap[i] = v
                continue
            g = snap.get(i)
            if g is None:
                continue
            d = dst_l[k]
            prev = value.get(d)
            value[d] = g if prev is None or not red_l[k] else (prev + g) & mask64
        expected = sum(weight[u] for u in c.pre) & mask64
        if broken or any(value.get(v) != expected for v in c.post):
            bad.add(cid)
    return bad
