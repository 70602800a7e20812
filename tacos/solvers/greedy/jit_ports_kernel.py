"""numba kernel of the greedy's port trial (imported only when numba is installed).

One trial of :func:`tacos.solvers.greedy.ports.run_port_trial` over bit rows
(:mod:`tacos.solvers.greedy.jit_bits`): the same min-degree port matching, the same rarest-first
chunk choice, the same ECMP route choice and the same random draws in the same order.  See
:mod:`tacos.solvers.greedy.jit_ports`.
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
    first_from,
    pick,
    popcount,
    random01,
    set_bit,
    take,
)


@njit(cache=True)
def _push(head, tail, nxt, lst, item):  # pragma: no cover - compiled
    """Append ``item`` to the singly linked list ``lst`` (``head``/``tail`` per list, -1 when
    empty; ``nxt`` per item)."""
    nxt[item] = -1
    if tail[lst] < 0:
        head[lst] = item
    else:
        nxt[tail[lst]] = item
    tail[lst] = item


@njit(cache=True)
def _free_route(ch, cr_ptr, cr_idx, rl_ptr, rl_idx, res_free, res_busy):
    """The least-loaded route of ``ch`` whose links all have a free lane (first on ties), or -1."""
    found = -1
    load = 0
    single = cr_ptr[ch + 1] - cr_ptr[ch] == 1
    for j in range(cr_ptr[ch], cr_ptr[ch + 1]):
        r = cr_idx[j]
        ok = True
        for k in range(rl_ptr[r], rl_ptr[r + 1]):
            if res_free[rl_idx[k]] == 0:
                ok = False
                break
        if not ok:
            continue
        if found < 0:
            found = r
            if single:
                return r
            load = 0
            for k in range(rl_ptr[r], rl_ptr[r + 1]):
                load += res_busy[rl_idx[k]]
        else:
            w = 0
            for k in range(rl_ptr[r], rl_ptr[r + 1]):
                w += res_busy[rl_idx[k]]
            if w < load:
                found = r
                load = w
    return found


@njit(cache=True)
def _rarest(x, q, level, nb, mt, pos, out, y, got):
    """Up to ``q`` chunks of ``x`` with the fewest copies claimed so far into ``out`` (random
    ties; ``x`` is left as it is)."""
    W = x.shape[0]
    if popcount(x) <= q:
        out[:] = x
        return
    out[:] = _U0
    for j in range(level.shape[0]):
        nz = False
        for w in range(W):
            y[w] = level[j, w] & x[w]
            if y[w]:
                nz = True
        if not nz:
            continue
        if q > 1:
            take(y, q, nb, mt, pos, got)
        else:
            got[:] = _U0
            set_bit(got, pick(y, nb, mt, pos))
        for w in range(W):
            out[w] |= got[w]
        q -= popcount(got)
        if q == 0:
            return


@njit(cache=True)
def _launch(t, ch, r, d, bits, sizes, alpha, bw, rl_ptr, rl_idx, res_free, res_busy, claimed,
            isl_ptr, isl_idx, isl_claimed, copies, level, T_start, T_end, T_link, T_route,
            T_ptr, T_ids, ntr, nid, heap, flags):
    """Start a transfer of ``bits`` on channel ``ch`` over route ``r`` towards ``d`` at ``t``."""
    nbytes = 0
    for wd in range(bits.shape[0]):
        x = bits[wd]
        while x:
            nbytes += sizes[(wd << 6) + _ctz(x)]
            x &= x - _U1
    w = _duration(alpha[ch], bw[ch], nbytes)
    e = t + w
    if e >= TICK_LIMIT:
        flags[0] = 1
    T_start[ntr] = t
    T_end[ntr] = e
    T_link[ntr] = ch
    T_route[ntr] = r
    for k in range(rl_ptr[r], rl_ptr[r + 1]):
        li = rl_idx[k]
        res_free[li] -= 1
        res_busy[li] += w
    for wd in range(bits.shape[0]):
        x = bits[wd]
        claimed[d, wd] |= x
        for k in range(isl_ptr[d], isl_ptr[d + 1]):
            isl_claimed[isl_idx[k], wd] |= x
        while x:
            c = (wd << 6) + _ctz(x)
            T_ids[nid] = c
            nid += 1
            j = copies[c]
            copies[c] = j + 1
            m = _U1 << np.uint64(c & 63)
            level[j, wd] ^= m
            level[j + 1, wd] |= m
            x &= x - _U1
    T_ptr[ntr + 1] = nid
    heapq.heappush(heap, (e, np.int64(ntr)))
    return ntr + 1, nid


@njit(cache=True)
def kernel(src, dst, in_ptr, in_idx, out_ptr, out_idx, cr_ptr, cr_idx, rl_ptr, rl_idx,
           cl_ptr, cl_idx, dp_ptr, dp_idx, rd_ptr, rd_idx, ch_first, ch_last, guard, fabric,
           caps, alpha, bw, res_mult, isl_ptr, isl_idx, isl_claimed, pre, need, fastest,
           total_need, sizes, nb, mt, pos):
    """One port trial (``sizes``: bytes of every chunk); returns ``(status, tick, left, start,
    end, channel, route, chunk_ptr, chunk_ids)`` with ``status`` 1 when stuck (no transfer
    in flight, ``left`` requests open) and 2 when event times outgrow 64-bit ticks.
    ``res_mult`` has one more entry than the physical links: the always-free link that
    ``ch_first``/``ch_last``/``dp_idx`` name for "no common end link"."""
    n = pre.shape[0]
    W = pre.shape[1]
    C = src.shape[0]
    R = res_mult.shape[0]
    held = pre.copy()
    claimed = pre.copy()
    res_free = res_mult.copy()
    res_busy = np.zeros(R, dtype=np.int64)
    copies = np.zeros(max(1, nb), dtype=np.int64)
    level = np.zeros((n + 2, W), dtype=np.uint64)
    for v in range(n):
        for w in range(W):
            x = pre[v, w]
            while x:
                copies[(w << 6) + _ctz(x)] += 1
                x &= x - _U1
    for c in range(nb):
        if c < copies.shape[0]:
            level[copies[c], c >> 6] |= _U1 << np.uint64(c & 63)
    lanes = 0
    for li in range(R):
        lanes += res_mult[li]
    room = lanes + 1
    capT = 1024
    T_start = np.empty(capT, dtype=np.int64)
    T_end = np.empty(capT, dtype=np.int64)
    T_link = np.empty(capT, dtype=np.int64)
    T_route = np.empty(capT, dtype=np.int64)
    T_ptr = np.zeros(capT + 1, dtype=np.int64)
    T_ids = np.empty(max(1, total_need), dtype=np.int64)
    ntr = 0
    nid = 0
    flags = np.zeros(1, dtype=np.int64)
    heap = [(np.int64(0), np.int64(0))]
    heap.pop()
    remaining = total_need
    # per match: candidate lists, port groups, entries, link users (stamps reset them)
    max_in = 1
    for d in range(n):
        max_in = max(max_in, in_ptr[d + 1] - in_ptr[d])
    L_ch = np.empty(max_in, dtype=np.int64)
    L_r = np.empty(max_in, dtype=np.int64)
    L_a = np.zeros((max_in, W), dtype=np.uint64)
    suffix = np.zeros((max_in + 1, W), dtype=np.uint64)
    E_ch = np.empty(C, dtype=np.int64)
    E_a = np.zeros((C, W), dtype=np.uint64)
    E_ex = np.zeros((C, W), dtype=np.uint64)
    E_alive = np.zeros(C, dtype=np.bool_)
    E_first = np.empty(C, dtype=np.int64)
    E_g = np.empty(C, dtype=np.int64)
    E_next = np.empty(C, dtype=np.int64)
    G_d = np.empty(C, dtype=np.int64)
    G_head = np.empty(C, dtype=np.int64)
    G_tail = np.empty(C, dtype=np.int64)
    G_count = np.empty(C, dtype=np.int64)
    G_done = np.zeros(C, dtype=np.bool_)
    port_stamp = np.full(R, -1, dtype=np.int64)
    port_gid = np.empty(R, dtype=np.int64)
    dem_stamp = np.full(R, -1, dtype=np.int64)
    demand = np.zeros(R, dtype=np.int64)
    u_stamp = np.full(R, -1, dtype=np.int64)
    u_head = np.full(R, -1, dtype=np.int64)
    u_tail = np.full(R, -1, dtype=np.int64)
    U_e = np.empty(max(1, cl_idx.shape[0]), dtype=np.int64)
    U_next = np.empty(max(1, cl_idx.shape[0]), dtype=np.int64)
    X_d = np.empty(C, dtype=np.int64)
    X_ch = np.empty(C, dtype=np.int64)
    X_key = np.empty(C, dtype=np.float64)
    O_e = np.empty(C, dtype=np.int64)
    O_dem = np.empty(C, dtype=np.int64)
    O_key = np.empty(C, dtype=np.float64)
    want = np.zeros(W, dtype=np.uint64)
    a = np.zeros(W, dtype=np.uint64)
    ex = np.zeros(W, dtype=np.uint64)
    b = np.zeros(W, dtype=np.uint64)
    b2 = np.zeros(W, dtype=np.uint64)
    tmp = np.zeros(W, dtype=np.uint64)
    y = np.zeros(W, dtype=np.uint64)
    got = np.zeros(W, dtype=np.uint64)
    prefix = np.zeros(W, dtype=np.uint64)
    dirty = np.empty(n, dtype=np.int64)
    d_stamp = np.full(n, -1, dtype=np.int64)
    nd = 0
    for d in range(n):
        if in_ptr[d + 1] > in_ptr[d] and any_bit(need[d]):
            dirty[nd] = d
            nd += 1
    gheap = [(np.int64(0), 0.0, np.int64(0))]
    gheap.pop()
    t = np.int64(0)
    event = 0
    while remaining > 0:
        if nd:
            if ntr + room > T_start.shape[0]:
                T_start = _grow(T_start, ntr + room)
                T_end = _grow(T_end, ntr + room)
                T_link = _grow(T_link, ntr + room)
                T_route = _grow(T_route, ntr + room)
                T_ptr = _grow(T_ptr, ntr + room + 1)
            dl = np.sort(dirty[:nd])
            ng = 0
            ne = 0
            nu = 0
            nx = 0
            # ---- candidates, grouped by the port they enter d through
            for di in range(nd):
                d = dl[di]
                free = False
                for k in range(dp_ptr[d], dp_ptr[d + 1]):
                    if res_free[dp_idx[k]]:
                        free = True
                        break
                if not free:
                    continue
                nz = False
                for w in range(W):
                    want[w] = need[d, w] & ~claimed[d, w]
                    if want[w]:
                        nz = True
                if not nz:
                    continue
                m = 0
                s0 = 0
                for k in range(in_ptr[d], in_ptr[d + 1]):
                    ch = in_idx[k]
                    if not (res_free[ch_first[ch]] and res_free[ch_last[ch]]):
                        continue
                    s0 = src[ch]
                    nz = False
                    for w in range(W):
                        a[w] = held[s0, w] & want[w]
                        if a[w]:
                            nz = True
                    g = guard[ch]
                    if nz and g >= 0:
                        nz2 = False
                        for w in range(W):
                            if a[w] & ~isl_claimed[g, w]:
                                nz2 = True
                                break
                        if not nz2:
                            if not fabric[ch]:
                                X_d[nx] = d
                                X_ch[nx] = ch
                                nx += 1
                            continue
                        for w in range(W):
                            a[w] &= ~isl_claimed[g, w]
                    if nz:
                        r = _free_route(ch, cr_ptr, cr_idx, rl_ptr, rl_idx, res_free, res_busy)
                        if r >= 0:
                            L_ch[m] = ch
                            L_r[m] = r
                            L_a[m] = a
                            m += 1
                suffix[m] = _U0
                for i in range(m - 1, -1, -1):
                    for w in range(W):
                        suffix[i, w] = suffix[i + 1, w] | L_a[i, w]
                prefix[:] = _U0
                for i in range(m):
                    ch = L_ch[i]
                    r = L_r[i]
                    port = rl_idx[rl_ptr[r + 1] - 1]
                    first = rl_idx[rl_ptr[r]]
                    if port_stamp[port] != event:
                        port_stamp[port] = event
                        port_gid[port] = ng
                        G_d[ng] = d
                        G_head[ng] = -1
                        G_tail[ng] = -1
                        G_count[ng] = 0
                        G_done[ng] = False
                        ng += 1
                    gid = port_gid[port]
                    e = ne
                    ne += 1
                    E_ch[e] = ch
                    for w in range(W):
                        E_a[e, w] = L_a[i, w]
                        E_ex[e, w] = L_a[i, w] & ~(prefix[w] | suffix[i + 1, w])
                        prefix[w] |= L_a[i, w]
                    E_alive[e] = True
                    E_first[e] = first
                    E_g[e] = gid
                    _push(G_head, G_tail, E_next, gid, e)
                    G_count[gid] += 1
                    if dem_stamp[first] != event:
                        dem_stamp[first] = event
                        demand[first] = 0
                    demand[first] += 1
                    for k in range(cl_ptr[ch], cl_ptr[ch + 1]):
                        li = cl_idx[k]
                        if u_stamp[li] != event:
                            u_stamp[li] = event
                            u_head[li] = -1
                            u_tail[li] = -1
                        U_e[nu] = e
                        _push(u_head, u_tail, U_next, li, nu)
                        nu += 1
            # ---- serve the groups, fewest live candidates first
            for g in range(ng):
                gheap.append((G_count[g], random01(mt, pos), np.int64(g)))
            heapq.heapify(gheap)
            while len(gheap):
                c, r0, gid = heapq.heappop(gheap)
                if G_done[gid]:
                    continue
                if c != G_count[gid]:
                    heapq.heappush(gheap, (G_count[gid], r0, gid))
                    continue
                G_done[gid] = True
                d = G_d[gid]
                k = 0
                e = G_head[gid]
                while e >= 0:
                    if E_alive[e]:
                        O_e[k] = e
                        O_dem[k] = demand[E_first[e]]
                        O_key[k] = random01(mt, pos)
                        # insertion: stable by (demand, key)
                        j = k
                        while j > 0 and (O_dem[j - 1] > O_dem[j] or (
                                O_dem[j - 1] == O_dem[j] and O_key[j - 1] > O_key[j])):
                            O_e[j - 1], O_e[j] = O_e[j], O_e[j - 1]
                            O_dem[j - 1], O_dem[j] = O_dem[j], O_dem[j - 1]
                            O_key[j - 1], O_key[j] = O_key[j], O_key[j - 1]
                            j -= 1
                        k += 1
                    e = E_next[e]
                for oi in range(k):
                    e = O_e[oi]
                    ch = E_ch[e]
                    a[:] = E_a[e]
                    ex[:] = E_ex[e]
                    g = guard[ch]
                    while True:
                        nz = False
                        for w in range(W):
                            a[w] &= ~claimed[d, w]
                            if g >= 0:
                                a[w] &= ~isl_claimed[g, w]
                            if a[w]:
                                nz = True
                        if not nz:
                            break
                        r = _free_route(ch, cr_ptr, cr_idx, rl_ptr, rl_idx, res_free, res_busy)
                        if r < 0:
                            break
                        nz = False
                        for w in range(W):
                            ex[w] &= a[w]
                            if ex[w]:
                                nz = True
                        q = caps[ch]
                        if nz:
                            _rarest(ex, q, level, nb, mt, pos, b, y, got)
                        else:
                            b[:] = _U0
                        cnt = popcount(b)
                        if cnt < q:
                            for w in range(W):
                                tmp[w] = a[w] & ~b[w]
                            _rarest(tmp, q - cnt, level, nb, mt, pos, b2, y, got)
                            for w in range(W):
                                b[w] |= b2[w]
                        ntr, nid = _launch(t, ch, r, d, b, sizes, alpha, bw, rl_ptr, rl_idx,
                                           res_free, res_busy, claimed, isl_ptr, isl_idx,
                                           isl_claimed, copies, level, T_start, T_end, T_link,
                                           T_route, T_ptr, T_ids, ntr, nid, heap, flags)
                        for kk in range(rl_ptr[r], rl_ptr[r + 1]):
                            li = rl_idx[kk]
                            if res_free[li] != 0 or u_stamp[li] != event:
                                continue
                            node = u_head[li]
                            u_head[li] = -1
                            u_tail[li] = -1
                            while node >= 0:
                                e2 = U_e[node]
                                if E_alive[e2]:
                                    E_alive[e2] = False
                                    demand[E_first[e2]] -= 1
                                    g2 = E_g[e2]
                                    if not G_done[g2]:
                                        G_count[g2] -= 1
                                        heapq.heappush(gheap, (G_count[g2], random01(mt, pos),
                                                               g2))
                                node = U_next[node]
            # ---- a second copy across a cut, on ports the matching left idle
            if nx:
                for i in range(nx):
                    X_key[i] = random01(mt, pos)
                order = np.argsort(X_key[:nx], kind="mergesort")
                for oi in range(nx):
                    i = order[oi]
                    d = X_d[i]
                    ch = X_ch[i]
                    s0 = src[ch]
                    nz = False
                    left = 0
                    for w in range(W):
                        tmp[w] = need[d, w] & ~claimed[d, w]
                        a[w] = held[s0, w] & tmp[w]
                        if a[w]:
                            nz = True
                    if not nz:
                        continue
                    r = _free_route(ch, cr_ptr, cr_idx, rl_ptr, rl_idx, res_free, res_busy)
                    if r < 0:
                        continue
                    left = popcount(tmp)
                    if left * fastest[d] < _duration(alpha[ch], bw[ch],
                                                     sizes[first_from(a, 0)]):
                        continue
                    b[:] = _U0
                    set_bit(b, pick(a, nb, mt, pos))
                    ntr, nid = _launch(t, ch, r, d, b, sizes, alpha, bw, rl_ptr, rl_idx,
                                       res_free, res_busy, claimed, isl_ptr, isl_idx,
                                       isl_claimed, copies, level, T_start, T_end, T_link,
                                       T_route, T_ptr, T_ids, ntr, nid, heap, flags)
        # ---- advance to the next completion
        if flags[0]:
            return (2, t, remaining, T_start[:0].copy(), T_end[:0].copy(), T_link[:0].copy(),
                    T_route[:0].copy(), T_ptr[:1].copy(), T_ids[:0].copy())
        if len(heap) == 0:
            return (1, t, remaining, T_start[:0].copy(), T_end[:0].copy(), T_link[:0].copy(),
                    T_route[:0].copy(), T_ptr[:1].copy(), T_ids[:0].copy())
        t = heap[0][0]
        event += 1
        nd = 0
        while len(heap) and heap[0][0] == t:
            tr = heapq.heappop(heap)[1]
            ch = T_link[tr]
            d = dst[ch]
            r = T_route[tr]
            for k in range(rl_ptr[r], rl_ptr[r + 1]):
                li = rl_idx[k]
                res_free[li] += 1
                for kk in range(rd_ptr[li], rd_ptr[li + 1]):
                    x = rd_idx[kk]
                    if d_stamp[x] != event:
                        d_stamp[x] = event
                        dirty[nd] = x
                        nd += 1
            for j in range(T_ptr[tr], T_ptr[tr + 1]):
                c = T_ids[j]
                held[d, c >> 6] |= _U1 << np.uint64(c & 63)
                if (need[d, c >> 6] >> np.uint64(c & 63)) & _U1:
                    remaining -= 1
            for k in range(out_ptr[d], out_ptr[d + 1]):
                x = dst[out_idx[k]]
                if d_stamp[x] != event:
                    d_stamp[x] = event
                    dirty[nd] = x
                    nd += 1
    # transfers still in flight carry nothing anyone needs any more: compact in place
    keep = np.ones(ntr, dtype=np.bool_)
    for item in heap:
        keep[item[1]] = False
    k = 0
    tot = 0
    for tr in range(ntr):
        lo = T_ptr[tr]
        hi = T_ptr[tr + 1]
        if keep[tr]:
            for j in range(lo, hi):
                T_ids[tot] = T_ids[j]
                tot += 1
            T_start[k] = T_start[tr]
            T_end[k] = T_end[tr]
            T_link[k] = T_link[tr]
            T_route[k] = T_route[tr]
            k += 1
    ptr = np.zeros(k + 1, dtype=np.int64)
    j = 0
    for tr in range(ntr):
        if keep[tr]:
            ptr[j + 1] = ptr[j] + T_ptr[tr + 1] - T_ptr[tr]
            j += 1
    return (0, t, 0, T_start[:k].copy(), T_end[:k].copy(), T_link[:k].copy(),
            T_route[:k].copy(), ptr, T_ids[:tot].copy())
