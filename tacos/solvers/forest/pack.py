"""Packing k capacity-respecting out-arborescences per group NPU.

Edmonds' branching theorem (1973) guarantees the packing once every max-flow σ → v reaches N·k
(:mod:`tacos.solvers.forest.rate`).  The construction is the constructive proof of Lovász (1976)
in the form ForestColl's ``BranchingGenerator`` uses (Zhao et al., arXiv 2402.06787): trees are
grown one at a time by BFS from their root; an arc (x, y) joins tree T with multiplicity

    min(C_T, c(x, y), maxflow(x → y) − Σ_{T' ≠ T} C_{T'})

in an auxiliary network where every unfinished tree T' is a node s_{T'} with arcs to the nodes it
already spans and x reaches each s_{T'} with capacity C_{T'} (C = how many of the root's k trees
the partial tree stands for).  When fewer than C_T units fit, T is split: a copy with the rest
continues later.  The test is valid for any number of partial trees (Edmonds' theorem with root
sets), so unlike ForestColl, which completes one tree before the next, all trees grow together,
one BFS node per tree in turn, and a tree only grows from nodes above a depth limit (first the
root's hop eccentricity, raised by one whenever the tree cannot grow within it): every tree takes
its shallow arcs before any tree goes deep, which keeps trees shallow (the pipeline's fill time
grows with depth).  The limit only orders the additions; every addition passes the same test, so
the packing is still complete.  A finished tree spans every group NPU, and the edge loads never
exceed the capacities; both are checked again by :func:`check_packing`.

Most tests that fail are failed by a cut that failed an earlier test too: the packer keeps the
minimum cuts of its last :data:`CUTS_KEPT` failed tests and answers 0 without a max-flow when
one of them, evaluated on the current capacities and trees, is small enough
(:meth:`_Packer._cut_blocks`); the answers are the max-flow's.

Written here, not taken from a library: networkx has single arborescences (Edmonds' optimum
branching) but no packing; the max-flows come from OR-Tools or networkx through
:class:`~tacos.solvers.forest.flow.FlowNetwork` (the x → s_{T'} arcs go through one hub node so a
test changes three capacities instead of one per tree).
"""

from __future__ import annotations

from collections import Counter, defaultdict, deque
from dataclasses import dataclass, field, replace
from itertools import repeat

from tacos.solvers.forest.flow import INF, FlowNetwork
from tacos.solvers.forest.rate import Edge
from tacos.solvers.forest.split import Path, SplitGraph, hop_distances, successors

CUTS_KEPT = 16
"""Zero answers' cuts the packer keeps to answer later questions without a max-flow."""


@dataclass
class Tree:
    """An out-arborescence of ``root`` standing for ``mult`` of the root's k trees.

    ``edges`` are (parent, child) in BFS order; ``paths[i]`` is the physical node path of
    ``edges[i]`` (just the two ends without switches).  ``steps``, when set, gives edges that
    may share transfers with other trees' edges a (family, step) label
    (:mod:`~tacos.solvers.forest.shared`); None elsewhere.  ``order``, when set, gives every
    edge the step at which the list schedule should send it within a round (lower first,
    :mod:`~tacos.solvers.forest.timed`); None: the edge with the tallest subtree below first.
    """

    root: int
    mult: int
    edges: list[Edge] = field(default_factory=list)
    paths: list[Path] = field(default_factory=list)
    steps: list[tuple[int, int] | None] | None = None
    order: list[int] | None = None

    def depth(self) -> int:
        """Largest number of tree edges from the root to a node."""
        level = {self.root: 0}
        for x, y in self.edges:
            level[y] = level[x] + 1
        return max(level.values())


def _entered(islands: list[tuple[int, ...]], caps: dict[Edge, int]) -> dict[Edge, int]:
    """For every arc (x, y), the island it enters (index into ``islands``): the largest island
    holding y but not x; -1 for an arc that stays inside every island of y."""
    sets = [frozenset(i) for i in islands]
    mine: dict[int, list[int]] = defaultdict(list)
    for i, members in enumerate(sets):
        for v in members:
            mine[v].append(i)
    out = {}
    for x, y in caps:
        outside = [i for i in mine.get(y, ()) if x not in sets[i]]
        out[(x, y)] = max(outside, key=lambda i: len(sets[i])) if outside else -1
    return out


