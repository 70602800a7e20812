"""The whole-program MSCCL checks compiled with numba: a fast yes for correct programs.

The passes after ``structure`` (connections, dependencies, happens-before, races, FIFO
execution, symbolic data flow; :mod:`tacos.msccl.verify`) are per-step Python bookkeeping over
dicts keyed by tuples.  This module runs the same checks over integer arrays: steps, thread
blocks, transmissions, connections and buffer slots are numbered once (:func:`arrays`) and each
pass is an event loop in :mod:`tacos.msccl.verify_jit_kernel`.  The kernels only decide whether
the passes are *clean*, i.e. report nothing at all, neither error nor warning;
:func:`clean` says so.  When it says no (or cannot tell), the verifier runs the Python passes,
which produce the exact report; violations are rare, and correct files take the fast path.

Equivalences the kernels rely on (all checked by ``tests/test_msccl_verify_jit.py`` against the
Python passes on every fixture and on mutated programs):

* the fold of steps into transmissions (nops, fused ``re`` chains, the kernel's step counter)
  is :func:`tacos.msccl.verify_model._fold` line for line;
* with clean dependencies, the transmission that releases a wait is the one holding the
  waited-for step (it has ``hasdep`` and its counter equals ``deps``);
* the race check keeps the Python pass's per-slot last write and reads since then, its
  rank-local vector clocks (as rows over the rank's tbs) and its exact reachability search, so
  it finds an unordered pair exactly when the Python pass does;
* the FIFO run's outcome does not depend on the interleaving (:mod:`~tacos.msccl.verify_fifo`);
* in a race-free program that runs to completion every linear extension of happens-before gives
  each read the same last write, so the symbolic replay follows the topological order instead
  of the FIFO events; values keep the single-chunk form ``(chunk, ranks)`` of
  :mod:`~tacos.msccl.verify_symbolic` (a sum that leaves it, and every other irregularity, is
  left to the Python replay).

Broadcast and reduce (whose root the Python replay infers), collectives without a fixed
postcondition, and programs whose structure check found anything take the Python path.  So do
programs below :data:`MIN_STEPS` steps while the kernels are not loaded yet, and every program
when numba is missing or ``TACOS_JIT=0`` is set.  The first call compiles the kernels (some
10-20 s of CPU once; numba caches them on disk with ``cache=True``).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass
from functools import cache
from itertools import chain
from operator import attrgetter

import numpy as np

from tacos.msccl.program import STEP_TYPES, Program, needs_multiple_of_ngpus

ENV = "TACOS_JIT"
"""Environment variable: ``0``/``false``/``off``/``no`` disables the compiled checks."""

MIN_STEPS = 20_000
"""Steps below which the Python passes run while the kernels are not loaded yet: importing
numba and loading the cached kernels costs about 0.5 s per process, what the Python passes
spend on some 20,000 steps."""

MAX_SLOT_BYTES = 1 << 28
"""Largest per-slot state (symbolic value and race bookkeeping) the kernels allocate; larger
programs take the Python passes."""
MAX_QUEUE_SLOTS = 1 << 24
"""Largest connections x capacity the compiled FIFO run allocates."""

#: collectives the compiled replay checks, by kernel code
COLL_CODES = {"allgather": 0, "allreduce": 1, "reducescatter": 2, "alltoall": 3}
_TYPE = {t: i for i, t in enumerate(STEP_TYPES)}
_BUF = {"i": 0, "o": 1, "s": 2}


@cache
def _has_numba() -> bool:
    return importlib.util.find_spec("numba") is not None


def available() -> bool:
    """True when numba is installed and ``TACOS_JIT`` does not disable it."""
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "off", "no") \
        and _has_numba()


def worth_it(program: Program) -> bool:
    """True when the compiled checks pay for themselves: the kernels are loaded in this
    process already, or the program has at least :data:`MIN_STEPS` steps."""
    return "tacos.msccl.verify_jit_kernel" in sys.modules or program.num_steps >= MIN_STEPS


def kernels():
    """The numba kernels module (imports numba; the first call per process loads or compiles
    the kernels)."""
    from tacos.msccl import verify_jit_kernel

    return verify_jit_kernel


def supported(program: Program) -> bool:
    """True when the compiled checks cover ``program``'s collective and chunk geometry."""
    p = program
    return (p.coll in COLL_CODES and p.ngpus >= 1 and p.nchunksperloop >= 0
            and not (needs_multiple_of_ngpus(p.coll) and p.nchunksperloop % p.ngpus))


