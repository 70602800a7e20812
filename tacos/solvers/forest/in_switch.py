"""In-switch trees for the forest solver: all-reduce through a switch that multicasts and reduces.

Spanning-tree packing counts a tree edge through a switch as one up-port and one down-port
(:mod:`~tacos.solvers.forest.split`).  A switch that declares ``multicast`` and ``reduce``
(NVSwitch NVLS, :mod:`tacos.check.in_switch`) changes what a tree costs: the *star* tree of a root
through the switch -- every other member one switch hop away -- becomes one in-switch operation,
a reduce group into the root (each member's up-port carries its contribution once, the root's
down-port the sum once) or a multicast group out of it (the root's up-port carries each byte
once, every down-port once).  All-reduce as a reduction star into one root followed by a
multicast star out of it moves every byte once up and once down each port: ``M / B``, the
in-switch optimum, against ``2(N-1)/N · M / B`` for the best plain trees.

Pipelined in ``S`` slices, slice j's multicast out of the root runs while slice j+1 is reduced
into it (the multicast holds the root's up-port and the others' down-ports, the reduction the
others' up-ports and the root's down-port: disjoint), so the pipeline fills once:
``(S + 1) · (α + M / (S·B))``.  NCCL's NVLS (:mod:`tacos.solvers.nccl.nvls`) reduces shard g into
GPU g instead, so a reduction into g can only overlap g's own multicast and the pipeline fills
once per GPU (``N`` times); one root fills it once.

Applies when every member of the group is attached to one switch that declares both
capabilities (one scale-up node); :func:`in_switch_allreduce` returns None otherwise.  ``S`` is
the power of two nearest the α-β optimum ``sqrt(M / (α·B))`` and its neighbours, the fastest
kept.
"""

from __future__ import annotations

from tacos.errors import TacosError
from tacos.model.collective import Collective
from tacos.model.schedule import Schedule
from tacos.model.topology import Topology

MAX_SLICES = 1024
"""Most slices tried (two groups of N-1 transfers each per slice)."""


def in_switch_hub(topology: Topology, group: tuple[int, ...]):
    """``(system, switch)``: the switch every member of ``group`` is attached to that declares
    multicast and reduce, with the group's NCCL system view; None when there is none or the
    group spans several scale-up nodes."""
    from tacos.solvers.nccl.system import system

    if len(group) < 3 or not any({"multicast", "reduce"} <= s.capabilities
                                 for s in topology.switches):
        return None
    sys_ = system(topology, group)
    if len(sys_.nodes) != 1:
        return None
    sw = sys_.nvls_switch(0, reduce=True)
    return None if sw is None else (sys_, sw)


def star_optimum(topology: Topology, collective: Collective, switch: int) -> float:
    """The in-switch optimum of an all-reduce through ``switch``: every byte once up and once
    down each member's port, ``M / B`` for the slowest port (no latency)."""
    links = topology.links
    ports = [links[i].bandwidth for v in collective.group for i in topology.out_links[v]
             if links[i].dst == switch]
    ports += [links[i].bandwidth for v in collective.group for i in topology.in_links[v]
              if links[i].src == switch]
    return collective.size / min(ports)


def star_allreduce(topology: Topology, collective: Collective, slices: int, root: int,
                   hub) -> Schedule:
    """The reduce-star/multicast-star all-reduce through the hub's switch in ``slices``
    pipelined slices (see module doc)."""
    from tacos.solvers.nccl.lower import GroupLowering, refine_allreduce

    sys_, switch = hub
    coll, pieces = refine_allreduce(collective, slices)
    members = list(collective.group)
    lowering = GroupLowering(topology, coll, sys_.graph)
    for piece in pieces:
        lowering.reduce(members, root, piece, switch)
        lowering.multicast(root, members, piece, switch)
    return lowering.schedule({"algorithm": "forest in-switch star (reduce into one root, "
                                           "multicast out of it, through the switch)",
                              "in_switch_tree": {"root": root, "switch": switch,
                                                 "slices": slices}})


def in_switch_allreduce(topology: Topology, collective: Collective) -> Schedule | None:
    """The fastest in-switch star all-reduce over a few slice counts, or None when the group
    has no switch that multicasts and reduces (see module doc)."""
    from tacos.solvers.nccl.lower import best_of, check_standard, pipeline_depths

    if collective.kind != "allreduce" or collective.tenants:
        return None
    try:
        check_standard(collective, "the in-switch star")
    except TacosError:
        return None
    group = tuple(collective.group)
    hub = in_switch_hub(topology, group)
    if hub is None:
        return None
    sys_, switch = hub
    links = topology.links
    root = group[0]
    up = next(links[i] for i in topology.out_links[root] if links[i].dst == switch)
    down = next(links[i] for i in topology.in_links[root] if links[i].src == switch)
    alpha = up.alpha + down.alpha
    bandwidth = min(up.bandwidth, down.bandwidth)
    cap = max(1, min(MAX_SLICES, collective.size // len(group)))
    depths = pipeline_depths(collective.size, 2, (alpha, bandwidth), cap)
    settings = [{"slices": s} for s in sorted(set(depths) | {min(cap, 2 * max(depths))})]
    best = best_of(settings, lambda s: star_allreduce(topology, collective, s["slices"], root,
                                                      hub))
    return best.schedule
