"""The runtime model's event loop over arrays, compiled: same times as the Python loop.

:func:`tacos.runtime.msccl_exec.time_iteration` walks the transmissions of a program in
Python, a few microseconds each; the shaping search times programs of some 100,000 of them
many times over.  :func:`time_iteration` here runs the same loop in one numba function
(:mod:`tacos.runtime.msccl_sim_kernel`) over arrays built once per folded model
(:func:`model_arrays`) and gives the fields of the same
:class:`~tacos.runtime.msccl_exec.IterationTiming`: the same topological order, the same
floating-point operations in the same order, the same dictionary order -- bit for bit the
Python loop's result.

It runs when numba is installed, ``TACOS_JIT`` does not disable it (see
:func:`tacos.solvers.greedy.jit.available`) and the work pays for loading the kernel
(:func:`worth_it`); otherwise the Python loop runs.
"""

from __future__ import annotations

import sys
import weakref
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np

from tacos.msccl.program import REDUCING_TYPES
from tacos.msccl.verify_model import ConnKey, Model, TbKey

MIN_WORK = 8_000
"""Transmissions below which an iteration is timed in Python while the kernel is not loaded
yet: importing numba and loading the cached kernel costs about 0.4 s of CPU, what the Python
loop spends on some 40,000 transmissions (a program is timed three to four times per
protocol, so a search over a few shapes of 8,000 pays it back)."""

_KERNEL = "tacos.runtime.msccl_sim_kernel"
_KINDS = {"nop": 0, "cpy": 1, "re": 1, "s": 2, "rcs": 3, "rrs": 3, "rrcs": 3}


def available() -> bool:
    """True when the compiled loop can run (numba installed, ``TACOS_JIT`` not off)."""
    from tacos.solvers.greedy.jit import available as jit_available

    return jit_available()


def worth_it(model: Model) -> bool:
    """True when the compiled loop pays for itself on ``model``: the kernel is loaded in this
    process already, or the program has at least :data:`MIN_WORK` transmissions."""
    return available() and (_KERNEL in sys.modules or len(model.txs) >= MIN_WORK)


@dataclass
class ModelArrays:
    """What the event loop reads of a folded model, as arrays indexed by transmission."""

    kind: np.ndarray  # 0 skipped (nop, cnt 0), 1 local, 2 send, 3 fused, 4 receive
    cnt: np.ndarray
    mult: np.ndarray  # sources of a fused re chain, else 1
    reducing: np.ndarray
    send_key: list[ConnKey | None]  # per transmission that sends: its connection
    recv_key: list[ConnKey | None]  # per fused transmission: the connection it receives on
    src: np.ndarray  # the matched send of a receive, else -1
    tb: np.ndarray
    tb_keys: list[TbKey]
    pred_ptr: np.ndarray
    pred_idx: np.ndarray
    hb_order: np.ndarray
    #: the FIFO pairs: per k-th send of a connection, its gid, k, its first step's cnt, and
    #: where the connection's receives start in ``fifo_recvs``
    fifo_send: np.ndarray
    fifo_k: np.ndarray
    fifo_cnt: np.ndarray
    fifo_base: np.ndarray
    fifo_recvs: np.ndarray


#: arrays of the last few models, by identity (a weak reference: the cache does not keep a
#: model alive)
_ARRAYS: dict[int, tuple[weakref.ref, ModelArrays]] = {}
_ARRAYS_MAX = 8


def model_arrays(model: Model, hb: Any) -> ModelArrays:
    """The event loop's arrays of ``model`` with happens-before graph ``hb`` (remembered for
    the last few models)."""
    got = _ARRAYS.get(id(model))
    if got is not None and got[0]() is model:
        return got[1]
    from tacos.nogc import paused_gc

    with paused_gc():
        out = _model_arrays(model, hb)
    if len(_ARRAYS) >= _ARRAYS_MAX:
        _ARRAYS.pop(next(iter(_ARRAYS)))
    _ARRAYS[id(model)] = (weakref.ref(model), out)
    return out