@dataclass
class Arrays:
    """A program as integer arrays: thread blocks in document order (rank, id, peers,
    channel, first step), steps in document order (type and buffer codes, offsets, counts,
    dependency fields), the tb id table per rank and the buffer-slot layout."""

    tb_start: np.ndarray
    tb_rank: np.ndarray
    tb_id: np.ndarray
    tb_send: np.ndarray
    tb_recv: np.ndarray
    tb_chan: np.ndarray
    tb_local: np.ndarray
    tbidx: np.ndarray
    width: int
    typ: np.ndarray
    srcbuf: np.ndarray
    srcoff: np.ndarray
    dstbuf: np.ndarray
    dstoff: np.ndarray
    cnt: np.ndarray
    depid: np.ndarray
    deps: np.ndarray
    hasdep: np.ndarray
    bsize: np.ndarray
    base: np.ndarray
    stride: int
    nslots: int


def _col(steps: list, name: str, codes: dict | None = None) -> np.ndarray:
    values = map(attrgetter(name), steps)
    if codes is not None:
        values = map(codes.__getitem__, values)
    return np.fromiter(values, dtype=np.int64, count=len(steps))


def arrays(program: Program) -> Arrays | None:
    """Number the program's tbs, steps and slots; None when it does not fit the layout
    (ranks outside ``0..ngpus-1``, unknown type or buffer letters: the structure check
    reports those)."""
    tbs = [tb for g in program.gpus for tb in g.tbs]
    lens = np.fromiter(map(len, map(attrgetter("steps"), tbs)), dtype=np.int64, count=len(tbs))
    steps = list(chain.from_iterable(tb.steps for tb in tbs))
    try:
        cols = {"typ": _col(steps, "type", _TYPE), "srcbuf": _col(steps, "srcbuf", _BUF),
                "dstbuf": _col(steps, "dstbuf", _BUF)}
    except KeyError:
        return None
    for name in ("srcoff", "dstoff", "cnt", "depid", "deps", "hasdep"):
        cols[name] = _col(steps, name)
    return assemble(program, lens, cols)


def assemble(program: Program, lens: np.ndarray, cols: dict[str, np.ndarray]) -> Arrays | None:
    """:class:`Arrays` from the tbs of ``program`` with ``lens[t]`` steps each and the step
    columns ``cols`` (:data:`STEP_COLUMNS`, document order; type and buffers as codes)."""
    p = program
    n = p.ngpus
    tbs = [tb for g in p.gpus for tb in g.tbs]
    ranks = [g.id for g in p.gpus for _ in g.tbs]
    nt = len(tbs)
    if not nt or min(ranks) < 0 or max(ranks) >= n:
        return None
    tb_rank = np.asarray(ranks, dtype=np.int64)
    tb_id = _col(tbs, "id")
    if tb_id.min() < 0:
        return None
    tb_start = np.zeros(nt + 1, dtype=np.int64)
    np.cumsum(lens, out=tb_start[1:])
    per_gpu = np.fromiter((len(g.tbs) for g in p.gpus), dtype=np.int64, count=len(p.gpus))
    first = np.repeat(np.cumsum(per_gpu) - per_gpu, per_gpu)
    tb_local = np.arange(nt, dtype=np.int64) - first
    width_ids = int(tb_id.max()) + 1
    tbidx = np.full((n, width_ids), -1, dtype=np.int64)
    tbidx[tb_rank, tb_id] = np.arange(nt, dtype=np.int64)
    c = max(p.nchunksperloop, 0)
    bsize = np.array([max([g.i_chunks for g in p.gpus] + [c]),
                      max([g.o_chunks for g in p.gpus] + [c]),
                      max([g.s_chunks for g in p.gpus] + [0])], dtype=np.int64)
    if bsize.min() < 0:
        return None
    base = np.array([0, bsize[0], bsize[0] + bsize[1]], dtype=np.int64)
    stride = int(bsize.sum())
    return Arrays(tb_start, tb_rank, tb_id, _col(tbs, "send"), _col(tbs, "recv"),
                  _col(tbs, "chan"), tb_local, tbidx, int(per_gpu.max()), cols["typ"],
                  cols["srcbuf"], cols["srcoff"], cols["dstbuf"], cols["dstoff"], cols["cnt"],
                  cols["depid"], cols["deps"], cols["hasdep"], bsize, base, stride, n * stride)


