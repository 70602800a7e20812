"""Tree packing by symmetry: one root's trees, translated to every root.

The Lovász construction (:mod:`tacos.solvers.forest.pack`) makes about N² max-flow tests, which
is minutes beyond a few hundred NPUs.  Tori, rings and other vertex-transitive machines need
none of them: if a group Γ of automorphisms of the capacity graph acts *regularly* on the NPUs
(for every root r exactly one γ_r ∈ Γ maps the first NPU r₀ to r), the trees of root r can be
the images γ_r(T) of root r₀'s trees T.  The load of an arc (a, b) is then the number of tree
arcs (u, w) of root r₀ in its orbit, i.e. with γ_u⁻¹(w) = γ_a⁻¹(b): every orbit of arcs
(on a 3D torus: the six direction classes) has one budget, the capacity of its arcs.

**Finding Γ** (:func:`find_symmetry`).  Candidate grid coordinates of the NPUs come from their
names (``t[1,2,3]``, what TDL's ``torus``/``mesh`` declare) and from their ids read in mixed radix
with the sizes of the link dimensions (``dim`` of the links, what :mod:`tacos.builders` makes);
the candidate Γ is the group of cyclic translations of the grid.  Every element of Γ is then
checked on the capacity graph after the solver's own preprocessing (group topology, switch
splitting): it is an automorphism iff every arc maps to an arc of equal capacity (one vectorized
O(E) test per element).  A mesh without wrap-around, a torus with one slower link or switch
paths between NPUs fail and get the general packing; nothing is assumed that is not checked.

**Trees of r₀** (:func:`pack_symmetric`).  Every NPU v ≠ r₀ chooses the parents of its k tree
units among the arcs (u, v) that come one hop closer to r₀ (so every choice is a shortest-path
tree, of depth the eccentricity of r₀); the choice is a transportation problem: v supplies k
units, an orbit takes at most its capacity.  One max-flow (scipy) solves it; when the shortest
arcs do not suffice, arcs inside a BFS layer (from a lower to a higher NPU id, still acyclic) are
allowed too.  Tree i takes the i-th unit of every NPU; equal trees merge into one with a larger
multiplicity.  The translated trees are checked by :func:`~tacos.solvers.forest.pack.check_packing`
like every packing.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass

import numpy as np

from tacos.model.topology import Topology
from tacos.solvers.forest.pack import Tree
from tacos.solvers.forest.rate import Edge
from tacos.solvers.forest.split import SplitGraph, hop_distances, successors

_NAME = re.compile(r"^(.*)\[\s*(\d+(?:\s*,\s*\d+)*)\s*\]$")


@dataclass(frozen=True)
class Symmetry:
    """A group of capacity-preserving automorphisms acting regularly on ``members``.

    ``perms[i]`` is the automorphism mapping ``members[0]`` to ``members[i]``, as an array over
    node ids (``perms[i][v]`` = image of v); ``dims`` the grid it was read from.
    """

    members: tuple[int, ...]
    perms: np.ndarray
    dims: tuple[int, ...]
    coords: dict[int, tuple[int, ...]] | None = None
    """Every member's grid coordinates (the grid ``dims`` was read from)."""



def _full_grid(coords: dict[int, tuple[int, ...]]) -> tuple[int, ...] | None:
    """The grid's sizes when ``coords`` are exactly every point of a box from the origin."""
    if not coords:
        return None
    arity = {len(c) for c in coords.values()}
    if len(arity) != 1:
        return None
    dims = tuple(max(c[a] for c in coords.values()) + 1 for a in range(arity.pop()))
    if int(np.prod(dims)) != len(coords) or len(set(coords.values())) != len(coords):
        return None
    return dims


def _name_coords(topology: Topology, members: tuple[int, ...]) -> dict[int, tuple[int, ...]]:
    """Coordinates from names such as ``t[1,2,3]`` (one prefix for every member), else {}."""
    out: dict[int, tuple[int, ...]] = {}
    prefixes = set()
    for v in members:
        m = _NAME.match(topology.node_name(v))
        if m is None:
            return {}
        prefixes.add(m.group(1))
        out[v] = tuple(int(x) for x in m.group(2).split(","))
    return out if len(prefixes) == 1 else {}


