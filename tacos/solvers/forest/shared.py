"""Trees that share their switch hops across roots: Bruck (binomial) spreading on a crossbar.

A packed tree often reaches the NPUs of one switch as a star: the NPU where it enters (its root,
or the NPU a NIC edge reached) sends its data through the switch to every other NPU there (or
to most of them, some of which forward it through the same switch).  On a
group of n NPUs every NPU then makes one transfer per tree and round through its up-port, n − 1
or more per round in all, each paying α (``docs/forest.md`` §6).

:func:`share_switch_hops` rebuilds every such star as the binomial tree of Bruck's all-gather
over the same NPUs in a fixed cyclic order: the NPU at distance d from the entry (in that order)
gets the data from the one at distance d − 2^⌊log₂ d⌋, at step ⌊log₂ d⌋.  Step b's hops are the
pairs (v, v + 2^b) whatever the entry, so the trees of different roots use the same hops at the
same step, and :func:`~tacos.solvers.forest.pipeline.emit` (``batch='steps'``) sends the slices
of one round, step and hop as one transfer: ⌈log₂ n⌉ transfers per NPU and round for each family
of stars (stars whose entry is at the same depth of its tree), each carrying 1, 2, 4 … trees'
slices.  Over a whole family the up-port and down-port loads of every NPU are the star's
(n − 1 per n entries: each NPU sends and receives once per tree), so the rate is unchanged;
:func:`~tacos.solvers.forest.pack.check_packing` confirms the loads on the packing's
capacities before the trees are used.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from tacos.solvers.forest.pack import Tree, check_packing
from tacos.solvers.forest.rate import Edge

MIN_STAR = 4
"""Stars of fewer leaves are left alone (on 4 NPUs Bruck saves one transfer in three and makes
the last NPU wait for a relay)."""


def _depths(tree: Tree) -> dict[int, int]:
    depth = {tree.root: 0}
    for x, y in tree.edges:
        depth[y] = depth[x] + 1
    return depth


def _rebuild(tree: Tree, order: dict[int, list[int]],
             is_switch: Callable[[int], bool]) -> Tree | None:
    """``tree`` with its switch stars (the edges through one switch, if they form a subtree
    entered at one NPU) replaced by binomial trees, or None if it has none."""
    depth = _depths(tree)
    through: dict[int, list[int]] = defaultdict(list)  # switch -> edges through it
    for e, path in enumerate(tree.paths):
        if len(path) == 3 and is_switch(path[1]) and path[1] in order:
            through[path[1]].append(e)
    keep: dict[tuple[int, int], list[int]] = {}  # (switch, entry) -> edges
    for w, es in through.items():
        reached = {tree.edges[e][1] for e in es}
        entries = {tree.edges[e][0] for e in es} - reached
        if len(entries) == 1 and len(es) >= MIN_STAR:  # one subtree entered at one NPU
            keep[w, entries.pop()] = es
    if not keep:
        return None
    dropped = {e for es in keep.values() for e in es}
    new: dict[int, list[tuple[int, tuple[int, ...], tuple[int, int] | None]]] = defaultdict(list)
    for e, ((x, y), path) in enumerate(zip(tree.edges, tree.paths, strict=True)):
        if e not in dropped:
            new[x].append((y, path, None))
    for (w, entry), es in keep.items():
        members = {entry} | {tree.edges[e][1] for e in es}
        ring = [v for v in order[w] if v in members]
        at = ring.index(entry)
        n = len(ring)
        for d in range(1, n):
            b = d.bit_length() - 1
            x, y = ring[(at + d - (1 << b)) % n], ring[(at + d) % n]
            new[x].append((y, (x, w, y), (depth[entry], b)))
    edges: list[Edge] = []
    paths: list[tuple[int, ...]] = []
    steps: list[tuple[int, int] | None] = []
    queue = [tree.root]
    for x in queue:  # BFS: parents before children
        for y, path, step in new[x]:
            edges.append((x, y))
            paths.append(path)
            steps.append(step)
            queue.append(y)
    return Tree(tree.root, tree.mult, edges, paths, steps)


def share_switch_hops(trees: list[Tree], compute: tuple[int, ...], roots: tuple[int, ...],
                      k: int, caps: dict[Edge, int], is_switch: Callable[[int], bool],
                      ) -> list[Tree] | None:
    """The trees with their switch stars as binomial trees (module docstring), or None when no
    tree has a star.  Only switches that are every attached NPU's fastest port count (NVSwitch,
    not the NICs' rails: a binomial tree there would add slow relay hops to every pipeline).
    All trees are rebuilt if the loads stay within ``caps``; otherwise (stars over some of a
    switch's NPUs load ports unevenly) rebuilt trees that add to an overloaded link are given
    back, the largest contributor first, until every link is within its capacity."""
    attached: dict[int, set[int]] = defaultdict(set)
    group = set(compute)
    for t in trees:
        for path in t.paths:
            if len(path) == 3 and is_switch(path[1]):
                attached[path[1]].update(v for v in (path[0], path[2]) if v in group)
    top: dict[int, int] = defaultdict(int)  # each NPU's largest out-capacity
    for (x, _), c in caps.items():
        top[x] = max(top[x], c)
    order = {w: sorted(vs) for w, vs in attached.items()
             if all(caps.get((v, w), 0) >= top[v] for v in vs)}
    if not order:
        return None
    rebuilt_all = [_rebuild(t, order, is_switch) for t in trees]
    if all(r is None for r in rebuilt_all):
        return None
    # repair: start from every tree rebuilt and give back the rebuilt tree that adds most to
    # an overloaded arc until none is overloaded (at worst all are given back)
    load = check_packing(compute, roots, trees, k, caps)
    delta: dict[int, dict[Edge, int]] = {}
    for i, (t, r) in enumerate(zip(trees, rebuilt_all, strict=True)):
        if r is not None:
            d = _loads(r)
            for e, u in _loads(t).items():
                d[e] -= u
            delta[i] = {e: u for e, u in d.items() if u}
            for e, u in delta[i].items():
                load[e] = load.get(e, 0) + u
    while True:
        over = [e for e, u in load.items() if u > caps.get(e, 0)]
        if not over:
            break
        worst = max(over, key=lambda e: (load[e] - caps.get(e, 0), e))
        i = max(delta, key=lambda i: (delta[i].get(worst, 0), -i))
        for e, u in delta.pop(i).items():
            load[e] -= u
    if not delta:
        return None
    out = [rebuilt_all[i] if i in delta else t for i, t in enumerate(trees)]
    check_packing(compute, roots, out, k, caps)
    return out


def _loads(tree: Tree) -> dict[Edge, int]:
    """Tree units ``tree`` puts on every physical arc."""
    load: dict[Edge, int] = defaultdict(int)
    for path in tree.paths:
        for hop in zip(path, path[1:], strict=False):
            load[hop] += tree.mult
    return load
