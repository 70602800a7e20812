"""One trial of TACOS-Greedy: event-driven link-chunk matching over chunk bitsets.

State per NPU ``v`` (Python-int bitsets over local chunk ids): ``held[v]`` (arrived),
``claimed[v]`` (held or in flight towards ``v``), ``need[v]`` (postcondition).  Time advances to
the next transfer completion (exact integer ticks).  At each event only the links it touched are
looked at: links that just freed, and free out-links of NPUs that just received chunks.  For each
destination ``d`` with such free in-links, the wanted chunks ``need[d] & ~claimed[d]`` (plus
chunks ``d`` may relay towards far targets) are matched to the links whose source holds them:

* ``cap == 1`` (TACOS): most constrained link first, a random chunk each, preferring chunks
  that no later link could carry;
* ``cap > 1``: :func:`tacos.solvers.greedy.merge.split_batches` balances batches over the links.

Heterogeneous links: a chunk goes where it arrives first; a free link whose source holds a chunk
already in flight to ``d`` on a slower transfer may send it again (speculation), and when the
slow transfer lands its now-duplicate chunk is *replaced* by another chunk ``d`` still wants that
the source held **when the transfer started** (causality), or dropped (the transfer shrinks).
Every NPU receives every chunk at most once, which the reduction-by-inversion relies on.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tacos.solvers.greedy.instance import Instance, bits_to_tuple, iter_bits
from tacos.solvers.greedy.merge import split_batches


@dataclass
class TrialResult:
    """A finished trial: makespan in ticks and the transfers as parallel lists (``link`` is
    the channel; ``route`` the route id of each transfer on the physical model, else empty)."""

    makespan: int
    trial: int
    cap: int
    start: list[int]
    end: list[int]
    link: list[int]
    bits: list[int]
    stats: dict[str, int] = field(default_factory=dict)
    route: list[int] = field(default_factory=list)
    chunk_ptr: Any = None
    chunk_ids: Any = None

    def chunk_tuples(self) -> Iterator[tuple[int, ...]]:
        """Each transfer's local chunk ids, ascending (from ``bits``, or from the compiled
        trial's columns ``chunk_ptr``/``chunk_ids`` when ``bits`` is empty)."""
        if self.chunk_ptr is None:
            for b in self.bits:
                yield bits_to_tuple(b)
            return
        ids = self.chunk_ids.tolist()
        if len(ids) == len(self.chunk_ptr) - 1:  # one chunk per transfer: shared 1-tuples
            one: dict[int, tuple[int]] = {}
            for c in ids:
                t = one.get(c)
                if t is None:
                    t = one[c] = (c,)
                yield t
            return
        ptr = self.chunk_ptr.tolist()
        for i in range(len(ptr) - 1):
            yield tuple(ids[ptr[i]:ptr[i + 1]])


class Stuck(Exception):
    """No transfer can make progress (some postcondition is unreachable)."""


def make_rng(seed: int, trial: int, n_chunks: int
             ) -> tuple[random.Random, Callable[[], float], Callable[[int], int],
                        Callable[[int, int], int]]:
    """The trial's random source: ``(rng, rand, pick, take)``, deterministic in
    ``(seed, trial)``.  ``pick(x)`` is a random set bit of ``x``; ``take(x, q)`` up to ``q``
    random bits of ``x``."""
    rng = random.Random(f"tacos-greedy:{seed}:{trial}")
    rand = rng.random
    nb = max(1, n_chunks)

    def pick(x: int) -> int:
        r = int(rand() * nb)
        y = x >> r
        if y:
            return (y & -y) << r
        return x & -x

    def take(x: int, q: int) -> int:
        pc = x.bit_count()
        if pc <= q:
            return x
        if q * 2 <= pc:
            out = 0
            for _ in range(q):
                b = pick(x)
                out |= b
                x ^= b
            return out
        for _ in range(pc - q):
            x ^= pick(x)
        return x

    return rng, rand, pick, take


