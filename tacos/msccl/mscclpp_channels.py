"""Which MSCCL++ channel type a topology can carry between two ranks, and the check of a plan's
channels against a topology.

MSCCL++ has three channel types (``docs/msccl-format.md``):

* ``memory`` - peer-to-peer loads and stores through a mapped pointer: only between GPUs of one
  node (one NVLink/xGMI domain, :meth:`~tacos.model.topology.Topology.scale_up_nodes`);
* ``port`` - puts issued by a CPU proxy over a NIC (IB verbs) or CUDA IPC: any two ranks,
  the only type across nodes;
* ``switch`` - NVLS multimem loads/stores on a multicast object of an NVSwitch: every rank of
  the channel's rank group attached to one switch declared ``with multicast`` (and ``reduce``
  for the reducing ``glres``/``glre`` operations).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tacos.model.topology import Topology
from tacos.msccl.verify_report import Violation

__all__ = ["channel_type_violations", "node_of_ranks", "peer_channel_type", "switch_for"]

REDUCING_SWITCH_OPS = frozenset({"glres", "glre"})


def node_of_ranks(topology: Topology, ranks: Sequence[int]) -> list[int]:
    """For rank ``r`` (on NPU ``ranks[r]``) the index of its node (scale-up domain)."""
    where: dict[int, int] = {}
    for k, members in enumerate(topology.scale_up_nodes(list(ranks))):
        for npu in members:
            where[npu] = k
    return [where.get(npu, -1 - r) for r, npu in enumerate(ranks)]


def peer_channel_type(nodes: Sequence[int] | None, a: int, b: int) -> str:
    """``'memory'`` between ranks of one node (or when ``nodes`` is unknown), else ``'port'``."""
    if nodes is None or nodes[a] == nodes[b]:
        return "memory"
    return "port"


def switch_for(topology: Topology, npus: Sequence[int], *, reduce: bool = False) -> int | None:
    """A switch with ``multicast`` (and ``reduce`` when asked) that every NPU of ``npus`` is
    linked to directly, or None."""
    need = {"multicast", "reduce"} if reduce else {"multicast"}
    base = len(topology.npus)
    for k, sw in enumerate(topology.switches):
        if not need <= set(sw.capabilities):
            continue
        attached = {topology.links[i].src for i in topology.in_links[base + k]}
        if all(n in attached for n in npus):
            return base + k
    return None


def channel_type_violations(doc: Any, topology: Topology,
                            ranks: Sequence[int] | None = None) -> list[Violation]:
    """Channels of the decoded plan ``doc`` that ``topology`` cannot carry, rank ``r`` on NPU
    ``ranks[r]`` (default ``r``): memory channels across nodes, switch channels whose group no
    multicast switch joins (reducing switch operations also need ``reduce``)."""
    gpus = doc.get("gpus", []) if isinstance(doc, dict) else []
    ranks = list(ranks) if ranks is not None else list(range(len(gpus)))
    if len(ranks) < len(gpus) or any(not 0 <= r < len(topology.npus) for r in ranks):
        return [Violation("channels", f"the plan has {len(gpus)} ranks; the topology has "
                          f"{len(topology.npus)} NPUs", hint="map ranks to NPUs with --ranks")]
    nodes = node_of_ranks(topology, ranks[:len(gpus)])
    out: list[Violation] = []
    for g, gpu in enumerate(gpus):
        reducing = any(op.get("name") in REDUCING_SWITCH_OPS
                       for tb in gpu.get("threadblocks", []) for op in tb.get("ops", []))
        for c, ch in enumerate(gpu.get("channels", [])):
            path = f"gpus[{g}].channels[{c}]"
            ctype = ch.get("channel_type")
            if ctype == "memory":
                for peer in ch.get("connected_to", []):
                    if isinstance(peer, int) and 0 <= peer < len(nodes) \
                            and nodes[peer] != nodes[g]:
                        out.append(Violation(
                            "channels", f"{path}: memory channel from rank {g} (NPU "
                            f"{ranks[g]}) to rank {peer} (NPU {ranks[peer]}) crosses nodes; "
                            "memory channels only work inside a node", rank=g,
                            hint="use a port channel across nodes"))
            elif ctype == "switch":
                for k, grp in enumerate(ch.get("rank_groups", [])):
                    members = [ranks[r] for r in grp.get("ranks", [])
                               if isinstance(r, int) and 0 <= r < len(gpus)]
                    if switch_for(topology, members, reduce=reducing) is None:
                        need = "multicast and reduce" if reducing else "multicast"
                        out.append(Violation(
                            "channels", f"{path}.rank_groups[{k}]: switch channel over ranks "
                            f"{grp.get('ranks')} but no switch with {need} joins their NPUs",
                            rank=g, hint="declare the switch 'with multicast, reduce' or use "
                            "memory/port channels"))
    return out
