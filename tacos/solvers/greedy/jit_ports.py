"""The greedy's port trial compiled with numba: same matching, same random draws, same bytes.

:func:`tacos.solvers.greedy.ports.run_port_trial` is the reference (pure Python over big-int
bitsets); :func:`run_port_trial_compiled` runs the same trial in one compiled function
(:mod:`tacos.solvers.greedy.jit_ports_kernel`) over ``uint64`` bit rows and gives the same
schedule for every ``(seed, trial, cap)``: the trial's Mersenne Twister state is handed over
(:mod:`tacos.solvers.greedy.jit_bits`), and every choice draws its random numbers in the
order the Python trial does (group keys in group order, candidate keys in entry order, the
re-pushed groups' keys as their links fill up, the second copies' order).

It covers port trials without relay chunks (:func:`supported`); other
trials, runs with the greedy's ``jit`` option off, and ``TACOS_JIT=0`` use the Python trial.
"""

from __future__ import annotations

import numpy as np

from tacos.solvers.greedy.instance import Instance
from tacos.solvers.greedy.jit import _csr, available, bit_rows

__all__ = ["available", "prepare", "prepare_kernel", "run_port_trial_compiled", "supported",
           "worth_it"]

MIN_WORK = 10_000
"""Requests (chunk, NPU) below which port trials stay in Python while the kernel is not
loaded yet: importing numba and loading the cached kernel costs about 0.5 s of CPU, what the
Python port trial spends on some 10,000-15,000 requests (35-50 µs each on 32-64 NPUs)."""


def supported(inst: Instance) -> bool:
    """True when the compiled port trial reproduces the Python one for ``inst``: a physical
    instance without relay chunks."""
    return inst.physical and not inst.relay_mask and inst.n_chunks > 0


def worth_it(inst: Instance) -> bool:
    """True when the compiled trial pays: its kernel is loaded in this process already, or the
    instance has at least :data:`MIN_WORK` requests."""
    import sys

    return ("tacos.solvers.greedy.jit_ports_kernel" in sys.modules
            or inst.total_need >= MIN_WORK)


def prepare_kernel():
    """The kernel module (imports numba and loads the kernel on first use: about 0.5 s)."""
    from tacos.solvers.greedy import jit_ports_kernel

    return jit_ports_kernel


def prepare(inst: Instance, trials: int) -> None:
    """Load the kernel before ``trials`` port trials of ``inst`` when they pay for it together
    (``trials`` × requests >= :data:`MIN_WORK`), so each of them runs compiled."""
    if supported(inst) and available() and inst.total_need * trials >= MIN_WORK:
        prepare_kernel()


def _arrays(inst: Instance) -> dict[str, np.ndarray]:
    """The kernel's view of ``inst`` (built once per instance and cached on it)."""
    cached = getattr(inst, "_jit_port_arrays", None)
    if cached is not None:
        return cached
    from tacos.solvers.greedy.core import island_claims

    n = inst.n_nodes
    n_res = len(inst.res_mult)
    words = (inst.n_chunks + 63) // 64
    routes, route_links = inst.ch_routes, inst.route_links

    def end(pick) -> list[int]:
        out = []
        for rs in routes:
            ends = {pick(route_links[r]) for r in rs}
            out.append(ends.pop() if len(ends) == 1 else n_res)
        return out

    ch_first = end(lambda p: p[0])
    ch_last = end(lambda p: p[-1])
    ch_links = [sorted({li for r in rs for li in route_links[r]}) for rs in routes]
    d_ports = [sorted({ch_last[c] for c in inst.in_links[v]}) for v in range(n)]
    fabric = [any(inst.res_fabric[li] for li in lks) for lks in ch_links]
    one = inst.uniform_size or min(inst.sizes, default=1)
    fastest = [min((inst.duration(c, one) for c in inst.in_links[v]), default=0)
               for v in range(n)]
    npu_isl = inst.npu_islands or [()] * n
    a: dict[str, np.ndarray] = {}
    for name, lists in (("in", inst.in_links), ("out", inst.out_links), ("cr", routes),
                        ("rl", route_links), ("cl", ch_links), ("dp", d_ports),
                        ("rd", inst.res_dests), ("isl", npu_isl)):
        a[name + "_ptr"], a[name + "_idx"] = _csr([list(x) for x in lists])
    i64 = np.int64
    a.update(
        src=np.asarray(inst.src, dtype=i64), dst=np.asarray(inst.dst, dtype=i64),
        ch_first=np.asarray(ch_first, dtype=i64), ch_last=np.asarray(ch_last, dtype=i64),
        guard=np.asarray(inst.guard or [-1] * len(inst.src), dtype=i64),
        fabric=np.asarray(fabric, dtype=np.bool_),
        alpha=np.asarray(inst.alpha, dtype=np.float64),
        bw=np.asarray(inst.bw, dtype=np.float64),
        res_mult=np.asarray(list(inst.res_mult) + [1], dtype=i64),
        isl_claimed=bit_rows(island_claims(inst), words) if inst.guard
        else np.zeros((1, words), dtype=np.uint64),
        pre=bit_rows(inst.pre, words), need=bit_rows(inst.need, words),
        fastest=np.asarray(fastest, dtype=i64), sizes=np.asarray(inst.sizes, dtype=i64),
    )
    inst._jit_port_arrays = a  # type: ignore[attr-defined]
    return a


def run_port_trial_compiled(inst: Instance, seed: int, trial: int, cap: int):
    """One port trial on the compiled path (:func:`supported` must hold): the
    :class:`~tacos.solvers.greedy.core.TrialResult` of
    :func:`~tacos.solvers.greedy.ports.run_port_trial`, with numpy columns."""
    from tacos.solvers.greedy.core import Stuck, TrialResult, make_rng
    from tacos.solvers.greedy.ports import channel_caps, run_port_trial

    rng = make_rng(seed, trial, inst.n_chunks)[0]
    state = rng.getstate()[1]
    mt = np.asarray(state[:624], dtype=np.int64)
    pos = np.asarray([state[624]], dtype=np.int64)
    a = _arrays(inst)
    caps = np.asarray(channel_caps(inst, cap), dtype=np.int64)
    status, t, left, start, end, link, route, cptr, cids = prepare_kernel().kernel(
        a["src"], a["dst"], a["in_ptr"], a["in_idx"], a["out_ptr"], a["out_idx"],
        a["cr_ptr"], a["cr_idx"], a["rl_ptr"], a["rl_idx"], a["cl_ptr"], a["cl_idx"],
        a["dp_ptr"], a["dp_idx"], a["rd_ptr"], a["rd_idx"], a["ch_first"], a["ch_last"],
        a["guard"], a["fabric"], caps, a["alpha"], a["bw"], a["res_mult"], a["isl_ptr"],
        a["isl_idx"], a["isl_claimed"].copy(), a["pre"], a["need"], a["fastest"],
        int(inst.total_need), a["sizes"], max(1, inst.n_chunks), mt, pos)
    if status == 2:  # times beyond 64-bit ticks: the Python trial has no such limit
        return run_port_trial(inst, seed, trial, cap)
    if status:
        raise Stuck(f"no transfer can progress at tick {t}; {left} requests left")
    return TrialResult(makespan=int(t), trial=trial, cap=cap, start=start, end=end, link=link,
                       bits=[], stats={"replaced": 0, "dropped": 0, "speculative": 0,
                                       "transfers": len(start)},
                       route=route, chunk_ptr=cptr, chunk_ids=cids)
