"""Two trees per root on two switch islands joined by rails, with hops shared across roots.

On two nodes whose GPUs sit on one fast switch each (NVSwitch) and whose GPU i of one node
reaches GPU i of the other through a rail (a NIC switch), the exact rate can need two trees per
root (2x DGX-H100: a GPU should take 1.5 of its 15 shards through its NIC and 13.5 through
NVSwitch, k = 2).  The packer's trees for k = 2 reach the other node at several GPUs, as partial
stars that :mod:`~tacos.solvers.forest.shared` cannot rebuild within the exact capacities.

:func:`rail_pair_trees` builds them directly, for a root r at position i of its node (n GPUs,
positions taken in NPU order, j = i + n/2):

* both trees spread r's data in r's node as Bruck (binomial) trees from r;
* tree 1 crosses once, r → GPU i of the other node, and spreads there over all n GPUs;
* tree 2 crosses twice, r → GPU i and (r's node's GPU j) → GPU j, and spreads from each over
  its half of the other node (positions i … j − 1 and j … i − 1).

Per GPU that is 2(n − 1) + (n − 1) + (n − 2) = 4n − 5 tree units through its switch port in
each direction and 3 through its NIC: 27 and 3 for n = 8, exactly the k = 2 capacities of
2x DGX-H100.  Every spreading edge carries a (family, step) label as in
:mod:`~tacos.solvers.forest.shared` (family = depth of the entry), so slices of different roots
on the same hop and step go as one transfer.  The trees are returned only if
:func:`~tacos.solvers.forest.pack.check_packing` accepts them on the packing's capacities.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from tacos.solvers.forest.pack import Tree, checked
from tacos.solvers.forest.rate import Edge

Step = tuple[int, int] | None


def _bruck(ring: list[int], switch: int, family: int) -> list[tuple[int, int, tuple, Step]]:
    """Edges (x, y, path, step) of the binomial tree over ``ring`` from ``ring[0]``."""
    out = []
    for d in range(1, len(ring)):
        b = d.bit_length() - 1
        x, y = ring[d - (1 << b)], ring[d]
        out.append((x, y, (x, switch, y), (family, b)))
    return out


def _tree(root: int, mult: int, edges: list[tuple[int, int, tuple, Step]]) -> Tree:
    """A tree from unordered edges, in BFS order."""
    children: dict[int, list[tuple[int, tuple, Step]]] = defaultdict(list)
    for x, y, path, step in edges:
        children[x].append((y, path, step))
    tree = Tree(root, mult, [], [], [])
    queue = [root]
    for x in queue:
        for y, path, step in children[x]:
            tree.edges.append((x, y))
            tree.paths.append(path)
            tree.steps.append(step)
            queue.append(y)
    return tree


def switch_islands(group: tuple[int, ...], caps: dict[Edge, int],
                   is_switch: Callable[[int], bool],
                   ) -> tuple[dict[int, dict[int, int]], list[int], list[list[int]]] | None:
    """The NPUs of ``group`` by the switch of their largest switch port (ties: lowest switch
    id): the positive capacities by tail (``out_caps[x][y]``), those switches in id order and
    each one's NPUs in id order; None when some NPU has no switch port."""
    out_caps: dict[int, dict[int, int]] = defaultdict(dict)
    for (x, y), c in caps.items():
        if c > 0:
            out_caps[x][y] = c
    fastest: dict[int, int] = {}
    for v in group:
        switches = {w: c for w, c in out_caps[v].items() if is_switch(w)}
        if not switches:
            return None
        fastest[v] = max(switches, key=lambda w: (switches[w], -w))
    by_switch: dict[int, list[int]] = defaultdict(list)
    for v in sorted(group):
        by_switch[fastest[v]].append(v)
    fast = sorted(by_switch)
    return out_caps, fast, [by_switch[w] for w in fast]


def _layout(group: tuple[int, ...], caps: dict[Edge, int], is_switch: Callable[[int], bool],
            ) -> tuple[list[list[int]], list[int], dict[tuple[int, int], int]] | None:
    """The two islands (NPUs in order), their fast switches and the rail switch of every pair
    (GPU i of one island, GPU i of the other), or None if the topology is not of that form."""
    found = switch_islands(group, caps, is_switch)
    if found is None or len(found[1]) != 2:
        return None
    out_caps, fast, islands = found
    n = len(islands[0])
    if n != len(islands[1]) or n < 4 or n % 2:
        return None
    rails: dict[tuple[int, int], int] = {}
    for a, b in zip(*islands, strict=True):
        for x, y in ((a, b), (b, a)):
            rail = next((w for w in sorted(out_caps[x]) if is_switch(w) and w not in fast
                         and out_caps[w].get(y, 0) > 0), None)
            if rail is None:
                return None
            rails[x, y] = rail
    return islands, fast, rails


def rail_pair_trees(group: tuple[int, ...], roots: tuple[int, ...], k: int,
                    caps: dict[Edge, int], is_switch: Callable[[int], bool],
                    ) -> list[Tree] | None:
    """Two trees per root as in the module docstring, or None when ``k`` is not 2, the
    topology is not two equal switch islands joined by rails, or the trees do not fit
    ``caps``."""
    if k != 2 or set(roots) != set(group):
        return None
    layout = _layout(group, caps, is_switch)
    if layout is None:
        return None
    islands, fast, rails = layout
    n = len(islands[0])
    half = n // 2
    trees = []
    for side in (0, 1):
        here, there = islands[side], islands[1 - side]
        for i, r in enumerate(here):
            own = _bruck(here[i:] + here[:i], fast[side], 0)
            peer, j = there[i], (i + half) % n

            def cross(x: int, y: int) -> tuple[int, int, tuple, Step]:
                return (x, y, (x, rails[x, y], y), None)

            one = own + [cross(r, peer)] + _bruck(there[i:] + there[:i], fast[1 - side], 1)
            far = here[j]
            two = (own + [cross(r, peer), cross(far, there[j])]
                   + _bruck([there[(i + d) % n] for d in range(half)], fast[1 - side], 1)
                   + _bruck([there[(j + d) % n] for d in range(half)], fast[1 - side], 2))
            trees += [_tree(r, 1, one), _tree(r, 1, two)]
    return checked(group, roots, trees, k, caps)
