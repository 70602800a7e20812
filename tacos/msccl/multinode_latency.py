"""Latency-bound multi-node all-reduce and all-gather written directly as MSCCL programs.

Below about 1 MiB a multi-node collective is bound by the protocol's latency per hop (NCCL's
``hwLat``: 0.6 µs over NVLink, 2.7 µs over a NIC in LL) and by how many primitive calls lie
on its critical path, not by bandwidth.  The pipelined hierarchical programs
(:mod:`tacos.msccl.multinode_program`) pay a NIC hop per stage and two rail phases (a
reduce-scatter and an all-gather across the nodes); NCCL's tree pays a hop per tree level.
The programs here are what NCCL and the production plans run at small sizes: one instance
or a few, one step per phase, every peer in parallel, meant for LL.

* **All-reduce** (:func:`latency_allreduce`), ``G`` ranks per node, ``M`` nodes: a one-shot
  reduce-scatter in the node (every rank sends every node peer its partial of that peer's
  block, ``G-1`` sends at once; the receive thread block of each peer adds that partial into
  my block as it arrives, ``rrc``), one exchange of the node-reduced block with every rail
  peer across the NICs (``M-1`` sends of ``S/G``, the rail partials added as they arrive),
  then a one-shot all-gather in the node (my finished block to every node peer).  Three hops
  on the critical path: NVLink, NIC, NVLink.  Two receive thread blocks must not add into
  one chunk at once: with ``pieces = 1`` the node peers add in turn (a chain of ``G-1``
  dependent ``rrc``, cheapest in calls at the smallest sizes); with ``pieces >= G-1`` a
  block is cut into that many pieces and at turn t the peer of index j adds piece
  ``(j + t) mod P`` (the rotation of :mod:`tacos.msccl.multinode_rotated`), so the node
  peers add side by side at the cost of ``P`` sends per peer.
* **All-gather** (:func:`latency_allgather`): every rank sends its shard to its rail peers
  across the NICs and, at the same time, to its node peers; each rail shard is forwarded to
  the node peers as it arrives.  At most two hops on a shard's path and one NIC send per
  rail peer, the fewest NIC sends and bytes.  (Sending every shard straight to every rank
  would save the NVLink hop, but the rail-optimized fabrics of DGX systems route GPU g only
  to GPU g of the other nodes.)

Chunk layout (all-reduce, ``I`` instances, ``P`` pieces): chunk ``(p·G + b)·P + x`` is
instance p, block b (finished by local rank b and its rail peers), piece x; every rank of a
rail finishes the same block.  Instance p runs on channel p.  All-gather: chunk ``r·I + p``
of the output is rank r's shard, instance p.

The families are candidates of the shape chooser like the pipelined ones
(:func:`tacos.msccl.multinode_program.multinode_candidates` offers them).
"""

from __future__ import annotations

from dataclasses import dataclass

from tacos.errors import TacosError
from tacos.model.collective import Collective
from tacos.msccl.lower import MscclOptions
from tacos.msccl.multinode_steps import Wait, _finish, _parses, _peer_tbs, _program, _Tb
from tacos.msccl.program import Program
from tacos.msccl.shape import Shape


def rotation_pieces(g_size: int) -> int:
    """The fewest pieces per block (a power of two) that give every node peer its own piece
    at every turn: at least ``G-1``."""
    p = 1
    while p < g_size - 1:
        p *= 2
    return p


