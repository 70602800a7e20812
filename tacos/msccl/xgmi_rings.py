"""Rings over the direct links inside a node: lane-disjoint Hamiltonian cycles.

Inside an AMD MI250 box the 16 GCDs are not all linked to each other: every GCD has 7 xGMI
links of 50 GB/s, 4 to the other GCD of its package and 1 or 2 to a few GCDs of other
packages, and a pair without a link is routed through a third GCD (or, in a topology with a
NIC switch, through the switch).  A ring whose hops are all direct links uses one lane of
each link it crosses, in each direction when both of its directions run; rings that share
no lane do not slow each other.  :func:`disjoint_cycles` finds as many such rings through
every GPU of the node as the lanes allow (at most half the fewest lanes a GPU has).

The search is a depth-first search, deterministic (neighbours in the order of their local
index, most-constrained first), bounded by a budget of expanded nodes.
"""

from __future__ import annotations

from collections.abc import Sequence

from tacos.model.topology import Topology

#: Tags of network (NIC) links: they do not join GPUs inside a node.
NIC_TAGS = ("nic", "ib", "net", "eth", "roce")
#: Nodes the cycle search may expand before it settles for fewer cycles.
BUDGET = 200_000

Lanes = list[list[int]]


def lane_matrix(topology: Topology, npus: Sequence[int]) -> Lanes:
    """``lanes[a][b]``: parallel direct links (their multiplicity) from ``npus[a]`` to
    ``npus[b]`` that are not NIC links, the smaller of the two directions (a ring's two
    directions each take a lane)."""
    return lane_matrices(topology, [npus])[0]


def lane_matrices(topology: Topology, nodes: Sequence[Sequence[int]]) -> list[Lanes]:
    """:func:`lane_matrix` of every node (its NPUs in local order), in one pass over the
    links."""
    where = {npu: (n, i) for n, npus in enumerate(nodes) for i, npu in enumerate(npus)}
    one_way = [[[0] * len(npus) for _ in npus] for npus in nodes]
    for lk in topology.links:
        a, b = where.get(lk.src), where.get(lk.dst)
        if a is None or b is None or a[0] != b[0] or a[1] == b[1]:
            continue
        if str(getattr(lk, "tag", "") or "").lower().startswith(NIC_TAGS):
            continue
        one_way[a[0]][a[1]][b[1]] += int(lk.multiplicity)
    return [[[min(m[a][b], m[b][a]) for b in range(len(m))] for a in range(len(m))]
            for m in one_way]


def disjoint_cycles(lanes: Lanes, most: int | None = None,
                    budget: int = BUDGET) -> list[tuple[int, ...]]:
    """The largest set (at most ``most``) of Hamiltonian cycles through every index of
    ``lanes`` that together use no pair more often than its lanes; each cycle starts at 0.
    Empty when there is none (or the search budget ran out before the first)."""
    n = len(lanes)
    if n < 3:
        return []
    degree = min(sum(row) for row in lanes)
    top = degree // 2 if most is None else min(most, degree // 2)
    left = [budget]
    for want in range(top, 0, -1):
        free = [row[:] for row in lanes]
        got = _cycles(free, want, left)
        if got is not None:
            return got
        if left[0] <= 0:
            left = [budget]  # a smaller set gets a budget of its own
    return []


def _cycles(free: Lanes, want: int, left: list[int]) -> list[tuple[int, ...]] | None:
    """``want`` lane-disjoint Hamiltonian cycles in ``free`` (lanes still unused), or None."""
    if want == 0:
        return []
    for cycle in _hamiltonian(free, left):
        _take(free, cycle, -1)
        rest = _cycles(free, want - 1, left)
        _take(free, cycle, +1)
        if rest is not None:
            return [cycle, *rest]
        if left[0] <= 0:
            return None
    return None


def _take(free: Lanes, cycle: tuple[int, ...], sign: int) -> None:
    for a, b in zip(cycle, cycle[1:] + cycle[:1], strict=True):
        free[a][b] += sign
        free[b][a] += sign


def _hamiltonian(free: Lanes, left: list[int]):  # noqa: ANN202 - a generator of tuples
    """Hamiltonian cycles of the pairs with a free lane, from index 0, each once (the
    direction with the smaller second index)."""
    n = len(free)
    path = [0]
    seen = [False] * n
    seen[0] = True

    def options(v: int) -> list[int]:
        nxt = [u for u in range(n) if not seen[u] and free[v][u] > 0]
        # most-constrained first: fewest unvisited neighbours with a free lane
        return sorted(nxt, key=lambda u: (sum(1 for w in range(n)
                                               if not seen[w] and free[u][w] > 0), u))

    stack = [iter(options(0))]
    while stack:
        if left[0] <= 0:
            return
        u = next(stack[-1], None)
        if u is None:
            stack.pop()
            seen[path.pop()] = False
            continue
        left[0] -= 1
        if len(path) == n - 1:
            if free[u][0] > 0 and path[1] < u:
                yield (*path, u)
            continue
        path.append(u)
        seen[u] = True
        stack.append(iter(options(u)))
