"""numba kernels of the compiled MSCCL verifier (imported only when numba is installed).

Each kernel answers one question of :mod:`tacos.msccl.verify_jit` over integer arrays (steps,
thread blocks, transmissions, connections and buffer slots numbered once) and stops at the first
thing the Python pass would report: it says *whether* the pass is clean, never *what* is wrong
(the Python passes say that).  Step types are coded by their position in
:data:`tacos.msccl.program.STEP_TYPES`; buffers ``i``, ``o``, ``s`` as 0, 1, 2.
"""

from __future__ import annotations

import numpy as np
from numba import njit

S_, R_, RCS, RRS, RRC, RRCS, CPY, RE, NOP = range(9)
MAX_FUSION = 16  # tacos.msccl.program.MAX_REDUCE_FUSION
MAX_DEPENDED = 127  # tacos.msccl.program.MAX_DEPENDED_TB


@njit(cache=True, inline="always")
def _sends(t):
    return t == S_ or t == RCS or t == RRS or t == RRCS


@njit(cache=True, inline="always")
def _receives(t):
    return R_ <= t <= RRCS


@njit(cache=True, inline="always")
def _reads_src(t):
    return t == S_ or RRS <= t <= RE


@njit(cache=True, inline="always")
def _writes_dst(t):
    return t == R_ or t == RCS or RRC <= t <= RE


# -- model: folding steps into transmissions -----------------------------------------------------


@njit(cache=True)
def fold(tb_start, typ, srcbuf, dstbuf, dstoff, depid, deps, hasdep):
    """Fold every tb into transmissions exactly as :func:`tacos.msccl.verify_model._fold`.

    Returns ``(tb_tx, pos_tx, tx_tb, tx_first, tx_last, tx_n, tx_post, tx_hasdep, tx_w0,
    tx_w1, w_dep, w_deps)``: transmissions of tb t are ``tb_tx[t]:tb_tx[t+1]``; ``pos_tx``
    maps a step to the transmission holding it (nops: the one consuming their dependency,
    -1 for none); ``tx_first``/``tx_last`` are global step indices, ``tx_n`` the fused step
    count; the waits of transmission k are ``w_*[tx_w0[k]:tx_w1[k]]``.
    """
    ns = typ.shape[0]
    nt = tb_start.shape[0] - 1
    pos_tx = np.full(ns, -1, np.int64)
    tx_tb = np.empty(ns, np.int64)
    tx_first = np.empty(ns, np.int64)
    tx_last = np.empty(ns, np.int64)
    tx_n = np.empty(ns, np.int64)
    tx_post = np.empty(ns, np.int64)
    tx_hasdep = np.zeros(ns, np.bool_)
    tx_w0 = np.empty(ns, np.int64)
    tx_w1 = np.empty(ns, np.int64)
    w_dep = np.empty(ns, np.int64)
    w_deps = np.empty(ns, np.int64)
    tb_tx = np.empty(nt + 1, np.int64)
    ntx = 0
    nw = 0
    for t in range(nt):
        tb_tx[t] = ntx
        a = tb_start[t]
        b = tb_start[t + 1]
        pend = nw
        chain = False
        kb = -1
        kd = -1
        ks = -1
        total_re = 0
        for g in range(a, b):
            ty = typ[g]
            if depid[g] >= 0:
                w_dep[nw] = depid[g]
                w_deps[nw] = deps[g]
                nw += 1
            if ty == NOP:
                continue
            if ty == RE and chain and dstbuf[g] == kb and dstoff[g] == kd \
                    and srcbuf[g] == ks and depid[g] == -1:
                k = ntx - 1
                tx_last[k] = g
                tx_n[k] += 1
                tx_hasdep[k] = hasdep[g] == 1
            else:
                k = ntx
                ntx += 1
                tx_tb[k] = t
                tx_first[k] = g
                tx_last[k] = g
                tx_n[k] = 1
                tx_hasdep[k] = hasdep[g] == 1
                tx_w0[k] = pend
                tx_w1[k] = nw
                pend = nw
            pos_tx[g] = k
            if ty == RE:
                total_re += 1
                if hasdep[g] == 1 or total_re == MAX_FUSION:
                    chain = False
                else:
                    chain = True
                    kb = dstbuf[g]
                    kd = dstoff[g]
                    ks = srcbuf[g]
            else:
                chain = False
        counter = 0
        for k in range(tb_tx[t], ntx):
            nwk = tx_w1[k] - tx_w0[k]
            if nwk > 0:
                counter += nwk - 1
            counter += tx_n[k] - 1
            tx_post[k] = counter
            counter += 1
        nxt = -1
        for g in range(b - 1, a - 1, -1):
            if pos_tx[g] >= 0:
                nxt = pos_tx[g]
            elif typ[g] == NOP:
                pos_tx[g] = nxt
    tb_tx[nt] = ntx
    return (tb_tx, pos_tx, tx_tb[:ntx], tx_first[:ntx], tx_last[:ntx], tx_n[:ntx],
            tx_post[:ntx], tx_hasdep[:ntx], tx_w0[:ntx], tx_w1[:ntx], w_dep[:nw], w_deps[:nw])