def latency_allreduce(nodes: list[list[int]], instances: int, options: MscclOptions,
                      pieces: int = 1) -> Program:
    """The all-reduce program (module docstring) for ``nodes`` (ranks per node, every node
    the same size, at least two nodes) with ``pieces`` pieces per block (a power of two)."""
    m_nodes, g_size = len(nodes), len(nodes[0])
    if m_nodes < 2 or g_size < 2 or any(len(n) != g_size for n in nodes):
        raise TacosError("the latency-bound all-reduce needs two or more equal nodes of two "
                         "or more ranks")
    if pieces < 1 or pieces & (pieces - 1):
        raise TacosError(f"pieces per block must be a power of two, not {pieces}")
    n_ranks, inst, p_n = m_nodes * g_size, instances, pieces
    out = "o" if options.out_of_place else "i"
    where = {r: (n, g) for n, ranks in enumerate(nodes) for g, r in enumerate(ranks)}

    def chunk(p: int, b: int, x: int = 0) -> int:
        return (p * g_size + b) * p_n + x

    per_tb = 2 * ((g_size - 1) + (m_nodes - 1))
    ranks: dict[int, dict[int, _Tb]] = {}
    for r, (n, g) in where.items():
        tbs: dict[int, _Tb] = {}
        intra = [w for w in range(g_size) if w != g]
        rails = [v for v in range(m_nodes) if v != n]
        for p in range(inst):
            peers = [nodes[n][w] for w in intra] + [nodes[v][g] for v in rails]
            send_tb, recv_tb = _peer_tbs(peers, p * per_tb, p, False, tbs)
            # node reduce-scatter: peer j adds piece (j + t) mod P at turn t, after the
            # piece's previous writer; I send peer w its pieces in the order w takes them
            last: dict[int, Wait] = {}
            for t in range(p_n):
                for j, w in enumerate(intra):
                    stb, rtb = send_tb[nodes[n][w]], recv_tb[nodes[n][w]]
                    x_out = ((g if g < w else g - 1) + t) % p_n  # my index among w's peers
                    stb.add("s", ("i", chunk(p, w, x_out)), (out, chunk(p, w, x_out)), 1)
                    x = (j + t) % p_n
                    prev = last.get(x)
                    src = (out, chunk(p, g, x)) if prev else ("i", chunk(p, g, x))
                    last[x] = (rtb.id, rtb.add("rrc", src, (out, chunk(p, g, x)), 1,
                                               [prev] if prev else []))
            mine = (out, chunk(p, g))
            summed = [last[x] for x in range(p_n) if x in last]
            # one exchange per rail peer; the rail partials are added in turn once every
            # rail send has read my node-reduced block
            sent = [(send_tb[nodes[v][g]].id,
                     send_tb[nodes[v][g]].add("s", mine, mine, p_n, summed)) for v in rails]
            chain: list[Wait] = sent
            for v in rails:
                rtb = recv_tb[nodes[v][g]]
                chain = [(rtb.id, rtb.add("rrc", mine, mine, p_n, chain))]
            for w in intra:  # node all-gather of the finished blocks
                stb, rtb = send_tb[nodes[n][w]], recv_tb[nodes[n][w]]
                stb.add("s", mine, mine, p_n, chain)
                rtb.add("r", (out, chunk(p, w)), (out, chunk(p, w)), p_n)
        ranks[r] = tbs
    c = inst * g_size * p_n
    blocks_of = _finish(ranks)
    if not _parses(blocks_of, n_ranks):
        raise TacosError(f"{n_ranks} ranks with {p_n} pieces exceed the runtime parser's "
                         "nodes per rank", hint="fewer pieces or instances")
    return _program("allreduce", blocks_of, f"tacos_ll_allreduce_{m_nodes}x{g_size}", inst, c,
                    options)


