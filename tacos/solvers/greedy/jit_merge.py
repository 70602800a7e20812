"""numba kernel of the greedy's multi-chunk split
(:func:`tacos.solvers.greedy.merge.split_batches`)."""

from __future__ import annotations

import numpy as np
from numba import njit

from tacos.solvers.greedy.jit_bits import _U0, any_bit, popcount, take


@njit(cache=True)
def _split_batches(slot_a, slot_lk, perm, k, cap, size, alpha, bw, nb, mt, pos, chosen, prefix,
                   shared, tmp, excl, counts, per, finish):
    """:func:`tacos.solvers.greedy.merge.split_batches` over the slots ``perm[0..k)``; the chunks of
    slot ``i`` land in ``chosen[i]``."""
    W = shared.shape[0]
    # prefix[i] = OR of avail[0..i)
    prefix[0] = _U0
    for i in range(1, k):
        for w in range(W):
            prefix[i, w] = prefix[i - 1, w] | slot_a[perm[i - 1], w]
    suffix = np.zeros(W, dtype=np.uint64)
    all_excl = np.zeros(W, dtype=np.uint64)
    for i in range(k - 1, -1, -1):
        a = slot_a[perm[i]]
        nz = False
        for w in range(W):
            excl[w] = a[w] & ~(prefix[i, w] | suffix[w])
            suffix[w] |= a[w]
            all_excl[w] |= excl[w]
            if excl[w]:
                nz = True
        if nz:
            take(excl, cap, nb, mt, pos, chosen[i])
        else:
            chosen[i] = _U0
    nz = False
    for w in range(W):
        shared[w] = suffix[w] & ~all_excl[w]  # suffix is now prefix[k]
        if shared[w]:
            nz = True
    if not nz:
        return
    for i in range(k):
        lk = slot_lk[perm[i]]
        per[i] = size / bw[lk]
        counts[i] = popcount(chosen[i])
        finish[i] = alpha[lk] + counts[i] * per[i]
    while any_bit(shared):
        best = -1
        second = -1
        for i in range(k):
            if counts[i] >= cap:
                continue
            a = slot_a[perm[i]]
            hit = False
            for w in range(W):
                if a[w] & shared[w]:
                    hit = True
                    break
            if not hit:
                continue
            v = finish[i] + per[i]
            if best < 0 or v < finish[best] + per[best]:
                second = best
                best = i
            elif second < 0 or v < finish[second] + per[second]:
                second = i
        if best < 0:
            break
        g = cap - counts[best]
        if second >= 0:
            step = np.int64((finish[second] + per[second] - finish[best]) / per[best] + 1e-9)
            g = min(g, max(1, step))
        a = slot_a[perm[best]]
        for w in range(W):
            tmp[w] = a[w] & shared[w]
        take(tmp, g, nb, mt, pos, excl)
        nn = popcount(excl)
        for w in range(W):
            chosen[best, w] |= excl[w]
            shared[w] &= ~excl[w]
        counts[best] += nn
        finish[best] += nn * per[best]