# -- dependencies ----------------------------------------------------------------------------------


@njit(cache=True)
def dependencies_clean(tb_start, tb_rank, tb_id, tbidx, typ, srcbuf, srcoff, dstbuf, dstoff, cnt,
                       depid, deps, hasdep, pos_tx, tx_first, tx_last, tx_n, tx_post):
    """True when :func:`tacos.msccl.verify_deps.check_dependencies` reports nothing (no error,
    no warning)."""
    ns = typ.shape[0]
    nt = tb_start.shape[0] - 1
    referenced = np.zeros(ns, np.bool_)
    width = tbidx.shape[1]
    for t in range(nt):
        r = tb_rank[t]
        tid = tb_id[t]
        nops = 0
        for g in range(tb_start[t], tb_start[t + 1]):
            d = depid[g]
            if d >= 0:
                if d == tid or d >= width:
                    return False
                u = tbidx[r, d]
                if u < 0:
                    return False
                k = deps[g]
                if k < 0 or k >= tb_start[u + 1] - tb_start[u]:
                    return False
                tg = tb_start[u] + k
                if typ[tg] == NOP or d > MAX_DEPENDED or hasdep[tg] != 1:
                    return False
                x = pos_tx[tg]
                if x >= 0 and tx_last[x] == tg and tx_post[x] != k:
                    return False
                referenced[tg] = True
            elif d < -1 or deps[g] != -1:
                return False
            if typ[g] == NOP:
                if d < 0 or hasdep[g] == 1:
                    return False
                nops += 1
                continue
            if nops > 0 and d < 0:
                return False
            nops = 0
        if nops > 0:
            return False
    for g in range(ns):
        if hasdep[g] == 1 and typ[g] != NOP and not referenced[g]:
            return False
    for k in range(tx_first.shape[0]):
        if tx_n[k] > 1:  # a fused re chain
            f = tx_first[k]
            nreal = 0
            for g in range(f, tx_last[k] + 1):
                if typ[g] == NOP:
                    continue
                nreal += 1
                if cnt[g] != cnt[f]:
                    return False
                if srcbuf[g] == dstbuf[f] and srcoff[g] < dstoff[f] + cnt[f] \
                        and dstoff[f] < srcoff[g] + cnt[g]:
                    return False
            if nreal > MAX_FUSION:
                return False
    return True


@njit(cache=True)
def resolve_waits(tb_start, tb_rank, tbidx, pos_tx, tx_tb, tx_w0, tx_w1, w_dep, w_deps):
    """Target tb and releasing transmission of every wait (dependencies must be clean)."""
    nw = w_dep.shape[0]
    w_tb = np.empty(nw, np.int64)
    w_rel = np.empty(nw, np.int64)
    for k in range(tx_tb.shape[0]):
        r = tb_rank[tx_tb[k]]
        for w in range(tx_w0[k], tx_w1[k]):
            u = tbidx[r, w_dep[w]]
            w_tb[w] = u
            w_rel[w] = pos_tx[tb_start[u] + w_deps[w]]
    return w_tb, w_rel


# -- connections -------------------------------------------------------------------------------