def latency_allgather(nodes: list[list[int]], instances: int, options: MscclOptions
                      ) -> Program:
    """The all-gather program (module docstring): rails first, then the node."""
    m_nodes, g_size = len(nodes), len(nodes[0])
    if m_nodes < 2 or g_size < 2 or any(len(n) != g_size for n in nodes):
        raise TacosError("the latency-bound all-gather needs two or more equal nodes of two "
                         "or more ranks")
    n_ranks, inst = m_nodes * g_size, instances
    inplace = bool(options.inplace)
    where = {r: (n, g) for n, ranks in enumerate(nodes) for g, r in enumerate(ranks)}

    def shard(r: int, p: int) -> int:
        return r * inst + p

    per_tb = 2 * ((g_size - 1) + (m_nodes - 1))
    ranks: dict[int, dict[int, _Tb]] = {}
    for r, (n, g) in where.items():
        tbs: dict[int, _Tb] = {}
        intra = [nodes[n][w] for w in range(g_size) if w != g]
        rails = [nodes[v][g] for v in range(m_nodes) if v != n]
        for p in range(inst):
            mine = ("o", shard(r, p)) if inplace else ("i", p)
            send_tb, recv_tb = _peer_tbs(rails + intra, p * per_tb, p, False, tbs)
            arrived: dict[int, Wait] = {}
            for v in rails:
                send_tb[v].add("s", mine, ("o", shard(r, p)), 1)
                arrived[v] = (recv_tb[v].id, recv_tb[v].add(
                    "r", ("o", shard(v, p)), ("o", shard(v, p)), 1))
            for w in intra:  # my shard first (no NIC), then the rail's as they arrive
                wg = where[w][1]
                for v in [n] + [v for v in range(m_nodes) if v != n]:
                    owner, theirs = nodes[v][g], nodes[v][wg]
                    src = mine if owner == r else ("o", shard(owner, p))
                    send_tb[w].add("s", src, ("o", shard(owner, p)), 1,
                                   [arrived[owner]] if owner != r else [])
                    recv_tb[w].add("r", ("o", shard(theirs, p)), ("o", shard(theirs, p)), 1)
        if not inplace:  # my own shard into my output
            tb = tbs[inst * per_tb] = _Tb(inst * per_tb, -1, -1, 0)
            for p in range(inst):
                tb.add("cpy", ("i", p), ("o", shard(r, p)), 1)
        ranks[r] = tbs
    blocks_of = _finish(ranks)
    if not _parses(blocks_of, n_ranks):
        raise TacosError(f"{n_ranks} ranks with {inst} instances exceed the runtime parser's "
                         "nodes per rank", hint="fewer instances")
    return _program("allgather", blocks_of, f"tacos_ll_allgather_{m_nodes}x{g_size}", inst, inst,
                    options)


@dataclass(frozen=True)
class LatencyBound:
    """A latency-bound program family for ``collective`` on ``nodes`` (ranks per node): any
    shape's instances and protocol (port order and pairing do not apply).  All-reduce:
    ``pieces`` per block (:func:`latency_allreduce`); all-gather: rails first
    (:func:`latency_allgather`)."""

    collective: Collective
    nodes: tuple[tuple[int, ...], ...]
    pieces: int = 1

    @property
    def label(self) -> str:
        """What the family is, for reports."""
        m, g = len(self.nodes), len(self.nodes[0])
        if self.collective.kind == "allgather":
            how = "rails first, then the node"
        else:
            how = (f"one-shot node reduce-scatter ({self.pieces} piece"
                   f"{'s' * (self.pieces > 1)} per block), one rail exchange, one-shot node "
                   "all-gather")
        return f"latency-bound {self.collective.kind}: {m} nodes x {g} ranks, {how}"

    def lower(self, shape: Shape, base: MscclOptions | None = None) -> Program:
        """The program for ``shape`` with ``base``'s header fields."""
        opts = shape.options(base)
        opts.validate()
        nodes = [list(n) for n in self.nodes]
        if self.collective.kind == "allreduce":
            return latency_allreduce(nodes, shape.instances, opts, self.pieces)
        if self.collective.kind == "allgather":
            return latency_allgather(nodes, shape.instances, opts)
        raise TacosError(f"no latency-bound program for {self.collective.kind}")


#: The family names :func:`latency_candidates` offers.
LATENCY = "latency-rail"
LATENCY_PIECES = "latency-pieces"


def latency_candidates(collective: Collective,
                       layout: tuple[tuple[int, ...], ...]) -> dict[str, LatencyBound]:
    """The latency-bound families for ``collective`` on ``layout`` (ranks per node, as
    :func:`tacos.msccl.multinode_program.rail_layout` finds them)."""
    if collective.kind == "allreduce":
        out = {LATENCY: LatencyBound(collective, layout)}
        pieces = rotation_pieces(len(layout[0]))
        if pieces > 1:
            out[LATENCY_PIECES] = LatencyBound(collective, layout, pieces=pieces)
        return out
    if collective.kind == "allgather":
        return {LATENCY: LatencyBound(collective, layout)}
    return {}
