"""forest's candidate packings as data: an ordered tuple of :class:`Candidate`, each a builder
of other trees for the packings the rate and the tree packer made, with its gate, the option
that turns it off, and the systems its rules were tuned on.

The solver packs the trees of every tree count (:func:`~tacos.solvers.forest.solver.plan_forest`),
then asks every candidate of :data:`PER_PACKING` in order for another packing of the same
phases, and those of :data:`ONCE` for one from the first packing; it times them all alike and
keeps the fastest schedule.  A candidate with ``instead_of`` is asked only when that earlier
candidate built nothing, for this tree count or any other of the same solve (the solver asks
every tree count's integer program before any fallback).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from tacos.model.topology import Topology
from tacos.solvers.forest.nic import nic_merge_trees
from tacos.solvers.forest.pack import Tree, check_packing
from tacos.solvers.forest.packing import Forest, group_topology
from tacos.solvers.forest.rails import rail_pair_trees
from tacos.solvers.forest.rate import link_capacities
from tacos.solvers.forest.shallow import shallow_trees
from tacos.solvers.forest.shared import share_switch_hops
from tacos.solvers.forest.symmetric import find_symmetry
from tacos.solvers.forest.timed import timed_trees
from tacos.solvers.forest.timed_links import link_program, timed_link_trees
from tacos.solvers.forest.torus import dimension_trees
from tacos.solvers.islands import find_islands

SHALLOW_MAX = 32
"""Largest group also packed by the depth-bounded program (:mod:`forest_shallow`), where NPUs
reach each other mostly by direct links (:func:`_npu_fabric`)."""
PHASES_SHARE_PROGRAM = True
"""A reduction phase whose step-timed program over physical links is the copy phase's (the same
arcs, lanes, capacities, roots and k, in any order: a symmetric topology reversed) takes the
copy phase's trees instead of solving it again; off: every phase solves its own program (the
same trees on the reversed links, so the same makespan: 2x MI250 all-reduce 82.47% / 94.03%
of the optimum at 64 MiB / 1 GiB either way)."""
LINK_TIMED_K = (2,)
"""Tree counts per root the step-timed program over physical links
(:mod:`~tacos.solvers.forest.timed_links`) is built for where the exact rate's is not."""


@dataclass(frozen=True)
class Context:
    """What a candidate builds from: one tree count's ``forests`` (one per phase), the
    topology and group, whether the packer kept island order, whether the user fixed the tree
    count, and the caches the step-timed and depth-bounded programs share across tree counts
    (a reduction phase with the same capacities both ways reuses the all-gather's trees)."""

    forests: list[Forest]
    topology: Topology
    group: tuple[int, ...]
    order: bool
    fixed: bool
    stepped: dict[tuple, list[Tree] | None]
    deep: dict[tuple, list[Tree] | None]

    @property
    def small(self) -> bool:
        """A group the integer programs afford, reaching itself mostly by direct links."""
        return len(self.group) <= SHALLOW_MAX and _npu_fabric(self.topology, self.group)


@dataclass(frozen=True)
class Candidate:
    """One way to build other trees for a packing (see the module docstring)."""

    name: str
    option: str
    """The solver option (default true) that turns the candidate off."""
    build: Callable[[Context], list[Forest] | None]
    gate: Callable[[Context], bool]
    tuned_on: tuple[str, ...]
    """Systems the rules were measured on (``docs/forest.md``)."""
    instead_of: str | None = None
    costly: bool = False
    """An integer program (seconds, not milliseconds): asked only when the packing it starts
    from could still win (:func:`candidates`' ``worth``)."""


def _npu_fabric(topo: Topology, group: tuple[int, ...]) -> bool:
    """Whether every group NPU has more bandwidth on direct links to NPUs than to switches
    (switch-free boxes, or such boxes joined by NIC switches: MI250, DGX-1, NDv2; not
    NVSwitch systems, whose trees :mod:`~tacos.solvers.forest.shared` rebuilds)."""
    direct: dict[int, float] = defaultdict(float)
    switched: dict[int, float] = defaultdict(float)
    for lk in topo.links:
        (switched if topo.is_switch(lk.dst) else direct)[lk.src] += lk.bandwidth * lk.multiplicity
    return all(direct[v] > switched[v] for v in group)