@njit(cache=True)
def pair(conn_sender, conn_receiver, tb_tx, tb_sconn, tb_rconn, tx_first, typ, srcbuf, srcoff,
         dstbuf, dstoff, cnt):
    """k-th send -> k-th receive of every connection; ``(clean, match)`` with ``match[rx]`` the
    sending transmission of receive ``rx`` (-1 for non-receives).  Clean when
    :func:`tacos.msccl.verify_connections.check_connections` reports nothing beyond symmetry
    (checked by the caller) and every sending/receiving tb has its connection."""
    ntx = tx_first.shape[0]
    match = np.full(ntx, -1, np.int64)
    nt = tb_tx.shape[0] - 1
    for t in range(nt):
        for k in range(tb_tx[t], tb_tx[t + 1]):
            ty = typ[tx_first[k]]
            if (_sends(ty) and tb_sconn[t] < 0) or (_receives(ty) and tb_rconn[t] < 0):
                return False, match
    for c in range(conn_sender.shape[0]):
        ts = conn_sender[c]
        tr = conn_receiver[c]
        i = tb_tx[ts]
        iend = tb_tx[ts + 1]
        j = tb_tx[tr]
        jend = tb_tx[tr + 1]
        while True:
            while i < iend and not _sends(typ[tx_first[i]]):
                i += 1
            while j < jend and not _receives(typ[tx_first[j]]):
                j += 1
            if i >= iend or j >= jend:
                if i < iend or j < jend:
                    return False, match  # one side has more transfers
                break
            fs = tx_first[i]
            fr = tx_first[j]
            if cnt[fs] != cnt[fr]:
                return False, match
            if typ[fs] == S_ and typ[fr] == R_ and (
                    srcbuf[fs] != srcbuf[fr] or srcoff[fs] != srcoff[fr]
                    or dstbuf[fs] != dstbuf[fr] or dstoff[fs] != dstoff[fr]):
                return False, match
            match[j] = i
            i += 1
            j += 1
    return True, match


# -- happens-before ------------------------------------------------------------------------------


@njit(cache=True)
def happens_before(tb_tx, tx_tb, tx_w0, tx_w1, w_rel, match):
    """Predecessors (CSR) and Kahn's topological order of the happens-before graph, as
    :func:`tacos.msccl.verify_deps.build_hb`; ``ordered`` is the count of ordered nodes (all of
    them when acyclic)."""
    n = tx_tb.shape[0]
    deg = np.zeros(n + 1, np.int64)
    for v in range(n):
        c = 0
        if v > tb_tx[tx_tb[v]]:
            c += 1
        for w in range(tx_w0[v], tx_w1[v]):
            if w_rel[w] >= 0 and w_rel[w] != v:
                c += 1
        if match[v] >= 0:
            c += 1
        deg[v + 1] = c
    ptr = np.cumsum(deg)
    preds = np.empty(ptr[n], np.int64)
    for v in range(n):
        p = ptr[v]
        if v > tb_tx[tx_tb[v]]:
            preds[p] = v - 1
            p += 1
        for w in range(tx_w0[v], tx_w1[v]):
            if w_rel[w] >= 0 and w_rel[w] != v:
                preds[p] = w_rel[w]
                p += 1
        if match[v] >= 0:
            preds[p] = match[v]
            p += 1
    # successors by transposition
    sdeg = np.zeros(n + 1, np.int64)
    for e in range(ptr[n]):
        sdeg[preds[e] + 1] += 1
    sptr = np.cumsum(sdeg)
    fill = sptr[:n].copy()
    succs = np.empty(ptr[n], np.int64)
    for v in range(n):
        for e in range(ptr[v], ptr[v + 1]):
            u = preds[e]
            succs[fill[u]] = v
            fill[u] += 1
    order = kahn_order(ptr[1:] - ptr[:-1], sptr, succs)
    return ptr, preds, order, order.shape[0]


