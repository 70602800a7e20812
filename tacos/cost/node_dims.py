"""Dimensions for hierarchical systems declared without them (presets: DGX nodes joined by
NIC rails).  The hierarchical model and baseline read ``Link.dim``; a preset's links carry
tags (``nic``) instead.  :func:`with_node_dims` gives such a topology two dimensions: 0 inside
a scale-up node (NVLink, NVSwitch, xGMI), 1 between nodes (NICs, rails, the network)."""

from __future__ import annotations

from dataclasses import replace

from tacos.model.topology import Topology


def with_node_dims(topology: Topology) -> Topology:
    """``topology`` with ``dim`` 0 on the links inside a node and 1 on those between nodes,
    when no link declares a dimension and it has several nodes; else ``topology`` itself.

    A link between NPUs is inside a node when both are in the same one; a switch belongs to
    dimension 0 when every NPU it links is in one node, else to dimension 1 (and so do its
    links, and links between switches of dimension 1)."""
    if any(lk.dim is not None for lk in topology.links) or not topology.links:
        return topology
    nodes = topology.scale_up_nodes(topology.live_npus)
    if len(nodes) < 2:
        return topology
    node_of = {v: i for i, node in enumerate(nodes) for v in node}
    reach: dict[int, set[int]] = {}
    for lk in topology.links:
        for sw, other in ((lk.src, lk.dst), (lk.dst, lk.src)):
            if topology.is_switch(sw) and not topology.is_switch(other) and other in node_of:
                reach.setdefault(sw, set()).add(node_of[other])

    def dim_of_node(v: int) -> int | None:
        if topology.is_switch(v):
            return 0 if len(reach.get(v, ())) == 1 else 1
        return None

    def dim(lk) -> int:
        a, b = dim_of_node(lk.src), dim_of_node(lk.dst)
        if a is None and b is None:
            return 0 if node_of.get(lk.src, -1) == node_of.get(lk.dst, -2) else 1
        return max(x for x in (a, b) if x is not None)

    return topology.with_links(replace(lk, dim=dim(lk)) for lk in topology.links)
