"""The array forms of the bounds and the feasibility check against plain per-node references:
latency bounds from scipy shortest paths against networkx Dijkstra, per-NPU byte totals
against summing :func:`tacos.check.bounds._needs` chunk by chunk."""

from __future__ import annotations

import math
import random
from collections import defaultdict

import networkx as nx
import pytest

from tacos import builders
from tacos.check import bounds
from tacos.model import patterns
from tacos.model.collective import Chunk, Collective
from tacos.model.topology import Link, Npu, Switch, Topology

KINDS = ("allgather", "reducescatter", "allreduce", "alltoall", "broadcast", "reduce")


def random_topology(seed: int) -> Topology:
    rng = random.Random(seed)
    n, m = rng.randint(3, 8), rng.randint(0, 2)
    links = []
    for _ in range(rng.randint(n, 3 * n)):
        a, b = rng.sample(range(n + m), 2)
        links.append(Link(a, b, rng.choice([0.0, 1e-6, 3e-6]), rng.choice([1e9, 5e9])))
    for v in range(n):  # keep it connected: a ring over the NPUs
        links.append(Link(v, (v + 1) % n, 2e-6, 2e9))
    return Topology(tuple(Npu(i, f"n{i}") for i in range(n)),
                    tuple(Switch(n + j, f"s{j}") for j in range(m)), tuple(links))


def random_chunks(topo: Topology, seed: int) -> Collective:
    rng = random.Random(seed)
    n = topo.n_npus
    chunks = []
    for i in range(rng.randint(1, 12)):
        pre = frozenset(rng.sample(range(n), rng.randint(0, n)))
        post = frozenset(rng.sample(range(n), rng.randint(0, n)))
        chunks.append(Chunk(i, rng.choice([1, 7, 1024]), pre, post, rng.random() < 0.4, i))
    return Collective("custom", tuple(chunks), tuple(range(n)), 0)


def reference_latency(topo: Topology, coll: Collective, hops: bool) -> float:
    g = nx.DiGraph()
    g.add_nodes_from(range(topo.n_nodes))
    best = 0.0
    for c in coll.chunks:
        g.clear_edges()
        for lk in topo.links:
            w = (0.0 if hops else lk.alpha) if topo.is_switch(lk.dst) else \
                (1.0 if hops else lk.alpha + c.size / lk.bandwidth)
            if not g.has_edge(lk.src, lk.dst) or g.edges[lk.src, lk.dst]["w"] > w:
                g.add_edge(lk.src, lk.dst, w=w)
        if not c.reduce:
            if c.post - c.pre and c.pre:
                d = nx.multi_source_dijkstra_path_length(g, set(c.pre), weight="w")
                best = max(best, max(d.get(v, math.inf) for v in c.post - c.pre))
            continue
        for v in c.post:
            if c.pre - {v}:
                d = nx.single_source_dijkstra_path_length(g.reverse(), v, weight="w")
                best = max(best, max(d.get(u, math.inf) for u in c.pre if u != v))
    return best


def reference_totals(coll: Collective, weight) -> tuple[dict, dict]:
    recv: dict[int, int] = defaultdict(int)
    send: dict[int, int] = defaultdict(int)
    for c in coll.chunks:
        r, s = bounds._needs(c.pre, c.post, c.reduce)
        for v in r:
            recv[v] += weight(c.size, 1)
        for u in s:
            send[u] += weight(c.size, 1)
    return ({k: v for k, v in recv.items() if v}, {k: v for k, v in send.items() if v})


@pytest.mark.parametrize("seed", range(12))
def test_latency_and_totals_match_per_node_references(seed: int) -> None:
    topo = random_topology(seed)
    colls = [random_chunks(topo, seed)] + [
        patterns.build(k, range(topo.n_npus), size=topo.n_npus ** 2 * 64,
                       root=0 if k in ("broadcast", "reduce") else None)
        for k in KINDS]
    for coll in colls:
        for hops in (False, True):
            got = bounds._latency(topo, coll, hops=hops)
            want = reference_latency(topo, coll, hops)
            assert got == pytest.approx(want, rel=1e-12, abs=0), (coll.kind, hops)
        for weight in (lambda size, count: size * count, lambda size, count: count):
            assert bounds._per_npu(coll, weight) == reference_totals(coll, weight), coll.kind


def test_uniform_torus_uses_hop_layers() -> None:
    topo = builders.torus(4, 5, bandwidth=1e9, latency=1e-6)
    coll = patterns.build("allgather", range(20), size=20 * 1000)
    step = 1e-6 + 1000 / 1e9
    assert bounds.latency_bound(topo, coll) == pytest.approx((2 + 2) * step)
    cache: dict = {}
    bounds._latency(topo, coll, hops=False, cache=cache)
    bounds._latency(topo, coll, hops=True, cache=cache)
    assert sum(1 for k in cache if k == "unit" or k[0] == "distances") == 1  # one graph


def reference_feasible(topo: Topology, coll: Collective, members) -> bool:
    g = nx.DiGraph()
    g.add_nodes_from(range(topo.n_nodes))
    group = None if members is None else set(members) | coll.npus

    def usable(v: int) -> bool:
        return group is None or topo.is_switch(v) or v in group

    g.add_edges_from((lk.src, lk.dst) for lk in topo.links if usable(lk.src) and usable(lk.dst))
    for c in coll.chunks:
        if c.post and not c.pre:
            return False
        if c.reduce:
            if any(not nx.has_path(g, u, v) for u in c.pre for v in c.post):
                return False
        elif any(not any(nx.has_path(g, u, v) for u in c.pre) for v in c.post - c.pre):
            return False
    return True


@pytest.mark.parametrize("seed", range(24))
def test_feasibility_matches_reachability(seed: int) -> None:
    from tacos.errors import InfeasibleError
    from tacos.passes.feasibility import check_feasible

    rng = random.Random(seed)
    n, m = rng.randint(3, 7), rng.randint(0, 2)
    links = []
    for _ in range(rng.randint(1, 2 * n)):  # sparse and one-way: often disconnected
        a, b = rng.sample(range(n + m), 2)
        links.append(Link(a, b, 1e-6, 1e9))
    if seed % 4 < 2:  # half the cases: a one-way ring through every node, often feasible
        links += [Link(v, (v + 1) % (n + m), 1e-6, 1e9) for v in range(n + m)]
    topo = Topology(tuple(Npu(i, f"n{i}") for i in range(n)),
                    tuple(Switch(n + j, f"s{j}") for j in range(m)), tuple(links))
    coll = random_chunks(topo, seed)
    members = None if seed % 2 else rng.sample(range(n), rng.randint(1, n))
    want = reference_feasible(topo, coll, members)
    try:
        check_feasible(topo, coll, members)
        got = True
    except InfeasibleError:
        got = False
    assert got == want