@njit(cache=True)
def kahn_order(indeg, sptr, succs):
    """Kahn's topological order of a graph given by in-degrees (consumed) and successors in
    CSR form (``sptr``, ``succs``): sources in index order, then each node when its last
    predecessor is taken; nodes on or behind a cycle are left out."""
    n = indeg.shape[0]
    order = np.empty(n, np.int64)
    m = 0
    for v in range(n):
        if indeg[v] == 0:
            order[m] = v
            m += 1
    i = 0
    while i < m:
        u = order[i]
        for e in range(sptr[u], sptr[u + 1]):
            w = succs[e]
            indeg[w] -= 1
            if indeg[w] == 0:
                order[m] = w
                m += 1
        i += 1
    return order[:m]


# -- races ---------------------------------------------------------------------------------------


@njit(cache=True, inline="always")
def _phys(rank, buf, off, aliased, amode, share):
    """:func:`tacos.msccl.program.inplace_alias` on codes: ``(buffer, offset)``."""
    if aliased and buf != 2:
        if amode == 1:  # allgather, gather: input is a slice of the output
            if buf == 0:
                return 1, rank * share + off
        elif amode == 2:  # reducescatter, scatter: output is a slice of the input
            if buf == 1:
                return 0, rank * share + off
        elif buf == 1:
            return 0, off
    return buf, off


@njit(cache=True, inline="always")
def _slot(rank, buf, off, bsize, base, stride):
    if off < 0 or off >= bsize[buf]:
        return -1
    return rank * stride + base[buf] + off


@njit(cache=True)
def _reach(a, b, pos, ptr, preds, seen, stamp, stack):
    """Exact reachability a -> b backwards from b, pruned at a's topological position."""
    floor = pos[a]
    seen[b] = stamp
    top = 0
    stack[top] = b
    top += 1
    while top > 0:
        top -= 1
        v = stack[top]
        for e in range(ptr[v], ptr[v + 1]):
            u = preds[e]
            if u == a:
                return True
            if seen[u] != stamp and pos[u] > floor:
                seen[u] = stamp
                stack[top] = u
                top += 1
    return False


