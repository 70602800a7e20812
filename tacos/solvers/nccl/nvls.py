"""NCCL's NVLS algorithms: collectives inside an NVSwitch that multicasts and reduces.

What NCCL does (``src/device/all_reduce.h`` ``runNvls``/``runNvlsTree``, ``all_gather.h``,
``reduce_scatter.h``; NVLink SHARP on NVSwitch-3), and how it is reproduced here with in-switch
transfer groups (``Transfer.group``, :mod:`tacos.check.in_switch`):

* **Reduce-scatter** (``multimem.ld_reduce``): GPU g's shard is read from every GPU of the node
  and summed in the switch, and the sum arrives at g once -- a *reduce group* from the other
  GPUs into g through the NVSwitch.
* **All-gather** (``multimem.st``): GPU g writes its shard once into the switch, which copies
  it to every other GPU -- a *multicast group* from g.
* **All-reduce** (single node): reduce-scatter then all-gather of each shard, **pipelined** in
  slices: while the switch multicasts slice j of shard g (g's up-port, the others' down-ports),
  it already reduces slice j+1 (the others' up-ports, g's down-port).  Every byte crosses each
  port once up and once down: ``M / B`` plus latency, against ``2(N-1)/N · M / B`` for a ring.
* **All-reduce across nodes** (NVLS_TREE): reduce-scatter inside each node through its
  NVSwitch, then GPU g of every node all-reduces shard g with its peers over rail g by NCCL's
  double binary tree of nodes (reduce up, broadcast down), then all-gather inside each node;
  pipelined in slices, every step of a slice as soon as its data is there.
* **All-reduce across nodes with SHARP** (NVLS with CollNet, ``runNvls``'s network part): where
  every rail's switch declares ``multicast`` and ``reduce`` (InfiniBand SHARP), shard g is
  reduced across the nodes in rail g's switch and the sum sent back down to every node: a
  reduce group into GPU g of one node (rotating per slice) and a multicast out of it, so each
  NIC carries each byte once up and once down.  NCCL's tuner picks between this and NVLS_TREE;
  so does the model (the faster of the two).

Needs, in every node, one switch that every member is attached to and that declares
``multicast`` (and ``reduce`` for reduce-scatter and all-reduce) -- an H100 NVSwitch with NVLS.
NCCL uses NVLS for all-gather and reduce-scatter within one node; here too.  The pipeline depth
``S`` is chosen per size like NCCL's tuner would (the fastest of a few, see
:func:`~tacos.solvers.nccl.lower.pipeline_depths`).
"""

from __future__ import annotations

from tacos.errors import TacosError
from tacos.model.collective import Collective
from tacos.model.schedule import Schedule
from tacos.solvers.baselines import algos as algos
from tacos.solvers.lowering.program import Msg
from tacos.solvers.nccl.lower import (
    MAX_TRANSFERS,
    GroupLowering,
    best_of,
    buffer_order,
    member_chunks,
    pipeline_depths,
    refine,
    refine_allreduce,
    split,
)
from tacos.solvers.nccl.system import System, capable_switch

KINDS = ("allreduce", "allgather", "reducescatter")
MAX_SLICES = 64


def nvls_switches(system: System, *, reduce: bool) -> list[int]:
    """The NVLS switch of every node; :class:`TacosError` naming a node without one."""
    out = []
    for i, node in enumerate(system.nodes):
        sw = system.nvls_switch(i, reduce=reduce)
        if sw is None:
            need = "multicast and reduce" if reduce else "multicast"
            raise TacosError(
                f"NVLS needs a switch that every GPU of node "
                f"{system.topology.node_name(node[0])}.. is attached to and that declares "
                f"{need}", hint="declare the NVSwitch's capabilities "
                "(Topology.with_capabilities({'*nvswitch': {'multicast', 'reduce'}}))")
        out.append(sw)
    return out


def _single_node(system: System, lowering: GroupLowering, coll: Collective, switch: int,
                 slices: int) -> None:
    kind = coll.kind
    members = list(system.nodes[0])
    if kind == "allreduce":
        shards = split(buffer_order(coll), len(members))
        for g, shard in zip(members, shards, strict=True):
            for piece in split(shard, slices):
                lowering.reduce(members, g, piece, switch)
                lowering.multicast(g, members, piece, switch)
        return
    own = member_chunks(coll)
    for j in range(slices):
        for g in members:
            piece = split(own[g], slices)[j]
            if kind == "allgather":
                lowering.multicast(g, members, piece, switch)
            else:
                lowering.reduce(members, g, piece, switch)


