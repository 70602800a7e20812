"""The hierarchical all-reduce with the node's reduce-scatter added in as it arrives.

:func:`tacos.msccl.multinode_program.hierarchical_allreduce` receives every node peer's
partial into scratch and sums the ``G-1`` partials of a sub-block on one reducing thread
block, one after the other, once they have arrived: on 4x DGX-A100 that reduction takes
longer than the NVLink transfer it follows, and the NICs wait for it (the pipeline's fill
was 1.27 ms of the 10.59 ms at 1 GiB).  Here the receive thread block of every node peer
adds that peer's partial into the GPU's own block as it arrives (``rrc``), no scratch and
no reducers.  Two receive thread blocks must not add into one chunk at once, so a block is
cut into ``P >= G-1`` pieces and the peers take them in rotation: at turn t the peer of
index j adds piece ``(j + t) mod P``, after the piece's previous writer (a dependency).  The
``G-1`` receive thread blocks then add into ``G-1`` different pieces at every turn, at the
rate the data arrives.

The pipeline stages may have different sizes (``ramp``): a small first stage starts the
NICs early, a small last stage shortens the node all-gather after them, big middle stages
keep the step count within the executor's 64 steps per thread block.

Chunk layout (``I`` instances, stage sizes ``s_k`` summing to ``U`` units, ``G`` ranks per
node, ``M`` nodes, ``P = M·Q`` pieces per block, ``Q`` per node sub-block): instance p's
stage k is the ``G·P·s_k`` chunks from ``(p·U + sum_{j<k} s_j)·G·P``; in it, block b (owned by
local rank b) is ``P·s_k`` consecutive chunks, piece x of it ``s_k`` chunks, and sub-block m
(owned by node m on the rail) the pieces ``m·Q .. m·Q+Q-1``.  The rail and node all-gather
phases are those of the hierarchical program (rail partials folded in as they arrive, the
rail's all-gather ``lag`` stages behind its reduce-scatter).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tacos.errors import TacosError
from tacos.model.collective import Collective
from tacos.msccl.lower import MscclOptions
from tacos.msccl.multinode_steps import (
    Wait,
    _finish,
    _is_pow2,
    _parses,
    _peer_tbs,
    _pow2_floor,
    _program,
    _Tb,
)
from tacos.msccl.program import Program
from tacos.msccl.shape import Shape


def pieces_per_subblock(g_size: int, m_nodes: int) -> int:
    """``Q``: the fewest pieces per node sub-block (a power of two) that give a block at
    least ``G-1`` pieces, one per node peer at every turn."""
    q = 1
    while m_nodes * q < g_size - 1:
        q *= 2
    return q


def steps_per_stage(g_size: int, m_nodes: int, q_n: int) -> int:
    """The most steps a thread block writes per stage: a node send block sends ``P`` pieces,
    then the finished block (after a nop for the sum of my sub-block; the last rail peer's
    all-gather receive waits for the others', so it stands for all); its receive block
    matches the ``P`` pieces with ``rrc`` and takes the block; a rail block waits for the
    last writers of ``Q`` pieces, then sends or receives the all-gather (the last rail
    receive block after nops for the other ``M-2``)."""
    p_n = m_nodes * q_n
    return max(p_n + 2, q_n + max(1, m_nodes - 2))


def max_stages(g_size: int, m_nodes: int, max_steps: int) -> int:
    """The most pipeline stages whose steps fit ``max_steps`` per thread block."""
    return (max_steps - 1) // steps_per_stage(g_size, m_nodes,
                                              pieces_per_subblock(g_size, m_nodes))


def rail_order(stages: int, lag: int = 1, tail: int = 0) -> list[tuple[str, int]]:
    """The order of a rail's phases: the reduce-scatter of stage k, then the all-gather of
    stage ``k - lag`` (the next reduce-scatter keeps the NIC busy while a stage's rail
    partials are summed), except that the all-gathers of the last ``tail`` stages but the
    very last come before the last reduce-scatter: the node's all-gather of a big stage
    then runs while the NIC still carries the small last stage."""
    order: list[tuple[str, int]] = []
    late = range(max(lag, stages - 1 - tail), stages - 1) if lag else range(0)
    for k in range(stages):
        if k == stages - 1:
            order += [("ag", j) for j in late]
        order.append(("rs", k))
        j = k - lag
        if j >= 0 and j not in late:
            order.append(("ag", j))
    return order + [("ag", j) for j in range(max(0, stages - lag), stages) if j not in late]


def rotated_allreduce(nodes: list[list[int]], instances: int, options: MscclOptions,
                      ramp: Sequence[int], lag: int = 1, tail: int = 0,
                      pieces: int | None = None) -> Program:
    """The all-reduce program (module docstring) for ``nodes`` (ranks per node) with
    pipeline stages of sizes ``ramp`` (units of an instance's data; their sum a power of
    two, at most :func:`max_stages` of them) and the rail's phases in the order of ``lag``
    and ``tail`` (:func:`rail_order`).  ``pieces``: ``Q``, pieces per node sub-block
    (default :func:`pieces_per_subblock`; fewer than ``G-1`` pieces per block make the
    node peers' additions wait for each other)."""
    m_nodes, g_size = len(nodes), len(nodes[0])
    n_ranks = m_nodes * g_size
    q_n = pieces or pieces_per_subblock(g_size, m_nodes)
    p_n = m_nodes * q_n
    size = [int(s) for s in ramp]
    k_n = len(size)
    if (not size or min(size) < 1 or not _is_pow2(sum(size))
            or k_n > (options.max_steps_per_tb - 1) // steps_per_stage(g_size, m_nodes, q_n)):
        raise TacosError(f"pipeline stages of sizes {tuple(size)} do not fit this program",
                         hint=f"at most {max_stages(g_size, m_nodes, options.max_steps_per_tb)}"
                              " stages, sizes summing to a power of two")
    units = sum(size)
    first = [sum(size[:k]) for k in range(k_n)]
    out = "o" if options.out_of_place else "i"
    inst = instances
    where = {r: (n, g) for n, ranks in enumerate(nodes) for g, r in enumerate(ranks)}

    def chunk(p: int, k: int, b: int, x: int = 0) -> int:
        """Piece x of block b, instance p, stage k (a sub-block m is piece ``m·Q``)."""
        return (p * units + first[k]) * g_size * p_n + (b * p_n + x) * size[k]

    per_tb = 2 * ((g_size - 1) + (m_nodes - 1))
    ranks: dict[int, dict[int, _Tb]] = {}
    for r, (n, g) in where.items():
        tbs: dict[int, _Tb] = {}
        intra = [w for w in range(g_size) if w != g]
        rails = [v for v in range(m_nodes) if v != n]
        for p in range(inst):
            peers = [nodes[n][w] for w in intra] + [nodes[v][g] for v in rails]
            send_tb, recv_tb = _peer_tbs(peers, p * per_tb, p, False, tbs)
            peer_tb = {w: (send_tb[nodes[n][w]], recv_tb[nodes[n][w]]) for w in intra}
            rail_tb = {v: (send_tb[nodes[v][g]], recv_tb[nodes[v][g]]) for v in rails}
            # the node's reduce-scatter: peer j (my index for it) adds piece (j + t) mod P
            # at turn t; I send peer w its pieces in the order w's receive block takes them
            end_a: dict[tuple[int, int], list[Wait]] = {}
            for k in range(k_n):
                last: dict[int, Wait] = {}
                for t in range(p_n):
                    for j, w in enumerate(intra):
                        stb, rtb = peer_tb[w]
                        mine_j = g if g < w else g - 1  # my index among w's peers
                        x_out = (mine_j + t) % p_n
                        stb.add("s", ("i", chunk(p, k, w, x_out)),
                                (out, chunk(p, k, w, x_out)), size[k])
                        x = (j + t) % p_n
                        prev = last.get(x)
                        src = (out, chunk(p, k, g, x)) if prev else ("i", chunk(p, k, g, x))
                        last[x] = (rtb.id, rtb.add("rrc", src, (out, chunk(p, k, g, x)),
                                                   size[k], [prev] if prev else []))
                for m in range(m_nodes):
                    end_a[(k, m)] = [last[x] for x in range(m * q_n, (m + 1) * q_n)
                                     if x in last]
            end_b: dict[int, list[Wait]] = {}
            recv_c: dict[int, list[Wait]] = {}
            sub = {k: q_n * size[k] for k in range(k_n)}
            for what, k in rail_order(k_n, lag, tail):
                mine = (out, chunk(p, k, g, n * q_n))
                if what == "rs":  # my partial of sub-block v to v; v's into mine, in turn
                    chain = end_a[(k, n)]
                    for v, (stb, rtb) in rail_tb.items():
                        theirs = (out, chunk(p, k, g, v * q_n))
                        stb.add("s", theirs, theirs, sub[k], end_a[(k, v)])
                        chain = [(rtb.id, rtb.add("rrc", mine, mine, sub[k], chain))]
                    end_b[k] = chain
                    continue
                got: list[Wait] = []  # the last rail peer's sub-block after the others'
                for i, (v, (stb, rtb)) in enumerate(rail_tb.items()):
                    stb.add("s", mine, mine, sub[k], end_b[k])
                    theirs = (out, chunk(p, k, g, v * q_n))
                    step = (rtb.id, rtb.add("r", theirs, theirs, sub[k],
                                            got if i == len(rail_tb) - 1 else []))
                    got = [step] if i == len(rail_tb) - 1 else got + [step]
                recv_c[k] = got
            for w, (stb, rtb) in peer_tb.items():  # the node's all-gather
                for k in range(k_n):
                    stb.add("s", (out, chunk(p, k, g)), (out, chunk(p, k, g)), p_n * size[k],
                            end_b[k] + recv_c[k])
                    rtb.add("r", (out, chunk(p, k, w)), (out, chunk(p, k, w)), p_n * size[k])
        ranks[r] = tbs
    c = inst * units * g_size * p_n
    blocks_of = _finish(ranks)
    if not _parses(blocks_of, n_ranks):
        raise TacosError(f"{n_ranks} ranks with {k_n} stages exceed the runtime parser's "
                         "nodes per rank", hint="fewer stages")
    return _program("allreduce", blocks_of, f"tacos_hier_allreduce_{m_nodes}x{g_size}", inst, c,
                    options)


#: The stage sizes the family uses: six stages (the most the 64-step limit holds with
#: eight pieces per block), an eighth of an instance's data first and last, a quarter in
#: each of the two middle stages (4x DGX-A100, 1 GiB: 9.77 ms against 10.59 ms for eight
#: equal stages of the reducing program; docs/benchmarks/runtime-plans.md).
RAMP = (1, 1, 2, 2, 1, 1)


@dataclass(frozen=True)
class Ramped:
    """The all-reduce family of :func:`rotated_allreduce` on ``nodes`` (ranks per node):
    any shape's instances and protocol, stages of sizes ``ramp`` (equal stages, as many as
    fit, when the step limit does not hold them), the rail's phases in the order of ``lag``
    and ``tail`` (:func:`rail_order`)."""

    collective: Collective
    nodes: tuple[tuple[int, ...], ...]
    ramp: tuple[int, ...] = RAMP
    lag: int = 1
    tail: int = 0

    @property
    def label(self) -> str:
        """What the family is, for reports."""
        m, g = len(self.nodes), len(self.nodes[0])
        return (f"hierarchical all-reduce, node partials added as they arrive: {m} nodes x "
                f"{g} ranks, rails between, stages {'/'.join(map(str, self.ramp))}")

    def lower(self, shape: Shape, base: MscclOptions | None = None) -> Program:
        """The program for ``shape`` with ``base``'s header fields."""
        opts = shape.options(base)
        opts.validate()
        if self.collective.kind != "allreduce":
            raise TacosError(f"no ramped hierarchical program for {self.collective.kind}")
        nodes = [list(n) for n in self.nodes]
        ramp: Sequence[int] = self.ramp
        fit = max_stages(len(nodes[0]), len(nodes), opts.max_steps_per_tb)
        if len(ramp) > fit:
            ramp = [1] * _pow2_floor(max(1, fit))
        return rotated_allreduce(nodes, shape.instances, opts, ramp, lag=self.lag,
                                 tail=self.tail)
