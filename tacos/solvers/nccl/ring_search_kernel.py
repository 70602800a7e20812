"""numba kernel of NCCL's ring search (imported only when numba is installed): the depth-first
search of :func:`tacos.solvers.nccl.rings._search` over arrays.

It mirrors :func:`tacos.solvers.lowering.hops.hamiltonian_path` driven by ``_search``'s
``options`` step for step -- the same order of tries, the same step count against the budget,
the same ``accept`` test -- and draws its random numbers exactly as ``random.Random.shuffle``
does, from the generator's own Mersenne Twister state (``getstate()``), which it advances in
place through the greedy kernel's :func:`~tacos.solvers.greedy.jit_bits.randbelow`: it takes
``getrandbits(n.bit_length())`` (the top bits of one 32-bit output) until it is below ``n``.
So the path found and the generator left behind are those of the Python search.  See
:mod:`tacos.solvers.nccl.ring_search_jit`.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from tacos.solvers.greedy.jit_bits import randbelow as _randbelow  # CPython's MT19937


@njit(cache=True)
def _options(v, plen, n, end, on, off, tgt, nxt_off, nxt_w, nxt_lanes, out, keys, mt,
             pos):  # pragma: no cover - compiled
    """``_search``'s ``options``: the untried next nodes after ``v`` into ``out``; their
    count."""
    last = plen == n - 1
    c = 0
    for e in range(nxt_off[v], nxt_off[v + 1]):
        w = nxt_w[e]
        if on[w]:
            continue
        if end >= 0 and (w == end) != last:
            continue
        out[c] = w
        keys[c, 0] = nxt_lanes[e]
        c += 1
    if c < 2:
        return c
    for i in range(c - 1, 0, -1):  # random.shuffle
        j = _randbelow(i + 1, mt, pos)
        out[i], out[j] = out[j], out[i]
        keys[i, 0], keys[j, 0] = keys[j, 0], keys[i, 0]
    for i in range(c):  # onward options left
        w = out[i]
        k = 0
        for e in range(off[w], off[w + 1]):
            x = tgt[e]
            if x < 0 or not on[x]:
                k += 1
        keys[i, 1] = k
    for i in range(1, c):  # stable insertion sort by (lanes, onward options)
        w = out[i]
        k0 = keys[i, 0]
        k1 = keys[i, 1]
        j = i - 1
        while j >= 0 and (keys[j, 0] > k0 or (keys[j, 0] == k0 and keys[j, 1] > k1)):
            out[j + 1] = out[j]
            keys[j + 1, 0] = keys[j, 0]
            keys[j + 1, 1] = keys[j, 1]
            j -= 1
        out[j + 1] = w
        keys[j + 1, 0] = k0
        keys[j + 1, 1] = k1
    return c


@njit(cache=True)
def search(n, start, end, cycle, budget, off, tgt, nxt_off, nxt_w, nxt_lanes, width, mt,
           pos):  # pragma: no cover - compiled
    """The path (node indices, length n) or an empty array when none is found within
    ``budget`` steps.  Nodes ``0..n-1`` are the search's; ``off``/``tgt`` list ``succ(v)`` of
    each (-1: a node outside the search), ``nxt_off``/``nxt_w``/``nxt_lanes`` its hops to
    search nodes with ``-weight``; ``width`` bounds any node's hop count."""
    on = np.zeros(n, dtype=np.bool_)
    path = np.empty(n, dtype=np.int64)
    cands = np.empty((n + 1, max(width, 1)), dtype=np.int64)
    ncand = np.zeros(n + 1, dtype=np.int64)
    ptr = np.zeros(n + 1, dtype=np.int64)
    keys = np.empty((max(width, 1), 2), dtype=np.int64)
    path[0] = start
    on[start] = True
    plen = 1
    ncand[0] = _options(start, plen, n, end, on, off, tgt, nxt_off, nxt_w, nxt_lanes,
                        cands[0], keys, mt, pos)
    ptr[0] = 0
    steps = 0
    while plen > 0:
        if plen == n:
            ok = not cycle
            if not ok:
                u = path[plen - 1]
                for e in range(off[u], off[u + 1]):
                    if tgt[e] == start:
                        ok = True
                        break
            if ok:
                return path.copy()
        d = plen - 1
        if plen < n and ptr[d] < ncand[d]:
            nxt = cands[d, ptr[d]]
            ptr[d] += 1
        else:
            plen -= 1
            on[path[plen]] = False
            continue
        steps += 1
        if steps > budget:
            return np.empty(0, dtype=np.int64)
        path[plen] = nxt
        on[nxt] = True
        plen += 1
        ncand[plen - 1] = _options(nxt, plen, n, end, on, off, tgt, nxt_off, nxt_w,
                                   nxt_lanes, cands[plen - 1], keys, mt, pos)
        ptr[plen - 1] = 0
    return np.empty(0, dtype=np.int64)
