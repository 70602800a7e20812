"""Dimension-ordered ("multi-port bucket") all-gather trees for tori.

On a d-dimensional torus n_1 × … × n_d every root's data is split into d parts; part p visits
the dimensions in the cyclic order p, p+1, …, p+d−1, and each part is halved once more: one
half travels the + direction of every ring, the other the − direction.  That makes k = 2d trees
per root.  Tree (p, ±) of root r is a chain along dimension p from r (n_p − 1 edges, direction
±), then from every node reached so far a chain along the next dimension, and so on: a spanning
tree of depth Σ (n_a − 1).

In phase φ (the φ-th dimension of a part's order) and step t (1 … n − 1) every node forwards
along the ring the data it received at step t − 1 of that phase (at step 1: everything it
holds from the earlier phases), which belongs to the n_{a_1}·…·n_{a_{φ−1}} roots of the
sub-torus already traversed.  Every tree edge carries the label (offset, t) with offset = the
steps of the earlier phases (``Tree.steps``), so step merging
(:func:`~tacos.solvers.forest.pipeline.step_groups`, ``batch='steps'``) sends all of it as ONE
transfer per link and step; labels grow along every tree path, so the groups never wait on each
other in a cycle.  With one round the whole all-gather is Σ_a (n_a − 1) steps of one transfer
per link direction.

**Optimality on a cubic torus** (n^d NPUs, links of bandwidth b).  In every phase the d parts
use d different dimensions and both directions, so all 2d links of every node are busy; a step
of phase φ moves n^{φ−1} units of s = M/(n^d·2d) bytes (M the all-gather's size), so the time is
(n − 1)·(1 + n + … + n^{d−1})·s/b = (n^d − 1)·s/b = (n^d − 1)/n^d · M/(2d·b), the min-cut
optimum (a single NPU's 2d in-links receive (n^d − 1)/n^d · M).  α is paid d·(n − 1) times in
all.  Every arc carries the same number of tree edges, N − 1 (N = n^d): exactly the capacity
of k = 2d trees per root at the optimal rate.  On other tori the dimensions' loads differ; the
trees then claim the rate of the busiest arc (``Rate.slowdown`` > 1) and are one more candidate
the solver times against the others.

**Where it applies** (:func:`dimension_trees`): the group's grid translations are verified
automorphisms (:func:`~tacos.solvers.forest.symmetric.find_symmetry`: not a mesh, not a torus
with one slower link, no switches on the paths), every NPU's arcs are exactly its 2d grid
neighbours, of one capacity, and every ring has at least 3 NPUs (on 2, + and − coincide).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from tacos.solvers.forest.pack import Tree
from tacos.solvers.forest.rate import Edge, Rate
from tacos.solvers.forest.symmetric import Symmetry


def _neighbour_ids(sym: Symmetry) -> np.ndarray | None:
    """``nb[v_index, a, s]``: the member index one step along dimension a (s = 0: +, 1: −) from
    member v_index; None without coordinates."""
    if sym.coords is None:
        return None
    members = sym.members
    dims = np.array(sym.dims)
    strides = np.cumprod([1, *sym.dims[:-1]])
    grid = np.array([sym.coords[v] for v in members])
    at = np.empty(len(members), dtype=np.int64)  # linear grid index -> member index
    at[grid @ strides] = np.arange(len(members))
    nb = np.empty((len(members), len(dims), 2), dtype=np.int64)
    for a in range(len(dims)):
        for s, sign in enumerate((1, -1)):
            moved = grid.copy()
            moved[:, a] = (moved[:, a] + sign) % dims[a]
            nb[:, a, s] = at[moved @ strides]
    return nb


def applies(sym: Symmetry | None, caps: dict[Edge, int]) -> bool:
    """Whether the dimension-ordered trees apply (module docstring): a verified torus whose
    every ring has ≥ 3 NPUs and whose arcs are exactly the grid neighbours, of one capacity."""
    if sym is None or sym.coords is None or min(sym.dims) < 3:
        return False
    if len({c for c in caps.values() if c > 0}) != 1:
        return False
    nb = _neighbour_ids(sym)
    members = sym.members
    want = {(members[i], members[int(j)]) for i in range(len(members))
            for j in nb[i].reshape(-1)}
    have = {e for e, c in caps.items() if c > 0}
    return have == want and len(want) == 2 * len(sym.dims) * len(members)


def _base_trees(sym: Symmetry, nb: np.ndarray
                ) -> list[tuple[np.ndarray, np.ndarray, list[tuple[int, int]]]]:
    """The 2d trees of ``members[0]`` as (parent indices, child indices, step labels)."""
    d = len(sym.dims)
    out = []
    for p in range(d):
        for s in (0, 1):
            reached = [0]
            parents: list[int] = []
            children: list[int] = []
            labels: list[tuple[int, int]] = []
            offset = 0
            for phi in range(d):
                a = (p + phi) % d
                n = sym.dims[a]
                front = np.array(reached)
                for t in range(1, n):
                    nxt = nb[front, a, s]
                    parents += front.tolist()
                    children += nxt.tolist()
                    labels += [(offset, t)] * len(front)
                    reached += nxt.tolist()
                    front = nxt
                offset += n - 1
            out.append((np.array(parents), np.array(children), labels))
    return out


def dimension_trees(sym: Symmetry, caps: dict[Edge, int], x: Fraction, unit_bw: int
                    ) -> tuple[list[Tree], Rate] | None:
    """The 2d dimension-ordered trees of every member (module docstring) and the rate they
    claim: k = 2d, every arc's capacity the busiest arc's load (on a cubic torus N − 1, the
    optimum).  ``x`` is the optimum x* (:class:`~tacos.solvers.forest.rate.Rate`), ``unit_bw``
    the arcs' common integer bandwidth.  None where they do not apply (:func:`applies`)."""
    if not applies(sym, caps):
        return None
    nb = _neighbour_ids(sym)
    members = np.array(sym.members)
    base = _base_trees(sym, nb)
    k = 2 * len(sym.dims)
    # loads by translation: arc (u, w) of root r0's trees lands on the class of (u, w)'s
    # direction; every arc of a class carries the class's count
    load: dict[tuple[int, int], int] = {}
    for parents, children, _ in base:
        for u, w in zip(parents.tolist(), children.tolist(), strict=True):
            key = next((a, s) for a in range(len(sym.dims)) for s in (0, 1) if nb[u, a, s] == w)
            load[key] = load.get(key, 0) + 1
    most = max(load.values())
    claimed = {e: most for e, c in caps.items() if c > 0}
    used = Fraction(most, unit_bw)
    slowdown = float(used / (k * x)) if x > 0 else 1.0
    rate = Rate(x, k, used, claimed, frozenset(), slowdown <= 1, max(1.0, slowdown))
    trees = []
    for i, root in enumerate(sym.members):
        perm = sym.perms[i]
        for parents, children, labels in base:
            us = perm[members[parents]].tolist()
            ws = perm[members[children]].tolist()
            edges = list(zip(us, ws, strict=True))
            trees.append(Tree(int(root), 1, edges, edges.copy(), labels))
    return trees, rate
