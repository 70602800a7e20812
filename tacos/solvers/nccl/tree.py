"""NCCL's tree all-reduce on the physical model: chains inside nodes under a double binary
tree of nodes.

What NCCL does (``src/graph/trees.cc``, ``connect.cc``, ``device/all_reduce.h``), and how it is
reproduced here:

* Inside a node a channel's GPUs form a **chain** (NCCL's TREE search pattern ``NET n -> GPU a
  -> GPU b -> .. -> GPU x``); the chain's head ``a`` is the GPU next to the channel's NIC.
* Across nodes the heads form NCCL's **double binary tree** (``ncclGetDtree``: a binary tree
  in which every node is a leaf in one tree and an inner node in the other, the second tree
  mirrored for an even count and shifted for an odd one).  Half the channels use each tree.
* **All-reduce** = reduce up the tree (chain tail to head, then child heads to parent heads up
  to the root) and broadcast back down, **pipelined** in chunks: a chunk's broadcast starts as
  soon as its reduction reached the root.  Channel c takes the c-th share of the buffer and
  starts on NIC ``c mod rails`` (rail-optimized heads: GPU c of every node), like NCCL's
  channel-to-NIC assignment.
* On one node the tree is the chain itself (NCCL uses Tree within a node as a chain too).
* NCCL's tuner picks the number of channels and halves the chunk size for small messages; here
  every channel count in ``{2, 4, ..., C_max}`` (at least 2: one per tree) and every pipeline
  depth ``S`` in ``{1, 2, 4, ...}`` (capped by the schedule size) is lowered and the fastest
  kept.

Only all-reduce: NCCL runs trees for all-reduce alone.
"""

from __future__ import annotations

from collections.abc import Sequence

from tacos.errors import TacosError
from tacos.model.collective import Collective
from tacos.model.schedule import Schedule
from tacos.solvers.baselines import algos as algos
from tacos.solvers.lowering.program import Msg
from tacos.solvers.nccl.lower import (
    MAX_TRANSFERS,
    GroupLowering,
    best_of,
    pipeline_depths,
    refine_allreduce,
)
from tacos.solvers.nccl.system import System

MAX_SLICES = 64


def chain(system: System, node: int, head: int) -> list[int]:
    """The node's GPUs as a chain from ``head``, each next GPU a neighbour of the previous one
    when possible (fewest-hop order otherwise)."""
    members = list(system.nodes[node])
    order = [head]
    left = [v for v in members if v != head]
    hops = system.graph.hops
    while left:
        here = order[-1]
        near = [v for v in left if v in hops(here)]
        pick = min(near or left, key=lambda v: (-max((h.bandwidth * h.lanes
                                                      for h in hops(here).get(v, ())),
                                                     default=0.0), v))
        order.append(pick)
        left.remove(pick)
    return order


def tree_parents(system: System, channel: int) -> tuple[dict[int, int | None], int]:
    """Parent of every member in channel ``channel``'s tree (None at the root) and its root."""
    nodes = system.nodes
    m = len(nodes)
    heads = []
    for i in range(m):
        nics = system.nics[i] if system.multi_node else ()
        heads.append(nics[channel % len(nics)] if nics else nodes[i][0])
    parents: dict[int, int | None] = {}
    for i in range(m):
        order = chain(system, i, heads[i])
        for a, b in zip(order, order[1:], strict=False):
            parents[b] = a
    inter = algos.dtree_parents(m)[channel % 2] if m > 1 else [None]
    root = heads[0]
    for i in range(m):
        up = inter[i]
        parents[heads[i]] = None if up is None else heads[up]
        if up is None:
            root = heads[i]
    return parents, root


def _depths(parents: dict[int, int | None]) -> dict[int, int]:
    depth: dict[int, int] = {}

    def d(v: int) -> int:
        if v not in depth:
            p = parents[v]
            depth[v] = 0 if p is None else d(p) + 1
        return depth[v]

    for v in parents:
        d(v)
    return depth


def tree_program(system: System, pieces: list[tuple[int, ...]], channels: int,
                 slices: int) -> list[Msg]:
    """Pipelined reduce-then-broadcast of every piece over its channel's tree (piece
    ``c*slices + j`` is chunk j of channel c), in wavefront order (chunk j's hop at level l
    comes with chunk j+1's hop at level l-1)."""
    edges: list[tuple] = []
    for c in range(channels):
        parents, _ = tree_parents(system, c)
        depth = _depths(parents)
        height = max(depth.values(), default=0)
        for j, piece in enumerate(pieces[c * slices:(c + 1) * slices]):
            for v, p in parents.items():
                if p is None:
                    continue
                up_wave = j + height - depth[v]
                down_wave = j + height + depth[v]
                edges.append((up_wave, 0, c, v, p, piece))
                edges.append((down_wave, 1, c, p, v, piece))
    edges.sort(key=lambda e: (e[0], e[1], e[2]))
    return [Msg(a, b, piece) for _, _, _, a, b, piece in edges]


def tree_schedule(system: System, collective: Collective, channels: int, slices: int
                  ) -> Schedule:
    """The NCCL tree all-reduce with ``channels`` channels and ``slices`` pipelined chunks per
    channel share, on the refined collective."""
    if collective.kind != "allreduce":
        raise TacosError(f"NCCL's tree runs all-reduce only, not {collective.kind}",
                         hint="use the ring for the other collectives")
    coll, pieces = refine_allreduce(collective, channels * slices)
    lowering = GroupLowering(system.topology, coll, system.graph)
    lowering.run(tree_program(system, pieces, channels, slices))
    return lowering.schedule({"algorithm": "NCCL tree (chains + double binary tree)",
                              "channels": channels, "slices": slices})


def tree_settings(system: System, collective: Collective, *,
                  channels: Sequence[int] | None = None) -> list[dict]:
    """The ``{"channels", "slices"}`` settings :func:`nccl_tree` builds, in its order."""
    rails = max(2, system.rails)
    cands = list(channels) if channels else sorted({2, rails})
    n = len(system.group)
    settings = []
    for c in cands:
        parents, _ = tree_parents(system, 0)
        height = max(_depths(parents).values(), default=0)
        hop = _slowest_hop(system)
        cap = min(MAX_SLICES, max(1, MAX_TRANSFERS // max(1, 2 * n * c)))
        settings += [{"channels": c, "slices": s}
                     for s in pipeline_depths(collective.size / c, 2 * height, hop, cap)]
    return settings


def nccl_tree(system: System, collective: Collective, *,
              channels: Sequence[int] | None = None) -> Schedule:
    """NCCL's tree all-reduce at the channel count and pipeline depth the model finds fastest
    for the size (see module doc)."""
    settings = tree_settings(system, collective, channels=channels)
    best = best_of(settings, lambda s: tree_schedule(system, collective, s["channels"],
                                                     s["slices"]))
    best.schedule.meta["tuned"] = best.setting
    return best.schedule


def _slowest_hop(system: System) -> tuple[float, float]:
    """(α, bandwidth) of the slowest link class the group uses: what a pipeline step costs."""
    links = system.topology.links
    slow = min(links, key=lambda lk: lk.bandwidth)
    return 2 * slow.alpha, slow.bandwidth
