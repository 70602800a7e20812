"""Cut bounds for collectives whose chunks go from one NPU to others: all-to-all, scatter,
gather and custom copy patterns.

For any set ``S`` of NPUs, every chunk held only inside ``S`` that some NPU outside ``S`` needs
must cross the cut at least once, so the collective takes at least ``D(S) / λ(S)`` where
``D(S)`` is those chunks' bytes and ``λ(S)`` the capacity of the best cut separating ``S`` from
the other NPUs (switches may fall on either side: a max-flow from ``S`` to the rest).  The
per-NPU case is the ingress/egress bound; what an all-to-all adds is the **fabric**: a node's
eight GPUs share its NICs, a leaf's hosts share its uplinks, half a torus reaches the other half
through its bisection.  The exact maximum over all ``S`` is a sparsest-cut problem (NP-hard),
so :func:`pair_cut_bound` evaluates the cuts that matter on real fabrics -- the groups of
every bandwidth level (nodes, as :mod:`tacos.check.bounds_groups` finds them) and their unions up to
half the system, every group of NPUs behind one switch, the half-planes of every link
dimension (a torus's bisection), and prefixes of a spectral ordering (the Fiedler vector of
the bandwidth Laplacian) -- each one a valid bound, the largest reported.  Unlike
:func:`tacos.check.bounds_groups.group_cut`, which sums the links around a fixed set of nodes, the
capacity here is a max-flow between the NPU sets (switches fall on whichever side gives the
smaller cut), and the demand is summed with numpy, which keeps a 512-NPU all-to-all (262,144
chunks) fast.
"""

from __future__ import annotations

import math
from collections import defaultdict

import networkx as nx
import numpy as np

from tacos.model.collective import Collective
from tacos.model.topology import Topology

MAX_SPECTRAL = 4096
EXACT_SPECTRAL = 300
POWER_STEPS = 400
FRACTIONS = (1 / 8, 1 / 4, 1 / 2)


def pair_cut_bound(topology: Topology, collective: Collective) -> float | None:
    """The largest ``D(S) / λ(S)`` over the candidate cuts (see module doc); None when the
    collective has reduction chunks or chunks with several sources."""
    if any(c.reduce or len(c.pre) != 1 for c in collective.chunks):
        return None
    members = sorted({v for c in collective.chunks for v in c.pre | c.post
                      if not topology.npus[v].failed})
    if len(members) < 2:
        return 0.0
    single, multi = _demand(collective, topology.n_nodes)
    cut = _Cuts(topology)
    best = 0.0
    for side in candidate_sets(topology, members):
        inside = frozenset(side)
        outside = frozenset(members) - inside
        if not inside or not outside:
            continue
        mask = np.zeros(topology.n_nodes, dtype=bool)
        mask[list(inside)] = True
        for a, b, here in ((inside, outside, mask), (outside, inside, ~mask)):
            need = float((single * np.outer(here, ~here)).sum())
            need += sum(size for (u, targets), size in multi.items()
                        if u in a and targets - a)
            if need <= 0:
                continue
            cap = cut(a, b)
            best = max(best, math.inf if cap <= 0 else need / cap)
    return best


def _demand(collective: Collective, n: int
            ) -> tuple[np.ndarray, dict[tuple[int, frozenset[int]], float]]:
    """Bytes from u to v for chunks with one target (a matrix), and the multi-target chunks."""
    single = np.zeros((n, n))
    multi: dict[tuple[int, frozenset[int]], float] = defaultdict(float)
    for c in collective.chunks:
        (u,) = tuple(c.pre)
        targets = c.post - c.pre
        if len(targets) == 1:
            (v,) = tuple(targets)
            single[u, v] += c.size
        elif targets:
            multi[(u, frozenset(targets))] += c.size
    return single, multi


