"""Trees that merge roots' slices on the NIC rails of three or more switch islands.

On P ≥ 3 nodes whose GPUs sit on one fast switch each (NVSwitch) and whose GPU i of every node
meets GPU i of the others on a rail (a NIC switch per position), a packing with one tree per root
sends every root's data to the P − 1 other nodes through the root's own NIC: P − 1 NIC transfers
per GPU and round, each paying the rail route's α (``docs/benchmarks/forest-alpha.md``).

:func:`nic_merge_trees` lets a root's data first reach another GPU g of its node inside its own
Bruck (binomial) spreading (:mod:`~tacos.solvers.forest.shared`), which it passes anyway, and
cross to node m + f on rail g.  Which GPU carries which root to which offset f is
:func:`assign_carriers`: the NICs' shares per offset by the north-west corner rule
(:func:`nic_loads`: every NIC carries its share and serves one offset, or two where an offset's
units run out inside its share: ``offsets − 1`` NICs at most, none when the offsets divide the
NICs), then the roots' units onto those shares by a min-cost transportation (networkx) that
prefers carriers near the root in its binomial tree.  The slices of all roots a NIC carries to
one node at one step travel as ONE transfer (the NIC edges are labelled with one (family,
step), :func:`~tacos.solvers.forest.pipeline.step_groups`).  The assignment is the same in
every node (offsets, not node ids), so NIC g of node n receives from the nodes n − f of the
offsets g serves: as many transfers per round as it sends.  At the destination the entry GPU
spreads the slices through the switch as Bruck trees (one family for all the data the NICs
bring), as forest_shared does.

Loads: a root's own spreading and the destination's spreading are Bruck trees over the whole
node with entries spread evenly (every GPU is a root; every GPU's NIC brings the same units), so
every GPU sends and receives through the fast switch once per unit, as the packed stars did, and
the carrier hop is an edge of the root's own spreading (no extra load); a NIC carries its exact
share.  With K units per root the capacities are the one-tree packing's scaled by K;
:func:`~tacos.solvers.forest.pack.check_packing` confirms the trees on them.  (Levelling the
NICs' bytes against α, so that a NIC serving two offsets carries a little less, was measured
slower on 4x DGX: ``docs/benchmarks/forest-nic.md``.)
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from tacos.solvers.forest.pack import Tree, checked
from tacos.solvers.forest.rails import _bruck, _tree, switch_islands
from tacos.solvers.forest.rate import Edge, Rate

NIC_FAMILY = 1
"""Step family of the NIC edges (the roots' own spreading is family 0)."""
SPREAD_FAMILY = 2
"""Step family of the spreading at the destination node."""
FEED_FAMILY = -2
"""Step family of a root's own spreading edges that lead to a carrier: their slices go before
the spreading of data the NICs brought in two rounds earlier (a lower step is sent first), so
the NICs are fed ahead of time."""


@dataclass(frozen=True)
class RailLayout:
    """P equal switch islands (NPUs in order), their fast switches and the rail switch of every
    position (GPU i of every island meets on ``rails[i]``)."""

    islands: list[list[int]]
    fast: list[int]
    rails: list[int]


def rail_layout(group: tuple[int, ...], caps: dict[Edge, int],
                is_switch: Callable[[int], bool]) -> RailLayout | None:
    """The layout of ``group`` on the packing's capacity graph, or None unless it has at least
    three equal islands of at least 4 NPUs, each NPU's largest switch port leading to its
    island's switch, and one rail switch per position reaching that position in every island
    (and no other group NPU)."""
    found = switch_islands(group, caps, is_switch)
    if found is None:
        return None
    out_caps, fast, islands = found
    n = len(islands[0])
    if len(islands) < 3 or n < 4 or any(len(i) != n for i in islands):
        return None
    members = set(group)
    rails = []
    for pos in range(n):
        column = [isl[pos] for isl in islands]
        common = set.intersection(*({w for w in out_caps[v] if is_switch(w) and w not in fast}
                                    for v in column))
        ok = [w for w in sorted(common)
              if {y for y in out_caps[w] if y in members} == set(column)
              and all(out_caps[w].get(v, 0) > 0 for v in column)]
        if not ok:
            return None
        rails.append(ok[0])
    return RailLayout(islands, fast, rails)


def bruck_depth(d: int) -> int:
    """Depth of the NPU at cyclic distance ``d`` in a binomial tree (number of set bits)."""
    return bin(d).count("1")


def _walk(loads: list[int], offsets: int, per: int) -> list[dict[int, int]]:
    """Fill offsets 1 … ``offsets`` (``per`` units each) over the NICs in order, NIC g taking
    ``loads[g]`` units (the north-west corner rule: a NIC serves two offsets only where an
    offset's units run out inside its share)."""
    out: list[dict[int, int]] = []
    f, left = 1, per
    for load in loads:
        mine: dict[int, int] = {}
        while load > 0 and f <= offsets:
            take = min(load, left)
            mine[f] = mine.get(f, 0) + take
            load -= take
            left -= take
            if left == 0:
                f, left = f + 1, per
        out.append(mine)
    return out


def nic_loads(n: int, offsets: int, units: int, cap: int) -> list[dict[int, int]] | None:
    """Units NIC position g carries to each offset: ``[{f: units}]``, f = 1 … ``offsets``.

    Every offset takes n·``units`` units (every root's) and every NIC its exact share,
    ``offsets``·``units``; NICs are filled in order (:func:`_walk`), so at most ``offsets`` − 1
    of them serve two offsets.  None when the share exceeds ``cap``."""
    share = offsets * units
    if share > cap:
        return None
    return _walk([share] * n, offsets, n * units)


def assign_carriers(n: int, offsets: int, units: int, cap: int,
                    ) -> dict[tuple[int, int], dict[int, int]] | None:
    """Which NIC position g carries how many of root position r's ``units`` to offset f:
    {(r, f): {g: units}}.  The NIC loads come from :func:`nic_loads`; for each offset the roots'
    units go to the NICs by a min-cost transportation (networkx), the cost being the carrier's
    depth in the root's binomial tree (a deeper carrier gets the root's slices later).  None
    when the loads are infeasible."""
    import networkx as nx

    loads = nic_loads(n, offsets, units, cap)
    if loads is None:
        return None
    out: dict[tuple[int, int], dict[int, int]] = {}
    for f in range(1, offsets + 1):
        g_net = nx.DiGraph()
        for r in range(n):
            g_net.add_node(("r", r), demand=-units)
        for g in range(n):
            g_net.add_node(("g", g), demand=loads[g].get(f, 0))
            for r in range(n):
                if loads[g].get(f, 0):
                    g_net.add_edge(("r", r), ("g", g), weight=bruck_depth((g - r) % n),
                                   capacity=units)
        flow = nx.min_cost_flow(g_net)
        for r in range(n):
            out[r, f] = {g: u for (_, g), u in sorted(flow[("r", r)].items()) if u > 0}
    return out


def _split(carriers: dict[int, dict[int, int]], units: int) -> list[tuple[int, dict[int, int]]]:
    """Root trees from per-offset carrier units: (multiplicity, {offset: carrier}), merging
    the offsets' unit sequences (a tree ends wherever some offset changes carrier)."""
    seqs = {f: sorted(c.items()) for f, c in carriers.items()}
    cuts = {0, units}
    for seq in seqs.values():
        acc = 0
        for _, u in seq:
            acc += u
            cuts.add(acc)
    edges = sorted(cuts)
    out = []
    for lo, hi in zip(edges, edges[1:], strict=False):
        pick = {}
        for f, seq in seqs.items():
            acc = 0
            for g, u in seq:
                if acc <= lo < acc + u:
                    pick[f] = g
                    break
                acc += u
        out.append((hi - lo, pick))
    return out


def nic_merge_trees(group: tuple[int, ...], roots: tuple[int, ...], rate: Rate,
                    is_switch: Callable[[int], bool], units: int = 1,
                    ) -> tuple[list[Tree], Rate] | None:
    """Trees as in the module docstring for a one-tree-per-root ``rate`` (k = 1), with
    ``units`` tree units per root, and the rate they are checked on: the capacities times
    ``units``.  None when the layout does not apply or the trees do not fit."""
    if rate.k != 1 or set(roots) != set(group):
        return None
    layout = rail_layout(group, rate.caps, is_switch)
    if layout is None:
        return None
    islands, fast, rails = layout.islands, layout.fast, layout.rails
    p, n = len(islands), len(islands[0])
    nic_cap = min(rate.caps.get((isl[g], rails[g]), 0) for isl in islands for g in range(n))
    plan = assign_carriers(n, p - 1, units, nic_cap * units)
    if plan is None:
        return None
    trees: list[Tree] = []
    for m, here in enumerate(islands):
        for i, r in enumerate(here):
            own = _bruck(here[i:] + here[:i], fast[m], 0)
            for mult, pick in _split({f: plan[i, f] for f in range(1, p)}, units):
                edges = list(own)
                for f, g in sorted(pick.items()):
                    there = islands[(m + f) % p]
                    x, y = here[g], there[g]
                    edges.append((x, y, (x, rails[g], y), (NIC_FAMILY, 0)))
                    edges += _bruck(there[g:] + there[:g], fast[(m + f) % p], SPREAD_FAMILY)
                trees.append(_feed_first(_tree(r, mult, edges)))
    caps = {e: c * units for e, c in rate.caps.items()}  # every NIC carries its exact share
    scaled = Rate(rate.x, units, rate.u * units, caps, rate.cut, rate.exact, rate.slowdown,
                  rate.checks)
    return None if checked(group, roots, trees, units, caps) is None else (trees, scaled)


def _feed_first(tree: Tree) -> Tree:
    """``tree`` with the root's own spreading edges above a NIC edge relabelled
    :data:`FEED_FAMILY`."""
    steps = list(tree.steps or [])
    parent = {y: e for e, (_, y) in enumerate(tree.edges)}
    for e, step in enumerate(steps):
        if step == (NIC_FAMILY, 0):
            up = parent.get(tree.edges[e][0])
            while up is not None and steps[up] is not None and steps[up][0] == 0:
                steps[up] = (FEED_FAMILY, steps[up][1])
                up = parent.get(tree.edges[up][0])
    return Tree(tree.root, tree.mult, tree.edges, tree.paths, steps)


def nic_peers(trees: list[Tree]) -> dict[int, set[int]]:
    """For every NPU, the NPUs its NIC edges reach (one per offset it serves): the distinct
    destinations its NIC sends to at each step."""
    out: dict[int, set[int]] = defaultdict(set)
    for t in trees:
        for (x, y), step in zip(t.edges, t.steps or [None] * len(t.edges), strict=True):
            if step == (NIC_FAMILY, 0):
                out[x].add(y)
    return out