class _Packer:
    def __init__(self, compute: tuple[int, ...], caps: dict[Edge, int], k: int,
                 islands: list[tuple[int, ...]] = ()) -> None:
        self.compute = compute
        n = max([*compute, *(v for e in caps for v in e)], default=0) + 1
        self.net = FlowNetwork(n)
        self.hub = self.net.add_node()
        self.caps = {e: c for e, c in caps.items() if c > 0}
        self.arc = {e: self.net.add_arc(e[0], e[1], c) for e, c in self.caps.items()}
        self.to_hub = {x: self.net.add_arc(x, self.hub, 0) for x in compute}
        # the test only needs the flow up to what the arc could take: a source in front of x
        # whose one arc carries just that much (the same answer, less flow to push)
        self.limit = self.net.add_node()
        self.from_limit = {x: self.net.add_arc(self.limit, x, 0) for x in compute}
        self.succ: dict[int, list[int]] = defaultdict(list)
        for x, y in sorted(self.caps):
            self.succ[x].append(y)
        self.live = 0  # Σ C over unfinished trees
        self.cover: dict[int, int] = defaultdict(int)  # Σ C over unfinished trees holding v
        self.tests = 0
        self.enter = _entered(list(islands), self.caps)
        self.island_of: dict[int, list[int]] = defaultdict(list)
        for i, members in enumerate(islands):
            for v in members:
                self.island_of[v].append(i)
        self.ranks = 2 if islands else 0  # highest arc rank (see pack_trees)
        self.open: dict[int, dict] = {}  # unfinished trees by their s node
        self.cuts: list[int] = []  # recent zero answers' cuts (NPU bit masks), latest first
        self.bit = {v: 1 << i for i, v in enumerate(compute)}

    def new(self, root: int, mult: int, edges: list[Edge], nodes: set[int]) -> dict:
        s = self.net.add_node()
        t = {"tree": Tree(root, mult, list(edges)), "nodes": set(nodes), "s": s,
             "hub": self.net.add_arc(self.hub, s, mult), "depth": {root: 0}, "bfs": deque(),
             "rank": 0, "islands": {i for v in nodes for i in self.island_of.get(v, ())}}
        for v in nodes:
            self.net.add_arc(s, v, INF)
            self.cover[v] += mult
        self.live += mult
        t["mask"] = sum(self.bit[v] for v in nodes)
        self.open[s] = t
        return t

    def test(self, t: dict, x: int, y: int) -> int:
        self.tests += 1
        mult = t["tree"].mult
        cap = self.caps[(x, y)]
        # units = min(mult, cap, flow - (live - mult)): a flow above this cannot change it
        enough = self.live - mult + min(mult, cap)
        if cap + self.cover[y] >= enough:
            # that much flows anyway: x → y directly, and x → hub → every other unfinished
            # tree that holds y → y (disjoint paths); no need to solve
            return min(mult, cap)
        if self._cut_blocks(t, x, y, self.live - mult):
            return 0
        self.net.set_cap(self.to_hub[x], INF)
        self.net.set_cap(t["hub"], 0)
        self.net.set_cap(self.from_limit[x], enough)
        value, _ = self.net.max_flow(self.limit, y)
        units = max(0, min(mult, cap, value - (self.live - mult)))
        if units == 0:  # remember the cut that blocked it: it often blocks later questions
            self._remember(sum(self.bit.get(v, 0) for v in self.net.last_cut()))
        self.net.set_cap(self.from_limit[x], 0)
        self.net.set_cap(self.to_hub[x], 0)
        self.net.set_cap(t["hub"], mult)
        return units

    def _remember(self, cut: int) -> None:
        cuts = self.cuts
        if cut in cuts:
            cuts.remove(cut)
        cuts.insert(0, cut)
        del cuts[CUTS_KEPT:]

    def _cut_blocks(self, t: dict, x: int, y: int, others: int) -> bool:
        """Whether a remembered cut proves the test's answer 0 without a max-flow.

        A set S of NPUs with x in S and y not in S gives the auxiliary network's cut
        {limit, hub, S, s_T for every unfinished T ≠ t whose nodes lie in S}; its capacity is
        the capacities of the arcs leaving S plus C_T for every other unfinished T with a node
        outside S (its hub arc; the INF arcs s_T → v force s_T to the sink side), and the
        arcs x → hub, limit → x and t's closed hub arc add nothing.  A max-flow is at most any
        cut, so a cut of capacity ≤ ``others`` (Σ C_T over T ≠ t) makes the answer
        max(0, min(mult, cap, flow − others)) 0, as the max-flow would.
        """
        bx, by = self.bit[x], self.bit[y]
        for i, cut in enumerate(self.cuts):
            if not cut & bx or cut & by:
                continue
            out = ~cut
            total = 0
            for other in self.open.values():
                if other["mask"] & out and other is not t:
                    total += other["tree"].mult
                    if total > others:
                        break
            else:
                bit = self.bit
                for (u, v), c in self.caps.items():
                    if c > 0 and bit.get(u, 0) & cut and not bit.get(v, 0) & cut:
                        total += c
                        if total > others:
                            break
                else:
                    self.cuts.insert(0, self.cuts.pop(i))
                    return True
        return False

    def expand(self, t: dict, x: int, trees: deque) -> bool:
        """Try every arc out of ``x`` for tree ``t``; True when some arc joined it."""
        tree: Tree = t["tree"]
        grew = False
        nodes, caps, enter, rank = t["nodes"], self.caps, self.enter, t["rank"]
        for y in self.succ[x]:
            if y in nodes or caps[(x, y)] <= 0:
                continue
            entered = enter[(x, y)]
            if entered >= 0 and (rank == 0 or (rank == 1 and entered in t["islands"])):
                continue  # enter an island once, then spread inside it
            units = self.test(t, x, y)
            if units == 0:
                continue
            if units < tree.mult:
                rest = tree.mult - units
                self.live -= rest
                copy = self.new(tree.root, rest, tree.edges, t["nodes"])
                copy["depth"] = dict(t["depth"])
                copy["limit"] = t["limit"]
                copy["islands"] = set(t["islands"])
                trees.append(copy)
                tree.mult = units
                for v in t["nodes"]:  # the copy holds the rest on these nodes now
                    self.cover[v] -= rest
                self.net.set_cap(t["hub"], units)
            tree.edges.append((x, y))
            t["nodes"].add(y)
            t["mask"] |= self.bit[y]
            self.cover[y] += tree.mult
            t["islands"].update(self.island_of.get(y, ()))
            t["depth"][y] = t["depth"][x] + 1
            if t["depth"][y] < t["limit"]:
                t["bfs"].append(y)
            self.net.add_arc(t["s"], y, INF)
            self.caps[(x, y)] -= units
            self.net.set_cap(self.arc[(x, y)], self.caps[(x, y)])
            grew = True
        return grew

    def finish(self, t: dict) -> None:
        self.net.set_cap(t["hub"], 0)
        del self.open[t["s"]]
        self.live -= t["tree"].mult
        for v in t["nodes"]:
            self.cover[v] -= t["tree"].mult


