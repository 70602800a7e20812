"""NCCL's CollNet (SHARP) all-reduce: in-network reduction in the InfiniBand switches.

What NCCL does (``src/device/all_reduce.h`` ``runCollNetDirect``, the SHARP plugin), and how it
is reproduced here with in-switch transfer groups (:mod:`tacos.check.in_switch`):

* **CollNet Direct**: inside each node the GPUs reduce-scatter the buffer with direct NVLink
  sends, so GPU g (the one next to NIC g) holds the node's partial sum of shard g;
* GPU g of every node then all-reduces shard g **in the network**: the scale-out switch that
  its NIC reaches (rail g's leaf) declares ``reduce`` and sums the nodes' partials.  SHARP
  returns the result to every node from the switch; a tacos schedule writes that as a *reduce
  group* into one node's GPU g followed by a *multicast group* from it (or plain sends when the
  switch does not multicast), the owning node rotating slice by slice, so every NIC still
  carries each byte once up and once down;
* inside each node GPU g gives the reduced shard to the others with direct sends (all-gather);
* pipelined in slices: every step of a slice runs as soon as its data is there.

A node whose GPUs do not all have a NIC (NCCL's CollNet Chain case) reduces its shards onto
the GPUs that do; each of those then serves ``G / NICs`` shards.  All-reduce only.
"""

from __future__ import annotations

from tacos.errors import TacosError
from tacos.model.collective import Collective
from tacos.model.schedule import Schedule
from tacos.solvers.lowering.program import Msg
from tacos.solvers.nccl.lower import (
    MAX_TRANSFERS,
    GroupLowering,
    best_of,
    buffer_order,
    pipeline_depths,
    refine_allreduce,
    split,
)
from tacos.solvers.nccl.system import System

MAX_SLICES = 64


def sharp_switches(system: System) -> list[int]:
    """Per rail (NIC index), the scale-out switch joining that rail of every node; each must
    declare ``reduce``.  :class:`TacosError` naming what is missing."""
    if not system.multi_node:
        raise TacosError("CollNet reduces across nodes; this group is one node",
                         hint="use NVLS or the ring within a node")
    rails = system.rails
    if rails == 0:
        raise TacosError("CollNet needs a NIC in every node")
    out = []
    topo = system.topology
    for r in range(rails):
        first = system.nics[0][r]
        common = set.intersection(*(system.route_switches(first, nics[r])
                                    for nics in system.nics[1:]))
        able = sorted(sw for sw in common
                      if "reduce" in topo.switches[sw - topo.n_npus].capabilities)
        if not able:
            names = ", ".join(topo.node_name(sw) for sw in sorted(common)) or f"rail {r}"
            raise TacosError(f"CollNet needs in-network reduction: scale-out switch {names} "
                             "does not declare 'reduce'",
                             hint="declare it (Topology.with_capabilities({'rail*': "
                                  "{'reduce', 'multicast'}})) for SHARP")
        out.append(able[0])
    return out


def collnet_schedule(system: System, collective: Collective, slices: int) -> Schedule:
    """CollNet Direct all-reduce with ``slices`` pipelined slices per shard."""
    if collective.kind != "allreduce":
        raise TacosError(f"CollNet runs all-reduce only, not {collective.kind}")
    switches = sharp_switches(system)
    rails = len(switches)
    nodes, nics = system.nodes, system.nics
    coll, _ = refine_allreduce(collective, rails * slices)
    shards = split(buffer_order(coll), rails)
    lowering = GroupLowering(system.topology, coll, system.graph)
    topo = system.topology
    multicast = ["multicast" in topo.switches[sw - topo.n_npus].capabilities for sw in switches]
    for j in range(slices):
        for r in range(rails):
            piece = split(shards[r], slices)[j]
            heads = [nic[r] for nic in nics]
            # intra-node: every GPU sends its part of the slice to the rail's GPU
            lowering.run([Msg(v, heads[i], piece) for i, node in enumerate(nodes)
                          for v in node if v != heads[i]])
            owner = heads[(j + r) % len(heads)]
            lowering.reduce(heads, owner, piece, switches[r])
            if multicast[r]:
                lowering.multicast(owner, heads, piece, switches[r])
            else:
                lowering.run([Msg(owner, h, piece) for h in heads if h != owner])
            lowering.run([Msg(heads[i], v, piece) for i, node in enumerate(nodes)
                          for v in node if v != heads[i]])
    return lowering.schedule({"algorithm": "NCCL CollNet Direct (SHARP in-network reduce)",
                              "slices": slices, "rails": rails})


def nccl_collnet(system: System, collective: Collective) -> Schedule:
    """CollNet at the pipeline depth the model finds fastest for the size."""
    rails = max(1, system.rails)
    n = len(system.group)
    links = system.topology.links
    hop = min(((2 * lk.alpha, lk.bandwidth) for lk in links), key=lambda h: h[1])
    cap = min(MAX_SLICES, max(1, MAX_TRANSFERS // max(1, 3 * n * rails)))
    settings = [{"slices": s} for s in pipeline_depths(collective.size / rails, 4, hop, cap)]
    best = best_of(settings, lambda s: collnet_schedule(system, collective, s["slices"]))
    best.schedule.meta["tuned"] = best.setting
    return best.schedule