def _model_arrays(model: Model, hb: Any) -> ModelArrays:
    n = len(model.txs)
    # filled as lists (a numpy item assignment costs several list ones), converted once
    kind = [0] * n
    cnt = [0] * n
    mult = [1] * n
    reducing = [False] * n
    tb = [0] * n
    send_key: list[ConnKey | None] = [None] * n
    recv_key: list[ConnKey | None] = [None] * n
    tb_index: dict[TbKey, int] = {}
    kinds = _KINDS
    reducing_types = REDUCING_TYPES
    for key, tbo in model.tbs.items():
        t = tb_index[key] = len(tb_index)
        send = (key[0], tbo.send, tbo.chan)
        recv = (tbo.recv, key[0], tbo.chan)
        for tx in model.by_tb.get(key, ()):
            v = tx.gid
            typ = tx.type
            c = tx.steps[0].cnt
            cnt[v] = c
            k = kinds.get(typ, 4)
            kind[v] = 0 if c == 0 or typ == "nop" else k
            if typ == "re":
                mult[v] = max(1, len(tx.steps))
            if typ in reducing_types:
                reducing[v] = True
            tb[v] = t
            if k == 2:
                send_key[v] = send
            elif k == 3:
                send_key[v] = send
                recv_key[v] = recv
    src = [-1] * n
    sends, ks, cnts, bases, recvs = [], [], [], [], []
    for conn, ss in model.sends.items():
        rs = model.recvs.get(conn, [])
        m = min(len(ss), len(rs))
        base = len(recvs)
        for k in range(m):
            s, r = ss[k], rs[k]
            src[r.gid] = s.gid
            sends.append(s.gid)
            ks.append(k)
            cnts.append(s.step.cnt)
            bases.append(base)
            recvs.append(r.gid)
    lens = np.fromiter((len(p) for p in hb.preds), np.int64, n)
    pred_ptr = np.zeros(n + 1, np.int64)
    np.cumsum(lens, out=pred_ptr[1:])
    flat = [u for p in hb.preds for u in p]
    return ModelArrays(
        np.array(kind, np.int8), np.array(cnt, np.float64), np.array(mult, np.float64),
        np.array(reducing, np.bool_), send_key, recv_key, np.array(src, np.int64),
        np.array(tb, np.int64), list(tb_index), pred_ptr,
        np.asarray(flat, np.int64), np.asarray(hb.order, np.int64),
        np.asarray(sends, np.int64), np.asarray(ks, np.int64), np.asarray(cnts, np.float64),
        np.asarray(bases, np.int64), np.asarray(recvs, np.int64))


def topological_order(preds: list[list[int]]) -> list[int]:
    """:func:`tacos.msccl.verify_deps.topological_order` compiled (the same order)."""
    from tacos.runtime import msccl_sim_kernel as kernel

    n = len(preds)
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.fromiter((len(p) for p in preds), np.int64, n), out=ptr[1:])
    flat = np.fromiter((u for p in preds for u in p), np.int64, int(ptr[-1]))
    return kernel.kahn(ptr, flat).tolist()