def pack_trees(compute: tuple[int, ...], roots: tuple[int, ...], split: SplitGraph,
               k: int, interleave: bool = True, islands: list[tuple[int, ...]] = ()
               ) -> tuple[list[Tree], int]:
    """k trees per root (counted with multiplicity) spanning ``compute`` within ``split.caps``;
    each tree edge gets one physical path (a tree whose edge stands for several paths is cut into
    sub-trees).  ``interleave=False`` grows one tree to the end before the next (ForestColl's
    order): deeper trees, but the auxiliary network stays small, which matters for large N.

    ``islands`` (:func:`tacos.solvers.islands.find_islands`: groups of NPUs behind a scarce cut)
    order the arcs a tree takes: a pass over its nodes first takes arcs that stay inside
    islands (rank 0), then arcs into islands the tree has not entered yet (rank 1), then any
    arc (rank 2); after a pass that grew the tree it starts again at rank 0.  A tree thus
    crosses into an island once and spreads inside it, instead of every member fetching the
    root's data over the scarce cut (which uses up that cut's capacity and leaves the later
    trees only long detours).  Like the depth limit, the ranks only order the additions.

    Returns the trees and the number of max-flow tests made.
    """
    p = _Packer(compute, split.caps, k, islands)
    ecc = _eccentricity(compute, split.caps)
    trees = deque(p.new(r, k, [], {r}) for r in sorted(roots))
    for t in trees:
        t["limit"] = ecc[t["tree"].root]
    done: list[Tree] = []
    idle = 0  # node expansions in a row that added nothing
    n = len(compute)
    while trees:
        t = trees.popleft()
        bfs = t["bfs"]
        if not bfs:  # every node tried: try again from the shallowest, deeper if stuck
            if t.get("grew", True):
                t["rank"] = 0
            elif t["rank"] < p.ranks:
                t["rank"] += 1
            else:
                t["limit"] += 1
                t["rank"] = 0
            t["grew"] = False
            depth, limit = t["depth"], t["limit"]
            bfs = t["bfs"] = deque(sorted((v for v in t["nodes"] if depth[v] < limit),
                                          key=lambda v: (depth[v], v)))
        if bfs:
            grew = p.expand(t, bfs.popleft(), trees)
            if grew:
                t["grew"] = True
                idle = 0
            else:
                idle += 1
        if len(t["nodes"]) == n:
            p.finish(t)
            done.append(t["tree"])
            idle = 0
            continue
        if idle > 2 * n * n * (len(trees) + 1):
            raise RuntimeError(f"tree of root {t['tree'].root} cannot grow: the capacities do "
                               "not satisfy Edmonds' condition")
        if interleave:
            trees.append(t)
        else:
            trees.appendleft(t)
    pools = {e: list(v) for e, v in split.paths.items()}
    out: list[Tree] = []
    for tree in sorted(done, key=lambda t: t.root):
        out += _map_paths(tree, pools)
    return out, p.tests