def _dim_coords(topology: Topology, members: tuple[int, ...]
                ) -> list[dict[int, tuple[int, ...]]]:
    """Coordinates from the members' order read in mixed radix, the radices being the sizes of
    the link dimensions (connected pieces of the links of one ``dim`` through the first member),
    first dimension fastest or slowest."""
    inside = set(members)
    by_dim: dict[int, dict[int, set[int]]] = defaultdict(lambda: defaultdict(set))
    for lk in topology.links:
        if lk.src in inside and lk.dst in inside and lk.dim is not None:
            by_dim[lk.dim][lk.src].add(lk.dst)
            by_dim[lk.dim][lk.dst].add(lk.src)
    sizes = []
    for d in sorted(by_dim):
        seen = {members[0]}
        todo = [members[0]]
        while todo:
            for w in by_dim[d][todo.pop()]:
                if w not in seen:
                    seen.add(w)
                    todo.append(w)
        sizes.append(len(seen))
    if not sizes or int(np.prod(sizes)) != len(members):
        return []
    order = sorted(members)
    out = []
    for radices in (sizes, sizes[::-1]):
        coords = {}
        for i, v in enumerate(order):
            c = []
            for r in radices:
                c.append(i % r)
                i //= r
            coords[v] = tuple(c) if radices is sizes else tuple(c[::-1])
        out.append(coords)
    return out


def _translations(coords: dict[int, tuple[int, ...]], dims: tuple[int, ...],
                  members: tuple[int, ...], n_nodes: int) -> np.ndarray:
    """The cyclic translations of the grid, as node-id permutations: row i maps ``members[0]``
    to ``members[i]`` (nodes outside ``members`` are fixed)."""
    dims_a = np.array(dims)
    strides = np.cumprod([1, *dims[:-1]])
    grid = np.array([coords[v] for v in members])  # member j's coordinates
    ids = np.array(members)
    at = np.empty(len(members), dtype=np.int64)  # grid point (linear index) -> node id
    at[grid @ strides] = ids
    shifts = grid - grid[0]  # row i: the translation moving members[0] to members[i]
    moved = (grid[None, :, :] + shifts[:, None, :]) % dims_a  # (i, j, axis)
    perms = np.tile(np.arange(n_nodes), (len(members), 1))
    perms[:, ids] = at[moved @ strides]
    return perms


def _automorphisms(perms: np.ndarray, caps: dict[Edge, int], n_nodes: int) -> bool:
    """True iff every row of ``perms`` maps every positive arc to an arc of equal capacity."""
    arcs = [(e, c) for e, c in caps.items() if c > 0]
    if not arcs:
        return False
    src = np.array([e[0] for e, _ in arcs], dtype=np.int64)
    dst = np.array([e[1] for e, _ in arcs], dtype=np.int64)
    cap = np.array([c for _, c in arcs], dtype=np.int64)
    key = src * n_nodes + dst
    order = np.argsort(key)
    key, cap = key[order], cap[order]
    for lo in range(0, len(perms), 64):  # bounded memory: 64 elements at a time
        p = perms[lo:lo + 64].astype(np.int64)
        mapped = p[:, src[order]] * n_nodes + p[:, dst[order]]
        pos = np.searchsorted(key, mapped)
        pos = np.minimum(pos, len(key) - 1)
        if not (np.all(key[pos] == mapped) and np.all(cap[pos] == cap[None, :])):
            return False
    return True


def find_symmetry(topology: Topology, members: tuple[int, ...], split: SplitGraph,
                  n_nodes: int) -> Symmetry | None:
    """A verified group of translations acting regularly on ``members`` that preserves the
    split capacities, or None (module docstring).  Only graphs whose every arc is a direct link
    between members qualify (the trees' physical paths are then their arcs)."""
    members = tuple(sorted(members))
    if len(members) < 2:
        return None
    inside = set(members)
    for e, paths in split.paths.items():
        if not (set(e) <= inside) or any(tuple(p) != e for p, _ in paths):
            return None
    candidates = []
    named = _name_coords(topology, members)
    if named:
        candidates.append(named)
    candidates += _dim_coords(topology, members)
    for coords in candidates:
        dims = _full_grid(coords)
        if dims is None:
            continue
        perms = _translations(coords, dims, members, n_nodes)
        if _automorphisms(perms, split.caps, n_nodes):
            return Symmetry(members, perms, dims, coords)
    return None


