"""The list schedule of :func:`tacos.solvers.forest.pipeline.emit` compiled with numba.

The same algorithm over flat arrays, for the common case: every hop has one fixed route (a
single choice of link per position; parallel lanes of a link are its ``multiplicity``) and
slices are not merged by step (``batch`` is ``False`` or ``True``).  It makes the same choices
in the same order and the same float operations, so it returns the same transfers:

* one ready queue per hop, a heap of ``(round key, rank, tree, round, edge)`` (unique: it
  names its tree, round and edge), the same tuples the Python path pushes;
* transfers ending within :data:`~tacos.solvers.forest.pipeline.TIE` of each other free their
  lanes together, then every touched hop whose route is free starts, lowest head first;
* a transfer's end is ``now + α + bytes / bandwidth`` with the bytes of its chunks as an
  integer sum, as in Python.

:func:`run` takes the arrays :func:`tacos.solvers.forest.pipeline.emit` builds and returns
the transfers as columns (creation order).  The first call compiles the kernel (cached on disk
by numba's ``cache=True``); ``TACOS_JIT=0`` keeps the pure-Python list schedule.
"""

from __future__ import annotations

import heapq

import numpy as np
from numba import njit
from numba.typed import List


@njit(cache=True)
def _kernel(lanes, hop_ptr, hop_link, hop_alpha, hop_bw, user_ptr, user_hop,
            n_trees, node_base, child_ptr, child_edge, child_hop, child_rank,
            edge_base, edge_child, round_base, n_rounds, scale, rchunk_ptr, rchunk,
            chunk_bytes, batch, stripe, tie):
    n_hops = len(hop_alpha)
    free = lanes.copy()
    ready = List()
    for _ in range(n_hops):
        q = [(0.0, 0, 0, 0, 0)]
        q.pop()
        ready.append(q)
    mark = np.zeros(n_hops, dtype=np.bool_)
    touched = [0]
    touched.pop()
    # outputs (creation order)
    o_start = [0.0]
    o_start.pop()
    o_end = [0.0]
    o_end.pop()
    o_tree = [0]
    o_tree.pop()
    o_edge = [0]
    o_edge.pop()
    o_hop = [0]
    o_hop.pop()
    o_cptr = [0]
    o_chunk = [0]
    o_chunk.pop()
    # groups (one per started slice or batch): members and stripes still under way
    g_ptr = [0]
    g_tree = [0]
    g_tree.pop()
    g_round = [0]
    g_round.pop()
    g_edge = [0]
    g_edge.pop()
    parts = [0]
    parts.pop()
    events = [(0.0, 0, 0)]
    events.pop()

    for i in range(n_trees):  # every round of every tree at its root (local node 0)
        nb = node_base[i]
        for j in range(n_rounds[i]):
            key = j * scale[i]
            for c in range(child_ptr[nb], child_ptr[nb + 1]):
                h = child_hop[c]
                heapq.heappush(ready[h], (key, child_rank[c], i, j, child_edge[c]))
                if not mark[h]:
                    mark[h] = True
                    touched.append(h)
    now = 0.0
    buf = np.empty(len(rchunk) + 1, dtype=np.int64)
    while True:
        # start: every touched hop whose route has a free lane, lowest queue head first
        heads = [(0.0, 0, 0, 0, 0, 0)]
        heads.pop()
        for h in touched:
            mark[h] = False
            if len(ready[h]) == 0:
                continue
            ok = True
            for p in range(hop_ptr[h], hop_ptr[h + 1]):
                if free[hop_link[p]] <= 0:
                    ok = False
                    break
            if ok:
                a = ready[h][0]
                heads.append((a[0], a[1], a[2], a[3], a[4], h))
        touched.clear()
        heads.sort()
        for hd in heads:
            hid = hd[5]
            queue = ready[hid]
            while len(queue) > 0:
                ok = True
                for p in range(hop_ptr[hid], hop_ptr[hid + 1]):
                    if free[hop_link[p]] <= 0:
                        ok = False
                        break
                if not ok:
                    break
                key, _, i, j, e = heapq.heappop(queue)
                g = len(parts)
                g_tree.append(i)
                g_round.append(j)
                g_edge.append(e)
                while batch and len(queue) > 0 and queue[0][0] == key:
                    _, _, i2, j2, e2 = heapq.heappop(queue)
                    g_tree.append(i2)
                    g_round.append(j2)
                    g_edge.append(e2)
                g_ptr.append(len(g_tree))
                for p in range(hop_ptr[hid], hop_ptr[hid + 1]):
                    free[hop_link[p]] -= 1
                # the group's chunks: one round's, or the sorted union of the batch's
                n = 0
                for m in range(g_ptr[g], g_ptr[g + 1]):
                    r = round_base[g_tree[m]] + g_round[m]
                    for c in range(rchunk_ptr[r], rchunk_ptr[r + 1]):
                        buf[n] = rchunk[c]
                        n += 1
                chunks = buf[:n].copy()
                if g_ptr[g + 1] - g_ptr[g] > 1:
                    chunks.sort()
                routes = 1
                while stripe and len(queue) == 0 and routes < n:  # idle lanes too
                    ok = True
                    for p in range(hop_ptr[hid], hop_ptr[hid + 1]):
                        if free[hop_link[p]] <= 0:
                            ok = False
                            break
                    if not ok:
                        break
                    for p in range(hop_ptr[hid], hop_ptr[hid + 1]):
                        free[hop_link[p]] -= 1
                    routes += 1
                parts.append(routes)
                for q in range(routes):
                    lo = q * n // routes
                    hi = (q + 1) * n // routes
                    share = 0
                    for c in range(lo, hi):
                        share += chunk_bytes[chunks[c]]
                    end = now + hop_alpha[hid] + share / hop_bw[hid]
                    heapq.heappush(events, (end, g, len(o_start)))
                    o_start.append(now)
                    o_end.append(end)
                    o_tree.append(i)
                    o_edge.append(e)
                    o_hop.append(hid)
                    for c in range(lo, hi):
                        o_chunk.append(chunks[c])
                    o_cptr.append(len(o_chunk))
        if len(events) == 0:
            break
        # everything ending within tie of the first event frees its lanes first
        now, g, t = heapq.heappop(events)
        while True:
            hid = o_hop[t]
            for p in range(hop_ptr[hid], hop_ptr[hid + 1]):
                li = hop_link[p]
                free[li] += 1
                for u in range(user_ptr[li], user_ptr[li + 1]):
                    h = user_hop[u]
                    if not mark[h]:
                        mark[h] = True
                        touched.append(h)
            parts[g] -= 1
            if parts[g] == 0:  # every stripe of the slice has arrived: its children
                for m in range(g_ptr[g], g_ptr[g + 1]):
                    i = g_tree[m]
                    j = g_round[m]
                    node = node_base[i] + edge_child[edge_base[i] + g_edge[m]]
                    key = j * scale[i]
                    for c in range(child_ptr[node], child_ptr[node + 1]):
                        h = child_hop[c]
                        heapq.heappush(ready[h], (key, child_rank[c], i, j, child_edge[c]))
                        if not mark[h]:
                            mark[h] = True
                            touched.append(h)
            if len(events) == 0 or events[0][0] > now + tie:
                break
            end, g, t = heapq.heappop(events)
            now = max(now, end)
    return (np.array(o_start), np.array(o_end), np.array(o_tree), np.array(o_edge),
            np.array(o_hop), np.array(o_cptr), np.array(o_chunk, dtype=np.int64))