def run_python_trial(inst: Instance, seed: int, trial: int, cap: int,
                     speculate: bool) -> TrialResult:
    """One randomized trial in pure Python; deterministic in ``(seed, trial, cap)``.
    ``speculate`` as :func:`tacos.solvers.greedy_trial.run_trial` resolves it (that function
    picks the engine)."""
    rng, rand, pick, take = make_rng(seed, trial, inst.n_chunks)

    src, dst, out_links, in_links = inst.src, inst.dst, inst.out_links, inst.in_links
    need = inst.need
    held = list(inst.pre)
    claimed = list(inst.pre)
    dupped = [0] * inst.n_nodes
    lane_free = list(inst.mult)
    active: list[list[int]] = [[] for _ in src]
    uniform = inst.uniform_size
    duration = inst.duration
    # one table per link: chunk count -> ticks (uniform chunk sizes only)
    dtab: list[dict[int, int]] = [{} for _ in src]
    relay_mask = inst.relay_mask
    best = {c: dict(b) for c, b in inst.relay_best0.items()}
    T_start: list[int] = []
    T_end: list[int] = []
    T_link: list[int] = []
    T_bits: list[int] = []
    T_snap: list[int] = []
    pending: dict[int, list[int]] = {}
    heap: list[int] = []
    remaining = inst.total_need
    stats = {"replaced": 0, "dropped": 0, "speculative": 0}

    def nbytes(bits: int) -> int:
        if uniform is not None:
            return uniform * bits.bit_count()
        return sum(inst.sizes[c] for c in iter_bits(bits))

    def launch(t: int, lk: int, d: int, bits: int) -> None:
        if uniform is not None:
            cnt = bits.bit_count()
            w = dtab[lk].get(cnt)
            if w is None:
                w = dtab[lk][cnt] = duration(lk, uniform * cnt)
            e = t + w
        else:
            e = t + duration(lk, nbytes(bits))
        tr = len(T_start)
        T_start.append(t)
        T_end.append(e)
        T_link.append(lk)
        T_bits.append(bits)
        lane_free[lk] -= 1
        claimed[d] |= bits
        if speculate:
            T_snap.append(held[src[lk]])
            active[lk].append(tr)
        due(pending, heap, e, tr)
        if relay_mask and bits & relay_mask:
            relay_sent(inst, best, bits & relay_mask, d)

    def relay_wanted(d: int, offered: int) -> int:
        return relay_useful(inst, best, claimed, offered & relay_mask & ~claimed[d] & ~need[d],
                            d)

    def speculate_on(t: int, lk: int, d: int) -> bool:
        """Resend a chunk in flight to ``d`` on ``lk`` if it lands strictly earlier."""
        have = held[src[lk]] & ~held[d] & ~dupped[d]
        best_gain, best_bit = 0, 0
        for l2 in in_links[d]:
            for tr in active[l2]:
                cand = T_bits[tr] & have
                if not cand:
                    continue
                bit = pick(cand)
                if uniform is not None:
                    w = dtab[lk].get(1)
                    if w is None:
                        w = dtab[lk][1] = duration(lk, uniform)
                else:
                    w = duration(lk, nbytes(bit))
                gain = T_end[tr] - (t + w)
                if gain > best_gain:
                    best_gain, best_bit = gain, bit
        if not best_bit:
            return False
        dupped[d] |= best_bit
        stats["speculative"] += 1
        launch(t, lk, d, best_bit)
        return True

    def land(tr: int) -> int:
        """Bits that really arrive with transfer ``tr`` after duplicate replacement."""
        lk = T_link[tr]
        d = dst[lk]
        bits = T_bits[tr]
        dup = bits & held[d]
        if not dup:
            return bits
        dropped = False
        for c in iter_bits(dup):
            bit = 1 << c
            bits ^= bit
            cand = T_snap[tr] & need[d] & ~claimed[d]
            if uniform is None and cand:
                cand = sum(1 << x for x in iter_bits(cand) if inst.sizes[x] == inst.sizes[c])
            if cand:
                new = pick(cand)
                bits |= new
                claimed[d] |= new
                stats["replaced"] += 1
            else:
                dropped = True
                stats["dropped"] += 1
        T_bits[tr] = bits
        if dropped:
            T_end[tr] = T_start[tr] + duration(lk, nbytes(bits)) if bits else T_start[tr]
        return bits

    t = 0
    # touched destinations and, per destination, its touched in-links, both in touch order
    # (insertion-ordered dicts, so the compiled core can follow the same order)
    dirty: dict[int, dict[int, None]] = {d: dict.fromkeys(in_links[d])
                                         for d in range(inst.n_nodes)
                                         if in_links[d] and (need[d] or relay_mask)}
    while remaining > 0:
        # ---- link-chunk matching for every destination touched by the last event
        for d, lset in dirty.items():
            want = need[d] & ~claimed[d]
            if relay_mask:
                offered = 0
                for lk in lset:
                    if lane_free[lk]:
                        offered |= held[src[lk]]
                want |= relay_wanted(d, offered)
            slots: list[tuple[int, int]] = []
            idle: list[int] = []
            for lk in lset:
                f = lane_free[lk]
                if not f:
                    continue
                a = held[src[lk]] & want if want else 0
                if a:
                    slots.extend([(lk, a)] * f)
                elif speculate:
                    idle.extend([lk] * f)
            if slots:
                if len(slots) == 1:
                    lk, a = slots[0]
                    if a.bit_count() > cap:
                        # prefer chunks no other in-neighbour of d could bring
                        other = 0
                        for l2 in in_links[d]:
                            if l2 != lk:
                                other |= held[src[l2]]
                        b = take(a & ~other, cap)
                        n = b.bit_count()
                        if n < cap:
                            b |= take(a & ~b, cap - n)
                        launch(t, lk, d, b)
                    else:
                        launch(t, lk, d, pick(a) if cap == 1 else take(a, cap))
                elif cap == 1:
                    slots.sort(key=lambda s: (s[1].bit_count(), rand()))
                    taken = 0
                    m = len(slots)
                    rest = [0] * m
                    acc = 0
                    for i in range(m - 1, -1, -1):
                        rest[i] = acc
                        acc |= slots[i][1]
                    for i, (lk, a) in enumerate(slots):
                        a &= ~taken
                        if a:
                            # prefer a chunk no later slot can carry (keeps the matching
                            # maximal: shared chunks are left to the other links)
                            ex = a & ~rest[i]
                            b = pick(ex if ex else a)
                            taken |= b
                            launch(t, lk, d, b)
                        elif speculate:
                            idle.append(lk)
                else:
                    rng.shuffle(slots)
                    for (lk, _), b in zip(slots, split_batches(inst, slots, cap, take),
                                          strict=True):
                        if b:
                            launch(t, lk, d, b)
                        elif speculate:
                            idle.append(lk)
            if idle:
                infl = claimed[d] & ~held[d] & ~dupped[d]
                if infl:
                    for lk in idle:
                        if lane_free[lk] and held[src[lk]] & infl:
                            speculate_on(t, lk, d)
                            infl = claimed[d] & ~held[d] & ~dupped[d]
        # ---- advance to the next completion
        if not heap:
            raise Stuck(f"no transfer can progress at tick {t}; {remaining} requests left")
        t = heapq.heappop(heap)
        dirty = {}
        for tr in pending.pop(t):
            lk = T_link[tr]
            d = dst[lk]
            lane_free[lk] += 1
            bits = T_bits[tr]
            if speculate:
                active[lk].remove(tr)
                if bits & held[d]:
                    bits = land(tr)
            s = dirty.get(d)
            if s is None:
                dirty[d] = {lk: None}
            else:
                s[lk] = None
            if not bits:
                continue
            held[d] |= bits
            remaining -= (bits & need[d]).bit_count()
            for l2 in out_links[d]:
                if lane_free[l2]:
                    e = dst[l2]
                    s = dirty.get(e)
                    if s is None:
                        dirty[e] = {l2: None}
                    else:
                        s[l2] = None
    return finish_trial(inst, t, trial, cap, pending, T_start, T_end, T_link, T_bits, stats)


