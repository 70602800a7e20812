"""Hierarchical multi-node all-reduce and all-gather written directly as MSCCL programs.

Multi-node plans that run fast keep the NICs for the bytes that must cross them: an all-reduce
reduce-scatters inside every node over NVLink (or xGMI), all-reduces each GPU's block with the
GPUs of the same local index on the other nodes (its *rail*: on DGX and MI250 systems GPU g of
every node has its own NIC on rail switch g), then all-gathers inside the node.  Each GPU's
NIC then carries ``2 (M-1)/M`` of its block, the least an all-reduce over ``M`` nodes can, and
the inside-node phases run at NVLink rate.  An all-gather exchanges every GPU's shard on its
rail first, then all-gathers the ``M`` shards inside the node.

Nodes are the groups of ranks joined by links that are not NIC links
(:func:`node_groups`); every node must hold the same number of ranks.  Rank ``(n, g)`` is the
g-th rank of node n in the collective's order.

Chunk layout (all-reduce, ``I`` instances, ``K`` pipeline stages, ``G`` ranks per node, ``M``
nodes, ``Q`` reduction sub-chunks): chunk ``(((p·K + k)·G + b)·M + m)·Q + q`` is instance p,
stage k, block b (owned by local rank b inside the node), node sub-block m (owned by node m
on the rail), sub-chunk q; a block is ``M·Q`` consecutive chunks and a sub-block ``Q``.  Per
instance (channel p) every rank runs, each thread block taking the stages in turn:

* per intra-node peer w a send and a receive thread block: send my partial of block w to w's
  scratch, receive w's partial of my block into mine;
* ``M·Q`` reducing thread blocks (no peer): reducer (m, q) adds the ``G-1`` partials of
  sub-chunk q of sub-block m into my block, each as it arrives;
* per rail peer v a send and a receive thread block: once sub-block v is reduced in the node,
  send it to v and receive v's partial of mine, adding it into my sub-block as it arrives
  (``rrc``; the rail peers one after the other, so no two thread blocks add into the same
  chunk at once); once my sub-block is summed, send it to v and receive v's.  Stage by
  stage: on two nodes the all-gather of a stage right after its reduce-scatter (so the
  node's all-gather of stage 0 can start while the node still reduce-scatters the later
  stages), on more nodes one stage later (the next reduce-scatter keeps the NIC busy while
  a stage's partials are summed);
* then the intra-node send thread blocks send the finished block to their peers, the receive
  thread blocks take the peers' blocks.

It is a candidate of the shape chooser like the lowered schedules (the classes have their
``collective`` and a ``lower(shape, base)``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tacos.errors import TacosError
from tacos.model.collective import Collective
from tacos.model.topology import Topology
from tacos.msccl.lower import MscclOptions
from tacos.msccl.multinode_nodes import NIC_TAGS as NIC_TAGS  # re-exported
from tacos.msccl.multinode_nodes import _is_nic, node_groups
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
from tacos.msccl.program import DEFAULT_SMS, Program
from tacos.msccl.shape import Shape

#: Reduction sub-chunks per sub-block: thread blocks per instance and node sub-block that
#: reduce.
REDUCERS = 4
#: Pipeline stages per instance: each thread block runs its phase for stage 0, 1, ... in
#: turn, so the NIC phase of one stage overlaps the NVLink phases of the others.
STAGES = 4



def rail_layout(topology: Topology, collective: Collective) -> list[list[int]] | None:
    """The collective's ranks per node when the hierarchical programs apply (at least two
    nodes of the same size, at least two ranks each, a route between every two ranks of a
    node that stays off the network and one between every two ranks of a rail), else None."""
    group = list(collective.group)
    nodes = node_groups(topology, group)
    if len(nodes) < 2 or len({len(n) for n in nodes}) != 1 or len(nodes[0]) < 2:
        return None
    rails = [list(r) for r in zip(*nodes, strict=True)]
    for ranks, inside in [(n, True) for n in nodes] + [(r, False) for r in rails]:
        for a in ranks:
            for b in ranks:
                if a == b:
                    continue
                route = topology.routing.best(group[a], group[b], 1.0)
                if route is None:
                    return None
                if inside and any(_is_nic(topology.links[i]) for i in route.links):
                    return None  # the node's own phases would cross the network
    return nodes


def _rail_order(stages: int, lag: int | None = None) -> list[tuple[str, int]]:
    """The order of a rail's phases: the reduce-scatter of stage k, then the all-gather of
    stage ``k - lag`` (``lag=None``: every reduce-scatter first, then every all-gather).
    Where the NIC is fast against NVLink (DGX-H100) an early all-gather lets the node's
    all-gather of stage 0 start while the node still reduce-scatters; where it is slow
    (DGX-A100), all-gathers between reduce-scatters delay the reduce-scatters the
    reductions wait for.  The shape chooser times both."""
    if lag is None or lag >= stages:
        return [("rs", k) for k in range(stages)] + [("ag", k) for k in range(stages)]
    order: list[tuple[str, int]] = []
    for k in range(stages):
        order.append(("rs", k))
        if k >= lag:
            order.append(("ag", k - lag))
    return order + [("ag", k) for k in range(stages - lag, stages)]


def _allreduce_steps_per_stage(g_size: int, m_nodes: int, q_n: int, copy: bool,
                               fold: bool) -> int:
    """The most steps (nops included) a thread block of the all-reduce writes per pipeline
    stage: a node send block sends twice, the second time after the sum of my sub-block
    (``q_n`` reducers, or the last rail receive when folded) and ``m_nodes - 1`` rail
    receives; a reducer sums ``g_size - 1`` node partials (after a copy of my own partial
    out of place) and, unfolded, the ``m_nodes - 1`` rail partials (nops for all rail waits
    but the last); a rail send block waits for ``q_n`` reducers, then for the sum; folded,
    the first rail receive block waits for ``q_n`` reducers before its ``rrc``."""
    reducer = int(copy) + (g_size - 1)
    if fold:
        return max(1 + m_nodes, reducer, q_n + 1, 2)
    node_send = 2 + (q_n + m_nodes - 2)
    reducer += (m_nodes - 1) + max(0, m_nodes - 2)
    return max(node_send, reducer, 2 * q_n, 2)


def hierarchical_allreduce(nodes: list[list[int]], instances: int, options: MscclOptions,
                           stages: int = STAGES, paired: bool = False,
                           lag: int | None = None, reducers: int = REDUCERS,
                           fold: bool = True, ramp: Sequence[int] | None = None) -> Program:
    """The all-reduce program (module docstring) for ``nodes`` (ranks per node), each
    instance's data cut into ``stages`` pipeline stages (fewer when the steps would not fit
    the step limit).  ``paired=False`` gives every peer a send and a receive thread block
    of its own, so a thread block's receive copies do not wait for its sends.  ``lag``: the
    rail's phase order (:func:`_rail_order`).  ``fold``: the rail receive thread blocks add
    the rail partials into a GPU's sub-block as they arrive (``rrc``, one rail peer after
    the other), else the reducers add them from scratch.  The stage count is a power of two
    (``nchunksperloop`` then divides power-of-two sizes).  ``ramp``: the stages' sizes in
    units of an instance's data (their sum a power of two), in place of ``stages`` equal
    stages: small first and last stages shorten the pipeline's fill (the first stage's node
    reduce-scatter and reduction, before any NIC is busy) and drain (the last stage's node
    all-gather), big middle stages keep the step count (:func:`ramp_stages`)."""
    m_nodes, g_size = len(nodes), len(nodes[0])
    n_ranks = m_nodes * g_size
    inst, q_n = instances, reducers
    fit = (options.max_steps_per_tb - 1) // _allreduce_steps_per_stage(
        g_size, m_nodes, q_n, bool(options.out_of_place), fold)
    if ramp is not None and (len(ramp) > fit or not _is_pow2(sum(ramp))
                             or min(ramp) < 1):
        ramp = None  # does not fit the step limit (or the sizes): equal stages
    k_n = len(ramp) if ramp is not None else _pow2_floor(max(1, min(stages, fit)))
    size = list(ramp) if ramp is not None else [1] * k_n
    units = sum(size)
    first = [sum(size[:k]) for k in range(k_n)]
    out = "o" if options.out_of_place else "i"
    where = {r: (n, g) for n, ranks in enumerate(nodes) for g, r in enumerate(ranks)}
    a_slots = (g_size - 1) * m_nodes * q_n  # scratch per stage: intra partials ...
    per_k = a_slots + (0 if fold else (m_nodes - 1) * q_n)  # ... then rail partials

    def chunk(p: int, k: int, b: int, m: int = 0, q: int = 0) -> int:
        return ((p * units + first[k]) * g_size * m_nodes * q_n
                + ((b * m_nodes + m) * q_n + q) * size[k])

    def a_slot(p: int, k: int, g: int, w: int, m: int = 0, q: int = 0) -> int:
        """Local rank g's scratch for local peer w's partial."""
        j = w - 1 if w > g else w
        return (p * units + first[k]) * per_k + ((j * m_nodes + m) * q_n + q) * size[k]

    def b_slot(p: int, k: int, n: int, v: int, q: int = 0) -> int:
        """Node n's scratch for rail peer node v's partial."""
        j = v - 1 if v > n else v
        return (p * units + first[k]) * per_k + (a_slots + j * q_n + q) * size[k]

    ways = 1 if paired else 2
    per_tb = ways * ((g_size - 1) + (m_nodes - 1)) + m_nodes * q_n
    ranks: dict[int, dict[int, _Tb]] = {}
    for r, (n, g) in where.items():
        tbs: dict[int, _Tb] = {}
        intra = [w for w in range(g_size) if w != g]
        rails = [v for v in range(m_nodes) if v != n]
        for p in range(inst):
            base = p * per_tb
            red = {(m, q): _Tb(base + m * q_n + q, -1, -1, p)
                   for m in range(m_nodes) for q in range(q_n)}
            base += m_nodes * q_n
            peers = [nodes[n][w] for w in intra] + [nodes[v][g] for v in rails]
            send_tb, recv_tb = _peer_tbs(peers, base, p, paired)
            for tb in (*red.values(), *send_tb.values(), *recv_tb.values()):
                tbs[tb.id] = tb
            peer_tb = {w: (send_tb[nodes[n][w]], recv_tb[nodes[n][w]]) for w in intra}
            rail_tb = {v: (send_tb[nodes[v][g]], recv_tb[nodes[v][g]]) for v in rails}
            recv_a: dict[tuple[int, int], Wait] = {}
            for w, (stb, rtb) in peer_tb.items():
                for k in range(k_n):
                    block = m_nodes * q_n * size[k]
                    stb.add("s", ("i", chunk(p, k, w)), ("s", a_slot(p, k, w, g)), block)
                    recv_a[(k, w)] = (rtb.id, rtb.add("r", ("i", chunk(p, k, w)),
                                                      ("s", a_slot(p, k, g, w)), block))
            end_a: dict[tuple[int, int], list[Wait]] = {}

            def node_reduce(m: int, q: int, k: int, p: int = p, g: int = g,
                            recv_a: dict[tuple[int, int], Wait] = recv_a,
                            end_a: dict[tuple[int, int], list[Wait]] = end_a,
                            red: dict[tuple[int, int], _Tb] = red,
                            intra: list[int] = intra) -> None:
                """Reducer (m, q) sums the node partials of stage k into my block."""
                tb = red[(m, q)]
                dst = (out, chunk(p, k, g, m, q))
                if out != "i":  # out-of-place: my own partial first
                    tb.add("cpy", ("i", dst[1]), dst, size[k])
                for w in intra:
                    last = tb.add("re", ("s", a_slot(p, k, g, w, m, q)), dst, size[k],
                                  [recv_a[(k, w)]])
                end_a.setdefault((k, m), []).append((tb.id, last))

            for m, q in red:  # my node's sub-block: stage by stage between the rail sums
                if m != n:
                    for k in range(k_n):
                        node_reduce(m, q, k)
            recv_b: dict[tuple[int, int], Wait] = {}
            end_b: dict[int, list[Wait]] = {}
            recv_c: dict[int, list[Wait]] = {}
            for what, k in _rail_order(k_n, lag):
                if what == "rs":  # my partial of sub-block v to v, v's of mine to me
                    for q in range(q_n):
                        node_reduce(n, q, k)
                    mine = (out, chunk(p, k, g, n))
                    sub = q_n * size[k]
                    chain = end_a[(k, n)]
                    for v, (stb, rtb) in rail_tb.items():
                        theirs = (out, chunk(p, k, g, v)) if fold else ("s", b_slot(p, k, v, n))
                        stb.add("s", (out, chunk(p, k, g, v)), theirs, sub, end_a[(k, v)])
                        if fold:  # add v's partial into mine as it arrives, one rail at a time
                            chain = [(rtb.id, rtb.add("rrc", mine, mine, sub, chain))]
                        else:
                            recv_b[(k, v)] = (rtb.id, rtb.add("r", (out, chunk(p, k, g, v)),
                                                              ("s", b_slot(p, k, n, v)), sub))
                    if fold:
                        end_b[k] = chain
                    continue
                for q in range(q_n if not fold else 0):  # sum the rail partials
                    last = red[(n, q)].reduce(
                        [("s", b_slot(p, k, n, v, q)) for v in rails],
                        (out, chunk(p, k, g, n, q)), [recv_b[(k, v)] for v in rails],
                        size[k])
                    end_b.setdefault(k, []).append((red[(n, q)].id, last))
                for v, (stb, rtb) in rail_tb.items():
                    stb.add("s", (out, chunk(p, k, g, n)), (out, chunk(p, k, g, n)),
                            q_n * size[k], end_b[k])
                    recv_c.setdefault(k, []).append(
                        (rtb.id, rtb.add("r", (out, chunk(p, k, g, v)),
                                         (out, chunk(p, k, g, v)), q_n * size[k])))
            for w, (stb, rtb) in peer_tb.items():
                for k in range(k_n):
                    block = m_nodes * q_n * size[k]
                    stb.add("s", (out, chunk(p, k, g)), (out, chunk(p, k, g)), block,
                            end_b[k] + recv_c[k])
                    rtb.add("r", (out, chunk(p, k, w)), (out, chunk(p, k, w)), block)
        ranks[r] = tbs
    c = inst * units * g_size * m_nodes * q_n
    blocks_of = _finish(ranks)
    if k_n > 1 and not _parses(blocks_of, n_ranks):
        return hierarchical_allreduce(nodes, instances, options, _pow2_floor(k_n) // 2,
                                      paired, lag, reducers, fold)
    return _program("allreduce", blocks_of, f"tacos_hier_allreduce_{m_nodes}x{g_size}", inst, c,
                    options, per_k * units * inst)


def hierarchical_allgather(nodes: list[list[int]], instances: int, options: MscclOptions,
                           stages: int = STAGES, paired: bool = False) -> Program:
    """The all-gather program: per instance (channel p) and pipeline stage k, rank (n, g)
    sends its shard to every rail peer (into its output), then sends the ``M`` shards of its
    rail to every local peer: its own of every stage first (they need no NIC), then the
    others, each once it has arrived.  Chunk ``(r·I + p)·K + k`` of the
    output is rank r's shard, instance p, stage k.  ``paired``: one ``send=w recv=w`` thread
    block per peer instead of a send and a receive block."""
    m_nodes, g_size = len(nodes), len(nodes[0])
    n_ranks = m_nodes * g_size
    inst = instances
    k_n = max(1, min(stages, (options.max_steps_per_tb - 1) // m_nodes))
    inplace = bool(options.inplace)
    where = {r: (n, g) for n, ranks in enumerate(nodes) for g, r in enumerate(ranks)}
    ways = 1 if paired else 2
    per_tb = ways * ((g_size - 1) + (m_nodes - 1))

    def shard(r: int, p: int, k: int) -> int:
        return (r * inst + p) * k_n + k

    ranks: dict[int, dict[int, _Tb]] = {}
    for r, (n, g) in where.items():
        tbs: dict[int, _Tb] = {}
        intra = [nodes[n][w] for w in range(g_size) if w != g]
        rails = [nodes[v][g] for v in range(m_nodes) if v != n]
        for p in range(inst):
            send_tb, recv_tb = _peer_tbs(rails + intra, p * per_tb, p, paired, tbs)

            def mine(p: int, k: int, r: int = r) -> tuple[str, int]:
                return ("o", shard(r, p, k)) if inplace else ("i", p * k_n + k)

            arrived: dict[tuple[int, int], Wait] = {}
            for k in range(k_n):
                for v in rails:
                    send_tb[v].add("s", mine(p, k), ("o", shard(r, p, k)), 1)
                    arrived[(v, k)] = (recv_tb[v].id, recv_tb[v].add(
                        "r", ("o", shard(v, p, k)), ("o", shard(v, p, k)), 1))
            # my node's shards first (they need no NIC), then the rail's as they arrive
            order = [(k, n) for k in range(k_n)] + [(k, v) for k in range(k_n)
                                                    for v in range(m_nodes) if v != n]
            for w in intra:
                for k, v in order:
                    owner = nodes[v][g]
                    src = mine(p, k) if owner == r else ("o", shard(owner, p, k))
                    send_tb[w].add("s", src, ("o", shard(owner, p, k)), 1,
                                   [arrived[(owner, k)]] if owner != r else [])
                    theirs = nodes[v][where[w][1]]
                    recv_tb[w].add("r", ("o", shard(theirs, p, k)),
                                   ("o", shard(theirs, p, k)), 1)
        if not inplace:  # my own shard into my output
            tb = tbs[inst * per_tb] = _Tb(inst * per_tb, -1, -1, 0)
            for p in range(inst):
                for k in range(k_n):
                    tb.add("cpy", ("i", p * k_n + k), ("o", shard(r, p, k)), 1)
        ranks[r] = tbs
    c = inst * k_n
    blocks_of = _finish(ranks)
    if k_n > 1 and not _parses(blocks_of, n_ranks):
        return hierarchical_allgather(nodes, instances, options, k_n - 1, paired)
    return _program("allgather", blocks_of, f"tacos_hier_allgather_{m_nodes}x{g_size}", inst, c,
                    options)


@dataclass(frozen=True)
class Hierarchical:
    """The hierarchical program family for ``collective`` on ``nodes`` (ranks per node):
    any shape's instances and protocol, the data of each instance cut into ``stages``
    pipeline stages (fewer when the steps would not fit), the rail's phases in the order of
    ``lag`` (:func:`_rail_order`); port order and pairing do not apply (every peer has a
    send and a receive thread block of its own: a block's receive copies then do not wait
    for its sends, which timed 1.25x faster on 2x DGX-A100 at 64 MiB)."""

    collective: Collective
    nodes: tuple[tuple[int, ...], ...]
    stages: int = STAGES
    lag: int | None = 0
    #: SMs per GPU: the all-reduce takes as many reducing thread blocks per sub-block (at
    #: most :data:`REDUCERS`) as let every thread block of the shape's instances be resident
    sms: int = 108

    @property
    def label(self) -> str:
        """What the family is, for reports."""
        m, g = len(self.nodes), len(self.nodes[0])
        return (f"hierarchical {self.collective.kind}: {m} nodes x {g} ranks, rails between, "
                f"{self.stages} pipeline stages")

    def lower(self, shape: Shape, base: MscclOptions | None = None) -> Program:
        """The program for ``shape`` with ``base``'s header fields."""
        opts = shape.options(base)
        opts.validate()
        nodes = [list(n) for n in self.nodes]
        if self.collective.kind == "allreduce":
            m, g = len(nodes), len(nodes[0])
            peers = 2 * (g - 1 + m - 1)  # send and receive thread blocks per instance
            fit = (self.sms // max(1, shape.instances) - peers) // m
            return hierarchical_allreduce(nodes, shape.instances, opts, stages=self.stages,
                                          paired=False, lag=self.lag,
                                          reducers=max(1, min(REDUCERS, fit)))
        if self.collective.kind == "allgather":
            return hierarchical_allgather(nodes, shape.instances, opts, stages=self.stages,
                                          paired=False)
        raise TacosError(f"no hierarchical program for {self.collective.kind}")


HIERARCHICAL = "hierarchical"
#: The family with as many pipeline stages as the step limit allows (at most
#: :data:`DEEP_STAGES`): shorter pipeline fill and drain at large sizes, more steps at small.
HIERARCHICAL_DEEP = "hierarchical-deep"
DEEP_STAGES = 8
#: The all-reduce whose node partials are added as they arrive, in ramped pipeline stages
#: (:mod:`tacos.msccl.multinode_rotated`).
HIERARCHICAL_RAMP = "hierarchical-ramp"
KINDS = ("allreduce", "allgather")


def multinode_candidates(topology: Topology, collective: Collective) -> dict[str, Any]:
    """The multi-node program families for ``collective`` on ``topology`` (name -> family):
    the hierarchical programs (:data:`STAGES` and up to :data:`DEEP_STAGES` pipeline
    stages; for all-reduce also :data:`HIERARCHICAL_RAMP`) and the latency-bound programs of
    :mod:`tacos.msccl.multinode_latency` when the ranks span two or more equal nodes with
    rails between; else, over nodes whose GPUs are not all linked (NDv2, MI250), the leader
    programs of :mod:`tacos.msccl.multinode_leader` when they apply."""
    if collective.kind not in KINDS:
        return {}
    nodes = rail_layout(topology, collective)
    if nodes is None:  # no rails: a tree to one leader per node, for small sizes
        from tacos.msccl.multinode_leader import leader_candidates

        return leader_candidates(topology, collective)
    from tacos.msccl.shape_choose import limits_for

    layout = tuple(tuple(n) for n in nodes)
    # the written files are verified against DEFAULT_SMS (Choice.xml's default)
    sms = min(limits_for(topology).sms, DEFAULT_SMS)
    # two nodes: a stage's rail all-gather right after its reduce-scatter; more: one stage
    # later, so the next reduce-scatter keeps the NIC busy while the rail partials are summed
    lag = 0 if len(nodes) == 2 else 1
    out = {HIERARCHICAL: Hierarchical(collective, layout, lag=lag, sms=sms)}
    from tacos.msccl.multinode_latency import latency_candidates

    out.update(latency_candidates(collective, layout))  # one hop per phase, for small sizes
    if collective.kind == "allreduce":  # the all-gather's stages gained nothing past four
        from tacos.msccl.multinode_rotated import Ramped

        out[HIERARCHICAL_DEEP] = Hierarchical(collective, layout, stages=DEEP_STAGES, lag=lag,
                                              sms=sms)
        out[HIERARCHICAL_RAMP] = Ramped(collective, layout, lag=lag)
    return out