@njit(cache=True)
def races_clean(order, ptr, preds, tx_tb, tx_first, tx_last, tx_hasdep, tx_w0, tx_w1, w_rel,
                tb_tx, tb_rank, tb_local, width, typ, srcbuf, srcoff, dstbuf, dstoff, cnt,
                aliased, amode, share, bsize, base, stride, nslots):
    """:func:`tacos.msccl.verify_races.check_races` as a yes/no: 0 = no race, 1 = some
    conflicting pair is unordered, 2 = an access falls outside the slot layout."""
    n = order.shape[0]
    pos = np.full(n, -1, np.int64)
    for k in range(n):
        pos[order[k]] = k
    # rank-local vector clocks: snapshot rows over the rank's tbs (-1 = no entry)
    nwaiting = 0
    for v in range(n):
        if tx_w1[v] > tx_w0[v]:
            nwaiting += 1
    snaps = np.empty((nwaiting + 1, width), np.int32)
    shared = np.zeros(nwaiting + 1, np.bool_)  # held by a hasdep transmission: copy on write
    nsnap = 0
    nt = tb_tx.shape[0] - 1
    tb_snap = np.full(nt, -1, np.int64)
    tx_snap = np.full(n, -1, np.int64)
    # per slot: last write and the reads since then (linked lists in a pool)
    nreads = 0
    for v in range(n):
        f = tx_first[v]
        ty = typ[f]
        if _reads_src(ty):
            for g in range(f, tx_last[v] + 1):
                if typ[g] != NOP:
                    nreads += cnt[g]
        if ty == RE:
            nreads += cnt[f]
    last_w = np.full(nslots, -1, np.int64)
    head = np.full(nslots, -1, np.int64)
    pool_tx = np.empty(max(nreads, 1), np.int64)
    pool_next = np.empty(max(nreads, 1), np.int64)
    npool = 0
    seen = np.zeros(n, np.int64)
    stack = np.empty(n + 1, np.int64)
    stamp = 0
    for k in range(n):
        x = order[k]
        t = tx_tb[x]
        # visit: the rank-local clock after x
        if tx_w1[x] > tx_w0[x]:
            cur = tb_snap[t]
            fresh = False
            for w in range(tx_w0[x], tx_w1[x]):
                rel = w_rel[w]
                if rel < 0 or rel == x or pos[rel] < 0:
                    continue
                rt = tx_tb[rel]
                rl = tb_local[rt]
                ridx = rel - tb_tx[rt]
                other = tx_snap[rel]
                dominated = cur >= 0 and snaps[cur, rl] >= ridx
                if dominated and other >= 0:
                    for q in range(width):
                        if snaps[other, q] > snaps[cur, q]:
                            dominated = False
                            break
                if dominated:
                    continue
                if not fresh:
                    if cur < 0 or shared[cur]:
                        for q in range(width):
                            snaps[nsnap, q] = snaps[cur, q] if cur >= 0 else -1
                        cur = nsnap
                        nsnap += 1
                    fresh = True
                if other >= 0:
                    for q in range(width):
                        if snaps[other, q] > snaps[cur, q]:
                            snaps[cur, q] = snaps[other, q]
                if snaps[cur, rl] < ridx:
                    snaps[cur, rl] = ridx
            tb_snap[t] = cur
        if tx_hasdep[x]:
            tx_snap[x] = tb_snap[t]
            if tb_snap[t] >= 0:
                shared[tb_snap[t]] = True
        # accesses
        rank = tb_rank[t]
        f = tx_first[x]
        ty = typ[f]
        self_copy = False
        if aliased and ty == CPY:
            b1, o1 = _phys(rank, srcbuf[f], srcoff[f], aliased, amode, share)
            b2, o2 = _phys(rank, dstbuf[f], dstoff[f], aliased, amode, share)
            self_copy = b1 == b2 and o1 == o2
        nacc = tx_last[x] - f + 3
        for a in range(nacc):
            # accesses in order: the sources of every (fused) step, the destination read of
            # re, the destination write
            if a < nacc - 2:
                g = f + a
                if not _reads_src(ty) or typ[g] == NOP:
                    continue
                buf = srcbuf[g]
                off = srcoff[g]
                c = cnt[g]
                write = False
            elif a == nacc - 2:
                if ty != RE:
                    continue
                buf = dstbuf[f]
                off = dstoff[f]
                c = cnt[f]
                write = False
            else:
                if not _writes_dst(ty) or self_copy:
                    continue
                buf = dstbuf[f]
                off = dstoff[f]
                c = cnt[f]
                write = True
            for j in range(off, off + c):
                pb, po = _phys(rank, buf, j, aliased, amode, share)
                s = _slot(rank, pb, po, bsize, base, stride)
                if s < 0:
                    return 2
                wv = last_w[s]
                if wv >= 0 and wv != x:
                    wt = tx_tb[wv]
                    if wt != t:
                        ok = tb_snap[t] >= 0 and snaps[tb_snap[t], tb_local[wt]] >= wv - tb_tx[wt]
                        if not ok:
                            stamp += 1
                            if not _reach(wv, x, pos, ptr, preds, seen, stamp, stack):
                                return 1
                if write:
                    e = head[s]
                    while e >= 0:
                        rv = pool_tx[e]
                        if rv != x:
                            rt = tx_tb[rv]
                            if rt != t:
                                ok = tb_snap[t] >= 0 and \
                                    snaps[tb_snap[t], tb_local[rt]] >= rv - tb_tx[rt]
                                if not ok:
                                    stamp += 1
                                    if not _reach(rv, x, pos, ptr, preds, seen, stamp, stack):
                                        return 1
                        e = pool_next[e]
                    head[s] = -1
                    last_w[s] = x
                else:
                    pool_tx[npool] = x
                    pool_next[npool] = head[s]
                    head[s] = npool
                    npool += 1
    return 0


# -- bounded-FIFO execution ----------------------------------------------------------------------