def finish_trial(inst: Instance, t: int, trial: int, cap: int, pending: dict[int, list[int]],
                 start: list[int], end: list[int], link: list[int], bits: list[int],
                 stats: dict[str, int], route: list[int] | None = None) -> TrialResult:
    """The trial's result once every request is served at tick ``t``: transfers still in
    flight carry nothing anyone needs any more, relay deliveries that feed no target go."""
    for trs in pending.values():
        for tr in trs:
            bits[tr] = 0
    if inst.relay_mask:
        _prune_relays(inst, start, end, link, bits)
    keep = [i for i, b in enumerate(bits) if b]
    stats["transfers"] = len(keep)
    return TrialResult(
        makespan=t, trial=trial, cap=cap,
        start=[start[i] for i in keep], end=[end[i] for i in keep],
        link=[link[i] for i in keep], bits=[bits[i] for i in keep], stats=stats,
        route=[route[i] for i in keep] if route is not None else [],
    )


def due(pending: dict[int, list[int]], heap: list[int], end: int, tr: int) -> None:
    """Record that transfer ``tr`` ends at tick ``end`` (event lists by tick, a heap of ticks)."""
    lst = pending.get(end)
    if lst is None:
        pending[end] = [tr]
        heapq.heappush(heap, end)
    else:
        lst.append(tr)


