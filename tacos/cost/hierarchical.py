"""The hierarchical (multi-rail) model for multi-dimensional topologies (seed 000, §III-B).

A collective on a ``Ring(a)_FC(b)_Switch(c)`` style topology runs dimension by dimension, in
every group of NPUs that differ only in that dimension's coordinate at once, with the
dimension's congestion-free algorithm (Ring -> ring, FullyConnected -> direct, Switch ->
halving-doubling):

* reduce-scatter: dimensions 1..D, stage d on ``M / Π_{j<d} P_j`` bytes;
* all-gather: dimensions D..1 (the mirror image); all-reduce: both;
* broadcast / reduce: one stage per dimension on the whole buffer, only in the groups that
  already hold (or still owe) data;
* scatter / gather: outermost dimension first, stage d on ``M / Π_{j>d} P_j``;
* all-to-all: one all-to-all of the whole buffer per dimension.

The product structure (groups per dimension, member orders) is the hierarchical baseline's
own (:func:`tacos.solvers.baselines.hier.analyse`), so both cut the topology the same way; it
is analysed once per topology and restricted to each process group (:func:`sub_grid`), which
gives what ``analyse`` gives for that group without re-reading the whole topology per group.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod

from tacos.cost import programs
from tacos.cost.steps import Step, merge
from tacos.errors import TacosError
from tacos.solvers.baselines.hier import Dimension, Grid, analyse
from tacos.solvers.lowering.hops import NpuGraph

#: dimension kind -> algorithm of its stages
STAGE_ALGORITHM = {"ring": "ring", "fc": "direct", "switch": "halving-doubling"}


def _stage(grid: Grid, d: int, kind: str, scale: float, holders: set[int] | None = None,
           root_of: dict[tuple[int, ...], int] | None = None) -> list[Step]:
    """Concurrent runs of collective ``kind`` in the groups of dimension ``d``."""
    dim = grid.dims[d]
    build = programs.ALGORITHMS[STAGE_ALGORITHM[dim.kind]][0]
    runs = []
    for group in dim.groups:
        if len(group) < 2 or (holders is not None and not holders & set(group)):
            continue
        root = None
        if holders is not None:
            root = next(v for v in group if v in holders)
        runs.append(build(list(group), kind, root=root, scale=scale))
    return merge(runs)


def sub_grid(whole: Grid, members: Sequence[int], order) -> Grid:
    """``whole`` restricted to ``members``: each dimension's groups cut down to the members
    (a fully connected dimension of two becomes a ring, as ``analyse`` classifies it);
    ``order(group)`` orders a ring's members.  Raises when the members are not a product."""
    inside = set(members)
    dims = []
    total = 1
    for dim in whole.dims:
        groups = [tuple(v for v in g if v in inside) for g in dim.groups]
        groups = [g for g in groups if g]
        sizes = {len(g) for g in groups}
        if len(sizes) != 1:
            raise TacosError(f"dimension {dim.index} has groups of different sizes "
                             f"{sorted(sizes)} in this process group",
                             hint="choose a process group that is a product of whole or "
                             "equally cut dimensions")
        size = sizes.pop()
        total *= size
        kind = "ring" if dim.kind == "fc" and size <= 2 else dim.kind
        ordered = tuple(tuple(order(g) if kind == "ring" else sorted(g)) for g in groups)
        dims.append(Dimension(dim.index, kind, ordered))
    if total != len(inside):
        raise TacosError("the process group is not a product of the topology's dimensions")
    return Grid({v: whole.coords[v] for v in members}, tuple(dims))


def whole_grid(graph: NpuGraph) -> Grid:
    """The product structure of every live NPU (the hierarchical baseline's ``analyse``)."""
    return analyse(graph.topology, graph.topology.live_npus, graph)


def hierarchical(grid: Grid, kind: str, *, root: int | None = None, k: int = 1,
                 scale: float = 1.0) -> list[Step]:
    """Steps of the hierarchical algorithm for ``kind`` on ``grid`` (see module doc)."""
    sizes = [len(d.groups[0]) for d in grid.dims]
    dims = range(len(sizes))
    out: list[Step] = []
    if kind in ("reducescatter", "allreduce"):
        for d in dims:
            out += _stage(grid, d, "reducescatter", scale / prod(sizes[:d]))
    if kind in ("allgather", "allreduce"):
        for d in reversed(dims):
            out += _stage(grid, d, "allgather", scale / prod(sizes[:d]))
    if kind in ("reducescatter", "allreduce", "allgather"):
        return out
    if kind == "alltoall":
        return [s for d in dims for s in _stage(grid, d, "alltoall", scale)]
    if root is None:
        raise programs.unsupported("hierarchical", kind)
    stages = []
    holders = {root}
    for d in (list(dims) if kind in ("broadcast", "reduce") else list(reversed(dims))):
        frac = scale if kind in ("broadcast", "reduce") else scale / prod(sizes[d + 1:])
        sub = "broadcast" if kind in ("broadcast", "reduce") else "scatter"
        stages.append(_stage(grid, d, sub, frac, holders))
        holders = {v for g in grid.dims[d].groups if holders & set(g) for v in g}
    if kind in ("reduce", "gather"):
        return [_reverse(s) for st in reversed(stages) for s in st]
    return [s for st in stages for s in st]


def _reverse(step: Step) -> Step:
    """The mirror-image step (every send turned around, pipelines read backwards)."""
    sends = tuple(type(s)(s.dst, s.src, s.frac, s.load) for s in step.sends)
    segs = (tuple(tuple(p[::-1] for p in seg) for seg in reversed(step.segments))
            if step.segments else None)
    return Step(sends, step.label, segs, step.mode, step.cycles)