@njit(cache=True)
def fifo_completes(tb_tx, tb_sconn, tb_rconn, conn_sender, conn_receiver, tx_first, tx_post,
                   tx_hasdep, tx_w0, tx_w1, w_tb, w_deps, typ, cnt, capacity):
    """:func:`tacos.msccl.verify_fifo.run_fifo` as a yes/no: True when every tb runs to its
    end with ``capacity`` messages per connection."""
    nt = tb_tx.shape[0] - 1
    nc = conn_sender.shape[0]
    cap = max(capacity, 1)
    qbuf = np.empty((max(nc, 1), cap), np.int64)
    qhead = np.zeros(max(nc, 1), np.int64)
    qlen = np.zeros(max(nc, 1), np.int64)
    pc = tb_tx[:nt].copy()
    phase = np.zeros(nt, np.int64)
    flag = np.full(nt, -1, np.int64)
    queued = np.ones(nt, np.bool_)
    work = np.empty(nt + 1, np.int64)
    for t in range(nt):
        work[t] = t
    wh = 0
    wlen = nt
    ring = nt + 1
    whead = np.full(nt, -1, np.int64)
    pool_tb = np.empty(max(nt, 16), np.int64)
    pool_next = np.empty(max(nt, 16), np.int64)
    npool = 0
    while wlen > 0:
        t = work[wh]
        wh = (wh + 1) % ring
        wlen -= 1
        queued[t] = False
        i = pc[t]
        ph = phase[t]
        end = tb_tx[t + 1]
        rq = tb_rconn[t]
        sq = tb_sconn[t]
        while i < end:
            f = tx_first[i]
            ty = typ[f]
            recv = _receives(ty)
            send = _sends(ty)
            c = cnt[f]
            if ph == 0:
                short = -1
                for w in range(tx_w0[i], tx_w1[i]):
                    if flag[w_tb[w]] < w_deps[w]:
                        short = w_tb[w]
                        break
                if short >= 0:
                    if npool == pool_tb.shape[0]:
                        grown = np.empty(2 * npool, np.int64)
                        grown[:npool] = pool_tb
                        pool_tb = grown
                        grown = np.empty(2 * npool, np.int64)
                        grown[:npool] = pool_next
                        pool_next = grown
                    pool_tb[npool] = t
                    pool_next[npool] = whead[short]
                    whead[short] = npool
                    npool += 1
                    break
                if recv:
                    if rq < 0 or qlen[rq] == 0 or qbuf[rq, qhead[rq]] != c:
                        break
                    qhead[rq] = (qhead[rq] + 1) % cap
                    qlen[rq] -= 1
                    u = conn_sender[rq]
                    if u >= 0 and not queued[u]:
                        queued[u] = True
                        work[(wh + wlen) % ring] = u
                        wlen += 1
                    if send:
                        ph = 1
                        continue
            if ph == 1 or (send and not recv):
                if sq < 0 or qlen[sq] >= capacity:
                    break
                qbuf[sq, (qhead[sq] + qlen[sq]) % cap] = c
                qlen[sq] += 1
                u = conn_receiver[sq]
                if u >= 0 and not queued[u]:
                    queued[u] = True
                    work[(wh + wlen) % ring] = u
                    wlen += 1
            ph = 0
            i += 1
            if tx_hasdep[i - 1]:
                flag[t] = tx_post[i - 1]
                e = whead[t]
                whead[t] = -1
                while e >= 0:
                    u = pool_tb[e]
                    if not queued[u]:
                        queued[u] = True
                        work[(wh + wlen) % ring] = u
                        wlen += 1
                    e = pool_next[e]
        pc[t] = i
        phase[t] = ph
    for t in range(nt):
        if pc[t] < tb_tx[t + 1]:
            return False
    return True


# -- symbolic data flow --------------------------------------------------------------------------


@njit(cache=True)
def _read(rank, buf, off, c, aliased, amode, share, bsize, base, stride, mchunk, mbits,
          vchunk, vbits):
    """Copy ``c`` chunks into ``vchunk``/``vbits``; False on a chunk holding no data."""
    for j in range(c):
        pb, po = _phys(rank, buf, off + j, aliased, amode, share)
        s = _slot(rank, pb, po, bsize, base, stride)
        if s < 0 or mchunk[s] < 0:
            return False
        vchunk[j] = mchunk[s]
        for q in range(mbits.shape[1]):
            vbits[j, q] = mbits[s, q]
    return True


@njit(cache=True)
def _merge(vchunk, vbits, uchunk, ubits, c):
    """``v += u`` chunk by chunk; False when a sum leaves the single-chunk form (same chunk,
    each rank once), which the Python replay handles."""
    for j in range(c):
        if vchunk[j] != uchunk[j]:
            return False
        for q in range(vbits.shape[1]):
            if vbits[j, q] & ubits[j, q]:
                return False
            vbits[j, q] |= ubits[j, q]
    return True


