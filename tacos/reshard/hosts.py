"""Which NPUs share a host (the seed's unit of load balancing).

Seed 001 balances resharding at the level of hosts: the NPUs of a host share its network
interface, so what matters is how much each host sends and receives.  tacos finds hosts from
the names TDL gives instances (``use "node.tdl" as node[4]`` names NPUs ``node[2].gpu[5]``: host
``node[2]``); in a flat file, NPUs joined through links faster than the slowest link class
form a host; when every link is alike, each NPU is its own host (its port is its interface).
"""

from __future__ import annotations

from collections.abc import Iterable

import networkx as nx

from tacos.model.topology import Topology


def hosts(topology: Topology, npus: Iterable[int] | None = None) -> dict[int, str]:
    """NPU id → host label for ``npus`` (default: every live NPU)."""
    members = list(topology.live_npus if npus is None else npus)
    names = {v: topology.npus[v].name for v in members}
    if members and all("." in names[v] for v in members):
        return {v: names[v].rsplit(".", 1)[0] for v in members}
    return _by_bandwidth(topology, members)


def _by_bandwidth(topology: Topology, members: list[int]) -> dict[int, str]:
    speeds = sorted({lk.bandwidth for lk in topology.links})
    if len(speeds) < 2:
        return {v: topology.npus[v].name for v in members}
    slowest = speeds[0]
    g = nx.Graph()
    g.add_nodes_from(range(topology.n_nodes))
    g.add_edges_from((lk.src, lk.dst) for lk in topology.links if lk.bandwidth > slowest)
    out: dict[int, str] = {}
    for comp in nx.connected_components(g):
        npus = sorted(v for v in comp if not topology.is_switch(v))
        if not npus:
            continue
        label = f"host of {topology.npus[npus[0]].name}"
        for v in npus:
            out[v] = label
    return {v: out[v] for v in members}


def host_groups(topology: Topology, npus: Iterable[int]) -> dict[str, list[int]]:
    """Host label → its NPUs among ``npus`` (in the given order)."""
    npus = list(npus)
    label = hosts(topology, npus)
    out: dict[str, list[int]] = {}
    for v in npus:
        out.setdefault(label[v], []).append(v)
    return out


__all__ = ["host_groups", "hosts"]
