"""Multi-chunk transfers: how the greedy splits wanted chunks over free links, and when to merge.

A transfer may carry several chunks over one link and pays the link's α once (duration
``α + Σ sizes / bandwidth``, MSCCL's ``cnt``).  Merging saves α per extra chunk but makes the
first chunk of the batch arrive later, so it pays where α is large next to a chunk's wire time
and hurts where it is small.  This module holds:

* :func:`split_batches`: given the free in-links of one NPU and the wanted chunks each link's
  source holds, choose the chunks each link carries (each chunk on one link, at most
  ``cap`` per link), balancing the links' finish times (shorter-link-first generalized to
  batches);
* :func:`merge_caps`: the ladder of per-trial caps tried for ``max_merge='auto'``;
* :func:`unmerged_lower_bound`: a lower bound on any chunk-granular (one chunk per transfer)
  schedule, used to skip the unmerged trials when a merged schedule already beats it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from tacos.errors import UsageError
from tacos.solvers.greedy.instance import Instance

UNLIMITED = 1 << 30


def split_batches(
    inst: Instance,
    slots: list[tuple[int, int]],
    cap: int,
    take: Callable[[int, int], int],
) -> list[int]:
    """Chunks (bitset) for each slot ``(link, available)``; each chunk goes to one slot.

    Chunks only one slot can carry go there first; the shared rest is water-filled onto the
    slot that would finish earliest (α + bytes/bandwidth), in bulk steps.  ``take(x, q)``
    returns up to ``q`` (randomly chosen) bits of ``x``.
    """
    k = len(slots)
    avail = [a for _, a in slots]
    prefix = [0] * (k + 1)
    for i, a in enumerate(avail):
        prefix[i + 1] = prefix[i] | a
    suffix = 0
    chosen = [0] * k
    all_excl = 0
    for i in range(k - 1, -1, -1):
        excl = avail[i] & ~(prefix[i] | suffix)
        suffix |= avail[i]
        all_excl |= excl
        chosen[i] = take(excl, cap) if excl else 0
    shared = prefix[k] & ~all_excl
    if not shared:
        return chosen
    size = inst.uniform_size or (sum(inst.sizes) / len(inst.sizes))
    links = [lk for lk, _ in slots]
    per = [size / inst.bw[lk] for lk in links]
    counts = [c.bit_count() for c in chosen]
    finish = [inst.alpha[lk] + counts[i] * per[i] for i, lk in enumerate(links)]
    while shared:
        cand = sorted((finish[i] + per[i], i) for i in range(k)
                      if counts[i] < cap and avail[i] & shared)
        if not cand:
            break
        best = cand[0][1]
        # give the earliest-finishing slot enough chunks to catch up with the next one
        g = cap - counts[best]
        if len(cand) > 1:
            g = min(g, max(1, int((cand[1][0] - finish[best]) / per[best] + 1e-9)))
        got = take(avail[best] & shared, g)
        n = got.bit_count()
        chosen[best] |= got
        shared &= ~got
        counts[best] += n
        finish[best] += n * per[best]
    return chosen


def check_max_merge(max_merge: object) -> int | str | None:
    """``max_merge`` as the greedy takes it (an int >= 1, None or ``'auto'``; texts such as
    ``'4'`` or ``'unlimited'`` are read); a :class:`~tacos.errors.UsageError` otherwise."""
    if isinstance(max_merge, str) and max_merge.strip().lower() in ("none", "unlimited"):
        return None
    if isinstance(max_merge, str) and max_merge.strip().isdigit():
        max_merge = int(max_merge)
    if max_merge is None or max_merge == "auto":
        return max_merge
    if isinstance(max_merge, int) and not isinstance(max_merge, bool):
        if max_merge < 1:
            raise UsageError(f"max_merge must be at least 1, not {max_merge}")
        return max_merge
    raise UsageError(f"max_merge must be an int, None or 'auto', not {max_merge!r}")


def merge_caps(inst: Instance, max_merge: int | str | None, trials: int) -> list[int]:
    """Per-trial chunk caps.

    An int (or None = unlimited) is used for every trial.  ``'auto'`` cycles through a ladder
    built from the ratio of α to a chunk's wire time: a cap ``b`` pays α once per ``b`` chunks,
    so ``b ≈ α·B/(ε·m)`` keeps α at about ε of a transfer; the ladder tries ε = 10% and 5%,
    then the small caps 4 and 2 (which pay even where α is negligible: a link that may carry a
    variable number of chunks balances its load better than one chunk per step), then ε = 20%.
    Unlimited batches are never tried: they wreck pipelining.  On the physical model
    (``inst.physical``) the α ratios are those of the channels (routes: ports pay α on each
    hop) and the ladder leans to larger batches (ε = 5% and 2% first, then 4, 2 and 10%), as
    :func:`tacos.solvers.greedy.ports.channel_caps` keeps them off channels where α does not
    matter.
    """
    max_merge = check_max_merge(max_merge)
    if max_merge is None:
        return [UNLIMITED] * trials
    if isinstance(max_merge, int):
        return [max_merge] * trials
    if not inst.sizes or not inst.alpha:
        return [1] * trials
    size = inst.uniform_size or (sum(inst.sizes) / len(inst.sizes))
    ratios = [a * b / size for a, b in zip(inst.alpha, inst.bw, strict=True)] or [0.0]
    ratio = max(ratios)  # α / wire time of one chunk, worst link
    ladder: list[int] = []
    eps = (0.05, 0.02, None, None, 0.1) if inst.physical else (0.1, 0.05, None, None, 0.2)
    for e, small in zip(eps, (0, 0, 4, 2, 0), strict=True):
        cap = small if e is None else math.ceil(ratio / e)
        if cap > 1 and cap not in ladder:
            ladder.append(cap)
    return [ladder[i % len(ladder)] for i in range(trials)]


def unmerged_lower_bound(inst: Instance) -> int:
    """Ticks below which no chunk-granular schedule can finish.

    Per NPU: its wanted chunks arrive one per transfer over its in-links (on the physical
    model: its ports), a link carrying ``j`` chunks being busy ``j`` full chunk times; the
    smallest T at which the in-links can carry them all bounds the makespan.  (Latency is not
    counted; this is only used to decide whether unmerged trials could still win.)
    """
    best = 0
    for d in range(inst.n_nodes):
        n = inst.need[d].bit_count()
        if not n:
            continue
        size = min(inst.sizes[c] for c in _sample_bits(inst.need[d]))
        times = []
        if inst.physical:  # channels sharing a port into d: one port, its lanes
            port: dict[int, int] = {}
            for ch in inst.in_links[d]:
                last = min(inst.route_links[r][-1] for r in inst.ch_routes[ch])
                w = inst.duration(ch, size)
                port[last] = min(port.get(last, w), w)
            for last, w in port.items():
                times.extend([w] * inst.res_mult[last])
        else:
            for lk in inst.in_links[d]:
                times.extend([inst.duration(lk, size)] * inst.mult[lk])
        if not times:
            continue
        lo, hi = 0, max(times) * n
        while lo < hi:  # smallest T with Σ floor(T / w_l) >= n
            mid = (lo + hi) // 2
            if sum(mid // w for w in times) >= n:
                hi = mid
            else:
                lo = mid + 1
        best = max(best, lo)
    return best


def _sample_bits(x: int, limit: int = 4096):
    i = 0
    while x and i < limit:
        low = x & -x
        yield low.bit_length() - 1
        x ^= low
        i += 1
