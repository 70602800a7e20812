"""numba kernel of the compiled greedy trial (imported only when numba is installed).

One trial of :func:`tacos.solvers.greedy.core.run_python_trial` over bit rows
(:mod:`tacos.solvers.greedy.jit_bits`), speculation in :mod:`tacos.solvers.greedy.jit_spec`.
See :mod:`tacos.solvers.greedy.jit`.
"""

from __future__ import annotations

import heapq

import numpy as np
from numba import njit

from tacos.solvers.greedy.jit_bits import (
    _U0,
    _U1,
    TICK_LIMIT,
    _ctz,
    _duration,
    _grow,
    any_bit,
    pick,
    popcount,
    randbelow,
    random01,
    set_bit,
    take,
)
from tacos.solvers.greedy.jit_merge import _split_batches
from tacos.solvers.greedy.jit_spec import _best_resend, _inflight, _land, _meets, _remove_active


@njit(cache=True)
def _order_slots(pcs, keys, m, perm):
    """``perm[:m]`` = the slots by (``pcs``, ``keys``, index), ascending: what a stable sort by
    ``keys`` followed by a stable sort by ``pcs`` gives (Python's two ``sorted`` calls), by
    insertion (m is a destination's in-lanes, a handful) without allocating."""
    for i in range(m):
        j = i
        while j > 0:
            q = perm[j - 1]
            if pcs[q] < pcs[i] or (pcs[q] == pcs[i] and keys[q] <= keys[i]):
                break
            perm[j] = q
            j -= 1
        perm[j] = i