@njit(cache=True)
def _write(rank, buf, off, c, aliased, amode, share, bsize, base, stride, mchunk, mbits,
           vchunk, vbits):
    for j in range(c):
        pb, po = _phys(rank, buf, off + j, aliased, amode, share)
        s = _slot(rank, pb, po, bsize, base, stride)
        if s < 0:
            return False
        mchunk[s] = vchunk[j]
        for q in range(mbits.shape[1]):
            mbits[s, q] = vbits[j, q]
    return True


@njit(cache=True)
def symbolic_clean(order, tx_tb, tx_first, tx_last, match, tb_rank, typ, srcbuf, srcoff, dstbuf,
                   dstoff, cnt, ngpus, nchunks, coll, aliased, amode, share, bsize, base,
                   stride, nslots):
    """:func:`tacos.msccl.verify_symbolic.check_symbolic` as a yes/no for a race-free program
    that runs to completion (any topological order of happens-before then gives the values of
    the FIFO order): True when no read finds an empty chunk and every output chunk meets the
    postcondition.  ``coll``: 0 allgather, 1 allreduce, 2 reducescatter, 3 alltoall."""
    words = (ngpus + 63) // 64
    n = order.shape[0]
    mchunk = np.full(nslots, -1, np.int32)
    mbits = np.zeros((nslots, words), np.uint64)
    # payload of every sending transmission, by its position in a value pool
    pay = np.full(n, -1, np.int64)
    total = 0
    for v in range(n):
        if _sends(typ[tx_first[v]]):
            pay[v] = total
            total += cnt[tx_first[v]]
    pchunk = np.empty(max(total, 1), np.int32)
    pbits = np.zeros((max(total, 1), words), np.uint64)
    maxc = 1
    for v in range(n):
        for g in range(tx_first[v], tx_last[v] + 1):
            if cnt[g] > maxc:
                maxc = cnt[g]
    vchunk = np.empty(maxc, np.int32)
    vbits = np.zeros((maxc, words), np.uint64)
    uchunk = np.empty(maxc, np.int32)
    ubits = np.zeros((maxc, words), np.uint64)
    m = nchunks // ngpus
    count = m if coll == 0 else nchunks
    for r in range(ngpus):
        for k in range(count):
            pb, po = _phys(r, 0, k, aliased, amode, share)
            s = _slot(r, pb, po, bsize, base, stride)
            if s < 0:
                return False
            mchunk[s] = k
            mbits[s, r >> 6] = np.uint64(1) << np.uint64(r & 63)
    for i in range(n):
        x = order[i]
        rank = tb_rank[tx_tb[x]]
        f = tx_first[x]
        ty = typ[f]
        c = cnt[f]
        if ty == S_:
            if not _read(rank, srcbuf[f], srcoff[f], c, aliased, amode, share, bsize, base,
                         stride, mchunk, mbits, vchunk, vbits):
                return False
        elif ty == CPY:
            if not _read(rank, srcbuf[f], srcoff[f], c, aliased, amode, share, bsize, base,
                         stride, mchunk, mbits, vchunk, vbits):
                return False
            if not _write(rank, dstbuf[f], dstoff[f], c, aliased, amode, share, bsize, base,
                          stride, mchunk, mbits, vchunk, vbits):
                return False
        elif ty == RE:
            c = cnt[tx_last[x]]  # the runtime keeps the last cnt of a fused chain
            if c > maxc:
                return False
            if not _read(rank, dstbuf[f], dstoff[f], c, aliased, amode, share, bsize, base,
                         stride, mchunk, mbits, vchunk, vbits):
                return False
            for g in range(f, tx_last[x] + 1):
                if typ[g] == NOP:
                    continue
                if not _read(rank, srcbuf[g], srcoff[g], c, aliased, amode, share, bsize,
                             base, stride, mchunk, mbits, uchunk, ubits):
                    return False
                if not _merge(vchunk, vbits, uchunk, ubits, c):
                    return False
            if not _write(rank, dstbuf[f], dstoff[f], c, aliased, amode, share, bsize, base,
                          stride, mchunk, mbits, vchunk, vbits):
                return False
        else:  # receives
            sx = match[x]
            if sx < 0:
                return False
            p = pay[sx]
            for j in range(c):
                vchunk[j] = pchunk[p + j]
                for q in range(words):
                    vbits[j, q] = pbits[p + j, q]
            if ty == RRS or ty == RRC or ty == RRCS:
                if not _read(rank, srcbuf[f], srcoff[f], c, aliased, amode, share, bsize,
                             base, stride, mchunk, mbits, uchunk, ubits):
                    return False
                if not _merge(vchunk, vbits, uchunk, ubits, c):
                    return False
            if ty != RRS:
                if not _write(rank, dstbuf[f], dstoff[f], c, aliased, amode, share, bsize,
                              base, stride, mchunk, mbits, vchunk, vbits):
                    return False
        if pay[x] >= 0:
            p = pay[x]
            for j in range(c):
                pchunk[p + j] = vchunk[j]
                for q in range(words):
                    pbits[p + j, q] = vbits[j, q]
    # postcondition
    n_out = m if coll == 2 else nchunks
    for r in range(ngpus):
        for k in range(n_out):
            if coll == 0:
                wc = k % m
                wr = k // m
            elif coll == 1:
                wc = k
                wr = -1
            elif coll == 2:
                wc = r * m + k
                wr = -1
            else:
                wc = r * m + k % m
                wr = k // m
            pb, po = _phys(r, 1, k, aliased, amode, share)
            s = _slot(r, pb, po, bsize, base, stride)
            if s < 0 or mchunk[s] != wc:
                return False
            for q in range(words):
                if wr < 0:  # every rank
                    lo = q * 64
                    nb = ngpus - lo
                    want = ~np.uint64(0) if nb >= 64 else (np.uint64(1) << np.uint64(nb)) - \
                        np.uint64(1)
                else:
                    want = np.uint64(1) << np.uint64(wr & 63) if wr >> 6 == q else np.uint64(0)
                if mbits[s, q] != want:
                    return False
    return True