def _fifo(a: ModelArrays, n: int, nccl_steps: int, slots_per_call: int,
          calls_per_chunk: int) -> np.ndarray:
    """Per send, the receive it waits to have drained (``-1``: none): the k-th send of a
    connection waits for the receive ``depth`` messages back."""
    fifo = np.full(n, -1, np.int64)
    if len(a.fifo_send):
        calls = np.maximum(1, np.ceil(a.fifo_cnt / calls_per_chunk)).astype(np.int64)
        depth = np.maximum(1, nccl_steps // (slots_per_call * calls))
        ok = a.fifo_k >= depth
        fifo[a.fifo_send[ok]] = a.fifo_recvs[a.fifo_base[ok] + a.fifo_k[ok] - depth[ok]]
    return fifo


def _simulate(a: ModelArrays, conns: dict, hw: Any, proto: str, slice_bytes: float,
              calls_per_chunk: int) -> tuple | None:
    """The kernel's outputs for arrays ``a``, with the connection keys and the port ids
    its indices stand for; None when a transmission names a connection ``conns`` lacks."""
    from tacos.runtime import msccl_sim_kernel as kernel

    n = len(a.kind)
    keys = list(conns)
    index = {k: i for i, k in enumerate(keys)}
    sconn = np.full(n, -1, np.int64)
    rconn = np.full(n, -1, np.int64)
    for v, key in enumerate(a.send_key):
        if key is not None and a.kind[v] != 0:
            c = index.get(key)
            if c is None:
                return None
            sconn[v] = c
            if a.kind[v] == 3:
                c = index.get(a.recv_key[v])  # type: ignore[arg-type]
                if c is None:
                    return None
                rconn[v] = c
    links = sorted({i for c in conns.values() for i in c.links})
    link_of = {i: j for j, i in enumerate(links)}
    link_ptr = np.zeros(len(keys) + 1, np.int64)
    np.cumsum([len(conns[k].links) for k in keys], out=link_ptr[1:])
    link_idx = np.asarray([link_of[i] for k in keys for i in conns[k].links], np.int64)
    fifo = _fifo(a, n, int(hw.common["nccl_steps"]), hw.slots_per_call(proto), calls_per_chunk)
    got = kernel.simulate(
        a.kind, a.cnt, a.mult, a.reducing, sconn, rconn, a.src, a.tb, a.pred_ptr, a.pred_idx,
        fifo, a.hb_order, np.asarray([conns[k].latency for k in keys], np.float64),
        np.asarray([conns[k].rate for k in keys], np.float64),
        np.asarray([conns[k].bound == "cta" for k in keys], np.bool_), link_ptr, link_idx,
        len(a.tb_keys), len(links), float(hw.cta_rate[proto]),
        float(hw.cta_reduce_rate(proto)), float(slice_bytes), int(calls_per_chunk))
    return got, keys, links, sconn


def time_iteration(model: Model, conns: dict, hw: Any, proto: str, slice_bytes: float,
                   calls_per_chunk: int, hb: Any) -> dict[str, Any] | None:
    """:func:`tacos.runtime.msccl_exec.time_iteration` (same arguments, ``hb`` built),
    compiled: the fields of its ``IterationTiming`` (``makespan``, ``tb_busy``, ``tb_sync``,
    ``tb_limit``, ``link_load``, ``spans``); None when a transmission names a connection
    ``conns`` lacks (the Python loop then runs and reports it as it does)."""
    a = model_arrays(model, hb)
    run = _simulate(a, conns, hw, proto, slice_bytes, calls_per_chunk)
    if run is None:
        return None
    got, keys, links, sconn = run
    (finish, pos, span_a, span_b, has_span, tb_busy, tb_sync, tb_limit, tb_first, link_load,
     link_first, conn_first) = got
    out = SimpleNamespace(makespan=float(finish.max()) if len(finish) else 0.0, tb_busy={},
                          tb_sync={}, tb_limit={}, link_load={}, spans={})
    for t in np.argsort(tb_first, kind="stable")[np.count_nonzero(tb_first < 0):].tolist():
        key = a.tb_keys[t]
        out.tb_limit[key] = "cta" if tb_limit[t] < 0 else conns[keys[tb_limit[t]]].bound
        out.tb_busy[key] = float(tb_busy[t])
        out.tb_sync[key] = float(tb_sync[t])
    for j in np.argsort(link_first, kind="stable")[np.count_nonzero(link_first < 0):].tolist():
        out.link_load[links[j]] = float(link_load[j])
    spans = np.flatnonzero(has_span)
    if len(spans):
        conn = sconn[spans]
        spans = spans[np.lexsort((pos[spans], conn_first[conn]))]
        bounds = np.flatnonzero(np.diff(sconn[spans])) + 1
        for part in np.split(spans, bounds):
            out.spans[keys[int(sconn[part[0]])]] = list(zip(span_a[part].tolist(),
                                                            span_b[part].tolist(), strict=True))
    return vars(out)


def twice_makespan(model: Model, hb: Any, conns: dict, hw: Any, proto: str,
                   slice_bytes: float, calls_per_chunk: int) -> float | None:
    """The makespan :func:`tacos.runtime.msccl_exec.time_iteration` gives the model of two
    loop iterations back to back (``msccl_exec._twice``), from ``model``'s arrays without
    folding the doubled program (:func:`twice_arrays`); None when that is not provably the
    same model or a connection is missing (then the doubled program is folded)."""
    if not worth_it(model):
        return None
    a = twice_arrays(model, hb)
    if a is None:
        return None
    run = _simulate(a, conns, hw, proto, slice_bytes, calls_per_chunk)
    if run is None:
        return None
    finish = run[0][0]
    return float(finish.max()) if len(finish) else 0.0


def _fusable(a: Any, b: Any) -> bool:
    """Whether the runtime's folding would fuse stored step ``b`` into the ``re`` chain of
    the stored step ``a`` before it (the 16-reduction cut aside)."""
    return a.type == "re" and b.type == "re" and b.depid == -1 and a.hasdep != 1 and \
        (a.dstbuf, a.dstoff, a.srcbuf) == (b.dstbuf, b.dstoff, b.srcbuf)


def _doubles_cleanly(model: Model) -> bool:
    """True when folding every tb's steps twice over gives two copies of its single folding
    (so :func:`twice_arrays` may derive the doubled model): no tb ends in nops (their waits
    would pass to the second copy), the kernel's step counter ends at the tb's step count
    (the second copy's shifted ``deps`` then name the second copy's flags), every wait is
    released within one copy, no two stored ``re`` steps could fuse (so the cut at a tb's
    16th reduction, which falls in one copy only, changes nothing), and every connection
    has as many receives as sends or none."""
    for key, tbo in model.tbs.items():
        steps = tbo.steps
        txs = model.by_tb.get(key, [])
        if not steps:
            continue
        if steps[-1].is_nop or not txs or txs[-1].post + 1 != len(steps):
            return False
        stored = [st for st in steps if not st.is_nop]
        if any(_fusable(x, y) for x, y in zip(stored, stored[1:] + stored[:1], strict=True)):
            return False
        for tx in txs:
            if len(tx.steps) > 1:
                return False
            for depid, deps, _ in tx.waits:
                if model.release(tx.rank, depid, deps) is None:
                    return False
    for conn, sends in model.sends.items():
        if len(model.recvs.get(conn, ())) not in (0, len(sends)):
            return False
    return True


_TWICE: dict[int, tuple[weakref.ref, ModelArrays | None]] = {}


def twice_arrays(model: Model, hb: Any) -> ModelArrays | None:
    """The arrays of the model of ``msccl_exec._twice(model.program)``, derived from
    ``model``'s: the same transmission ids (per tb, the first copy's then the second's), the
    same happens-before edges (each copy's own, plus the first copy's last transmission of a
    tb before the second's first), the k-th send matched to the k-th receive of its
    connection over both copies.  None when the program does not double cleanly
    (:func:`_doubles_cleanly`).  Remembered for the last few models."""
    got = _TWICE.get(id(model))
    if got is not None and got[0]() is model:
        return got[1]
    out = _twice_arrays(model, hb) if _doubles_cleanly(model) else None
    if len(_TWICE) >= _ARRAYS_MAX:
        _TWICE.pop(next(iter(_TWICE)))
    _TWICE[id(model)] = (weakref.ref(model), out)
    return out


def _twice_arrays(model: Model, hb: Any) -> ModelArrays | None:
    from tacos.runtime import msccl_sim_kernel as kernel

    a = model_arrays(model, hb)
    n = len(a.kind)
    sizes = np.bincount(a.tb, minlength=len(a.tb_keys)).astype(np.int64)
    offset = np.zeros(len(sizes), np.int64)
    np.cumsum(sizes[:-1], out=offset[1:])
    one = np.arange(n, dtype=np.int64) + offset[a.tb]  # first copy's ids
    two = one + sizes[a.tb]  # second copy's ids
    m = 2 * n

    def both(x: np.ndarray) -> np.ndarray:
        out = np.empty(m, x.dtype)
        out[one] = x
        out[two] = x
        return out

    src = np.full(m, -1, np.int64)
    has = a.src >= 0
    src[one[has]] = one[a.src[has]]
    src[two[has]] = two[a.src[has]]
    send_key: list = [None] * m
    recv_key: list = [None] * m
    for v in range(n):
        if a.send_key[v] is not None:
            send_key[one[v]] = send_key[two[v]] = a.send_key[v]
            recv_key[one[v]] = recv_key[two[v]] = a.recv_key[v]
    target = np.repeat(np.arange(n, dtype=np.int64), np.diff(a.pred_ptr))
    firsts = np.flatnonzero(np.r_[True, a.tb[1:] != a.tb[:-1]]) if n else np.zeros(0, np.int64)
    lasts = np.r_[firsts[1:] - 1, n - 1] if n else np.zeros(0, np.int64)
    to = np.concatenate([one[target], two[target], two[firsts]])
    frm = np.concatenate([one[a.pred_idx], two[a.pred_idx], one[lasts]])
    order = np.argsort(to, kind="stable")
    pred_ptr = np.zeros(m + 1, np.int64)
    np.cumsum(np.bincount(to, minlength=m), out=pred_ptr[1:])
    pred_idx = frm[order]
    hb_order = kernel.kahn(pred_ptr, pred_idx)
    if len(hb_order) < m:
        return None
    sends, ks, cnts, bases, recvs = [], [], [], [], []
    starts = np.flatnonzero(np.r_[True, a.fifo_k[1:] == 0]) if len(a.fifo_k) else []
    ends = list(starts[1:]) + [len(a.fifo_k)]
    for lo, hi in zip(starts, ends, strict=True):
        k = hi - lo
        s = a.fifo_send[lo:hi]
        r = a.fifo_recvs[a.fifo_base[lo]:a.fifo_base[lo] + k]
        sends += [one[s], two[s]]
        ks.append(np.arange(2 * k, dtype=np.int64))
        cnts += [a.fifo_cnt[lo:hi]] * 2
        bases.append(np.full(2 * k, 2 * a.fifo_base[lo], np.int64))
        recvs += [one[r], two[r]]

    def cat(parts: list, dtype: Any) -> np.ndarray:
        return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype)

    return ModelArrays(
        both(a.kind), both(a.cnt), both(a.mult), both(a.reducing), send_key, recv_key, src,
        both(a.tb), a.tb_keys, pred_ptr, pred_idx, hb_order, cat(sends, np.int64),
        cat(ks, np.int64), cat(cnts, np.float64), cat(bases, np.int64), cat(recvs, np.int64))