def pack_cached(cache: dict | None, compute: tuple[int, ...], roots: tuple[int, ...],
                split: SplitGraph, k: int, interleave: bool = True,
                islands: list[tuple[int, ...]] = ()) -> tuple[list[Tree], int]:
    """:func:`pack_trees`, kept in ``cache`` (None: no cache) under its exact inputs: the
    capacities and paths in their order (the packer's choices follow it), so a hit returns what
    packing again would (copies: callers may rebuild trees).  An all-reduce's reduction phase on
    a topology whose reversed capacities equal the forward ones, in the same order, packs
    once."""
    if cache is None:
        return _pack_remembered(compute, roots, split, k, interleave, islands)
    key = (tuple(compute), tuple(roots), k, interleave, tuple(map(tuple, islands)),
           tuple(split.caps.items()),
           tuple((e, tuple(pool)) for e, pool in split.paths.items()))
    hit = cache.get(key)
    if hit is None:
        hit = cache[key] = _pack_remembered(compute, roots, split, k, interleave, islands)
    trees, tests = hit
    return [replace(t, edges=list(t.edges), paths=list(t.paths)) for t in trees], tests


def _pack_remembered(compute: tuple[int, ...], roots: tuple[int, ...], split: SplitGraph,
                     k: int, interleave: bool, islands: list[tuple[int, ...]]
                     ) -> tuple[list[Tree], int]:
    """:func:`pack_trees`, remembered on disk under its inputs in their order when it took at
    least :data:`~tacos.solvers.forest.disk_cache.PACK_MIN_TESTS` max-flow tests
    (:mod:`~tacos.solvers.forest.disk_cache`)."""
    from tacos.solvers.forest.disk_cache import PACK_MIN_TESTS, remembered

    inputs = {"compute": list(compute), "roots": list(roots), "k": k,
              "interleave": interleave, "islands": [list(i) for i in islands],
              "caps": [[x, y, c] for (x, y), c in split.caps.items()],
              "paths": [[x, y, [[list(p), c] for p, c in pool]]
                        for (x, y), pool in split.paths.items()]}
    return remembered("pack", inputs,
                      lambda: pack_trees(compute, roots, split, k, interleave, islands),
                      _encode_packing, lambda data: _decode_packing(data, compute, roots, k),
                      keep=lambda answer: answer[1] >= PACK_MIN_TESTS)


def _encode_packing(answer: tuple[list[Tree], int]) -> list:
    """A packing and its test count as JSON-able data (trees as [root, mult, edges, paths])."""
    trees, tests = answer
    return [tests, [[t.root, t.mult, [list(e) for e in t.edges], [list(p) for p in t.paths]]
                    for t in trees]]


def _decode_packing(data: list, compute: tuple[int, ...], roots: tuple[int, ...], k: int
                    ) -> tuple[list[Tree], int]:
    """:func:`_encode_packing`'s data back; ValueError unless every tree is a spanning
    arborescence of its root over ``compute`` whose paths join its edges' ends, and every
    root of ``roots`` has k trees (with multiplicity)."""
    from tacos.solvers.forest.disk_cache import ints

    tests, rows = data
    if type(tests) is not int or not isinstance(rows, list):
        raise ValueError("not a packing")
    group = set(compute)
    per_root: dict[int, int] = defaultdict(int)
    trees = []
    for root, mult, edges, paths in rows:
        edges = [tuple(ints(e, 2)) for e in edges]
        paths = [tuple(ints(p)) for p in paths]
        reached = {root}
        for (x, y), path in zip(edges, paths, strict=True):
            if x not in reached or y in reached or path[0] != x or path[-1] != y:
                raise ValueError("not an arborescence")
            reached.add(y)
        if reached != group or type(mult) is not int or mult < 1:
            raise ValueError("not a spanning tree")
        per_root[root] += mult
        trees.append(Tree(root, mult, edges, paths))
    if per_root != {r: k for r in roots}:
        raise ValueError("not k trees per root")
    return trees, tests


