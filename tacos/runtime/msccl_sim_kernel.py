"""numba kernel of one loop iteration of the runtime model (imported only when numba is
installed): :func:`tacos.runtime.msccl_exec.time_iteration`'s event loop over arrays.

The same topological order (Kahn's, successors in ascending node order, the FIFO edge after a
node's happens-before predecessors), the same arithmetic in the same order, the same
accumulation order per thread block and per port: the times are bit for bit the Python
loop's.  See :mod:`tacos.runtime.msccl_sim`.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from tacos.msccl.verify_jit_kernel import kahn_order

SKIP, LOCAL, SEND, FUSED, RECV = 0, 1, 2, 3, 4


@njit(cache=True)
def _order(pred_ptr, pred_idx, fifo):  # pragma: no cover - compiled
    """Kahn's order of the happens-before graph plus the FIFO edges (``fifo[v]``: one more
    predecessor of ``v``, or -1), as :func:`tacos.msccl.verify_deps.topological_order`
    computes it: nodes on or behind a cycle are left out."""
    n = pred_ptr.shape[0] - 1
    indeg = np.zeros(n, np.int64)
    outdeg = np.zeros(n, np.int64)
    for v in range(n):
        for j in range(pred_ptr[v], pred_ptr[v + 1]):
            outdeg[pred_idx[j]] += 1
        if fifo[v] >= 0:
            outdeg[fifo[v]] += 1
        indeg[v] = pred_ptr[v + 1] - pred_ptr[v] + (1 if fifo[v] >= 0 else 0)
    succ_ptr = np.zeros(n + 1, np.int64)
    for u in range(n):
        succ_ptr[u + 1] = succ_ptr[u] + outdeg[u]
    fill = succ_ptr[:-1].copy()
    succ = np.empty(succ_ptr[n], np.int64)
    for v in range(n):
        for j in range(pred_ptr[v], pred_ptr[v + 1]):
            u = pred_idx[j]
            succ[fill[u]] = v
            fill[u] += 1
        if fifo[v] >= 0:
            u = fifo[v]
            succ[fill[u]] = v
            fill[u] += 1
    return kahn_order(indeg, succ_ptr, succ)


@njit(cache=True)
def kahn(pred_ptr, pred_idx):  # pragma: no cover - compiled
    """Kahn's order of a graph given as predecessor lists (nodes on or behind a cycle left
    out), as :func:`tacos.msccl.verify_deps.topological_order` computes it."""
    n = pred_ptr.shape[0] - 1
    return _order(pred_ptr, pred_idx, np.full(n, -1, np.int64))


@njit(cache=True)
def simulate(kind, cnt, mult, reducing, sconn, rconn, src, tb, pred_ptr, pred_idx, fifo,
             hb_order, conn_lat, conn_rate, conn_cta, link_ptr, link_idx, n_tbs, n_links,
             cta, cta_reduce, slice_bytes, calls_per_chunk):  # pragma: no cover - compiled
    """Event times of one iteration; see :func:`tacos.runtime.msccl_sim.time_iteration`."""
    n = kind.shape[0]
    order = _order(pred_ptr, pred_idx, fifo)
    if order.shape[0] < n:  # the FIFO edges close a cycle: the happens-before order
        order = hb_order
    start = np.zeros(n)
    finish = np.zeros(n)
    span_a = np.zeros(n)
    span_b = np.zeros(n)
    has_span = np.zeros(n, np.bool_)
    tb_busy = np.zeros(n_tbs)
    tb_sync = np.zeros(n_tbs)
    tb_limit = np.full(n_tbs, -1, np.int64)
    tb_first = np.full(n_tbs, -1, np.int64)
    link_load = np.zeros(n_links)
    link_first = np.full(n_links, -1, np.int64)
    conn_first = np.full(conn_lat.shape[0], -1, np.int64)
    pos = np.zeros(n, np.int64)
    seen_tb = 0
    seen_link = 0
    seen_conn = 0
    for p in range(order.shape[0]):
        v = order[p]
        pos[v] = p
        s = src[v]
        ready = 0.0
        for j in range(pred_ptr[v], pred_ptr[v + 1]):
            u = pred_idx[j]
            if u != s and finish[u] > ready:
                ready = finish[u]
        f = fifo[v]
        if f >= 0 and f != s and finish[f] > ready:
            ready = finish[f]
        k = kind[v]
        if k == SKIP:
            start[v] = ready
            finish[v] = ready
            continue
        nbytes = cnt[v] * slice_bytes * mult[v]
        calls = max(1, math.ceil(cnt[v] / calls_per_chunk))
        own = cta_reduce if reducing[v] else cta
        busy = 0.0
        sync = 0.0
        limit = -1
        c = -1
        if k == LOCAL:
            busy = nbytes / own
            start[v] = ready
            finish[v] = ready + busy
        elif k == SEND:
            c = sconn[v]
            sync = calls * conn_lat[c]
            busy = nbytes / conn_rate[c]
            limit = c
            start[v] = ready
            finish[v] = ready + sync + busy
            span_a[v] = ready + sync
            span_b[v] = finish[v]
        elif k == FUSED:
            cin = rconn[v]
            c = sconn[v]
            first = start[s] + conn_lat[cin] if s >= 0 else ready
            start[v] = max(ready, first)
            sync = calls * conn_lat[c]
            busy = nbytes / min(conn_rate[c], own)
            limit = c
            tail = finish[s] if s >= 0 else 0.0
            finish[v] = max(tail + conn_lat[c], start[v] + sync + busy)
            span_a[v] = start[v] + sync
            span_b[v] = finish[v]
        else:
            start[v] = max(ready, start[s] if s >= 0 else ready)
            busy = nbytes / own
            tail = finish[s] if s >= 0 else 0.0
            finish[v] = max(tail, start[v] + busy)
        if c >= 0:
            has_span[v] = True
            if conn_first[c] < 0:
                conn_first[c] = seen_conn
                seen_conn += 1
            for j in range(link_ptr[c], link_ptr[c + 1]):
                i = link_idx[j]
                if link_first[i] < 0:
                    link_first[i] = seen_link
                    seen_link += 1
                link_load[i] += nbytes
        t = tb[v]
        if tb_first[t] < 0:
            tb_first[t] = seen_tb
            seen_tb += 1
        if limit >= 0 and not conn_cta[limit]:
            tb_limit[t] = limit
        tb_busy[t] += busy
        tb_sync[t] += sync
    return (finish, pos, span_a, span_b, has_span, tb_busy, tb_sync, tb_limit, tb_first,
            link_load, link_first, conn_first)
