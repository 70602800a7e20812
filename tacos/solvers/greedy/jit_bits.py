"""numba primitives of the compiled greedy trial: CPython's Mersenne Twister, bit rows.

Bitsets are rows of ``uint64`` words (bit ``c`` of a row is bit ``c & 63`` of word ``c >> 6``).
The random source continues CPython's Mersenne Twister from the state the pure-Python trial
starts with, so :func:`random01` equals ``random.Random.random`` and :func:`randbelow` equals
the ``_randbelow`` that ``random.shuffle`` uses; :func:`pick` and :func:`take` are
:func:`tacos.solvers.greedy.core.make_rng`'s ``pick`` and ``take`` on rows.
"""

from __future__ import annotations

import numpy as np
from numba import njit

TICK = 1e-15  # must equal tacos.solvers.greedy.instance.TICK
TICK_LIMIT = 1 << 62
"""Event times at or past this many ticks (about 77 minutes) do not fit the kernel: the trial
reports it and the pure-Python trial (unbounded integers) runs instead."""

_U1 = np.uint64(1)
_U0 = np.uint64(0)
_U63 = np.uint64(63)
_DEBRUIJN = np.uint64(0x03F79D71B4CB0A89)
_DB_TABLE = np.zeros(64, dtype=np.int64)
for _i in range(64):
    _DB_TABLE[((((1 << _i) * 0x03F79D71B4CB0A89) & (2**64 - 1)) >> 58)] = _i


# ---------------------------------------------------------------- Mersenne Twister (CPython's)

@njit(cache=True)
def genrand(mt, pos):
    """Next 32-bit output of MT19937 (state ``mt``: 624 words as int64, ``pos[0]`` index)."""
    if pos[0] >= 624:
        for kk in range(624):
            y = (mt[kk] & 0x80000000) | (mt[(kk + 1) % 624] & 0x7FFFFFFF)
            v = mt[(kk + 397) % 624] ^ (y >> 1)
            if y & 1:
                v ^= 0x9908B0DF
            mt[kk] = v
        pos[0] = 0
    y = mt[pos[0]]
    pos[0] += 1
    y ^= y >> 11
    y ^= (y << 7) & 0x9D2C5680
    y ^= (y << 15) & 0xEFC60000
    y ^= y >> 18
    return y & 0xFFFFFFFF


@njit(cache=True)
def random01(mt, pos):
    """``random.Random.random()``: 53 random bits as a float in [0, 1)."""
    a = genrand(mt, pos) >> 5
    b = genrand(mt, pos) >> 6
    return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0)


@njit(cache=True)
def randbelow(n, mt, pos):
    """``random.Random._randbelow(n)`` for ``2 <= n < 2**32`` (rejection on ``k`` bits)."""
    k = 0
    x = n
    while x:
        k += 1
        x >>= 1
    r = genrand(mt, pos) >> (32 - k)
    while r >= n:
        r = genrand(mt, pos) >> (32 - k)
    return r


# ---------------------------------------------------------------- bit rows

@njit(cache=True)
def _popcount64(x):
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return np.int64((x * np.uint64(0x0101010101010101)) >> np.uint64(56))


@njit(cache=True)
def _ctz(x):
    """Index of the lowest set bit of a non-zero word."""
    low = x & (~x + _U1)
    return _DB_TABLE[np.int64((low * _DEBRUIJN) >> np.uint64(58))]


@njit(cache=True)
def popcount(row):
    n = 0
    for w in range(row.shape[0]):
        if row[w]:
            n += _popcount64(row[w])
    return n


@njit(cache=True)
def any_bit(row):
    for w in range(row.shape[0]):
        if row[w]:
            return True
    return False


@njit(cache=True)
def first_from(row, r):
    """Lowest set bit at position >= ``r``, or -1."""
    w = r >> 6
    W = row.shape[0]
    if w >= W:
        return -1
    x = row[w] & ~((_U1 << np.uint64(r & 63)) - _U1)
    while True:
        if x:
            return (w << 6) + _ctz(x)
        w += 1
        if w >= W:
            return -1
        x = row[w]


@njit(cache=True)
def pick(row, nb, mt, pos):
    """``pick(x)`` of :func:`~tacos.solvers.greedy.core.make_rng`: a random set bit (its
    index); ``row`` must be non-empty."""
    r = np.int64(random01(mt, pos) * nb)
    c = first_from(row, r)
    if c < 0:
        c = first_from(row, 0)
    return c


@njit(cache=True)
def set_bit(row, c):
    row[c >> 6] |= _U1 << np.uint64(c & 63)


@njit(cache=True)
def clear_bit(row, c):
    row[c >> 6] &= ~(_U1 << np.uint64(c & 63))


@njit(cache=True)
def take(x, q, nb, mt, pos, out):
    """``take(x, q)``: up to ``q`` random bits of ``x`` into ``out`` (``x`` is consumed)."""
    pc = popcount(x)
    if pc <= q:
        out[:] = x
        return
    if q * 2 <= pc:
        out[:] = _U0
        for _ in range(q):
            c = pick(x, nb, mt, pos)
            set_bit(out, c)
            clear_bit(x, c)
        return
    for _ in range(pc - q):
        clear_bit(x, pick(x, nb, mt, pos))
    out[:] = x


@njit(cache=True)
def _duration(alpha, bw, nbytes):
    """Ticks of a transfer (as :meth:`~tacos.solvers.greedy.instance.Instance.duration`), or
    :data:`TICK_LIMIT` when it does not fit the kernel's 64-bit ticks."""
    x = np.ceil((alpha + nbytes / bw) / TICK - 1e-6)
    if x >= TICK_LIMIT:
        return TICK_LIMIT
    d = np.int64(x)
    return d if d > 1 else 1


@njit(cache=True)
def _grow(a, n):
    out = np.empty(max(n, 2 * a.shape[0]), dtype=a.dtype)
    out[:a.shape[0]] = a
    return out
