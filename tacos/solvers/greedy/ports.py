"""The greedy on the physical machine model: switch ports are links shared in time.

:func:`build_port_instance` turns a topology with switches into greedy *channels*: every direct
NPU-to-NPU link is a channel (as on a switch-free topology), and every NPU pair joined through
switches gets one channel whose transfers take one of the pair's candidate routes
(:mod:`tacos.model.routes`; several in a multi-switch fabric, ECMP) -- except routes that leave and
re-enter an island holding both ends (:func:`tacos.solvers.islands.inner_route`).  A transfer
holds one lane of every physical link of its route for its whole cut-through duration, so a
GPU behind an NVSwitch sends to one peer at a time at the full port rate, and an uplink carries
as many transfers at once as it has lanes.

:func:`run_port_trial` is one randomized trial of the link-chunk matching on that model.  At
each event (a transfer finishing) the destinations whose ports or in-channels may have freed are
looked at together:

1. for every such destination ``d``, its in-channels with a free route and a source holding a
   chunk ``d`` still wants -- across a scarce cut (an island boundary,
   :mod:`tacos.solvers.islands`) only chunks no member of ``d``'s island holds or has on the way;
2. the candidates are grouped by the port they enter ``d`` through; the group with the fewest
   live candidates is served first, taking its sources in order of how few other groups still
   want them, and the counts are updated as links fill up (a min-degree greedy matching of
   free up-ports to free down-ports: contested sources are left to those who need them), random
   ties;
3. each accepted channel carries up to ``cap`` chunks (one when ``cap == 1``, preferring chunks
   no later source of ``d`` could bring) over its least-loaded free route (ECMP: fewest busy
   ticks so far on the route's links).  A channel batches only as many chunks as it takes to
   make α small next to the wire time (:func:`channel_caps`): merging pays α once, but a long
   batch on a NIC would hold back every chunk of it.

Relays (chunks passing through NPUs outside their pre/post sets) use the same rules as the
switch-free trial.  Speculative resends are not made here: on shared ports a duplicate costs a
port that another transfer could use.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Sequence

from tacos.model.collective import Collective
from tacos.model.topology import Topology
from tacos.solvers.greedy.core import (
    Stuck,
    TrialResult,
    due,
    finish_trial,
    island_claims,
    make_rng,
    relay_sent,
    relay_useful,
)
from tacos.solvers.greedy.instance import Instance, _flatten, iter_bits, set_islands
from tacos.solvers.islands import inner_route, inner_switches


def build_port_instance(topology: Topology, collective: Collective, allowed: Iterable[int],
                        islands: Sequence[tuple[int, ...]] = ()) -> Instance:
    """Channels of the physical model among the ``allowed`` NPUs (see the module doc).

    Direct links come first in link order, then one channel per NPU pair and (α, bandwidth)
    class of its switch routes, pairs in id order.
    """
    keep = set(allowed)
    links = topology.links
    src: list[int] = []
    dst: list[int] = []
    alpha: list[float] = []
    bw: list[float] = []
    mult: list[int] = []
    ch_routes: list[tuple[int, ...]] = []
    route_links: list[tuple[int, ...]] = []
    route_id: dict[tuple[int, ...], int] = {}

    def rid(path: tuple[int, ...]) -> int:
        r = route_id.get(path)
        if r is None:
            r = route_id[path] = len(route_links)
            route_links.append(path)
        return r

    def add(u: int, v: int, a: float, b: float, m: int, paths: list[tuple[int, ...]]) -> None:
        src.append(u)
        dst.append(v)
        alpha.append(a)
        bw.append(b)
        mult.append(m)
        ch_routes.append(tuple(rid(p) for p in paths))

    for i, lk in enumerate(links):
        if lk.src in keep and lk.dst in keep and not topology.is_switch(lk.src) \
                and not topology.is_switch(lk.dst):
            add(lk.src, lk.dst, lk.alpha, lk.bandwidth, lk.multiplicity, [(i,)])
    routing = topology.routing
    isl_sets = [set(c) for c in islands]
    isl_inner = [inner_switches(topology, c, keep) for c in islands]
    for u in sorted(keep):
        for v, routes in sorted(routing.from_npu(u).items()):
            if v not in keep:
                continue
            classes: dict[tuple[float, float], list] = {}
            for r in routes:
                if r.switched and inner_route(topology, r.links, isl_sets, isl_inner, u, v):
                    classes.setdefault((r.alpha, r.bandwidth), []).append(r)
            for (a, b), rs in classes.items():
                add(u, v, a, b, min(r.lanes for r in rs), [r.links for r in rs])
    n = topology.n_nodes
    in_ch: list[list[int]] = [[] for _ in range(n)]
    out_ch: list[list[int]] = [[] for _ in range(n)]
    for c, (u, v) in enumerate(zip(src, dst, strict=True)):
        out_ch[u].append(c)
        in_ch[v].append(c)
    inst = _flatten(n, src, dst, in_ch, out_ch, collective, keep)
    inst.alpha, inst.bw, inst.mult = alpha, bw, mult
    inst.physical = True
    inst.ch_routes = ch_routes
    inst.route_links = route_links
    inst.res_mult = topology.link_arrays.multiplicity.tolist()
    inst.res_fabric = [topology.is_switch(lk.src) and topology.is_switch(lk.dst) for lk in links]
    dests: list[set[int]] = [set() for _ in links]
    for c, rs in enumerate(ch_routes):
        for r in rs:
            for li in route_links[r]:
                dests[li].add(dst[c])
    inst.res_dests = [tuple(sorted(x)) for x in dests]
    set_islands(inst, islands)
    return inst


MERGE_OVERHEAD = 0.02
"""A channel batches chunks only where α is more than this share of one chunk's wire time."""