class _Cuts:
    """Smallest cut capacity (B/s) between two NPU sets: OR-Tools' max-flow when it loads
    (capacities in KB/s as integers), networkx otherwise."""

    def __init__(self, topology: Topology) -> None:
        self.graph = topology.to_digraph()
        self.n = topology.n_nodes
        self.smf = None
        try:
            from ortools.graph.python import max_flow

            self.max_flow = max_flow
        except (ImportError, OSError):
            self.max_flow = None

    def __call__(self, a: frozenset[int], b: frozenset[int]) -> float:
        if self.max_flow is not None:
            smf = self.max_flow.SimpleMaxFlow()
            for u, w, d in self.graph.edges(data=True):
                smf.add_arc_with_capacity(u, w, int(d["bandwidth"] // 1000))
            src, dst = self.n, self.n + 1
            big = 1 << 60
            for v in a:
                smf.add_arc_with_capacity(src, v, big)
            for v in b:
                smf.add_arc_with_capacity(v, dst, big)
            if smf.solve(src, dst) == smf.OPTIMAL:
                return smf.optimal_flow() * 1000.0  # rounded down: the bound stays valid
        g = self.graph.copy()
        for v in a:
            g.add_edge("src", v)  # no capacity attribute: infinite
        for v in b:
            g.add_edge(v, "dst")
        return nx.maximum_flow_value(g, "src", "dst", capacity="bandwidth")


def candidate_sets(topology: Topology, members: list[int]) -> list[list[int]]:
    """NPU sets whose cuts :func:`pair_cut_bound` evaluates: the groups of every bandwidth
    level (:func:`tacos.check.bounds_groups.candidate_groups`: nodes, islands, racks; two of each
    size, since alike groups give alike cuts) and unions of a level's groups up to half the
    system, the groups behind one switch, the half-planes of every link dimension, and
    prefixes of a spectral ordering."""
    from tacos.check.bounds_groups import candidate_groups

    inside = set(members)
    out: list[list[int]] = []
    levels: dict[int, list[list[int]]] = defaultdict(list)  # group size -> groups
    for group in candidate_groups(topology):
        npus = sorted(v for v in group if v in inside)
        if 1 < len(npus) < len(members):
            levels[len(npus)].append(npus)
    for size, groups in sorted(levels.items()):
        out += groups[:2]
        m = len(groups)
        if m * size == len(members):  # a level that partitions the group: nodes, racks
            out += [[v for g in groups[:k] for v in g] for k in sorted({2, m // 4, m // 2})
                    if 1 < k < m]
    by_switch: dict[int, set[int]] = defaultdict(set)
    for v in members:
        for li in topology.out_links[v]:
            w = topology.links[li].dst
            if topology.is_switch(w):
                by_switch[w].add(v)
    per_size: dict[int, int] = defaultdict(int)
    for group in by_switch.values():
        if 1 < len(group) < len(members) and per_size[len(group)] < 2:
            per_size[len(group)] += 1
            out.append(sorted(group))
    out += _dimension_halves(topology, members)
    order = _spectral_order(topology, members)
    if order is not None:
        for f in FRACTIONS:
            k = max(1, int(len(order) * f))
            out.append(order[:k])
    unique: dict[frozenset[int], list[int]] = {}
    for side in out:
        unique.setdefault(frozenset(side), side)
    return list(unique.values())


def _dimension_halves(topology: Topology, members: list[int]) -> list[list[int]]:
    """For every link dimension (``Link.dim``, as in tori and meshes): the NPUs in the first
    half of their dimension-d line or ring, walked from its smallest id toward its smaller
    neighbour -- a bisection plane of a torus or a mesh."""
    inside = set(members)
    out = []
    for d in sorted({lk.dim for lk in topology.links if lk.dim is not None}):
        g = nx.Graph()
        g.add_nodes_from(members)
        g.add_edges_from((lk.src, lk.dst) for lk in topology.links
                         if lk.dim == d and lk.src in inside and lk.dst in inside)
        half: list[int] = []
        for comp in nx.connected_components(g):
            if len(comp) < 2:
                continue
            walk = [min(comp)]
            seen = {walk[0]}
            while True:
                nxt = sorted(w for w in g[walk[-1]] if w not in seen)
                if not nxt:
                    break
                walk.append(nxt[0])
                seen.add(nxt[0])
            if len(walk) == len(comp):
                half += walk[:len(walk) // 2]
        if half and len(half) < len(members):
            out.append(sorted(half))
    return out


def _spectral_order(topology: Topology, members: list[int]) -> list[int] | None:
    """NPUs sorted by the Fiedler vector of the (undirected) bandwidth Laplacian."""
    n = topology.n_nodes
    if n > MAX_SPECTRAL or n < 3:
        return None
    w = np.zeros((n, n))
    for lk in topology.links:
        bw = lk.bandwidth * lk.multiplicity
        w[lk.src, lk.dst] += bw
        w[lk.dst, lk.src] += bw
    scale = w.max() or 1.0
    w /= scale
    lap = np.diag(w.sum(axis=1)) - w
    if n <= EXACT_SPECTRAL:
        fiedler = np.linalg.eigh(lap)[1][:, 1]
    else:  # power iteration on (σI - L), kept orthogonal to the constant vector
        sigma = 2 * lap.diagonal().max()
        x = np.random.default_rng(0).standard_normal(n)
        for _ in range(POWER_STEPS):
            x -= x.mean()
            x = sigma * x - lap @ x
            x /= np.linalg.norm(x) or 1.0
        fiedler = x
    return sorted(members, key=lambda v: (fiedler[v], v))