def _connections(a: Arrays, n: int) -> tuple[np.ndarray, ...] | None:
    """Connection ids: ``(tb_sconn, tb_rconn, conn_sender, conn_receiver)``; None when a
    connection has two owners or only one end (the Python passes report those)."""
    nch = int(max(a.tb_chan.max(), 0)) + 1
    if a.tb_chan.min() < 0:
        return None
    s_tbs = np.flatnonzero(a.tb_send >= 0)
    r_tbs = np.flatnonzero(a.tb_recv >= 0)
    if (a.tb_send[s_tbs] >= n).any() or (a.tb_recv[r_tbs] >= n).any():
        return None
    s_key = (a.tb_rank[s_tbs] * n + a.tb_send[s_tbs]) * nch + a.tb_chan[s_tbs]
    r_key = (a.tb_recv[r_tbs] * n + a.tb_rank[r_tbs]) * nch + a.tb_chan[r_tbs]
    keys, s_idx = np.unique(s_key, return_index=True)
    r_keys, r_idx = np.unique(r_key, return_index=True)
    if len(keys) != len(s_key) or len(r_keys) != len(r_key) or not np.array_equal(keys, r_keys):
        return None
    nt = len(a.tb_rank)
    tb_sconn = np.full(nt, -1, dtype=np.int64)
    tb_rconn = np.full(nt, -1, dtype=np.int64)
    tb_sconn[s_tbs] = np.searchsorted(keys, s_key)
    tb_rconn[r_tbs] = np.searchsorted(keys, r_key)
    return tb_sconn, tb_rconn, s_tbs[s_idx], r_tbs[r_idx]


def _alias_mode(coll: str) -> int:
    if coll in ("allgather", "gather"):
        return 1
    if coll in ("reducescatter", "scatter"):
        return 2
    return 0


def clean(program: Program, *, capacity: int, modes: list[bool], a: Arrays | None = None
          ) -> str | None:
    """Run the compiled checks; None when connections, dependencies, happens-before, races,
    FIFO execution and the symbolic data flow (under every in-place mode in ``modes``) all
    report nothing, else the first pass that may report something (``"unsupported"`` when the
    program is outside what the kernels model).  The program must have passed the structure
    check without any violation; ``a`` are its arrays when the caller has them already."""
    if not supported(program):
        return "unsupported"
    a = a or arrays(program)
    if a is None:
        return "unsupported"
    p = program
    n = p.ngpus
    if a.nslots * (8 * ((n + 63) // 64) + 20) > MAX_SLOT_BYTES:
        return "unsupported"  # symbolic memory and per-slot race state
    k = kernels()
    (tb_tx, pos_tx, tx_tb, tx_first, tx_last, tx_n, tx_post, tx_hasdep, tx_w0, tx_w1, w_dep,
     w_deps) = k.fold(a.tb_start, a.typ, a.srcbuf, a.dstbuf, a.dstoff, a.depid, a.deps,
                      a.hasdep)
    if not k.dependencies_clean(a.tb_start, a.tb_rank, a.tb_id, a.tbidx, a.typ, a.srcbuf,
                                a.srcoff, a.dstbuf, a.dstoff, a.cnt, a.depid, a.deps, a.hasdep,
                                pos_tx, tx_first, tx_last, tx_n, tx_post):
        return "dependencies"
    conns = _connections(a, n)
    if conns is None:
        return "connections"
    tb_sconn, tb_rconn, conn_sender, conn_receiver = conns
    ok, match = k.pair(conn_sender, conn_receiver, tb_tx, tb_sconn, tb_rconn, tx_first, a.typ,
                       a.srcbuf, a.srcoff, a.dstbuf, a.dstoff, a.cnt)
    if not ok:
        return "connections"
    w_tb, w_rel = k.resolve_waits(a.tb_start, a.tb_rank, a.tbidx, pos_tx, tx_tb, tx_w0, tx_w1,
                                  w_dep, w_deps)
    ptr, preds, order, m = k.happens_before(tb_tx, tx_tb, tx_w0, tx_w1, w_rel, match)
    if m != len(tx_tb):
        return "happens-before"
    amode = _alias_mode(p.coll)
    share = p.nchunksperloop // n
    aliased = bool(modes) and modes[0]
    race = k.races_clean(order, ptr, preds, tx_tb, tx_first, tx_last, tx_hasdep, tx_w0, tx_w1,
                         w_rel, tb_tx, a.tb_rank, a.tb_local, a.width, a.typ, a.srcbuf, a.srcoff,
                         a.dstbuf, a.dstoff, a.cnt, aliased, amode, share, a.bsize, a.base,
                         a.stride, a.nslots)
    if race:
        return "races" if race == 1 else "unsupported"
    if len(conn_sender) * max(int(capacity), 1) > MAX_QUEUE_SLOTS:
        return "unsupported"
    if not k.fifo_completes(tb_tx, tb_sconn, tb_rconn, conn_sender, conn_receiver, tx_first,
                            tx_post, tx_hasdep, tx_w0, tx_w1, w_tb, w_deps, a.typ, a.cnt,
                            int(capacity)):
        return "fifo"
    for mode in modes:
        if not k.symbolic_clean(order, tx_tb, tx_first, tx_last, match, a.tb_rank, a.typ,
                                a.srcbuf, a.srcoff, a.dstbuf, a.dstoff, a.cnt, n,
                                p.nchunksperloop, COLL_CODES[p.coll], mode, amode, share,
                                a.bsize, a.base, a.stride, a.nslots):
            return "symbolic"
    return None
