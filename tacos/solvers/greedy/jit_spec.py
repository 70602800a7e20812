"""numba kernels of the compiled greedy trial's speculation (see :mod:`tacos.solvers.greedy.core`).

A free link whose source holds a chunk already in flight to ``d`` on a slower transfer may send
it again (:func:`_best_resend`); when the slow transfer lands, its now-duplicate chunks are
replaced by chunks ``d`` still wants that the source held when it started, or dropped
(:func:`_land`).  Same random draws, in the same order, as the pure-Python trial.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from tacos.solvers.greedy.jit_bits import _U0, _U1, _ctz, _duration, clear_bit, pick, set_bit


@njit(cache=True)
def _inflight(claimed_d, held_d, dupped_d, out):
    """``out`` = chunks claimed by ``d`` but not there yet and not resent; True if any."""
    nz = False
    for w in range(out.shape[0]):
        out[w] = claimed_d[w] & ~held_d[w] & ~dupped_d[w]
        if out[w]:
            nz = True
    return nz


@njit(cache=True)
def _meets(a, b):
    """True when the rows share a bit."""
    for w in range(a.shape[0]):
        if a[w] & b[w]:
            return True
    return False


@njit(cache=True)
def _remove_active(act, act_n, lk, tr):
    """Take transfer ``tr`` off link ``lk``'s in-flight list, keeping the others' order."""
    n = act_n[lk]
    i = 0
    while act[lk, i] != tr:
        i += 1
    for j in range(i, n - 1):
        act[lk, j] = act[lk, j + 1]
    act_n[lk] = n - 1


@njit(cache=True)
def _best_resend(t, lk, d, held, dupped, src, in_ptr, in_idx, act, act_n, T_end, T_ptr, T_ids,
                 sentinel, alpha, bw, usize, nb, mt, pos, have, cand):
    """The chunk (or -1) whose resend on ``lk`` lands at ``d`` earliest before its transfer in
    flight: one random candidate per transfer in flight to ``d``, the largest gain wins."""
    s = src[lk]
    W = have.shape[0]
    for w in range(W):
        have[w] = held[s, w] & ~held[d, w] & ~dupped[d, w]
    wdur = _duration(alpha[lk], bw[lk], usize)
    best_gain = 0
    best = -1
    for j in range(in_ptr[d], in_ptr[d + 1]):
        l2 = in_idx[j]
        for q in range(act_n[l2]):
            tr = act[l2, q]
            cand[:] = _U0
            nz = False
            for e in range(T_ptr[tr], T_ptr[tr + 1]):
                c = T_ids[e]
                if c == sentinel:
                    continue
                if (have[c >> 6] >> np.uint64(c & 63)) & _U1:
                    set_bit(cand, c)
                    nz = True
            if not nz:
                continue
            c = pick(cand, nb, mt, pos)
            gain = T_end[tr] - (t + wdur)
            if gain > best_gain:
                best_gain = gain
                best = c
    return best


@njit(cache=True)
def _land(tr, lk, d, held, claimed, need, snaprow, T_start, T_end, T_ptr, T_ids, sentinel, alpha,
          bw, usize, nb, mt, pos, bits, cand, stats):
    """Transfer ``tr`` lands at ``d``: replace (or drop) chunks ``d`` already holds; rewrite its
    chunk ids (ascending, ``sentinel`` for dropped ones) and, if it shrank, its end."""
    lo = T_ptr[tr]
    hi = T_ptr[tr + 1]
    dup = False
    for j in range(lo, hi):
        c = T_ids[j]
        if c != sentinel and (held[d, c >> 6] >> np.uint64(c & 63)) & _U1:
            dup = True
            break
    if not dup:
        return
    W = bits.shape[0]
    bits[:] = _U0
    for j in range(lo, hi):
        c = T_ids[j]
        if c != sentinel:
            set_bit(bits, c)
    dropped = False
    for j in range(lo, hi):  # ascending: the duplicates in increasing order
        c = T_ids[j]
        if c == sentinel or not (held[d, c >> 6] >> np.uint64(c & 63)) & _U1:
            continue
        clear_bit(bits, c)
        nz = False
        for w in range(W):
            cand[w] = snaprow[w] & need[d, w] & ~claimed[d, w]
            if cand[w]:
                nz = True
        if nz:
            new = pick(cand, nb, mt, pos)
            set_bit(bits, new)
            set_bit(claimed[d], new)
            stats[0] += 1
        else:
            dropped = True
            stats[1] += 1
    j = lo
    for w in range(W):
        x = bits[w]
        while x:
            T_ids[j] = (w << 6) + _ctz(x)
            j += 1
            x &= x - _U1
    cnt = j - lo
    while j < hi:
        T_ids[j] = sentinel
        j += 1
    if dropped:
        if cnt:
            T_end[tr] = T_start[tr] + _duration(alpha[lk], bw[lk], usize * cnt)
        else:
            T_end[tr] = T_start[tr]