def _shared(forests: list[Forest], topology: Topology,
            group: tuple[int, ...]) -> list[Forest] | None:
    """The forests with their switch stars rebuilt to share hops across roots
    (:func:`~tacos.solvers.forest.shared.share_switch_hops`), or None if no phase changes."""
    out, changed = [], False
    done: dict[tuple, list[Tree] | None] = {}  # by the inputs: all-reduce's phases often agree
    for f in forests:
        key = (tuple((t.root, t.mult, tuple(t.edges), tuple(t.paths),
                      None if t.steps is None else tuple(t.steps),
                      None if t.order is None else tuple(t.order)) for t in f.trees),
               f.roots, f.rate.k, tuple(f.rate.caps.items()))
        if key not in done:
            done[key] = share_switch_hops(f.trees, group, f.roots, f.rate.k,
                                          f.rate.caps, topology.is_switch)
        trees = done[key]
        if trees is not None:  # (each phase its own trees: callers may rebuild them)
            trees = [replace(t, edges=list(t.edges), paths=list(t.paths)) for t in trees]
        changed |= trees is not None
        out.append(replace(f, trees=trees) if trees is not None else f)
    return out if changed else None


def _shallow(forests: list[Forest], group: tuple[int, ...],
             cache: dict[tuple, list[Tree] | None]) -> list[Forest] | None:
    """The forests with depth-bounded trees from an integer program
    (:func:`~tacos.solvers.forest.shallow.shallow_trees`), or None unless every phase is at the
    exact rate (or has one tree per root and no exact-rate packing was built), and has them
    (``cache`` keeps them per capacities, paths and tree count: a reduction phase on a
    topology with equal capacities both ways reuses the all-gather trees)."""
    # the exact rate, or one tree per root where no exact packing was built (2x MI250's exact
    # k = 83 is too large); other fixed k never won on MI250 and only shift the search budget
    single = ("exact",) not in cache
    if not all(f.rate.exact or (f.rate.k == 1 and single) for f in forests):
        return None
    if all(f.packing == "symmetric" for f in forests):
        return None  # translated shortest-path trees are as shallow as trees can be
    out = []
    for f in forests:
        key = (f.rate.k, f.roots, tuple(sorted(f.split.caps.items())),
               tuple(sorted((e, tuple(p)) for e, p in f.split.paths.items())),
               tuple(sorted(f.rate.caps.items())))
        if key not in cache:
            cache[key] = shallow_trees(group, f.roots, f.rate.k, f.split, f.rate.caps)
        if cache[key] is None:
            return None
        out.append(replace(f, trees=cache[key]))
    if all(f.rate.exact for f in forests):
        cache[("exact",)] = []
    return out