def _parents(sym: Symmetry, caps: dict[Edge, int], k: int, same_layer: bool
             ) -> tuple[dict[int, list[int]], list[int]] | None:
    """k parents (with repetition) of every member but the first, every orbit of arcs within
    its capacity (module docstring), and the members in an order that puts every parent before
    its children; None when the arcs allowed cannot carry them."""
    r0 = sym.members[0]
    inverse = {v: np.argsort(sym.perms[i]) for i, v in enumerate(sym.members)}
    dist = hop_distances(successors(caps), r0)
    if len(dist) < len(sym.members):
        return None
    rank = {v: (dist[v], v) for v in dist}
    # orbit of an arc (u, w): the out-neighbour x of r0 with (r0, x) = γ_u⁻¹(u, w)
    allowed: dict[int, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    for (u, w), c in sorted(caps.items()):
        if c <= 0 or w == r0:
            continue
        if dist[u] == dist[w] - 1 or (same_layer and dist[u] == dist[w] and rank[u] < rank[w]):
            allowed[w][int(inverse[u][w])].append(u)
    orbits = sorted({x for (u, x), c in caps.items() if u == r0 and c > 0})
    others = [v for v in sym.members if v != r0]
    # flow network: source 0, member j at 1 + j, orbit o at 1 + len(others) + o, sink last
    oi = {x: i for i, x in enumerate(orbits)}
    base = 1 + len(others)
    sink = base + len(orbits)
    rows, cols, data = [], [], []
    for j, v in enumerate(others):
        if not allowed[v]:
            return None
        rows.append(0)
        cols.append(1 + j)
        data.append(k)
        for x in allowed[v]:
            rows.append(1 + j)
            cols.append(base + oi[x])
            data.append(k)
    for x in orbits:
        rows.append(base + oi[x])
        cols.append(sink)
        data.append(caps[(r0, x)])
    from scipy.sparse import csr_matrix  # (here: systems without translations never load it)
    from scipy.sparse.csgraph import maximum_flow

    graph = csr_matrix((np.array(data, dtype=np.int32), (rows, cols)), shape=(sink + 1,) * 2)
    result = maximum_flow(graph, 0, sink)
    if result.flow_value < k * len(others):
        return None
    flow = result.flow.tocsr()
    out: dict[int, list[int]] = {}
    for j, v in enumerate(others):
        row = flow.getrow(1 + j)
        units = []
        for col, f in zip(row.indices.tolist(), row.data.tolist(), strict=True):
            if f <= 0:
                continue
            x = orbits[col - base]
            us = allowed[v][x]  # parents in this orbit: spread the units over them
            units += [us[i % len(us)] for i in range(f)]
        out[v] = sorted(units)
    return out, sorted(others, key=rank.__getitem__)


def pack_symmetric(sym: Symmetry, caps: dict[Edge, int], k: int) -> list[Tree] | None:
    """k trees per member: root ``members[0]``'s trees (module docstring), translated by the
    symmetry to every member; None when the orbit budgets do not admit such trees.  ``caps``
    must be invariant under the symmetry (what :func:`find_symmetry` checked): an orbit's budget
    is read off its arc at ``members[0]``."""
    found = None
    for same_layer in (False, True):
        found = _parents(sym, caps, k, same_layer)
        if found is not None:
            break
    if found is None:
        return None
    parents, order = found
    # tree i takes the i-th parent of every NPU; equal trees merge; edges parents first
    shapes = Counter(tuple(parents[v][i] for v in order) for i in range(k))
    children = np.array(order)
    base_trees = [(mult, np.array(shape)) for shape, mult in sorted(shapes.items())]
    out: list[Tree] = []
    for i, root in enumerate(sym.members):
        p = sym.perms[i]
        for mult, us in base_trees:
            edges = list(zip(p[us].tolist(), p[children].tolist(), strict=True))
            out.append(Tree(root, mult, edges, edges.copy()))
    return out