def sharp_rails(system: System) -> list[int] | None:
    """The switch of every rail g (GPU g of each node) that reduces and multicasts, or None."""
    out = []
    for g in range(len(system.nodes[0])):
        sw = capable_switch(system.topology, [node[g] for node in system.nodes],
                            {"multicast", "reduce"})
        if sw is None:
            return None
        out.append(sw)
    return out


def _multi_node(system: System, lowering: GroupLowering, coll: Collective,
                switches: list[int], slices: int, rails: list[int] | None = None) -> None:
    nodes = system.nodes
    width = len(nodes[0])
    if any(len(n) != width for n in nodes):
        raise TacosError("multi-node NVLS needs the same number of GPUs in every node")
    shards = split(buffer_order(coll), width)
    trees = algos.dtree_parents(len(nodes))
    for j in range(slices):
        for g in range(width):
            piece = split(shards[g], slices)[j]
            for n, node in enumerate(nodes):
                lowering.reduce(node, node[g], piece, switches[n])
            peers = [node[g] for node in nodes]
            if rails is not None:  # SHARP: in-switch across the nodes
                root = peers[j % len(peers)]
                lowering.reduce(peers, root, piece, rails[g])
                lowering.multicast(root, peers, piece, rails[g])
            else:
                up = _tree_edges(trees[(g + j) % 2])
                lowering.run([Msg(peers[c], peers[p], piece) for c, p in up])
                lowering.run([Msg(peers[p], peers[c], piece) for c, p in reversed(up)])
            for n, node in enumerate(nodes):
                lowering.multicast(node[g], node, piece, switches[n])


def _tree_edges(parents: list[int | None]) -> list[tuple[int, int]]:
    """(child, parent) edges deepest first, so a parent sends up after its children."""
    def depth(v: int) -> int:
        d = 0
        while parents[v] is not None:
            v = parents[v]
            d += 1
        return d

    return sorted(((v, p) for v, p in enumerate(parents) if p is not None),
                  key=lambda e: -depth(e[0]))


def nvls_schedule(system: System, collective: Collective, slices: int,
                  sharp: bool = False) -> Schedule:
    """NVLS for ``collective`` with ``slices`` pipelined slices (see module doc); ``sharp``:
    across nodes through the rails' SHARP switches instead of NVLS_TREE's trees."""
    kind = collective.kind
    if kind not in KINDS:
        raise TacosError(f"NVLS runs {', '.join(KINDS)}, not {kind}")
    if system.multi_node and kind != "allreduce":
        raise TacosError(f"NVLS {kind} runs within one node (NCCL uses NVLS across nodes for "
                         "all-reduce only)")
    switches = nvls_switches(system, reduce=kind != "allgather")
    if kind == "allreduce":
        width = len(system.nodes[0])
        coll, _ = refine_allreduce(collective, width * slices)
    else:
        coll = refine(collective, slices)
    lowering = GroupLowering(system.topology, coll, system.graph)
    if system.multi_node:
        rails = sharp_rails(system) if sharp else None
        if sharp and rails is None:
            raise TacosError("NVLS with SHARP needs every rail's switch to declare multicast "
                             "and reduce")
        _multi_node(system, lowering, coll, switches, slices, rails)
        what = ("NVLS + SHARP (NVSwitch reduce/multicast + in-switch reduction on the rails)"
                if sharp else
                "NVLS tree (NVSwitch reduce/multicast + double binary tree of nodes)")
    else:
        _single_node(system, lowering, coll, switches[0], slices)
        what = "NVLS (NVSwitch reduce/multicast)"
    return lowering.schedule({"algorithm": what, "slices": slices})


def nccl_nvls(system: System, collective: Collective) -> Schedule:
    """NVLS at the pipeline depth the model finds fastest for the size (see module doc)."""
    width = len(system.nodes[0])
    n = len(system.group)
    depth = 2 + (2 * len(system.nodes) if system.multi_node else 0)
    links = system.topology.links
    hop = min(((2 * lk.alpha, lk.bandwidth) for lk in links), key=lambda h: h[1])
    cap = min(MAX_SLICES, max(1, MAX_TRANSFERS // max(1, 2 * n * width)))
    variants = [False]
    if system.multi_node and sharp_rails(system) is not None:
        variants.append(True)
    settings = [{"slices": s, "sharp": v} for v in variants
                for s in pipeline_depths(collective.size / max(1, width), depth, hop, cap)]
    best = best_of(settings, lambda s: nvls_schedule(system, collective, s["slices"],
                                                     s["sharp"]))
    best.schedule.meta["tuned"] = best.setting
    return best.schedule