def _timed(forests: list[Forest], topology: Topology, group: tuple[int, ...],
           cache: dict[tuple, list[Tree] | None], fixed: bool = False) -> list[Forest] | None:
    """The forests with step-timed trees (:func:`~tacos.solvers.forest.timed.timed_trees`),
    or None unless the group has islands (:func:`~tacos.solvers.islands.find_islands`) and
    every phase is at the exact rate and has them (``cache`` as in :func:`_shallow`: a
    reduction phase with the same capacities both ways reuses them).  Where NIC switches join
    the group, the trees are timed over physical links
    (:func:`~tacos.solvers.forest.timed_links.timed_link_trees`) at a k of
    :data:`LINK_TIMED_K`: when the tree count is ``fixed`` by the user, or when the exact
    rate's k was too large for the ``"auto"`` choice (which comes first)."""
    if all(f.packing == "symmetric" for f in forests):
        return None  # tori and rings: the dimension-ordered trees time their steps already
    islands = [i for i in find_islands(topology, group) if len(i) > 1]
    if not islands:  # (DGX-1, meshes: the depth-bounded trees tie with them at a third of
        return None  # the program's time; islands are what make the program small and needed)
    if all(f.rate.exact for f in forests):
        cache[("exact",)] = []  # (the "auto" tree count comes first: it is the exact rate)
    switched = any(topology.is_switch(lk.dst) for lk in group_topology(topology, group).links)
    if switched:  # boxes joined by NIC switches: time the physical links (forest_timed_links),
        # at a fixed k only where the exact rate's k was too large to pack (2x MI250: 83; 2x
        # NDv2's exact k = 1 wins, and the program would search ~40 s for nothing)
        if ("exact",) in cache and not fixed or not all(f.rate.k in LINK_TIMED_K
                                                         for f in forests):
            return None
    elif not all(f.rate.exact for f in forests):
        return None
    out: list[Forest | None] = [None] * len(forests)
    # the copy phase first: a reduction phase with the same program takes its trees (below)
    for j in sorted(range(len(forests)), key=lambda j: forests[j].reverse):
        f = forests[j]
        topo = group_topology(topology, group)
        topo = topo.reversed() if f.reverse else topo
        if switched:  # keyed by the program's content, not its order: a reduction phase
            # whose reversed links are the copy phase's (2x MI250) reuses the copy's trees
            key = ("links", f.rate.k, f.roots, link_program(topo, group),
                   tuple(sorted(f.rate.caps.items())),
                   None if PHASES_SHARE_PROGRAM else f.reverse)
            if key not in cache:
                cache[key] = timed_link_trees(topo, group, f.roots, f.rate.k, f.rate.caps,
                                              islands)
            if cache[key] is None:
                return None
            out[j] = replace(f, trees=cache[key], packing="timed")
            continue
        lanes: dict[tuple[int, int], int] = defaultdict(int)
        for lk in topo.links:
            lanes[lk.src, lk.dst] += lk.multiplicity
        key = (f.rate.k, f.roots, tuple(sorted(f.split.caps.items())),
               tuple(sorted((e, tuple(p)) for e, p in f.split.paths.items())),
               tuple(sorted(f.rate.caps.items())), tuple(sorted(lanes.items())))
        if key not in cache:
            cache[key] = timed_trees(group, f.roots, f.rate.k, f.split, f.rate.caps,
                                     dict(lanes), islands)
        if cache[key] is None:
            return None
        out[j] = replace(f, trees=cache[key], packing="timed")
    return [f for f in out if f is not None]


def _rails(forests: list[Forest], topology: Topology,
           group: tuple[int, ...]) -> list[Forest] | None:
    """The forests with two trees per root built for two switch islands joined by rails
    (:func:`~tacos.solvers.forest.rails.rail_pair_trees`), or None unless every phase has them."""
    out = []
    for f in forests:
        trees = rail_pair_trees(group, f.roots, f.rate.k, f.rate.caps, topology.is_switch)
        if trees is None:
            return None
        out.append(replace(f, trees=trees))
    return out


def _nic(forests: list[Forest], topology: Topology,
         group: tuple[int, ...]) -> list[Forest] | None:
    """The forests with trees that merge roots' slices on the NIC rails of three or more
    switch islands (:func:`~tacos.solvers.forest.nic.nic_merge_trees`, every NIC carrying its
    exact share), or None unless every phase has one tree per root and that layout."""
    out = []
    for f in forests:
        built = nic_merge_trees(group, f.roots, f.rate, topology.is_switch)
        if built is None:
            return None
        out.append(replace(f, trees=built[0], rate=built[1]))
    return out


