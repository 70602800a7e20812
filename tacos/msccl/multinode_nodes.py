"""Which ranks of a multi-node system share a node, and which links are network links: what
the directly written multi-node programs (:mod:`tacos.msccl.multinode_program`,
:mod:`tacos.msccl.multinode_leader`, :mod:`tacos.msccl.xgmi_program`) build on."""

from __future__ import annotations

from collections.abc import Sequence

from tacos.model.topology import Topology

#: Link tags of network links (NICs); the other links join the GPUs of one node.
NIC_TAGS = ("nic", "ib", "net", "eth", "roce")


def node_groups(topology: Topology, group: Sequence[int]) -> list[list[int]]:
    """The ranks of ``group`` (indices into it) per node, nodes in the order of their first
    rank: ranks are in one node when links other than NIC links (tags ``nic``, ``ib``,
    ``net``, ``eth``, ``roce``) join them, through switches or not."""
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for lk in topology.links:
        if _is_nic(lk):
            continue
        a, b = find(lk.src), find(lk.dst)
        if a != b:
            parent[a] = b
    nodes: dict[int, list[int]] = {}
    for r, npu in enumerate(group):
        nodes.setdefault(find(npu), []).append(r)
    return list(nodes.values())


def _is_nic(link: object) -> bool:
    return str(getattr(link, "tag", "") or "").lower().startswith(NIC_TAGS)