# -- reading canonical steps -----------------------------------------------------------------------


@njit(cache=True)
def parse_steps(b, starts, counts, type_keys, type_codes, buf_codes):
    """The values of canonical ``<step>`` lines (:mod:`tacos.msccl.verify_columns`): run k
    holds ``counts[k]`` steps from byte ``starts[k]``; each step has 10 double-quoted values
    (s type srcbuf srcoff dstbuf dstoff cnt depid deps hasdep).  Returns ``(ok, values)`` with
    ``values`` of shape (10, steps): integers, the type code (``type_keys`` holds each type's
    bytes packed little-endian, ``type_codes`` its code) and buffer codes (``buf_codes`` by
    letter); ``ok`` is False for an unknown type or buffer."""
    total = 0
    for k in range(counts.shape[0]):
        total += counts[k]
    out = np.empty((10, total), np.int64)
    i = 0
    n = b.shape[0]
    for k in range(counts.shape[0]):
        p = starts[k]
        for _ in range(counts[k]):
            for f in range(10):
                while p < n and b[p] != 34:
                    p += 1
                p += 1  # first byte of the value
                if f == 1 or f == 2 or f == 4:
                    key = 0
                    j = 0
                    while b[p + j] != 34:
                        if j < 4:
                            key |= np.int64(b[p + j]) << (8 * j)
                        j += 1
                    if f == 1:
                        code = -1
                        if j <= 4:
                            for t in range(type_keys.shape[0]):
                                if type_keys[t] == key:
                                    code = type_codes[t]
                        if code < 0:
                            return False, out
                        out[f, i] = code
                    else:
                        code = buf_codes[b[p]] if j == 1 else -1
                        if code < 0:
                            return False, out
                        out[f, i] = code
                    p += j + 1
                else:
                    neg = b[p] == 45
                    if neg:
                        p += 1
                    v = 0
                    while b[p] != 34:
                        v = v * 10 + (np.int64(b[p]) - 48)
                        p += 1
                    out[f, i] = -v if neg else v
                    p += 1
            i += 1
    return True, out
