"""numba kernel of the baselines' first-fit placement (imported only when numba is installed):
:meth:`tacos.solvers.lowering.program.Lowering.run`'s timing loop over arrays.

Every function here mirrors one of :mod:`tacos.solvers.lowering.program` -- ``_Server``'s
``earliest`` and ``book``, ``_Resource``'s, ``LinkCalendar.fit`` and ``Lowering._place`` /
``_send`` -- with the same comparisons, the same floating-point operations in the same order
and the same tie rules, so the times, the routes chosen and the calendar left behind are bit for
bit the Python loop's.  See :mod:`tacos.solvers.lowering.place_jit`.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.typed import List

EPS = 1e-13  # tacos.solvers.lowering.program.EPS


@njit(cache=True)
def _bisect_right(a, n, x):  # pragma: no cover - compiled
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) // 2
        if x < a[mid]:
            hi = mid
        else:
            lo = mid + 1
    return lo


@njit(cache=True)
def _bisect_left(a, n, x):  # pragma: no cover - compiled
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) // 2
        if a[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True)
def _srv_earliest(st, en, n, t, d):  # pragma: no cover - compiled
    i = _bisect_right(en, n, t)
    cand = t
    while i < n:
        if st[i] >= cand + d - EPS * (cand + d):
            return cand
        cand = max(cand, en[i])
        i += 1
    return cand


@njit(cache=True)
def _res_earliest(starts, ends, count, srv_off, li, t, d):  # pragma: no cover - compiled
    k0, k1 = srv_off[li], srv_off[li + 1]
    if k1 - k0 == 1:
        return _srv_earliest(starts[k0], ends[k0], count[k0], t, d)
    best = _srv_earliest(starts[k0], ends[k0], count[k0], t, d)
    for k in range(k0 + 1, k1):
        v = _srv_earliest(starts[k], ends[k], count[k], t, d)
        if v < best:
            best = v
    return best


@njit(cache=True)
def _srv_book(starts, ends, count, k, s, e):  # pragma: no cover - compiled
    st, en, n = starts[k], ends[k], count[k]
    i = _bisect_left(st, n, s)
    tol = EPS * e
    if i > 0 and en[i - 1] >= s - tol:
        i -= 1
        s = st[i]
        e = max(e, en[i])
        for j in range(i, n - 1):  # del starts[i], ends[i]
            st[j] = st[j + 1]
            en[j] = en[j + 1]
        n -= 1
    while i < n and st[i] <= e + tol:
        e = max(e, en[i])
        for j in range(i, n - 1):
            st[j] = st[j + 1]
            en[j] = en[j + 1]
        n -= 1
    if n == st.shape[0]:  # grow
        st2 = np.empty(2 * n, np.float64)
        en2 = np.empty(2 * n, np.float64)
        st2[:n] = st[:n]
        en2[:n] = en[:n]
        starts[k] = st2
        ends[k] = en2
        st, en = st2, en2
    for j in range(n, i, -1):  # insert at i
        st[j] = st[j - 1]
        en[j] = en[j - 1]
    st[i] = s
    en[i] = e
    count[k] = n + 1


@njit(cache=True)
def _res_book(starts, ends, count, srv_off, busy, li, s, d):  # pragma: no cover - compiled
    k0, k1 = srv_off[li], srv_off[li + 1]
    busy[li] += d / (k1 - k0)
    for k in range(k0, k1):
        if _srv_earliest(starts[k], ends[k], count[k], s, d) <= s:
            _srv_book(starts, ends, count, k, s, s + d)
            return
    _srv_book(starts, ends, count, k0, s, s + d)


@njit(cache=True)
def place_all(src, dst, nbytes, hop_off, hop_pair, chunk_off, chunks, pair_off, pair_routes,
              alpha, bandwidth, route_off, route_links, srv_off, n_chunks_total, n_ids,
              init_cap):  # pragma: no cover - compiled
    """Place every send (``src``/``dst`` NPU, ``nbytes``, hops ``hop_off[i]..``, each hop's
    candidate routes ``pair_routes[pair_off[p]..]``) in order.  Returns the start, end and
    route of every hop, the availability of every (NPU, chunk) and the calendar (per server
    its busy intervals, flat, per link its busy time)."""
    n_links = srv_off.shape[0] - 1
    n_srv = srv_off[n_links]
    starts = List()
    ends = List()
    for _ in range(n_srv):
        starts.append(np.empty(init_cap, np.float64))
        ends.append(np.empty(init_cap, np.float64))
    count = np.zeros(n_srv, np.int64)
    busy = np.zeros(n_links, np.float64)
    avail = np.zeros((n_ids, n_chunks_total), np.float64)
    n_hops = hop_off[src.shape[0]]
    out_s = np.empty(n_hops, np.float64)
    out_e = np.empty(n_hops, np.float64)
    out_r = np.empty(n_hops, np.int64)
    for i in range(src.shape[0]):
        a0 = src[i]
        ready = avail[a0, chunks[chunk_off[i]]]
        for j in range(chunk_off[i] + 1, chunk_off[i + 1]):
            v = avail[a0, chunks[j]]
            if v > ready:
                ready = v
        nb = nbytes[i]
        for h in range(hop_off[i], hop_off[i + 1]):
            p = hop_pair[h]
            best_r = -1
            best_s = 0.0
            best_d = 0.0
            best_load = 0.0
            for q in range(pair_off[p], pair_off[p + 1]):
                r = pair_routes[q]
                d = alpha[r] + nb / bandwidth[r]
                l0, l1 = route_off[r], route_off[r + 1]
                if l1 - l0 == 1:
                    s = _res_earliest(starts, ends, count, srv_off, route_links[l0], ready, d)
                else:
                    t = ready
                    while True:
                        nxt = _res_earliest(starts, ends, count, srv_off, route_links[l0], t, d)
                        for x in range(l0 + 1, l1):
                            v = _res_earliest(starts, ends, count, srv_off, route_links[x],
                                              t, d)
                            if v > nxt:
                                nxt = v
                        if nxt <= t:
                            break
                        t = nxt
                    s = t
                load = busy[route_links[l0]]
                for x in range(l0 + 1, l1):
                    if busy[route_links[x]] > load:
                        load = busy[route_links[x]]
                if best_r < 0 or s + d < best_s + best_d - EPS * (s + d) or (
                        s + d <= best_s + best_d + EPS * (s + d) and load < best_load):
                    best_s, best_d, best_load, best_r = s, d, load, r
            for x in range(route_off[best_r], route_off[best_r + 1]):
                _res_book(starts, ends, count, srv_off, busy, route_links[x], best_s, best_d)
            out_s[h] = best_s
            out_e[h] = best_s + best_d
            out_r[h] = best_r
            ready = best_s + best_d
        b0 = dst[i]
        for j in range(chunk_off[i], chunk_off[i + 1]):
            c = chunks[j]
            if avail[b0, c] < ready:
                avail[b0, c] = ready
    # the calendar as flat arrays (server k's intervals at cal_off[k]..): reading a typed
    # List from Python compiles its accessors in every process
    cal_off = np.zeros(n_srv + 1, np.int64)
    for k in range(n_srv):
        cal_off[k + 1] = cal_off[k] + count[k]
    cal_s = np.empty(cal_off[n_srv], np.float64)
    cal_e = np.empty(cal_off[n_srv], np.float64)
    for k in range(n_srv):
        cal_s[cal_off[k]:cal_off[k + 1]] = starts[k][:count[k]]
        cal_e[cal_off[k]:cal_off[k + 1]] = ends[k][:count[k]]
    return out_s, out_e, out_r, avail, cal_off, cal_s, cal_e, count, busy
