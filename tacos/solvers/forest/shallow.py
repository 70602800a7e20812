"""Depth-bounded tree packings by constraint programming, for small groups of directly linked NPUs.

The Lovász packer (:mod:`~tacos.solvers.forest.pack`) grows trees greedily: where capacity is
tight on every link (1x MI250: k = 3, 16 GCDs, every xGMI lane is needed at 92%) the last trees
take long detours (depth 9), and a pipeline pays fill and drain along the deepest tree.

:func:`shallow_trees` builds the k trees of every root as one constraint program (OR-Tools
CP-SAT, one worker and a deterministic time limit, so the same input gives the same trees) with
the tree depth bounded by D, the smallest D for which a packing is found (starting at the roots'
hop eccentricity; a bound proved infeasible or not solved within :data:`FIND_TIME` is raised by
one), and then the total depth (sum of node levels) minimized:

* x[t, a] ∈ {0, 1}: arc a is in tree t; every non-root node has exactly one arc in, the root
  none;
* levels l[t, v] ∈ [0, D], l[t, root] = 0, and x[t, (u, v)] = 1 ⇒ l[t, v] ≥ l[t, u] + 1 (an
  enforced linear constraint; no cycles, so the in-arcs form an arborescence of depth ≤ D);
* the summed loads respect the packing's integer capacities on every arc.

**Symmetry.**  The program is built for one root of every orbit of the capacity graph's
automorphism group (found with networkx; a permutation is kept only if every arc maps to an arc
of equal capacity, checked again here); the other roots' trees are the images of their
representative's trees under one automorphism each, and the capacity constraint sums those
images.  On 1x MI250 the group has order 4 and acts freely (4 orbits of 4 GCDs), so the program
has 12 trees instead of 48.  The result is checked with
:func:`~tacos.solvers.forest.pack.check_packing`; any failure returns None.

OR-Tools is optional (the ``ilp`` extra): without it there is no depth-bounded candidate and
the solver keeps the other packings (:func:`have_cp_sat`).
"""

from __future__ import annotations

import importlib.util
from collections import OrderedDict

from tacos.solvers.forest.pack import Tree, _map_paths, checked
from tacos.solvers.forest.rate import Edge
from tacos.solvers.forest.split import SplitGraph, hop_distances, successors

MAX_BINARIES = 3000
"""Largest program (tree-arc variables) attempted."""
MAX_AUTOMORPHISMS = 512
"""Most automorphisms enumerated."""
EXTRA_DEPTH = 3
"""Depth bounds tried above the smallest possible one."""
FIND_TIME = 2.0
"""Deterministic seconds (CP-SAT's work measure) to find a packing within one depth bound."""
IMPROVE_TIME = 4.0
"""Deterministic seconds to minimize the total depth of the packing found."""


_AUTOMORPHISMS: OrderedDict[tuple, list[dict[int, int]]] = OrderedDict()
AUTOMORPHISMS_KEPT = 16
"""Capacity patterns whose automorphisms are kept (a solve asks for the same ones for the
step-timed and the depth-bounded programs, at every tree count and for a sweep's sizes)."""


def automorphisms(nodes: tuple[int, ...], caps: dict[Edge, int]) -> list[dict[int, int]]:
    """Permutations of ``nodes`` that map every positive-capacity arc to an arc of equal
    capacity (at most :data:`MAX_AUTOMORPHISMS`, identity first).

    The enumeration depends only on the nodes, the positive arcs in their order and which of
    them have equal capacities, so its result is kept by that pattern (the most recent
    :data:`AUTOMORPHISMS_KEPT`): capacities scaled for another tree count give the same list."""
    ids: dict[int, int] = {}
    pattern = tuple((x, y, ids.setdefault(c, len(ids))) for (x, y), c in caps.items() if c > 0)
    key = (tuple(nodes), pattern)
    found = _AUTOMORPHISMS.get(key)
    if found is None:
        found = _AUTOMORPHISMS[key] = _enumerate(nodes, caps)
        while len(_AUTOMORPHISMS) > AUTOMORPHISMS_KEPT:
            _AUTOMORPHISMS.popitem(last=False)
    else:
        _AUTOMORPHISMS.move_to_end(key)
    return [dict(m) for m in found]


def _enumerate(nodes: tuple[int, ...], caps: dict[Edge, int]) -> list[dict[int, int]]:
    """:func:`automorphisms`, enumerated (networkx's VF2 on the positive arcs)."""
    import networkx as nx
    from networkx.algorithms.isomorphism import DiGraphMatcher

    g = nx.DiGraph()
    g.add_nodes_from(nodes)
    for (x, y), c in caps.items():
        if c > 0:
            g.add_edge(x, y, c=c)
    matcher = DiGraphMatcher(g, g, edge_match=lambda a, b: a["c"] == b["c"])
    out = [{v: v for v in nodes}]
    for m in matcher.isomorphisms_iter():
        if len(out) >= MAX_AUTOMORPHISMS:
            break
        if any(m[v] != v for v in nodes) and _is_automorphism(m, caps):
            out.append(dict(m))
    return out


def _is_automorphism(m: dict[int, int], caps: dict[Edge, int]) -> bool:
    return all(caps.get((m[x], m[y]), 0) == c for (x, y), c in caps.items())


def _transversal(roots: tuple[int, ...], auts: list[dict[int, int]]
                 ) -> dict[int, tuple[int, dict[int, int]]]:
    """For every root: its orbit's representative (smallest root) and an automorphism mapping
    the representative onto it."""
    out: dict[int, tuple[int, dict[int, int]]] = {}
    for r in sorted(roots):
        if r in out:
            continue
        for m in auts:
            v = m[r]
            if v in roots and v not in out:
                out[v] = (r, m)
    return out


