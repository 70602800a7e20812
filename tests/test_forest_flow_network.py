"""FlowNetwork keeps one C++ network and changes capacities between solves (the packer's and the
splitter's many questions): every answer equals a fresh max-flow on the current capacities."""

from __future__ import annotations

import random

import networkx as nx
import pytest

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