def _dims(forests: list[Forest], topology: Topology,
          group: tuple[int, ...]) -> list[Forest] | None:
    """The forests with the dimension-ordered trees of a torus
    (:func:`~tacos.solvers.forest.torus.dimension_trees`: k = 2d per root, checked against the
    capacities of the rate they claim), or None unless every phase is rooted at every NPU of a
    switch-free topology and has them."""
    npus = set(group)
    if any(topology.is_switch(v) or v not in npus for v in range(topology.n_nodes)):
        return None
    out = []
    for f in forests:
        if set(f.roots) != npus:
            return None
        topo = group_topology(topology, group)
        topo = topo.reversed() if f.reverse else topo
        sym = find_symmetry(topo, group, f.split, topology.n_nodes)
        if sym is None:
            return None
        graph = link_capacities(topo, group, f.roots)
        bws = set(graph.bw.values())
        if len(bws) != 1:
            return None
        built = dimension_trees(sym, graph.bw, f.rate.x, bws.pop())
        if built is None:
            return None
        trees, rate = built
        check_packing(group, f.roots, trees, rate.k, rate.caps)
        out.append(replace(f, rate=rate, trees=trees, packing="dims"))
    return out


PER_PACKING: tuple[Candidate, ...] = (
    Candidate("timed", "timed",
              lambda c: _timed(c.forests, c.topology, c.group, c.stepped, c.fixed),
              lambda c: c.small, ("1x MI250", "2x MI250", "2x NDv2"), costly=True),
    # step-timed trees win on MI250 in a fraction of the depth-bounded program's time
    Candidate("shallow", "shallow", lambda c: _shallow(c.forests, c.group, c.deep),
              lambda c: c.small, ("1x MI250", "2x MI250"), instead_of="timed", costly=True),
    # the same trees with Bruck spreading on switches
    Candidate("shared", "share", lambda c: _shared(c.forests, c.topology, c.group),
              lambda c: True, ("DGX-A100", "2x DGX-A100", "DGX-H100")),
    Candidate("rails", "share", lambda c: _rails(c.forests, c.topology, c.group),
              lambda c: c.order, ("2x DGX-A100", "2x DGX-H100")),
    # roots' slices merged on the NIC rails
    Candidate("nic", "nic", lambda c: _nic(c.forests, c.topology, c.group),
              lambda c: c.order, ("4x DGX-A100", "4x DGX-H100")),
)
ONCE: tuple[Candidate, ...] = (
    # tori: the multi-port bucket all-gather
    Candidate("dims", "dims", lambda c: _dims(c.forests, c.topology, c.group),
              lambda c: True, ("6x6x6 torus", "8x8x8 torus", "TPU v4")),
)


def candidates(table: tuple[Candidate, ...], ctx: Context, options: dict[str, Any],
               worth: Callable[[Candidate], bool] | None = None) -> list[list[Forest]]:
    """The packings the candidates of ``table`` build for ``ctx``, in table order (each asked
    when its option is on, its gate holds and, with ``instead_of``, that one built nothing).
    A ``costly`` candidate is asked only when ``worth(candidate)`` holds (the caller's bound:
    whether trees like these could still beat the best schedule timed so far)."""
    return [f for _, f in named_candidates(table, ctx, options, worth)]


def named_candidates(table: tuple[Candidate, ...], ctx: Context, options: dict[str, Any],
                     worth: Callable[[Candidate], bool] | None = None,
                     built_before: set[str] | frozenset[str] = frozenset(),
                     ) -> list[tuple[str, list[Forest]]]:
    """:func:`candidates` with the name of the candidate that built each packing.
    ``built_before`` names the candidates that built a packing for another tree count of the
    same solve: a candidate ``instead_of`` one of them is not asked either (2x MI250: the
    step-timed trees at k = 2 make the depth-bounded program at k = 1 unnecessary)."""
    built: dict[str, list[Forest] | None] = {}
    for cand in table:
        if cand.instead_of is not None and (built.get(cand.instead_of) is not None
                                            or cand.instead_of in built_before):
            continue
        if cand.costly and worth is not None and not worth(cand):
            continue
        if options.get(cand.option, True) and cand.gate(ctx):
            built[cand.name] = cand.build(ctx)
    return [(name, f) for name, f in built.items() if f is not None]
