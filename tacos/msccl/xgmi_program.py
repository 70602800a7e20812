"""Multi-node all-reduce and all-gather for nodes whose GPUs are joined by direct links only
(AMD MI250 boxes: 16 GCDs, 7 xGMI links each), written directly as MSCCL programs.

The rail programs of :mod:`tacos.msccl.multinode_program` send between every two GPUs of a
node; on an MI250 box most pairs have no link, and such a send crosses a third GCD or the
NIC switch.  Here the node's phases run on rings whose every hop is a direct link: the
lane-disjoint Hamiltonian cycles of :mod:`tacos.msccl.xgmi_rings` (three on an MI250 box,
six of a GCD's seven lanes), each in both directions.  A ring's two directions share their
channels (their peers differ on every GPU).

All-reduce (two nodes, ``G`` GPUs each, ``U`` rings): every block (owned by local GPU b) is
cut into ``P`` parts (``P`` a power of two, so ``nchunksperloop = G·P`` divides power-of-two
sizes); ring i carries a contiguous range of about ``P / U`` parts, in *groups* of at most
two chunks (a Simple step of more chunks would need more FIFO slots than a connection has
once every chunk fills a slice, and a ring whose GPUs all send first would hang).  Per
group, ring i reduce-scatters inside the node (``s``, ``rrs``..., ``rrc`` at the owner), the
two GPUs of a rail exchange the group over their NICs -- one of them (alternating by group)
adds the other's partial as it arrives (``rrc``) and sends the sum back (``s``/``r``), so each
direction of the NIC carries every group once -- then ring i all-gathers the group inside
the node (``s`` at the owner, ``rcs``..., ``r``).  A ring's thread block takes every group's
reduce-scatter first, then every group's all-gather: the rail exchange of a group overlaps
the node's work on the later groups.  Each ring is spread over ``k`` channels (a block keeps
the channel of its owner's ring position, so each thread block runs about ``1/k`` of the
ring's steps); the rail runs on ``R`` send and ``R`` receive thread blocks (a NIC takes more
than one CTA's rate).

All-gather (any number of nodes): every GPU sends its shard to its rail peers first; ring i
all-gathers inside the node the shards of its own node (they need no NIC), then, group by
group as they arrive, those of every other node.

Both are candidates of the shape chooser (:class:`XgmiRings` has the ``collective`` and a
``lower(shape, base)``); a shape's ``instances`` multiply the channels per ring, from the
fewest whose thread blocks fit the steps of the family's parts per block (chosen for the
message size: :func:`parts_for_size`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tacos.errors import TacosError
from tacos.model.collective import Collective
from tacos.model.topology import Topology
from tacos.msccl.lower import MscclOptions
from tacos.msccl.multinode_program import _finish, _Tb, node_groups
from tacos.msccl.multinode_steps import _program
from tacos.msccl.program import DEFAULT_MAX_STEPS, MAX_CHANNELS, MAX_NODES, Program
from tacos.msccl.shape import Shape
from tacos.msccl.xgmi_rings import disjoint_cycles, lane_matrices

#: Chunks a ring step carries at most: two Simple calls fill a connection's eight FIFO slots.
GROUP = 2
#: Parts per block tried, largest first (the first whose steps fit the step limit is taken).
PARTS = (128, 64, 32, 16, 8)
#: Rail send (and receive) thread blocks per rail peer.
RAIL_TBS = 2
#: The smallest chunk :func:`parts_for_size` cuts a message into: more, smaller chunks pipeline
#: the rail under the rings at large sizes, but every step pays a synchronization (runtime
#: model, 2x MI250: 32 parts per block fastest at a 64 MiB all-reduce, 128 at 1 GiB).
MIN_CHUNK = 128 << 10
KINDS = ("allreduce", "allgather")
FAMILY = "xgmi-rings"

Wait = tuple[int, int]


def _split(total: int, ways: int) -> list[tuple[int, int]]:
    """``total`` parts in ``ways`` contiguous ranges whose sizes differ by at most one."""
    base, extra = divmod(total, ways)
    out, lo = [], 0
    for i in range(ways):
        hi = lo + base + (1 if i < extra else 0)
        out.append((lo, hi))
        lo = hi
    return out


def _groups(lo: int, hi: int) -> list[tuple[int, int]]:
    """``[lo, hi)`` in runs of at most :data:`GROUP` parts: ``(offset, count)``."""
    return [(j, min(GROUP, hi - j)) for j in range(lo, hi, GROUP)]


def _parts_for(g_size: int, rings: int, k: int, passes: int, max_steps: int,
               parts: int | None = None) -> int:
    """``parts`` parts per block, or (None) the most of :data:`PARTS` whose ring thread
    blocks fit ``max_steps`` steps: ``passes`` passes round the ring per group,
    ``ceil(G / k)`` steps of a pass on each thread block, one step per group.  The parts do
    not change with ``k``: the shape chooser bounds every instance count of a family by the
    link loads of one of them.  Raises :class:`TacosError` when the steps do not fit."""
    per_pass = -(-g_size // k)

    def steps(p: int) -> int:
        return passes * max(len(_groups(lo, hi)) for lo, hi in _split(p, rings)) * per_pass

    tried = [parts] if parts else [p for p in PARTS if p >= rings]
    for p in tried:
        if p >= rings and steps(p) <= max_steps - 1:
            return p
    raise TacosError(f"{tried[-1]} parts per block need {steps(max(tried[-1], rings))} steps "
                     f"on a thread block at {k} channels per ring, over "
                     f"{max_steps - 1}", hint="use more channels per ring (instances)")


def parts_for_size(nbytes: int, blocks: int) -> int:
    """Parts per block for an ``nbytes`` message of ``blocks`` blocks (shards): the most of
    :data:`PARTS` that keep a chunk at least :data:`MIN_CHUNK` bytes (the fewest at small
    sizes, where every step's synchronization counts more than its bytes)."""
    for p in PARTS:
        if nbytes // (blocks * p) >= MIN_CHUNK:
            return p
    return PARTS[-1]


def _rings(cycles: Sequence[Sequence[int]]) -> list[tuple[int, tuple[int, ...]]]:
    """``(cycle index, order)`` of every ring: each cycle, then its reverse."""
    out = []
    for ci, cyc in enumerate(cycles):
        out.append((ci, tuple(cyc)))
        out.append((ci, (cyc[0], *reversed(cyc[1:]))))
    return out


def xgmi_allreduce(nodes: list[list[int]], cycles: Sequence[Sequence[int]], k: int,
                   options: MscclOptions, rail_tbs: int = RAIL_TBS,
                   parts: int | None = None) -> Program:
    """The all-reduce program (module docstring) for two ``nodes`` (ranks per node, local
    index order the cycles use), ``k`` channels per ring."""
    if len(nodes) != 2:
        raise TacosError("the xGMI ring all-reduce is written for two nodes")
    g_size = len(nodes[0])
    rings = _rings(cycles)
    u_n = len(rings)
    if len(cycles) * k > MAX_CHANNELS:
        raise TacosError(f"{len(cycles)} rings x {k} channels > {MAX_CHANNELS} channels")
    p_n = _parts_for(g_size, u_n, k, 2, options.max_steps_per_tb, parts)
    ranges = _split(p_n, u_n)
    groups = [_groups(lo, hi) for lo, hi in ranges]
    n_groups = max(len(g) for g in groups)
    out = "o" if options.out_of_place else "i"

    def chunk(b: int, j: int) -> int:
        return b * p_n + j

    # every (group index, ring) item of the rail, in the order the rings finish them
    items = [(x, i) for x in range(n_groups) for i in range(u_n) if x < len(groups[i])]
    ranks: dict[int, dict[int, _Tb]] = {}
    for n, members in enumerate(nodes):
        peer_node = nodes[1 - n]
        for g, r in enumerate(members):
            tbs, ring_tb = _ring_tbs(members, g, rings, k)
            peer = peer_node[g]
            send = [_Tb(len(tbs) + j, peer, -1, j) for j in range(rail_tbs)]
            recv = [_Tb(len(tbs) + rail_tbs + j, -1, peer, j) for j in range(rail_tbs)]
            for tb in (*send, *recv):
                tbs[tb.id] = tb
            rs_done: dict[tuple[int, int], Wait] = {}
            for i, (_ci, order) in enumerate(rings):  # reduce-scatter, group by group
                q = order.index(g)
                for x, (j, cnt) in enumerate(groups[i]):
                    for t in range(g_size):
                        p = (q - t - 1) % g_size
                        tb = ring_tb[(i, p % k)]
                        off = chunk(order[p], j)
                        if t == 0:
                            tb.add("s", ("i", off), ("i", off), cnt)
                        elif t < g_size - 1:
                            tb.add("rrs", ("i", off), ("i", off), cnt)
                        else:
                            rs_done[(x, i)] = (tb.id, tb.add("rrc", ("i", off), (out, off), cnt))
            ag_wait: dict[tuple[int, int], Wait] = {}
            for m, (x, i) in enumerate(items):  # the rail: one of the two sums, by turns
                j, cnt = groups[i][x]
                off = chunk(g, j)
                stb, rtb = send[m % rail_tbs], recv[m % rail_tbs]
                mine = (out, off)
                if (m + n) % 2 == 0:  # I sum: add the peer's partial, send the sum back
                    got = rtb.add("rrc", mine, mine, cnt, [rs_done[(x, i)]])
                    stb.add("s", mine, mine, cnt, [(rtb.id, got)])
                else:  # the peer sums: send my partial, take the sum once it has left
                    sent = stb.add("s", mine, mine, cnt, [rs_done[(x, i)]])
                    got = rtb.add("r", mine, mine, cnt, [(stb.id, sent)])
                ag_wait[(x, i)] = (rtb.id, got)
            for i, (_ci, order) in enumerate(rings):  # all-gather, group by group
                q = order.index(g)
                for x, (j, cnt) in enumerate(groups[i]):
                    for t in range(g_size):
                        p = (q - t) % g_size
                        tb = ring_tb[(i, p % k)]
                        off = (out, chunk(order[p], j))
                        if t == 0:
                            tb.add("s", off, off, cnt, [ag_wait[(x, i)]])
                        elif t < g_size - 1:
                            tb.add("rcs", off, off, cnt)
                        else:
                            tb.add("r", off, off, cnt)
            ranks[r] = tbs
    c = g_size * p_n
    blocks_of = _finish(ranks)
    _check_nodes(blocks_of, 2 * g_size)
    return _program("allreduce", blocks_of, f"tacos_xgmi_allreduce_2x{g_size}",
                    max(len(cycles) * k, rail_tbs), c, options)


def xgmi_allgather(nodes: list[list[int]], cycles: Sequence[Sequence[int]], k: int,
                   options: MscclOptions, rail_tbs: int = RAIL_TBS,
                   parts: int | None = None) -> Program:
    """The all-gather program (module docstring): output chunk ``rank·P + j`` is part j of
    rank ``rank``'s shard."""
    m_nodes, g_size = len(nodes), len(nodes[0])
    n_ranks = m_nodes * g_size
    rings = _rings(cycles)
    u_n = len(rings)
    if len(cycles) * k > MAX_CHANNELS:
        raise TacosError(f"{len(cycles)} rings x {k} channels > {MAX_CHANNELS} channels")
    p_n = _parts_for(g_size, u_n, k, m_nodes, options.max_steps_per_tb, parts)
    groups = [_groups(lo, hi) for lo, hi in _split(p_n, u_n)]
    n_groups = max(len(g) for g in groups)
    inplace = bool(options.inplace)
    items = [(x, i) for x in range(n_groups) for i in range(u_n) if x < len(groups[i])]

    def at(rank: int, j: int) -> tuple[str, int]:
        return ("o", rank * p_n + j)

    ranks: dict[int, dict[int, _Tb]] = {}
    for n, members in enumerate(nodes):
        for g, r in enumerate(members):
            tbs, ring_tb = _ring_tbs(members, g, rings, k)
            arrived: dict[tuple[int, int, int], Wait] = {}
            for v in (v for v in range(m_nodes) if v != n):
                peer = nodes[v][g]
                send = [_Tb(len(tbs) + j, peer, -1, j) for j in range(rail_tbs)]
                recv = [_Tb(len(tbs) + rail_tbs + j, -1, peer, j) for j in range(rail_tbs)]
                for tb in (*send, *recv):
                    tbs[tb.id] = tb
                for m, (x, i) in enumerate(items):
                    j, cnt = groups[i][x]
                    src = at(r, j) if inplace else ("i", j)
                    send[m % rail_tbs].add("s", src, at(r, j), cnt)
                    rtb = recv[m % rail_tbs]
                    arrived[(v, x, i)] = (rtb.id, rtb.add("r", at(peer, j), at(peer, j), cnt))
            if not inplace:  # my shard into my output, on thread blocks of their own
                copy = [_Tb(len(tbs) + j, -1, -1, 0) for j in range(rail_tbs)]
                for tb in copy:
                    tbs[tb.id] = tb
                for m, (x, i) in enumerate(items):
                    j, cnt = groups[i][x]
                    copy[m % rail_tbs].add("cpy", ("i", j), at(r, j), cnt)
            for i, (_ci, order) in enumerate(rings):
                q = order.index(g)
                for v in [n] + [v for v in range(m_nodes) if v != n]:
                    for x, (j, cnt) in enumerate(groups[i]):
                        for t in range(g_size):
                            p = (q - t) % g_size
                            tb = ring_tb[(i, p % k)]
                            owner = nodes[v][order[p]]
                            dst = at(owner, j)
                            if t == 0:
                                src = ("i", j) if owner == r and not inplace else dst
                                waits = [arrived[(v, x, i)]] if v != n else []
                                tb.add("s", src, dst, cnt, waits)
                            elif t < g_size - 1:
                                tb.add("rcs", dst, dst, cnt)
                            else:
                                tb.add("r", dst, dst, cnt)
            ranks[r] = tbs
    c = p_n
    blocks_of = _finish(ranks)
    _check_nodes(blocks_of, n_ranks)
    return _program("allgather", blocks_of, f"tacos_xgmi_allgather_{m_nodes}x{g_size}",
                    max(len(cycles) * k, rail_tbs), c, options)


def _check_nodes(blocks_of: Sequence[Sequence[object]], n_ranks: int) -> None:
    """Refuse a program whose ranks hold more XML nodes than the runtime's parser."""
    for tbs in blocks_of:
        nodes = 1 + n_ranks + len(tbs) + sum(len(tb.steps) for tb in tbs)  # type: ignore[attr-defined]
        if nodes > MAX_NODES:
            raise TacosError(f"{nodes} parsed nodes per rank > {MAX_NODES}")


@dataclass(frozen=True)
class XgmiRings:
    """The ring-hierarchical program family for ``collective``: ``nodes`` (ranks per node,
    in the local order of ``cycles``), the rings' ``cycles`` (local indices), any shape's
    protocol; its ``instances`` multiply the channels per ring
    (:meth:`channels_per_ring`)."""

    collective: Collective
    nodes: tuple[tuple[int, ...], ...]
    cycles: tuple[tuple[int, ...], ...]
    rail_tbs: int = RAIL_TBS
    #: parts per block (per shard, all-gather), the same at every instance count (a count
    #: whose steps would not fit is refused); None: as many as fit
    parts: int | None = None

    @property
    def label(self) -> str:
        """What the family is, for reports."""
        m, g = len(self.nodes), len(self.nodes[0])
        return (f"xGMI rings {self.collective.kind}: {m} nodes x {g} ranks, "
                f"{2 * len(self.cycles)} rings on direct links, rails between")

    def _layout(self, max_steps: int) -> tuple[int, int]:
        """``(parts per block, fewest channels per ring)``: the family's parts (or, None, the
        most that fit one channel per ring) and the fewest channels per ring (a power of
        two) whose thread blocks fit their steps."""
        passes = 2 if self.collective.kind == "allreduce" else len(self.nodes)
        g_size, rings = len(self.nodes[0]), 2 * len(self.cycles)
        k = 1
        while True:
            try:
                return _parts_for(g_size, rings, k, passes, max_steps, self.parts), k
            except TacosError:
                if k >= g_size:
                    raise
                k *= 2

    def channels_per_ring(self, instances: int, max_steps: int = DEFAULT_MAX_STEPS) -> int:
        """Channels per ring at ``instances``: that many times the fewest whose thread blocks
        fit the parts' steps, so every instance count has the same parts and link loads."""
        return self._layout(max_steps)[1] * instances

    def lower(self, shape: Shape, base: MscclOptions | None = None) -> Program:
        """The program for ``shape`` with ``base``'s header fields."""
        opts = shape.options(base)
        opts.validate()
        nodes = [list(n) for n in self.nodes]
        parts, fewest = self._layout(opts.max_steps_per_tb)
        k = fewest * shape.instances
        if self.collective.kind == "allreduce":
            return xgmi_allreduce(nodes, self.cycles, k, opts, self.rail_tbs, parts)
        if self.collective.kind == "allgather":
            return xgmi_allgather(nodes, self.cycles, k, opts, self.rail_tbs, parts)
        raise TacosError(f"no xGMI ring program for {self.collective.kind}")


def ring_layout(topology: Topology, collective: Collective
                ) -> tuple[list[list[int]], list[tuple[int, ...]]] | None:
    """The collective's ranks per node and the lane-disjoint rings inside a node
    (:func:`tacos.msccl.xgmi_rings.disjoint_cycles`), when the programs apply: two or more
    nodes of the same size (two for an all-reduce), at least three ranks each, the same
    direct links in every node (by local index), no direct link between every two ranks of a
    node (else the rail programs' all-pairs phases apply), a ring through every rank of a
    node, and a route between the ranks of every rail; else None."""
    group = list(collective.group)
    nodes = node_groups(topology, group)
    if len(nodes) < 2 or len({len(n) for n in nodes}) != 1 or len(nodes[0]) < 3:
        return None
    if collective.kind == "allreduce" and len(nodes) != 2:
        return None
    lanes = lane_matrices(topology, [[group[r] for r in n] for n in nodes])
    g_size = len(nodes[0])
    if not any(map(any, lanes[0])) or any(m != lanes[0] for m in lanes[1:]):
        return None
    if all(lanes[0][a][b] for a in range(g_size) for b in range(g_size) if a != b):
        return None
    for rail in zip(*nodes, strict=True):
        for a in rail:
            for b in rail:
                if a != b and topology.routing.best(group[a], group[b], 1.0) is None:
                    return None
    cycles = disjoint_cycles(lanes[0], most=MAX_CHANNELS)
    if not cycles:
        return None
    return nodes, cycles


def xgmi_candidates(topology: Topology, collective: Collective,
                    nbytes: int | None = None) -> dict[str, XgmiRings]:
    """``{"xgmi-rings": family}`` when :func:`ring_layout` applies to ``collective`` on
    ``topology``, else empty; its parts per block suit an ``nbytes`` message (default the
    collective's size, :func:`parts_for_size`)."""
    if collective.kind not in KINDS:
        return {}
    got = ring_layout(topology, collective)
    if got is None:
        return {}
    nodes, cycles = got
    blocks = len(nodes[0]) if collective.kind == "allreduce" else len(collective.group)
    parts = parts_for_size(int(nbytes or collective.size), blocks)
    return {FAMILY: XgmiRings(collective, tuple(tuple(n) for n in nodes),
                              tuple(tuple(c) for c in cycles), parts=parts)}


def _ring_tbs(members: Sequence[int], g: int, rings: Sequence[tuple[int, Sequence[int]]],
              k: int) -> tuple[dict[int, _Tb], dict[tuple[int, int], _Tb]]:
    """The ring thread blocks of the node's ``g``-th rank: ``k`` channels per ring, each
    sending to its next rank and receiving from its previous one on ring ``i``'s channels
    (by id, and by ``(ring, channel)``)."""
    tbs: dict[int, _Tb] = {}
    ring_tb: dict[tuple[int, int], _Tb] = {}
    size = len(members)
    for i, (ci, order) in enumerate(rings):
        q = order.index(g)
        nxt, prv = members[order[(q + 1) % size]], members[order[(q - 1) % size]]
        for c in range(k):
            tb = _Tb(len(tbs), nxt, prv, ci * k + c)
            tbs[tb.id] = ring_tb[(i, c)] = tb
    return tbs, ring_tb
