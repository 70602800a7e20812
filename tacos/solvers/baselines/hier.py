"""Hierarchical (multi-rail) collectives for multi-dimensional topologies.

Seed 000 §III-B: an all-reduce on a D-dimensional network runs reduce-scatter on dimension 1,
then 2, ... up to D, then all-gather from D back down to 1 (2D stages).  Each stage runs inside
every group of NPUs that differ only in that dimension's coordinate, with the dimension's own
congestion-free algorithm: Ring -> ring, FullyConnected -> direct, Switch -> halving-doubling.

Dimensions come from ``Link.dim``.  The coordinate of NPU v along dimension d is the connected
component of v when dimension d's links are removed (NPUs agreeing on every other coordinate
are exactly those joined by dimension-d links), so no naming convention is needed; the
topology must be a full product (every coordinate tuple is one NPU).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import networkx as nx

from tacos.errors import TacosError
from tacos.model.topology import Topology
from tacos.solvers.baselines import algos as algos
from tacos.solvers.lowering.hops import NpuGraph, ring_order
from tacos.solvers.lowering.program import Msg

Stage = Callable[[Sequence[int], algos.Blocks], list[Msg]]


@dataclass(frozen=True)
class Dimension:
    """One dimension: its kind (``ring``/``fc``/``switch``) and its groups (member orders)."""

    index: int
    kind: str
    groups: tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class Grid:
    """The product structure: per-NPU coordinates and the dimensions in order."""

    coords: dict[int, tuple[int, ...]]
    dims: tuple[Dimension, ...]

    def describe(self) -> str:
        """E.g. ``ring(2) x fc(4) x switch(8)``."""
        return " x ".join(f"{d.kind}({len(d.groups[0])})" for d in self.dims)


def _components(topology: Topology, keep) -> dict[int, int]:
    g = nx.Graph()
    g.add_nodes_from(range(topology.n_nodes))
    g.add_edges_from((lk.src, lk.dst) for lk in topology.links if keep(lk.dim))
    label = {}
    for k, comp in enumerate(sorted(nx.connected_components(g), key=min)):
        for v in comp:
            label[v] = k
    return label


def analyse(topology: Topology, members: Sequence[int], graph: NpuGraph) -> Grid:
    """Find the dimensions of ``topology`` or raise a :class:`TacosError` saying why not."""
    hint = ("use a multi-dimensional topology such as Ring(2)_FullyConnected(4)_Switch(8) "
            "(links carry dim), or another baseline (ring, direct)")
    dims = sorted({lk.dim for lk in topology.links if lk.dim is not None})
    if any(lk.dim is None for lk in topology.links):
        raise TacosError("the hierarchical baseline needs every link to carry a dimension",
                         hint=hint)
    if not dims:
        raise TacosError("the hierarchical baseline needs a multi-dimensional topology",
                         hint=hint)
    members = sorted(members)
    labels = {d: _components(topology, lambda x, d=d: x != d) for d in dims}
    coords = {v: tuple(labels[d][v] for d in dims) for v in members}
    if len(set(coords.values())) != len(members):
        raise TacosError("the topology is not a product of its dimensions", hint=hint)
    out = []
    total = 1
    for k, d in enumerate(dims):
        same = _components(topology, lambda x, d=d: x == d)
        groups: dict[int, list[int]] = {}
        for v in members:
            groups.setdefault(same[v], []).append(v)
        sizes = {len(g) for g in groups.values()}
        if len(sizes) != 1:
            raise TacosError(f"dimension {d} has groups of different sizes {sorted(sizes)}",
                             hint=hint)
        total *= sizes.pop()
        kind = _kind(topology, graph, d, next(iter(groups.values())))
        ordered = tuple(tuple(_member_order(kind, graph, g)) for g in groups.values())
        out.append(Dimension(k, kind, ordered))
    if total != len(members):
        raise TacosError("the topology is not a product of its dimensions", hint=hint)
    coords = {v: tuple(c) for v, c in coords.items()}
    return Grid(coords, tuple(out))


def _kind(topology: Topology, graph: NpuGraph, dim: int, group: list[int]) -> str:
    inside = set(group)
    for lk in topology.links:
        if lk.dim == dim and (lk.src in inside or lk.dst in inside):
            if topology.is_switch(lk.src) or topology.is_switch(lk.dst):
                return "switch"
    if all(graph.has_hop(u, v) for u in group for v in group if u != v) and len(group) > 2:
        return "fc"
    return "ring"


def _member_order(kind: str, graph: NpuGraph, group: list[int]) -> list[int]:
    if kind == "ring":
        return ring_order(graph, group)[0]
    return sorted(group)


STAGES: dict[str, tuple[Stage, Stage]] = {
    "ring": (algos.ring_reducescatter, algos.ring_allgather),
    "fc": (algos.direct_reducescatter, algos.direct_allgather),
    "switch": (algos.rhd_reducescatter, algos.rhd_allgather),
}


def _stage_blocks(grid: Grid, d: int, group: Sequence[int],
                  owner_chunks: dict[tuple[int, ...], list[int]]) -> algos.Blocks:
    """Member y's block at stage d: chunks whose owner agrees with y on dimensions 0..d."""
    out: algos.Blocks = {}
    for y in group:
        prefix = grid.coords[y][: d + 1]
        out[y] = tuple(sorted(c for key, cs in owner_chunks.items() if key[: d + 1] == prefix
                              for c in cs))
    return out


def hierarchical_program(grid: Grid, owner: dict[int, int], *, reduce_scatter: bool,
                         all_gather: bool) -> list[Msg]:
    """Reduce-scatter up the dimensions and/or all-gather back down.

    ``owner`` maps each chunk to the NPU that owns it (source for all-gather, destination for
    reduce-scatter, the shard holder for all-reduce).
    """
    owner_chunks: dict[tuple[int, ...], list[int]] = {}
    for c, v in owner.items():
        owner_chunks.setdefault(grid.coords[v], []).append(c)
    out: list[Msg] = []
    if reduce_scatter:
        for dim in grid.dims:
            rs = STAGES[dim.kind][0]
            for group in dim.groups:
                if len(group) > 1:
                    out += rs(group, _stage_blocks(grid, dim.index, group, owner_chunks))
    if all_gather:
        for dim in reversed(grid.dims):
            ag = STAGES[dim.kind][1]
            for group in dim.groups:
                if len(group) > 1:
                    out += ag(group, _stage_blocks(grid, dim.index, group, owner_chunks))
    return out