@njit(cache=True)
def kernel(src, dst, in_ptr, in_idx, out_ptr, out_idx, mult, alpha, bw, pre, need, total_need,
           usize, nb, cap, mt, pos, T_ids, spec, sentinel):
    """One trial; returns ``(status, tick, left, start, end, link, chunk_ptr, chunk_ids,
    stats)`` with ``status`` 1 when stuck (no transfer in flight, ``left`` requests open), 2
    when event times outgrow 64-bit ticks, and ``stats`` = (replaced, dropped, speculative,
    overflow).

    ``T_ids`` receives every delivered chunk id (``sentinel`` marks an id dropped on landing):
    without speculation a chunk reaches an NPU at most once, so ``total_need`` entries suffice;
    with it the buffer grows, like the transfer columns, by doubling.  The returned
    ``chunk_ids`` is a prefix view of ``T_ids``."""
    n = pre.shape[0]
    W = pre.shape[1]
    L = src.shape[0]
    held = pre.copy()
    claimed = pre.copy()
    lane_free = mult.copy()
    # transfers (columns, grown by doubling)
    capT = 1024
    T_start = np.empty(capT, dtype=np.int64)
    T_end = np.empty(capT, dtype=np.int64)
    T_link = np.empty(capT, dtype=np.int64)
    T_ptr = np.zeros(capT + 1, dtype=np.int64)
    T_snap = np.empty(capT if spec else 0, dtype=np.int64)
    stats = np.zeros(4, dtype=np.int64)  # replaced, dropped, speculative, overflow
    # speculation: chunks resent to d, transfers in flight per link, snapshots of the source's
    # chunks at each launch (a pool as large as the lanes, since only transfers in flight
    # need theirs)
    dupped = np.zeros((n if spec else 0, W), dtype=np.uint64)
    maxmult = 1
    lanes = 0
    for lk in range(L):
        maxmult = max(maxmult, mult[lk])
        lanes += mult[lk]
    act = np.zeros((L if spec else 0, maxmult), dtype=np.int64)
    act_n = np.zeros(L, dtype=np.int64)
    snap = np.zeros((lanes if spec else 0, W), dtype=np.uint64)
    snap_free = np.arange(lanes if spec else 0)[::-1].copy()
    snap_top = np.array([lanes if spec else 0])
    ntr = 0
    nid = 0
    heap = [(np.int64(0), np.int64(0))]
    heap.pop()
    remaining = total_need
    # touched destinations and links, in touch order (d list; per d a linked list of links)
    d_order = np.empty(n, dtype=np.int64)
    nd = 0
    d_stamp = np.full(n, -1, dtype=np.int64)
    l_stamp = np.full(L, -1, dtype=np.int64)
    head = np.full(n, -1, dtype=np.int64)
    tail = np.full(n, -1, dtype=np.int64)
    nxt = np.full(L, -1, dtype=np.int64)
    event = 0
    for d in range(n):
        if in_ptr[d + 1] > in_ptr[d] and any_bit(need[d]):
            for j in range(in_ptr[d], in_ptr[d + 1]):
                nd = _touch(d, in_idx[j], event, d_stamp, d_order, nd, head, tail, nxt,
                            l_stamp)
    max_slots = 1
    for d in range(n):
        s = 0
        for j in range(in_ptr[d], in_ptr[d + 1]):
            s += mult[in_idx[j]]
        max_slots = max(max_slots, s)
    slot_lk = np.empty(max_slots, dtype=np.int64)
    slot_a = np.zeros((max_slots, W), dtype=np.uint64)
    chosen = np.zeros((max_slots, W), dtype=np.uint64)
    rest = np.zeros((max_slots, W), dtype=np.uint64)
    want = np.zeros(W, dtype=np.uint64)
    other = np.zeros(W, dtype=np.uint64)
    tmp = np.zeros(W, dtype=np.uint64)
    tmp2 = np.zeros(W, dtype=np.uint64)
    b = np.zeros(W, dtype=np.uint64)
    taken = np.zeros(W, dtype=np.uint64)
    shared = np.zeros(W, dtype=np.uint64)
    keys = np.empty(max_slots, dtype=np.float64)
    pcs = np.empty(max_slots, dtype=np.int64)
    counts = np.empty(max_slots, dtype=np.int64)
    per = np.empty(max_slots, dtype=np.float64)
    finish = np.empty(max_slots, dtype=np.float64)
    perm = np.empty(max_slots, dtype=np.int64)
    idle = np.empty(max_slots, dtype=np.int64)
    t = np.int64(0)
    while remaining > 0:
        # ---- link-chunk matching for every destination touched by the last event
        for di in range(nd):
            d = d_order[di]
            have_want = False
            for w in range(W):
                want[w] = need[d, w] & ~claimed[d, w]
                if want[w]:
                    have_want = True
            m = 0
            ni = 0
            if have_want or spec:
                lk = head[d]
                while lk >= 0:
                    f = lane_free[lk]
                    if f:
                        s = src[lk]
                        nz = False
                        if have_want:
                            for w in range(W):
                                tmp[w] = held[s, w] & want[w]
                                if tmp[w]:
                                    nz = True
                        if nz:
                            for _ in range(f):
                                slot_lk[m] = lk
                                slot_a[m] = tmp
                                m += 1
                        elif spec:
                            for _ in range(f):
                                idle[ni] = lk
                                ni += 1
                    lk = nxt[lk]
            if m == 0 and ni == 0:
                continue
            # make room for every lane into d and every chunk d still wants
            if ntr + max_slots > T_start.shape[0]:
                T_start = _grow(T_start, ntr + max_slots)
                T_end = _grow(T_end, ntr + max_slots)
                T_link = _grow(T_link, ntr + max_slots)
                T_ptr = _grow(T_ptr, ntr + max_slots + 1)
                if spec:
                    T_snap = _grow(T_snap, ntr + max_slots)
            if nid + nb + max_slots > T_ids.shape[0]:
                # resends overflowed the headroom: grow by a quarter (the buffer is large)
                T_ids = _grow_by(T_ids, nid + nb + max_slots, 4)
            if m == 0:
                pass
            elif m == 1:
                lk = slot_lk[0]
                a = slot_a[0]
                if popcount(a) > cap:
                    # prefer chunks no other in-neighbour of d could bring
                    other[:] = _U0
                    for j in range(in_ptr[d], in_ptr[d + 1]):
                        l2 = in_idx[j]
                        if l2 != lk:
                            s = src[l2]
                            for w in range(W):
                                other[w] |= held[s, w]
                    for w in range(W):
                        tmp[w] = a[w] & ~other[w]
                    take(tmp, cap, nb, mt, pos, b)
                    k = popcount(b)
                    if k < cap:
                        for w in range(W):
                            tmp[w] = a[w] & ~b[w]
                        take(tmp, cap - k, nb, mt, pos, tmp2)
                        for w in range(W):
                            b[w] |= tmp2[w]
                elif cap == 1:
                    b[:] = _U0
                    set_bit(b, pick(a, nb, mt, pos))
                else:
                    tmp[:] = a
                    take(tmp, cap, nb, mt, pos, b)
                ntr, nid = _launch(t, lk, d, b, usize, alpha, bw, T_start, T_end, T_link,
                                   T_ptr, T_ids, ntr, nid, lane_free, claimed, heap, spec,
                                   held, src, snap, snap_free, snap_top, T_snap, act, act_n, stats)
            elif cap == 1:
                for i in range(m):
                    pcs[i] = popcount(slot_a[i])
                    keys[i] = random01(mt, pos)
                _order_slots(pcs, keys, m, perm)
                acc = other  # free here: only the m == 1 case above uses it
                acc[:] = _U0
                for i in range(m - 1, -1, -1):
                    rest[i] = acc
                    acc |= slot_a[perm[i]]
                taken[:] = _U0
                for i in range(m):
                    p = perm[i]
                    nz = False
                    for w in range(W):
                        tmp[w] = slot_a[p, w] & ~taken[w]
                        if tmp[w]:
                            nz = True
                    if not nz:
                        if spec:
                            idle[ni] = slot_lk[p]
                            ni += 1
                        continue
                    nz = False
                    for w in range(W):
                        tmp2[w] = tmp[w] & ~rest[i, w]
                        if tmp2[w]:
                            nz = True
                    c = pick(tmp2 if nz else tmp, nb, mt, pos)
                    set_bit(taken, c)
                    b[:] = _U0
                    set_bit(b, c)
                    ntr, nid = _launch(t, slot_lk[p], d, b, usize, alpha, bw, T_start, T_end,
                                       T_link, T_ptr, T_ids, ntr, nid, lane_free, claimed, heap,
                                       spec, held, src, snap, snap_free, snap_top, T_snap, act,
                                       act_n, stats)
            else:
                # rng.shuffle(slots)
                for i in range(m):
                    perm[i] = i
                for i in range(m - 1, 0, -1):
                    j = randbelow(i + 1, mt, pos)
                    x = perm[i]
                    perm[i] = perm[j]
                    perm[j] = x
                _split_batches(slot_a, slot_lk, perm, m, cap, float(usize), alpha, bw, nb,
                               mt, pos, chosen, rest, shared, tmp, tmp2, counts, per, finish)
                for i in range(m):
                    if any_bit(chosen[i]):
                        ntr, nid = _launch(t, slot_lk[perm[i]], d, chosen[i], usize, alpha,
                                           bw, T_start, T_end, T_link, T_ptr, T_ids, ntr, nid,
                                           lane_free, claimed, heap, spec, held, src, snap,
                                           snap_free, snap_top, T_snap, act, act_n, stats)
                    elif spec:
                        idle[ni] = slot_lk[perm[i]]
                        ni += 1
            if ni:
                # resend a chunk in flight to d on a slower transfer where it lands earlier
                nz = _inflight(claimed[d], held[d], dupped[d], tmp)
                if nz:
                    for i in range(ni):
                        lk = idle[i]
                        if lane_free[lk] and _meets(held[src[lk]], tmp):
                            c = _best_resend(t, lk, d, held, dupped, src, in_ptr, in_idx, act,
                                             act_n, T_end, T_ptr, T_ids, sentinel, alpha, bw,
                                             usize, nb, mt, pos, tmp2, b)
                            if c >= 0:
                                set_bit(dupped[d], c)
                                stats[2] += 1
                                b[:] = _U0
                                set_bit(b, c)
                                ntr, nid = _launch(t, lk, d, b, usize, alpha, bw, T_start,
                                                   T_end, T_link, T_ptr, T_ids, ntr, nid,
                                                   lane_free, claimed, heap, spec, held, src,
                                                   snap, snap_free, snap_top, T_snap, act,
                                                   act_n, stats)
                                _inflight(claimed[d], held[d], dupped[d], tmp)
        # ---- advance to the next completion
        if stats[3]:
            return (2, t, remaining, T_start[:0].copy(), T_end[:0].copy(),
                    T_link[:0].copy(), T_ptr[:1].copy(), T_ids[:0], stats)
        if len(heap) == 0:
            return (1, t, remaining, T_start[:0].copy(), T_end[:0].copy(),
                    T_link[:0].copy(), T_ptr[:1].copy(), T_ids[:0], stats)
        t = heap[0][0]
        event += 1
        nd = 0
        while len(heap) and heap[0][0] == t:
            tr = heapq.heappop(heap)[1]
            lk = T_link[tr]
            d = dst[lk]
            lane_free[lk] += 1
            if spec:
                _remove_active(act, act_n, lk, tr)
                _land(tr, lk, d, held, claimed, need, snap[T_snap[tr]], T_start, T_end, T_ptr,
                      T_ids, sentinel, alpha, bw, usize, nb, mt, pos, tmp, tmp2, stats)
                snap_free[snap_top[0]] = T_snap[tr]
                snap_top[0] += 1
            nd = _touch(d, lk, event, d_stamp, d_order, nd, head, tail, nxt, l_stamp)
            got = 0
            for j in range(T_ptr[tr], T_ptr[tr + 1]):
                c = T_ids[j]
                if c == sentinel:
                    continue
                got += 1
                held[d, c >> 6] |= _U1 << np.uint64(c & 63)
                if (need[d, c >> 6] >> np.uint64(c & 63)) & _U1:
                    remaining -= 1
            if got == 0:
                continue
            for j in range(out_ptr[d], out_ptr[d + 1]):
                l2 = out_idx[j]
                if lane_free[l2]:
                    nd = _touch(dst[l2], l2, event, d_stamp, d_order, nd, head, tail, nxt,
                                l_stamp)
    # transfers still in flight carry nothing anyone needs any more: compact in place
    keep = np.ones(ntr, dtype=np.bool_)
    for item in heap:
        keep[item[1]] = False
    k = 0
    tot = 0
    lo = T_ptr[0]
    for tr in range(ntr):
        hi = T_ptr[tr + 1]
        if keep[tr]:
            first = tot
            for j in range(lo, hi):
                if T_ids[j] != sentinel:
                    T_ids[tot] = T_ids[j]
                    tot += 1
            if tot == first:  # every chunk dropped on landing
                lo = hi
                continue
            T_start[k] = T_start[tr]
            T_end[k] = T_end[tr]
            T_link[k] = T_link[tr]
            k += 1
            T_ptr[k] = tot  # k <= tr + 1: T_ptr[tr + 1] was read above
        lo = hi
    return (0, t, 0, T_start[:k].copy(), T_end[:k].copy(), T_link[:k].copy(),
            T_ptr[:k + 1].copy(), T_ids[:tot], stats)


