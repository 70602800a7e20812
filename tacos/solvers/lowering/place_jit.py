"""The baselines' first-fit placement, compiled: same transfers as the Python loop.

:meth:`tacos.solvers.lowering.program.Lowering.run` places a program's sends one by one in
Python, some 20 microseconds each; NCCL's ring on 1,024 GPUs is a million sends (one channel),
on 256 GPUs half a million (eight).  :func:`place_compiled` runs the same loop in one numba
function (:mod:`tacos.solvers.lowering.place_jit_kernel`) over arrays and leaves the lowering
exactly as the Python loop would: the same rows (start, end, hop, route, chunks), the same
availability of every chunk at every NPU and the same link calendar (busy intervals per lane,
busy time per link), so whatever the lowering does next sees no difference.

It runs on a fresh lowering (nothing placed yet) whose class places sends as
:class:`~tacos.solvers.lowering.program.Lowering` does (the caller checks), when numba is
installed and ``TACOS_JIT`` does not disable it (:func:`tacos.solvers.greedy.jit.available`),
and the program has at least :data:`MIN_SENDS` sends (loading the kernel costs a few tenths
of a second).
"""

from __future__ import annotations

from typing import Any

import numpy as np

MIN_SENDS = 20_000
"""Sends from which the compiled loop pays for loading its kernel."""

MAX_CELLS = 50_000_000
"""Largest (NPU x chunk) availability table the kernel holds densely (400 MB); above it the
Python loop runs."""


def usable(lowering: Any, sends: list) -> bool:
    """True when :func:`place_compiled` may run ``sends`` on ``lowering`` (see module doc)."""
    from tacos.solvers.greedy.jit import available

    return (len(sends) >= MIN_SENDS and not lowering._rows and not lowering._avail
            and not lowering.calendar._res
            and lowering.topology.n_npus * len(lowering.collective.chunks) <= MAX_CELLS
            and all(chunks for _, chunks in sends) and available())


def place_compiled(lowering: Any, sends: list[tuple[list[int], tuple[int, ...]]]) -> None:
    """Place ``sends`` (``(route of NPUs, chunks)``, in program order) on ``lowering`` as its
    ``_send`` would, one after the other (see module doc)."""
    from tacos.solvers.lowering import place_jit_kernel as kernel

    topo = lowering.topology
    graph = lowering.graph
    sizes = [c.size for c in lowering.collective.chunks]
    pair_id: dict[tuple[int, int], int] = {}
    pair_routes: list[int] = []
    pair_off = [0]
    route_id: dict[int, int] = {}
    routes: list[Any] = []
    one_hop: dict[tuple[int, int], tuple[list[int], list[tuple[int, int]]]] = {}
    src: list[int] = []
    dst: list[int] = []
    nbytes: list[int] = []
    hop_off = [0]
    chunk_off = [0]
    hop_pair: list[int] = []
    hop_ends: list[tuple[int, int]] = []
    flat_chunks: list[int] = []
    for route, chunks in sends:
        a0, b0 = route[0], route[-1]
        got = one_hop.get((a0, b0)) if len(route) == 2 else None
        if got is None:
            pairs = []
            for a, b in zip(route, route[1:], strict=False):
                p = pair_id.get((a, b))
                if p is None:
                    p = pair_id[(a, b)] = len(pair_id)
                    for r in graph.hops(a)[b]:
                        rid = route_id.get(id(r))
                        if rid is None:
                            rid = route_id[id(r)] = len(routes)
                            routes.append(r)
                        pair_routes.append(rid)
                    pair_off.append(len(pair_routes))
                pairs.append(p)
            got = (pairs, list(zip(route, route[1:], strict=False)))
            if len(route) == 2:
                one_hop[(a0, b0)] = got
        src.append(a0)
        dst.append(b0)
        nbytes.append(sizes[chunks[0]] if len(chunks) == 1 else sum(sizes[c] for c in chunks))
        hop_pair += got[0]
        hop_ends += got[1]
        hop_off.append(len(hop_pair))
        flat_chunks += chunks
        chunk_off.append(len(flat_chunks))
    route_off = [0]
    route_links: list[int] = []
    for r in routes:
        route_links.extend(r.links)
        route_off.append(len(route_links))
    links = topo.links
    srv_off = np.zeros(len(links) + 1, np.int64)
    srv_off[1:] = np.cumsum([max(1, lk.multiplicity) for lk in links])
    n_ids = max(max(ab) for ab in hop_ends) + 1
    out_s, out_e, out_r, avail, cal_off, cal_s, cal_e, count, busy = kernel.place_all(
        np.asarray(src, np.int64), np.asarray(dst, np.int64),
        np.asarray(nbytes, np.float64), np.asarray(hop_off, np.int64),
        np.asarray(hop_pair, np.int64), np.asarray(chunk_off, np.int64),
        np.asarray(flat_chunks, np.int64), np.asarray(pair_off, np.int64),
        np.asarray(pair_routes, np.int64),
        np.asarray([float(r.alpha) for r in routes], np.float64),
        np.asarray([float(r.bandwidth) for r in routes], np.float64),
        np.asarray(route_off, np.int64), np.asarray(route_links, np.int64), srv_off,
        len(sizes), n_ids, 8)
    # the rows, availability and calendar the Python loop leaves
    s_list, e_list, r_list = out_s.tolist(), out_e.tolist(), out_r.tolist()
    links_of = [r.links for r in routes]
    rows = lowering._rows
    if len(hop_ends) == len(sends):  # every send one hop
        rows += [[s, e, a, b, links_of[r], chunks] for s, e, (a, b), r, (_, chunks)
                 in zip(s_list, e_list, hop_ends, r_list, sends, strict=True)]
    else:
        h = 0
        for i, (_route, chunks) in enumerate(sends):
            for _ in range(hop_off[i + 1] - hop_off[i]):
                a, b = hop_ends[h]
                rows.append([s_list[h], e_list[h], a, b, links_of[r_list[h]], chunks])
                h += 1
    av = lowering._avail
    for (npu, c) in zip(*np.nonzero(avail > 0.0), strict=True):
        av[(int(npu), int(c))] = float(avail[npu, c])
    cal = lowering.calendar
    busy_l = busy.tolist()
    count_l = count.tolist()
    for li in range(len(links)):
        k0, k1 = int(srv_off[li]), int(srv_off[li + 1])
        if busy_l[li] == 0.0 and not any(count_l[k0:k1]):
            continue
        res = cal.lanes(li)
        res.busy = busy_l[li]
        for srv, k in zip(res.servers, range(k0, k1), strict=True):
            srv.starts = cal_s[cal_off[k]:cal_off[k + 1]].tolist()
            srv.ends = cal_e[cal_off[k]:cal_off[k + 1]].tolist()
