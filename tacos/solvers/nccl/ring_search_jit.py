"""NCCL's ring search, compiled: the same paths and the same random draws as the Python search.

:func:`tacos.solvers.nccl.rings._search` looks for Hamiltonian cycles of the residual lane
graph by depth-first search with a budget of 20,000 steps; on a 4x4x4 torus most searches
find nothing and spend the whole budget, about 0.9 s of Python per ring search (a first
compile of the torus examples, before the answer is remembered on disk).  :func:`search` runs
the same search in one numba function (:mod:`tacos.solvers.nccl.ring_search_kernel`) over
arrays of the hops ``succ`` and ``weight`` give, which the search reads once per node anyway,
and continues the caller's ``random.Random`` from its Mersenne Twister state: the path found,
the steps counted against the budget and the generator left behind are the Python search's
(``tests/test_ring_search_jit.py`` compares both on random lane graphs).

It runs when numba is installed, ``TACOS_JIT`` does not disable it
(:func:`tacos.solvers.greedy.jit.available`) and the search has at least :data:`MIN_NODES`
nodes, once the kernel is loaded or when the Python search has not ended within
:data:`PYTHON_STEPS` steps (loading the kernel costs more than a short search).
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable, Sequence

import numpy as np

MIN_NODES = 32
"""Search nodes from which the compiled search may be used."""

PYTHON_STEPS = 2_000
"""Steps the Python search runs first while the kernel is not loaded in this process: most
searches that succeed end well within them (a few milliseconds), and loading the kernel
costs more than that; a search still running then starts again, compiled."""

KERNEL = "tacos.solvers.nccl.ring_search_kernel"


def usable(nodes: Sequence[int]) -> bool:
    """Whether :func:`search` may run a search over ``nodes`` (see module doc)."""
    from tacos.solvers.greedy.jit import available

    return len(nodes) >= MIN_NODES and available()


def loaded() -> bool:
    """Whether the kernel is already loaded in this process."""
    return KERNEL in sys.modules


def search(nodes: Sequence[int], start: int, succ: Callable[[int], Sequence[int]],
           rng: random.Random, budget: int, *, end: int | None = None, cycle: bool = False,
           weight: Callable[[int, int], int] | None = None) -> list[int] | None | bool:
    """:func:`tacos.solvers.nccl.rings._search` with the same arguments and answer, compiled;
    ``False`` (nothing run, ``rng`` untouched) when the arguments are outside what the kernel
    takes: repeated nodes, ``start``/``end`` outside ``nodes``, weights that are not ints."""
    from tacos.solvers.nccl.ring_search_kernel import search as run

    idx = {v: i for i, v in enumerate(nodes)}
    n = len(nodes)
    if len(idx) != n or start not in idx or (end is not None and end not in idx):
        return False
    off = [0]
    tgt: list[int] = []
    nxt_off = [0]
    nxt_w: list[int] = []
    nxt_lanes: list[int] = []
    width = 0
    for v in nodes:
        onward = list(succ(v))
        tgt.extend(idx.get(w, -1) for w in onward)
        off.append(len(tgt))
        hops = [w for w in onward if w in idx]
        for w in hops:
            lanes = -(weight(v, w) if weight else 0)
            if type(lanes) is not int or not -(1 << 62) < lanes < 1 << 62:
                return False
            nxt_w.append(idx[w])
            nxt_lanes.append(lanes)
        nxt_off.append(len(nxt_w))
        width = max(width, len(hops))
    version, internal, gauss = rng.getstate()
    mt = np.array(internal[:-1], dtype=np.int64)
    pos = np.array([internal[-1]], dtype=np.int64)
    arr = lambda xs: np.array(xs, dtype=np.int64)  # noqa: E731
    found = run(n, idx[start], -1 if end is None else idx[end], cycle, budget, arr(off),
                arr(tgt), arr(nxt_off), arr(nxt_w), arr(nxt_lanes), width, mt, pos)
    rng.setstate((version, tuple(int(x) for x in mt) + (int(pos[0]),), gauss))
    if len(found) == 0:
        return None
    return [nodes[i] for i in found]
