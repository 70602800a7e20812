"""A cut bound for any collective: bytes that must cross into (or out of) a group of nodes.

For a set ``S`` of nodes (NPUs and switches), a copy chunk must enter ``S`` when some NPU in
``S`` needs it and no NPU in ``S`` holds it, and must leave ``S`` when only NPUs in ``S`` hold it
and some NPU outside needs it; a reduction chunk must enter ``S`` when an output is in ``S`` and
a contribution outside, and leave it the other way round.  Those bytes cross the links into
(out of) ``S``, so ``bytes / bandwidth into S`` is a lower bound on the collective's time (the
fluid min-cut argument; it holds for the cut-through model, where a transfer can only be slower).

Which sets: the levels of the topology's bandwidth hierarchy -- for each link speed ``θ``, the
connected groups of nodes joined by links at least that fast (single NPUs, NVLink islands, a
host with its PCIe switch, a rack, ...).  For cross-mesh resharding the binding set is usually a
host behind its network interface, which the per-NPU ingress/egress bound cannot see.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import networkx as nx

from tacos.model.collective import Collective
from tacos.model.topology import Topology


@dataclass(frozen=True)
class GroupCut:
    """The binding group: its nodes, the direction (``'into'``/``'out of'``), the bytes that
    must cross and the bandwidth of the crossing links."""

    value: float
    nodes: frozenset[int]
    direction: str
    nbytes: float
    bandwidth: float


def candidate_groups(topology: Topology) -> list[frozenset[int]]:
    """Node sets of every bandwidth level that hold at least one NPU (deduplicated)."""
    seen: set[frozenset[int]] = set()
    out: list[frozenset[int]] = []
    for v in topology.live_npus:
        s = frozenset((v,))
        seen.add(s)
        out.append(s)
    speeds = sorted({lk.bandwidth for lk in topology.links}, reverse=True)
    for theta in speeds:
        g = nx.Graph()
        g.add_nodes_from(range(topology.n_nodes))
        g.add_edges_from((lk.src, lk.dst) for lk in topology.links if lk.bandwidth >= theta)
        for comp in nx.connected_components(g):
            s = frozenset(comp)
            if s in seen or not any(not topology.is_switch(v) for v in s):
                continue
            seen.add(s)
            out.append(s)
    return out


def group_cut(topology: Topology, collective: Collective) -> GroupCut | None:
    """The largest ``bytes / bandwidth`` over :func:`candidate_groups`; None when no group
    must exchange anything."""
    classes: dict[tuple, int] = defaultdict(int)
    for c in collective.chunks:
        classes[(c.pre, c.post, c.reduce)] += c.size
    best: GroupCut | None = None
    for s in candidate_groups(topology):
        into = out = 0.0
        for (pre, post, reduce), nbytes in classes.items():
            if reduce:
                if post & s and pre - s:
                    into += nbytes
                if pre & s and post - s:
                    out += nbytes
            else:
                if (post - pre) & s and not pre & s:
                    into += nbytes
                if pre <= s and post - s - pre:
                    out += nbytes
        bw_in = sum(lk.total_bandwidth for lk in topology.links
                    if lk.dst in s and lk.src not in s)
        bw_out = sum(lk.total_bandwidth for lk in topology.links
                     if lk.src in s and lk.dst not in s)
        for direction, nbytes, bw in (("into", into, bw_in), ("out of", out, bw_out)):
            if nbytes <= 0:
                continue
            value = nbytes / bw if bw > 0 else float("inf")
            if best is None or value > best.value:
                best = GroupCut(value, s, direction, nbytes, bw)
    return best


def group_cut_bound(topology: Topology, collective: Collective) -> float:
    """:func:`group_cut`'s value in seconds (0 when nothing must cross a group)."""
    cut = group_cut(topology, collective)
    return 0.0 if cut is None else cut.value


def describe(topology: Topology, cut: GroupCut) -> str:
    """``'1.07 GB into {node[2].gpu[0..3], node[2].pcie} at 1.25 GB/s'``-style text."""
    npus = sorted(v for v in cut.nodes if not topology.is_switch(v))
    names = [topology.node_name(v) for v in npus]
    shown = ", ".join(names[:4]) + (f", ... ({len(names)} NPUs)" if len(names) > 4 else "")
    return f"{cut.nbytes / 1e9:.3g} GB {cut.direction} {{{shown}}} at " \
           f"{cut.bandwidth / 1e9:.3g} GB/s"


__all__ = ["GroupCut", "candidate_groups", "describe", "group_cut", "group_cut_bound"]
