"""FlowNetwork keeps one C++ network and changes capacities between solves (the packer's and the
splitter's many questions): every answer equals a fresh max-flow on the current capacities."""

from __future__ import annotations

import random

import networkx as nx
import pytest

from tacos.solvers.forest import flow
from tacos.solvers.forest.flow import FlowNetwork


def _fresh(net: FlowNetwork, s: int, t: int) -> tuple[int, frozenset[int]]:
    """Max-flow value and the nodes the residual graph reaches from ``s``, from scratch."""
    g = nx.DiGraph()
    g.add_nodes_from(range(net.n))
    for a, c in enumerate(net.cap):
        if c > 0:
            u, v = net.tail[a], net.head[a]
            prev = g.edges[u, v]["capacity"] if g.has_edge(u, v) else 0
            g.add_edge(u, v, capacity=prev + c)
    r = nx.algorithms.flow.edmonds_karp(g, s, t)  # another algorithm than OR-Tools'
    value = r.graph["flow_value"]
    reach, stack = {s}, [s]
    while stack:
        u = stack.pop()
        for v, d in r.succ[u].items():
            if v not in reach and d["capacity"] - d["flow"] > 0:
                reach.add(v)
                stack.append(v)
    # the nodes the residual graph reaches are a minimum cut's source side
    assert sum(g.edges[u, v]["capacity"] for u in reach for v in g.succ[u]
               if v not in reach) == value
    return int(value), frozenset(reach)


@pytest.mark.parametrize("seed", range(4))
def test_changing_capacities_give_fresh_answers(seed):
    rng = random.Random(seed)
    n = 9
    net = FlowNetwork(n)
    if net._smf is None:
        pytest.skip("OR-Tools does not load here")
    arcs = [net.add_arc(rng.randrange(n), rng.randrange(n), rng.randrange(0, 6))
            for _ in range(30)]
    for _ in range(120):
        for _ in range(rng.randrange(1, 6)):
            net.set_cap(rng.choice(arcs), rng.choice([0, 0, 0, rng.randrange(1, 8)]))
        if rng.random() < 0.2:
            v = net.add_node()  # a node no arc touches until later
            arcs.append(net.add_arc(rng.randrange(net.n), v, rng.randrange(0, 4)))
        s, t = rng.sample(range(net.n), 2)
        value, side = net.max_flow(s, t, min_cut=True)
        assert (value, side) == _fresh(net, s, t)
        assert net.max_flow(s, t)[0] == value and net.last_cut() == side


def test_multi_source_sink_after_zeroing():
    net = FlowNetwork(4)
    a = net.add_arc(0, 2, 5)
    net.add_arc(1, 3, 2)
    net.add_arc(2, 3, 4)
    assert net.max_flow([0, 1], [3])[0] == 6
    net.set_cap(a, 0)
    assert net.max_flow([0, 1], [3])[0] == 2
    net.set_cap(a, 1)
    assert net.max_flow([0, 1], 3, min_cut=True) == (3, frozenset({0, 1}))


# one MI250 box's 16 GCDs as the packer sees them (arcs and capacities at k = 1)
_MI250 = {(0, 1): 12, (0, 4): 6, (0, 8): 3, (1, 0): 12, (1, 5): 3, (1, 9): 3, (1, 10): 3,
          (2, 3): 12, (2, 6): 3, (2, 9): 3, (2, 10): 3, (3, 2): 12, (3, 7): 6, (3, 11): 3,
          (4, 0): 6, (4, 5): 12, (4, 6): 3, (5, 1): 3, (5, 4): 12, (5, 6): 3, (5, 7): 3,
          (6, 2): 3, (6, 4): 3, (6, 5): 3, (6, 7): 12, (7, 3): 6, (7, 5): 3, (7, 6): 12,
          (8, 0): 3, (8, 9): 12, (8, 12): 6, (9, 1): 3, (9, 2): 3, (9, 8): 12, (9, 13): 3,
          (10, 1): 3, (10, 2): 3, (10, 11): 12, (10, 14): 3, (11, 3): 3, (11, 10): 12,
          (11, 15): 6, (12, 8): 6, (12, 13): 12, (12, 14): 3, (13, 9): 3, (13, 12): 12,
          (13, 14): 3, (13, 15): 3, (14, 10): 3, (14, 12): 3, (14, 13): 3, (14, 15): 12,
          (15, 11): 6, (15, 13): 3, (15, 14): 12}


def _pack_both(seed: int, monkeypatch) -> list[tuple[int, int]]:
    """Pack a seeded variant of the box with and without remembered cuts; assert that every
    question a cut answered has the max-flow answer 0 and that both packings are the same.
    Returns the questions the cuts answered."""
    from tacos.solvers.forest import pack
    from tacos.solvers.forest.split import SplitGraph

    rng = random.Random(seed)
    k = 1 + seed % 2
    compute = tuple(range(16))
    # k times a feasible k = 1 graph stays feasible; raising capacities too
    caps = {e: k * c + (rng.random() < 0.2) * rng.randrange(1, 4) for e, c in _MI250.items()}
    islands = [(0, 1, 4, 5), (2, 3, 6, 7)] if seed >= 2 else []

    def packed():
        split = SplitGraph(dict(caps), {e: [(e, c)] for e, c in caps.items()})
        return pack.pack_trees(compute, compute, split, k, islands=islands)

    blocked = []
    real = pack._Packer._cut_blocks

    def checked(self, t, x, y, others):
        hit = real(self, t, x, y, others)
        if hit:  # the max-flow the cut replaced gives 0 as well
            mult, cap = t["tree"].mult, self.caps[(x, y)]
            self.net.set_cap(self.to_hub[x], flow.INF)
            self.net.set_cap(t["hub"], 0)
            value, _ = self.net.max_flow(x, y)
            self.net.set_cap(self.to_hub[x], 0)
            self.net.set_cap(t["hub"], mult)
            assert min(mult, cap, value - others) <= 0
            blocked.append((x, y))
        return hit

    monkeypatch.setattr(pack._Packer, "_cut_blocks", checked)
    with_cuts = packed()
    monkeypatch.setattr(pack, "CUTS_KEPT", 0)
    without = packed()
    assert [(t.root, t.mult, t.edges, t.paths) for t in with_cuts[0]] == \
        [(t.root, t.mult, t.edges, t.paths) for t in without[0]]
    assert with_cuts[1] == without[1]
    return blocked


@pytest.mark.parametrize("seed", range(4))
def test_remembered_cuts_give_the_same_packing(seed, monkeypatch):
    """The packer's remembered cuts answer only questions whose max-flow answer is 0, and the
    trees are the ones packed with every question asked of the max-flow."""
    blocked = _pack_both(seed, monkeypatch)
    if seed == 0:  # the path is taken (the box at k = 1 has such questions)
        assert blocked
