"""The switch-free greedy trial compiled with numba: same algorithm, same random draws, same bytes.

:func:`tacos.solvers.greedy.core.run_python_trial` is pure Python over big-int bitsets; this
module runs the same trial over fixed-width bitset arrays (``numpy.uint64`` words, one row per
NPU) in one compiled function.  It reproduces the pure-Python trial exactly, so a seed gives the
same schedule whichever path runs:

* the random numbers are those of the trial's :class:`random.Random` (Mersenne Twister,
  seeded from ``(seed, trial)`` by :func:`tacos.solvers.greedy.core.make_rng`): its state is
  handed over and :func:`_genrand` continues the same stream, ``random()`` and the
  ``shuffle``'s ``_randbelow`` included;
* every choice consumes them in the same order (links of a destination in the order they were
  touched, destinations in the order they were touched, slots sorted by ``(chunks, random)``,
  the same water-filling of :func:`tacos.solvers.greedy.merge.split_batches`).

It covers every switch-free trial on uniform chunks without relay chunks (speculation
included): :func:`supported` says when; otherwise, when numba is missing, or when
``TACOS_JIT=0`` is set (or the greedy's ``jit`` option is false), the pure-Python trial
runs.  The first call compiles the kernels (about 12 s of CPU; the compiled code is cached on
disk by numba's ``cache=True``, and loading it takes about 0.5 s).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from functools import cache

import numpy as np

from tacos.solvers.greedy.instance import Instance

ENV = "TACOS_JIT"
"""Environment variable: ``0``/``false``/``off`` disables the compiled trial."""

MIN_WORK = 20_000
"""Requests (chunk, NPU) below which a trial stays in Python while the kernels are not loaded
yet: importing numba and loading the cached kernels costs about 0.3-0.5 s per process, what
the pure-Python trial spends on some 30,000 requests."""


@cache
def _has_numba() -> bool:
    return importlib.util.find_spec("numba") is not None


def available() -> bool:
    """True when numba is installed and ``TACOS_JIT`` does not disable it (numba itself is
    imported on the first compiled trial, not here: start-up stays light)."""
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "off", "no") \
        and _has_numba()


def worth_it(inst: Instance) -> bool:
    """True when the compiled trial pays for itself: the kernels are already loaded in this
    process, or the instance has at least :data:`MIN_WORK` requests."""
    return "tacos.solvers.greedy.jit_kernel" in sys.modules or inst.total_need >= MIN_WORK


def kernels():
    """The numba kernels module (imports numba; the first call per process costs the import
    and loading or compiling the kernels)."""
    from tacos.solvers.greedy import jit_kernel as greedy_jit_kernel

    return greedy_jit_kernel


def supported(inst: Instance) -> bool:
    """True when the compiled trial reproduces the pure-Python one for ``inst``: switch-free
    channels, uniform chunk sizes and no relay chunks."""
    return (not inst.physical and inst.uniform_size is not None and not inst.relay_mask
            and inst.n_chunks > 0)


def _csr(lists: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    ptr = np.zeros(len(lists) + 1, dtype=np.int64)
    ptr[1:] = np.cumsum([len(x) for x in lists])
    idx = np.fromiter((i for x in lists for i in x), dtype=np.int64, count=int(ptr[-1]))
    return ptr, idx


def bit_rows(bits: list[int], words: int) -> np.ndarray:
    """Python-int bitsets as rows of ``words`` little-endian ``uint64`` words."""
    out = np.zeros((len(bits), words), dtype=np.uint64)
    nbytes = words * 8
    for i, b in enumerate(bits):
        if b:
            out[i] = np.frombuffer(b.to_bytes(nbytes, "little"), dtype="<u8")
    return out


def arrays(inst: Instance) -> dict[str, np.ndarray]:
    """The compiled trial's view of ``inst`` (built once per instance and cached on it)."""
    cached = getattr(inst, "_jit_arrays", None)
    if cached is not None:
        return cached
    words = (inst.n_chunks + 63) // 64
    in_ptr, in_idx = _csr(inst.in_links)
    out_ptr, out_idx = _csr(inst.out_links)
    a = {
        "src": np.asarray(inst.src, dtype=np.int64),
        "dst": np.asarray(inst.dst, dtype=np.int64),
        "in_ptr": in_ptr, "in_idx": in_idx, "out_ptr": out_ptr, "out_idx": out_idx,
        "mult": np.asarray(inst.mult, dtype=np.int64),
        "alpha": np.asarray(inst.alpha, dtype=np.float64),
        "bw": np.asarray(inst.bw, dtype=np.float64),
        "pre": bit_rows(inst.pre, words),
        "need": bit_rows(inst.need, words),
    }
    inst._jit_arrays = a  # type: ignore[attr-defined]
    return a


def run_trial_compiled(inst: Instance, seed: int, trial: int, cap: int, speculate: bool):
    """One trial on the compiled path (:func:`supported` must hold; ``speculate`` as
    :func:`~tacos.solvers.greedy_trial.run_trial` resolves it); the
    :class:`~tacos.solvers.greedy.core.TrialResult` holds numpy columns."""
    from tacos.solvers.greedy.core import Stuck, TrialResult, make_rng

    rng = make_rng(seed, trial, inst.n_chunks)[0]
    state = rng.getstate()[1]
    mt = np.asarray(state[:624], dtype=np.int64)
    pos = np.asarray([state[624]], dtype=np.int64)
    a = arrays(inst)
    # chunk ids of every delivery: at most total_need of them without speculation, and resends
    # are a few percent more with it (the kernel grows the buffer if they are not); 2 bytes
    # each when they fit, the largest value marking ids dropped on landing
    dtype = np.uint16 if inst.n_chunks < (1 << 16) - 1 else np.int32
    room = inst.total_need // 16 + inst.n_chunks if speculate else 0
    ids = np.empty(max(1, inst.total_need + room), dtype=dtype)
    status, t, left, start, end, link, cptr, cids, st = kernels().kernel(
        a["src"], a["dst"], a["in_ptr"], a["in_idx"], a["out_ptr"], a["out_idx"], a["mult"],
        a["alpha"], a["bw"], a["pre"], a["need"], int(inst.total_need),
        int(inst.uniform_size), int(inst.n_chunks), int(cap), mt, pos, ids, bool(speculate),
        int(np.iinfo(dtype).max))
    if status == 2:  # times beyond 64-bit ticks: the pure-Python trial has no such limit
        from tacos.solvers.greedy.core import run_python_trial

        return run_python_trial(inst, seed, trial, cap, speculate)
    if status:
        raise Stuck(f"no transfer can progress at tick {t}; {left} requests left")
    return TrialResult(makespan=int(t), trial=trial, cap=cap, start=start, end=end, link=link,
                       bits=[], stats={"replaced": int(st[0]), "dropped": int(st[1]),
                                       "speculative": int(st[2]), "transfers": len(start)},
                       chunk_ptr=cptr, chunk_ids=cids)

