"""The greedy solver's prepared problem: flat arrays and chunk bitsets, built once per solve.

An :class:`Instance` is what every trial of :mod:`tacos.solvers.greedy.core` reads.  It is a
plain picklable object (so worker processes get it once) with:

* per *channel* (a way to move chunks from one NPU to another in one transfer): source,
  destination, α, bandwidth, multiplicity, and a cache of transfer durations in integer *ticks*
  (:data:`TICK` seconds; durations are rounded up, so no transfer is ever shorter than its α-β
  time).  On a switch-free topology the channels are the links themselves (channel ``i`` is
  link ``i``); on the physical model (:func:`tacos.solvers.greedy.ports.build_port_instance`)
  they are direct links and, per NPU pair, the routes through switches, each transfer holding
  one lane of every physical link of its route (``route_links``, ``res_mult``);
* per NPU: the chunks it holds at the start (``pre``) and must receive (``need``), as Python-int
  bitsets (bit ``i`` = local chunk ``i``);
* relay data for chunks that may have to pass through NPUs outside their pre/post sets
  (alltoall, scatter, broadcast over a sub-group...): for each such chunk its targets and, for
  each target, hop distances towards it.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from tacos.model.collective import Collective
from tacos.model.topology import Topology

TICK = 1e-15
"""Internal time unit (seconds).  Event times are exact integers, so ties are exact."""


@dataclass
class Instance:
    """Flat, picklable view of a non-combining collective: channels, chunks, islands."""

    n_nodes: int
    src: list[int]
    dst: list[int]
    alpha: list[float]
    bw: list[float]
    mult: list[int]
    in_links: list[list[int]]
    out_links: list[list[int]]
    sizes: list[int]
    pre: list[int]
    need: list[int]
    total_need: int
    relay_mask: int = 0
    relay_targets: dict[int, list[int]] = field(default_factory=dict)
    dist_to: dict[int, list[int]] = field(default_factory=dict)
    relay_best0: dict[int, dict[int, int]] = field(default_factory=dict)
    uniform_size: int | None = None
    guard: list[int] = field(default_factory=list)
    island_members: list[tuple[int, ...]] = field(default_factory=list)
    npu_islands: list[tuple[int, ...]] = field(default_factory=list)
    physical: bool = False
    ch_routes: list[tuple[int, ...]] = field(default_factory=list)
    route_links: list[tuple[int, ...]] = field(default_factory=list)
    res_mult: list[int] = field(default_factory=list)
    res_fabric: list[bool] = field(default_factory=list)
    res_dests: list[tuple[int, ...]] = field(default_factory=list)
    _dur: dict[tuple[int, int], int] = field(default_factory=dict, repr=False)

    @property
    def n_chunks(self) -> int:
        """Number of (local) chunks."""
        return len(self.sizes)

    def duration(self, link: int, nbytes: int) -> int:
        """Ticks a transfer of ``nbytes`` takes on ``link`` (α paid once), rounded up."""
        key = (link, nbytes)
        d = self._dur.get(key)
        if d is None:
            secs = self.alpha[link] + nbytes / self.bw[link]
            d = max(1, math.ceil(secs / TICK - 1e-6))
            self._dur[key] = d
        return d

    def bits_bytes(self, bits: int) -> int:
        """Total size of the chunks in a bitset."""
        if self.uniform_size is not None:
            return self.uniform_size * bits.bit_count()
        return sum(self.sizes[c] for c in iter_bits(bits))

    @property
    def heterogeneous(self) -> bool:
        """True when links differ in α, bandwidth, or chunks differ in size."""
        return (len(set(zip(self.alpha, self.bw, strict=True))) > 1
                or self.uniform_size is None)


def iter_bits(x: int):
    """Yield the positions of the set bits of ``x`` in increasing order."""
    while x:
        low = x & -x
        yield low.bit_length() - 1
        x ^= low


def bits_to_tuple(x: int) -> tuple[int, ...]:
    """Positions of the set bits of ``x`` as a sorted tuple."""
    if x.bit_count() > 64:
        s = bin(x)[:1:-1]
        return tuple(i for i, ch in enumerate(s) if ch == "1")
    return tuple(iter_bits(x))


def _bfs_to(target: int, in_links: list[list[int]], src: list[int], n: int) -> list[int]:
    """Hop distance from every node to ``target`` (n+1 meaning unreachable)."""
    inf = n + 1
    dist = [inf] * n
    dist[target] = 0
    q = deque([target])
    while q:
        v = q.popleft()
        dv = dist[v] + 1
        for li in in_links[v]:
            u = src[li]
            if dist[u] > dv:
                dist[u] = dv
                q.append(u)
    return dist


def build_instance(topology: Topology, collective: Collective,
                   allowed: Iterable[int] | None = None,
                   islands: Sequence[tuple[int, ...]] = ()) -> Instance:
    """Flatten ``topology`` (switch-free) and ``collective`` (non-combining) into an Instance.

    Local chunk ``i`` is ``collective.chunks[i]``; channel ``i`` is link ``i``.  Only links
    between ``allowed`` NPUs (default: every live NPU) are used, and only they may relay.
    """
    n = topology.n_nodes
    links = topology.links
    src = [lk.src for lk in links]
    dst = [lk.dst for lk in links]
    live = set(topology.live_npus if allowed is None else allowed)
    in_links = [[i for i in x if src[i] in live and dst[i] in live] for x in topology.in_links]
    out_links = [[i for i in x if src[i] in live and dst[i] in live]
                 for x in topology.out_links]
    inst = _flatten(n, src, dst, in_links, out_links, collective, live)
    arrays = topology.link_arrays
    inst.alpha = arrays.alpha.tolist()
    inst.bw = arrays.bandwidth.tolist()
    inst.mult = arrays.multiplicity.tolist()
    set_islands(inst, islands)
    return inst


def set_islands(inst: Instance, islands: Sequence[tuple[int, ...]]) -> None:
    """Record ``islands`` (innermost first) and each channel's guard: the outermost island its
    destination is in and its source is not (-1: the channel crosses no island boundary)."""
    if not islands:
        return
    inst.island_members = [tuple(c) for c in islands]
    per_node: list[list[int]] = [[] for _ in range(inst.n_nodes)]
    for i, members in enumerate(islands):
        for v in members:
            per_node[v].append(i)
    inst.npu_islands = [tuple(x) for x in per_node]
    sets = [frozenset(c) for c in islands]
    guard = []
    for u, d in zip(inst.src, inst.dst, strict=True):
        g = -1
        for i in reversed(per_node[d]):  # outermost first
            if u not in sets[i]:
                g = i
                break
        guard.append(g)
    inst.guard = guard


def _rows_of(n: int, sets: Sequence[frozenset[int]]) -> list[int]:
    """Per node ``v``, the bitset of the indices ``i`` with ``v in sets[i]``.  Equal set
    objects are grouped first, so a set shared by many chunks (an all-gather's destinations)
    is walked once: the cost is the total size of the distinct set objects."""
    groups: dict[int, tuple[frozenset[int], int]] = {}
    for i, s in enumerate(sets):
        g = groups.get(id(s))
        groups[id(s)] = (s, (g[1] if g else 0) | (1 << i))
    rows = [0] * n
    for s, mask in groups.values():
        for v in s:
            rows[v] |= mask
    return rows


def _flatten(n: int, src: list[int], dst: list[int], in_links: list[list[int]],
             out_links: list[list[int]], collective: Collective, live: set[int]) -> Instance:
    """The chunk and relay part of an Instance over the given channels (α/bw/mult unset)."""
    sizes = [c.size for c in collective.chunks]
    pre = _rows_of(n, [c.pre for c in collective.chunks])
    post = _rows_of(n, [c.post for c in collective.chunks])
    need = [p & ~q for p, q in zip(post, pre, strict=True)]  # in post, not in pre
    total = sum(x.bit_count() for x in need)
    relay_mask = 0
    relay_targets: dict[int, list[int]] = {}
    covers: dict[int, bool] = {}  # per post set (by identity): does it hold every live NPU?
    for i, c in enumerate(collective.chunks):
        cov = covers.get(id(c.post))
        if cov is None:
            cov = covers[id(c.post)] = live <= c.post
        if cov:
            continue
        targets = sorted(c.post - c.pre)
        if targets and live - (c.pre | c.post):
            relay_mask |= 1 << i
            relay_targets[i] = targets
    dist_to: dict[int, list[int]] = {}
    for targets in relay_targets.values():
        for p in targets:
            if p not in dist_to:
                dist_to[p] = _bfs_to(p, in_links, src, n)
    relay_best0 = {
        i: {p: min(dist_to[p][v] for v in collective.chunks[i].pre) for p in targets}
        for i, targets in relay_targets.items()
    }
    uniform = sizes[0] if sizes and all(s == sizes[0] for s in sizes) else None
    return Instance(
        n_nodes=n, src=src, dst=dst, alpha=[], bw=[], mult=[],
        in_links=in_links, out_links=out_links,
        sizes=sizes, pre=pre, need=need, total_need=total, relay_mask=relay_mask,
        relay_targets=relay_targets, dist_to=dist_to, relay_best0=relay_best0,
        uniform_size=uniform,
    )