def relay_sent(inst: Instance, best: dict[int, dict[int, int]], bits: int, d: int) -> None:
    """Relay chunks ``bits`` are on their way to ``d``: update each one's best hop distance
    to each of its targets."""
    dist_to = inst.dist_to
    for c in iter_bits(bits):
        bc = best[c]
        for p in inst.relay_targets[c]:
            dd = dist_to[p][d]
            if dd < bc[p]:
                bc[p] = dd


def relay_useful(inst: Instance, best: dict[int, dict[int, int]], claimed: list[int],
                 cand: int, d: int) -> int:
    """The relay chunks of ``cand`` that ``d`` would bring closer to a target still waiting."""
    dist_to = inst.dist_to
    useful = 0
    for c in iter_bits(cand):
        bc = best[c]
        for p in inst.relay_targets[c]:
            if not (claimed[p] >> c) & 1 and dist_to[p][d] < bc[p]:
                useful |= 1 << c
                break
    return useful


def island_claims(inst: Instance) -> list[int]:
    """Per island, the chunks its members hold at the start (bitsets)."""
    return [_or(inst.pre[v] for v in members) for members in inst.island_members]


def _or(bits) -> int:
    out = 0
    for b in bits:
        out |= b
    return out


def _prune_relays(inst: Instance, start: list[int], end: list[int], link: list[int],
                  bits: list[int]) -> None:
    """Drop relay deliveries that feed no target (latest first), shrinking their transfers."""
    by_chunk: dict[int, list[int]] = {}
    for i, b in enumerate(bits):
        rb = b & inst.relay_mask
        if rb:
            for c in iter_bits(rb):
                by_chunk.setdefault(c, []).append(i)
    touched: set[int] = set()
    for c, trs in by_chunk.items():
        useful = set(inst.relay_targets[c])
        for i in sorted(trs, key=lambda i: (start[i], i), reverse=True):
            if inst.dst[link[i]] in useful:
                useful.add(inst.src[link[i]])
            else:
                bits[i] &= ~(1 << c)
                touched.add(i)
    for i in touched:
        if bits[i]:
            size = sum(inst.sizes[c] for c in iter_bits(bits[i]))
            end[i] = start[i] + inst.duration(link[i], size)