def _eccentricity(compute: tuple[int, ...], caps: dict[Edge, int]) -> dict[int, int]:
    """Hop eccentricity of every NPU in the graph of positive-capacity arcs."""
    succ = successors(caps)
    return {r: max(hop_distances(succ, r).values()) for r in compute}


def _map_paths(tree: Tree, pools: dict[Edge, list[tuple[Path, int]]]) -> list[Tree]:
    from tacos.solvers.forest.split import _take

    parts: list[tuple[list[Path], int]] = [([], tree.mult)]
    for e in tree.edges:
        choices = _take(pools[e], tree.mult)
        merged: list[tuple[list[Path], int]] = []
        i = j = 0
        a = [[p, c] for p, c in parts]
        b = [[p, c] for p, c in choices]
        while i < len(a) and j < len(b):
            used = min(a[i][1], b[j][1])
            merged.append((a[i][0] + [b[j][0]], used))
            a[i][1] -= used
            b[j][1] -= used
            i += a[i][1] == 0
            j += b[j][1] == 0
        parts = merged
    return [Tree(tree.root, mult, list(tree.edges), paths) for paths, mult in parts]


def checked(compute: tuple[int, ...], roots: tuple[int, ...], trees: list[Tree], k: int,
            caps: dict[Edge, int]) -> list[Tree] | None:
    """``trees`` if :func:`check_packing` accepts them, else None (for the candidate packings
    a solver may do without)."""
    try:
        check_packing(compute, roots, trees, k, caps)
    except RuntimeError:
        return None
    return trees


def _spans(t: Tree, group: set[int]) -> bool:
    """Whether ``t`` is a spanning out-arborescence of its root over ``group`` whose paths
    join its edges' ends (:func:`check_packing`'s test, on whole lists)."""
    xs = [x for x, _ in t.edges]
    ys = [y for _, y in t.edges]
    at = dict(zip(ys, range(1, len(ys) + 1), strict=True))  # node -> edge into it (+1)
    at[t.root] = 0
    return (len(at) == len(ys) + 1 and at.keys() == group
            and [p[0] for p in t.paths] == xs and [p[-1] for p in t.paths] == ys
            and all(map(int.__lt__, map(at.get, xs, repeat(len(at))), range(1, len(xs) + 1))))


def check_packing(compute: tuple[int, ...], roots: tuple[int, ...], trees: list[Tree], k: int,
                  caps: dict[Edge, int]) -> dict[Edge, int]:
    """Raise if a tree is not a spanning out-arborescence of its root, a root does not have k
    trees, or a physical arc carries more than its capacity; returns the physical loads."""
    per_root: dict[int, int] = defaultdict(int)
    load: dict[Edge, int] = defaultdict(int)
    group = set(compute)
    if all(_spans(t, group) for t in trees):  # in bulk; else find the fault edge by edge
        paths: Counter[Path] = Counter()  # paths with their trees' multiplicities
        for t in trees:
            per_root[t.root] += t.mult
            if t.mult == 1:
                paths.update(t.paths)
            else:
                for path in t.paths:
                    paths[path] += t.mult
        for path, m in paths.items():
            for hop in zip(path, path[1:], strict=False):
                load[hop] += m
        trees = []
    for t in trees:
        per_root[t.root] += t.mult
        reached = {t.root}
        for (x, y), path in zip(t.edges, t.paths, strict=True):
            if x not in reached or y in reached or path[0] != x or path[-1] != y:
                raise RuntimeError(f"tree of root {t.root} is not an arborescence at {x}->{y}")
            reached.add(y)
            for hop in zip(path, path[1:], strict=False):
                load[hop] += t.mult
        if reached != group:
            raise RuntimeError(f"tree of root {t.root} misses {sorted(group - reached)}")
    bad = [r for r in roots if per_root[r] != k]
    if bad:
        raise RuntimeError(f"roots {bad} do not have {k} trees")
    over = [e for e, u in load.items() if u > caps.get(e, 0)]
    if over:
        raise RuntimeError(f"tree loads exceed capacities on {over[:3]}")
    return dict(load)