def representatives(roots: tuple[int, ...], auts: list[dict[int, int]],
                    ) -> tuple[dict[int, tuple[int, dict[int, int]]], list[int]] | None:
    """For every root its orbit's representative and one of ``auts`` mapping the
    representative onto the root (:func:`_transversal`), and the representatives; None when
    some root is in no representative's orbit."""
    images = _transversal(roots, auts)
    if set(images) != set(roots):
        return None
    return images, sorted({rep for rep, _ in images.values()})


def _solve(group: tuple[int, ...], reps: list[int], k: int, arcs: list[Edge],
           caps: dict[Edge, int], images: list[tuple[int, dict[int, int]]], depth: int,
           ) -> list[Tree] | None:
    """The program of the module docstring for trees of ``reps`` with depth ≤ ``depth``: a
    feasible packing first (:data:`FIND_TIME`), then the total depth minimized from it
    (:data:`IMPROVE_TIME`); None if none was found."""
    from ortools.sat.python import cp_model

    arc_id = {a: i for i, a in enumerate(arcs)}
    trees = [r for r in reps for _ in range(k)]
    model = cp_model.CpModel()
    x: dict[tuple[int, int], cp_model.IntVar] = {}
    level: list[cp_model.IntVar] = []
    for i, r in enumerate(trees):
        lv = {v: model.new_int_var(0 if v == r else 1, 0 if v == r else depth, f"l{i}_{v}")
              for v in group}
        level += lv.values()
        into: dict[int, list] = {v: [] for v in group}
        for a, (u, v) in enumerate(arcs):
            if v == r:
                continue
            x[i, a] = model.new_bool_var(f"x{i}_{a}")
            model.add(lv[v] >= lv[u] + 1).only_enforce_if(x[i, a])
            into[v].append(x[i, a])
        for v in group:
            if v != r:
                model.add_exactly_one(into[v])
    load: dict[int, list] = {a: [] for a in range(len(arcs))}
    for rep, m in images:
        for i, r in enumerate(trees):
            if r == rep:
                for a, (u, v) in enumerate(arcs):
                    if (i, a) in x:
                        load[arc_id[m[u], m[v]]].append(x[i, a])
    for a, terms in load.items():
        if terms:
            model.add(sum(terms) <= caps[arcs[a]])
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1  # deterministic (with a deterministic time limit)
    solver.parameters.max_deterministic_time = FIND_TIME
    if solver.solve(model) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    for var in x.values():
        model.add_hint(var, solver.value(var))
    model.minimize(sum(level))
    solver.parameters.max_deterministic_time = IMPROVE_TIME
    if solver.solve(model) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    out = []
    for i, r in enumerate(trees):
        parent = {arcs[a][1]: arcs[a][0] for a in range(len(arcs))
                  if (i, a) in x and solver.value(x[i, a])}
        out.append(_bfs_tree(r, parent))
    return out


def _bfs_tree(root: int, parent: dict[int, int]) -> Tree:
    """The tree of a parent map, edges in BFS order (single-hop paths)."""
    children: dict[int, list[int]] = {}
    for y, x in sorted(parent.items()):
        children.setdefault(x, []).append(y)
    tree = Tree(root, 1, [], [])
    queue = [root]
    for x in queue:
        for y in children.get(x, ()):
            tree.edges.append((x, y))
            tree.paths.append((x, y))
            queue.append(y)
    return tree


def _image(tree: Tree, m: dict[int, int]) -> Tree:
    return Tree(m[tree.root], tree.mult, [(m[x], m[y]) for x, y in tree.edges],
                [(m[x], m[y]) for x, y in tree.edges])


def have_cp_sat() -> bool:
    """Whether OR-Tools' CP-SAT can be imported (it comes with ``pip install tacos[ilp]``)."""
    try:
        return importlib.util.find_spec("ortools.sat.python.cp_model") is not None
    except ImportError:  # no ortools package at all
        return False


def shallow_trees(group: tuple[int, ...], roots: tuple[int, ...], k: int,
                  split: SplitGraph, caps: dict[Edge, int]) -> list[Tree] | None:
    """k trees per root of the smallest depth the program finds within ``split.caps`` (see the
    module docstring), with physical paths from ``split.paths``; None when the program is too
    large, infeasible within :data:`EXTRA_DEPTH` extra levels, or the result does not check
    against ``caps``, and when OR-Tools (the ``ilp`` extra) is not installed."""
    if not have_cp_sat():
        return None
    arcs = sorted(a for a, c in split.caps.items() if c > 0)
    if not arcs or any(x not in group or y not in group for x, y in arcs):
        return None
    orbits = representatives(roots, automorphisms(group, split.caps))
    if orbits is None:
        return None
    images, reps = orbits
    if len(reps) * k * len(arcs) > MAX_BINARIES:
        return None
    succ = successors(split.caps)
    low = max(max(hop_distances(succ, r).values()) for r in reps)
    for depth in range(low, low + EXTRA_DEPTH + 1):
        base = _solve(group, reps, k, arcs, split.caps, list(images.values()), depth)
        if base is not None:
            break
    else:
        return None
    by_rep: dict[int, list[Tree]] = {}
    for t in base:
        by_rep.setdefault(t.root, []).append(t)
    logical = [_image(t, m) for v in sorted(roots) for t in by_rep[images[v][0]]
               for m in (images[v][1],)]
    pools = {e: list(p) for e, p in split.paths.items()}
    out: list[Tree] = []
    for tree in logical:
        out += _map_paths(tree, pools)
    return checked(group, roots, out, k, caps)