def channel_caps(inst: Instance, cap: int) -> list[int]:
    """Most chunks per transfer on each channel: enough to keep α within
    :data:`MERGE_OVERHEAD` of the wire time, at most ``cap``, at least 1."""
    if cap <= 1 or not inst.sizes:
        return [1] * len(inst.src)
    size = inst.uniform_size or (sum(inst.sizes) / len(inst.sizes))
    return [max(1, min(cap, math.ceil(a * b / size / MERGE_OVERHEAD)))
            for a, b in zip(inst.alpha, inst.bw, strict=True)]


def run_port_trial(inst: Instance, seed: int, trial: int, cap: int) -> TrialResult:
    """One randomized trial on the physical model; deterministic in ``(seed, trial, cap)``."""
    rng, rand, pick, take = make_rng(seed, trial, inst.n_chunks)
    src, dst, in_ch, out_ch = inst.src, inst.dst, inst.in_links, inst.out_links
    ch_routes, route_links, res_dests = inst.ch_routes, inst.route_links, inst.res_dests
    need = inst.need
    held = list(inst.pre)
    claimed = list(inst.pre)
    res_free = list(inst.res_mult)
    res_busy = [0] * len(res_free)
    uniform = inst.uniform_size
    duration = inst.duration
    dtab: list[dict[int, int]] = [{} for _ in src]
    relay_mask = inst.relay_mask
    best = {c: dict(b) for c, b in inst.relay_best0.items()}
    guard, npu_isl = inst.guard, inst.npu_islands
    # chunks that may need relays are left out of the island rule: a relay's next hop is
    # chosen by distance, which a blocked cut would make wrong
    dense = ~inst.relay_mask
    isl_claimed = [x & dense for x in island_claims(inst)]
    caps = channel_caps(inst, cap)
    one = inst.uniform_size or min(inst.sizes, default=1)
    fastest = [min((duration(c, one) for c in in_ch[v]), default=0) for v in range(inst.n_nodes)]
    # transfers as parallel lists: start, end, channel, route, chunk bits
    T_start, T_end, T_link, T_route, T_bits = [], [], [], [], []  # type: ignore[var-annotated]
    pending: dict[int, list[int]] = {}  # end tick -> transfers
    heap: list[int] = []  # end ticks
    remaining = inst.total_need

    # per channel: the links its routes all start and end with, and every link they use
    ch_first = [route_links[rs[0]][0] if len({route_links[r][0] for r in rs}) == 1 else -1
                for rs in ch_routes]
    ch_last = [route_links[rs[0]][-1] if len({route_links[r][-1] for r in rs}) == 1 else -1
               for rs in ch_routes]
    ch_links = [tuple(sorted({li for r in rs for li in route_links[r]})) for rs in ch_routes]
    d_ports = [sorted({ch_last[c] for c in in_ch[v]}) for v in range(inst.n_nodes)]
    fabric = [any(inst.res_fabric[li] for li in lks) for lks in ch_links]
    res_free.append(1)  # link -1: always free (channels whose routes differ in their ends)
    # rarest first: level[j] holds the chunks claimed by exactly j NPUs so far
    copies = [0] * inst.n_chunks
    for v in range(inst.n_nodes):
        for c in iter_bits(inst.pre[v]):
            copies[c] += 1
    level = [0] * (inst.n_nodes + 2)
    for c, j in enumerate(copies):
        level[j] |= 1 << c

    def rarest(x: int, q: int) -> int:
        """Up to ``q`` chunks of ``x`` with the fewest copies claimed so far (random ties)."""
        if x.bit_count() <= q:
            return x
        out = 0
        for y in level:
            y &= x
            if y:
                got = take(y, q) if q > 1 else pick(y)
                out |= got
                q -= got.bit_count()
                if not q:
                    return out
        return out

    def free_route(ch: int) -> int:
        """The least-loaded route of ``ch`` whose links all have a free lane, or -1."""
        found, load = -1, 0
        for r in ch_routes[ch]:
            lks = route_links[r]
            for li in lks:
                if not res_free[li]:
                    break
            else:
                if found < 0:
                    found = r
                    if len(ch_routes[ch]) == 1:
                        return r
                    load = sum(res_busy[li] for li in lks)
                else:
                    w = sum(res_busy[li] for li in lks)
                    if w < load:
                        found, load = r, w
        return found

    def launch(t: int, ch: int, r: int, d: int, bits: int) -> None:
        if uniform is not None:
            cnt = bits.bit_count()
            w = dtab[ch].get(cnt)
            if w is None:
                w = dtab[ch][cnt] = duration(ch, uniform * cnt)
        else:
            w = duration(ch, inst.bits_bytes(bits))
        e = t + w
        tr = len(T_start)
        T_start.append(t)
        T_end.append(e)
        T_link.append(ch)
        T_route.append(r)
        T_bits.append(bits)
        for li in route_links[r]:
            res_free[li] -= 1
            res_busy[li] += w
        claimed[d] |= bits
        if guard:
            got = bits & dense
            for i in npu_isl[d]:
                isl_claimed[i] |= got
        for c in iter_bits(bits):
            j = copies[c]
            copies[c] = j + 1
            level[j] ^= 1 << c
            level[j + 1] |= 1 << c
        due(pending, heap, e, tr)
        if relay_mask and bits & relay_mask:
            relay_sent(inst, best, bits & relay_mask, d)

    def match(t: int, dirty: set[int]) -> None:
        """Match free channels into the ``dirty`` destinations with chunks they want.

        Candidates are grouped by the port they enter ``d`` through (the last link of the
        route); groups are served fewest-live-candidates first (min-degree greedy matching,
        counts updated as links fill up), each taking its least-contested source first."""
        groups: list[tuple[int, list[list]]] = []  # (d, entries [ch, a, ex, alive, first])
        extra: list[tuple[int, int]] = []  # cut channels with only island-held chunks
        by_port: dict[int, int] = {}
        users: dict[int, list[tuple[int, int]]] = {}
        demand: dict[int, int] = {}
        for d in sorted(dirty):
            for li in d_ports[d]:
                if res_free[li]:
                    break
            else:
                continue  # every port into d is busy
            want = need[d] & ~claimed[d]
            if relay_mask:
                offered = 0
                for ch in in_ch[d]:
                    offered |= held[src[ch]]
                want |= relay_useful(inst, best, claimed,
                                     offered & relay_mask & ~claimed[d] & ~need[d], d)
            if not want:
                continue
            lst = []
            for ch in in_ch[d]:
                if not (res_free[ch_first[ch]] and res_free[ch_last[ch]]):
                    continue  # its ports are busy (every route shares them)
                a = held[src[ch]] & want
                if a and guard and guard[ch] >= 0:
                    if not a & ~isl_claimed[guard[ch]]:
                        if not fabric[ch]:
                            extra.append((d, ch))
                        continue
                    a &= ~isl_claimed[guard[ch]]
                if a:
                    r = free_route(ch)
                    if r >= 0:
                        lst.append((ch, a, route_links[r]))
            m = len(lst)
            suffix = [0] * (m + 1)
            for i in range(m - 1, -1, -1):
                suffix[i] = suffix[i + 1] | lst[i][1]
            prefix = 0
            for i, (ch, a, lks) in enumerate(lst):
                port = lks[-1]
                gid = by_port.get(port)
                if gid is None:
                    gid = by_port[port] = len(groups)
                    groups.append((d, []))
                entries = groups[gid][1]
                first = lks[0]
                entries.append([ch, a, a & ~(prefix | suffix[i + 1]), True, first])
                prefix |= a
                demand[first] = demand.get(first, 0) + 1
                for li in ch_links[ch]:
                    users.setdefault(li, []).append((gid, len(entries) - 1))
        count = [len(e) for _, e in groups]
        heap = [(count[g], rand(), g) for g in range(len(groups))]
        heapq.heapify(heap)
        done = [False] * len(groups)
        while heap:
            c, r0, gid = heapq.heappop(heap)
            if done[gid]:
                continue
            if c != count[gid]:
                heapq.heappush(heap, (count[gid], r0, gid))
                continue
            done[gid] = True
            d, entries = groups[gid]
            order = sorted((e for e in entries if e[3]), key=lambda e: (demand[e[4]], rand()))
            for e in order:
                ch, a, ex = e[0], e[1], e[2]
                g = guard[ch] if guard else -1
                while True:
                    a &= ~claimed[d]
                    if g >= 0:
                        a &= ~isl_claimed[g]
                    if not a:
                        break
                    r = free_route(ch)
                    if r < 0:
                        break
                    ex &= a
                    q = caps[ch]
                    b = rarest(ex, q) if ex else 0
                    n = b.bit_count()
                    if n < q:
                        b |= rarest(a & ~b, q - n)
                    launch(t, ch, r, d, b)
                    for li in route_links[r]:
                        if res_free[li] == 0:
                            for g2, i2 in users.pop(li, ()):
                                e2 = groups[g2][1][i2]
                                if e2[3]:
                                    e2[3] = False
                                    demand[e2[4]] -= 1
                                    if not done[g2]:
                                        count[g2] -= 1
                                        heapq.heappush(heap, (count[g2], rand(), g2))
        if extra:
            relieve(t, extra)

    def relieve(t: int, extra: list[tuple[int, int]]) -> None:
        """A second copy across a cut whose island has every chunk it needs on the way: only
        on ports left idle by the matching (never over switch-to-switch links, which other
        islands share), and only to a destination whose remaining chunks keep its fast ports
        busy for longer than the copy takes."""
        for i in sorted(range(len(extra)), key=lambda _: rand()):
            d, ch = extra[i]
            a = held[src[ch]] & need[d] & ~claimed[d]
            if not a:
                continue
            r = free_route(ch)
            if r < 0:
                continue
            left = (need[d] & ~claimed[d]).bit_count()
            if left * fastest[d] < duration(ch, inst.bits_bytes(a & -a)):
                continue
            launch(t, ch, r, d, pick(a))

    t = 0
    dirty = {d for d in range(inst.n_nodes) if in_ch[d] and (need[d] or relay_mask)}
    while remaining > 0:
        if dirty:
            match(t, dirty)
        if not heap:
            raise Stuck(f"no transfer can progress at tick {t}; {remaining} requests left")
        t = heapq.heappop(heap)
        dirty = set()
        for tr in pending.pop(t):
            ch = T_link[tr]
            d = dst[ch]
            for li in route_links[T_route[tr]]:
                res_free[li] += 1
                dirty.update(res_dests[li])
            bits = T_bits[tr]
            held[d] |= bits
            remaining -= (bits & need[d]).bit_count()
            for c2 in out_ch[d]:
                dirty.add(dst[c2])
    return finish_trial(inst, t, trial, cap, pending, T_start, T_end, T_link, T_bits,
                        {"replaced": 0, "dropped": 0, "speculative": 0}, T_route)