@njit(cache=True)
def _grow_by(a, n, div):
    """``a`` copied into a buffer of at least ``n`` entries and ``len(a) / div`` more."""
    out = np.empty(max(n, a.shape[0] + a.shape[0] // div), dtype=a.dtype)
    out[:a.shape[0]] = a
    return out


@njit(cache=True)
def _touch(d, lk, event, d_stamp, d_order, nd, head, tail, nxt, l_stamp):
    """Mark in-link ``lk`` of ``d`` touched in this event (destinations and, per destination,
    links kept in first-touch order, each once); returns the new count of destinations."""
    if d_stamp[d] != event:
        d_stamp[d] = event
        d_order[nd] = d
        nd += 1
        head[d] = lk
    elif l_stamp[lk] == event:
        return nd
    else:
        nxt[tail[d]] = lk
    l_stamp[lk] = event
    tail[d] = lk
    nxt[lk] = -1
    return nd


@njit(cache=True)
def _launch(t, lk, d, bits, usize, alpha, bw, T_start, T_end, T_link, T_ptr, T_ids, ntr, nid,
            lane_free, claimed, heap, spec, held, src, snap, snap_free, snap_top, T_snap, act,
            act_n, stats):
    """Start a transfer of ``bits`` on ``lk`` towards ``d`` at tick ``t`` (with speculation:
    snapshot the source's chunks and list the transfer as in flight on ``lk``)."""
    if spec:
        snap_top[0] -= 1
        slot = snap_free[snap_top[0]]
        snap[slot] = held[src[lk]]
        T_snap[ntr] = slot
        act[lk, act_n[lk]] = ntr
        act_n[lk] += 1
    cnt = 0
    for w in range(bits.shape[0]):
        x = bits[w]
        claimed[d, w] |= x
        while x:
            T_ids[nid] = (w << 6) + _ctz(x)
            nid += 1
            cnt += 1
            x &= x - _U1
    e = t + _duration(alpha[lk], bw[lk], usize * cnt)
    if e >= TICK_LIMIT:
        stats[3] = 1
    T_start[ntr] = t
    T_end[ntr] = e
    T_link[ntr] = lk
    T_ptr[ntr + 1] = nid
    lane_free[lk] -= 1
    heapq.heappush(heap, (e, np.int64(ntr)))
    return ntr + 1, nid