def run(lanes: np.ndarray, hop_ptr: np.ndarray, hop_link: np.ndarray, hop_alpha: np.ndarray,
        hop_bw: np.ndarray, user_ptr: np.ndarray, user_hop: np.ndarray, node_base: np.ndarray,
        child_ptr: np.ndarray, child_edge: np.ndarray, child_hop: np.ndarray,
        child_rank: np.ndarray, edge_base: np.ndarray, edge_child: np.ndarray,
        round_base: np.ndarray, n_rounds: np.ndarray, scale: np.ndarray,
        rchunk_ptr: np.ndarray, rchunk: np.ndarray, chunk_bytes: np.ndarray, batch: bool,
        stripe: bool, tie: float) -> tuple[np.ndarray, ...]:
    """The list schedule over flat arrays (CSR ``*_ptr``/value pairs): hops' fixed routes,
    links' users, every (tree, local node)'s children ``(edge, hop, rank)``, every (tree,
    round)'s chunks.  Returns ``(start, end, tree, edge, hop, chunk_ptr, chunks)`` of every
    transfer in creation order."""
    return _kernel(lanes, hop_ptr, hop_link, hop_alpha, hop_bw, user_ptr, user_hop,
                   len(n_rounds), node_base, child_ptr, child_edge, child_hop, child_rank,
                   edge_base, edge_child, round_base, n_rounds, scale, rchunk_ptr, rchunk,
                   chunk_bytes, batch, stripe, tie)
