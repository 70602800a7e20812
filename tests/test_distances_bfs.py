"""Uniform hop counts by breadth-first search (tacos/model/distances.py, small topologies): the
same distances as scipy's Dijkstra, forwards and backwards, nearest-of-several and per source,
unreachable nodes included; and the bounds built on them unchanged."""

from __future__ import annotations

import numpy as np
import pytest

import tacos
from tacos.check.bounds import lower_bound
from tacos.model import distances
from tacos.model.patterns import build

pytest.importorskip("scipy.sparse.csgraph")  # the reference (imported once, as the suite does)

TOPOLOGIES = {
    "torus": 'topology "t"\ntorus t[3, 3, 2] 50GiB/s 0.5us\n',
    "ring": 'topology "r"\nring r[6] 100GB/s 1us\n',  # one direction: far back is far
    "mesh": 'topology "m"\nmesh m[3, 4] 25GB/s 2us\n',
}


def _both(monkeypatch, topo, ask):
    out = []
    for most in (distances.BFS_MAX_NODES, 0):
        monkeypatch.setattr(distances, "BFS_MAX_NODES", most)
        d = distances.Distances(topo, lambda lk: 3.0)
        assert (d._adj is not None) == (most > 0)
        out.append(ask(d))
    return out


@pytest.mark.parametrize("name", sorted(TOPOLOGIES))
def test_same_distances_as_dijkstra(monkeypatch, name):
    topo = tacos.parse(TOPOLOGIES[name]).topology
    n = topo.n_nodes
    for reverse in (False, True):
        bfs, dij = _both(monkeypatch, topo, lambda d, r=reverse: d.nearest([0, n - 1], reverse=r))
        assert np.array_equal(bfs, dij)
        bfs, dij = _both(monkeypatch, topo,
                         lambda d, r=reverse: np.stack([row for _, row in
                                                        d.rows(list(range(n)), reverse=r)]))
        assert np.array_equal(bfs, dij) and bfs.shape == (n, n)
        assert bfs.max() > 3.0  # more than one hop somewhere


def test_unreachable_nodes_are_infinite(monkeypatch):
    topo = tacos.parse('topology "two"\nring a[3] 10GB/s 1us\nring b[3] 10GB/s 1us\n').topology
    bfs, dij = _both(monkeypatch, topo, lambda d: d.nearest([0]))
    assert np.array_equal(bfs, dij) and np.isinf(bfs).sum() == 3


@pytest.mark.parametrize("kind", ["allgather", "allreduce", "broadcast"])
def test_bounds_unchanged(monkeypatch, kind):
    topo = tacos.parse(TOPOLOGIES["torus"]).topology
    coll = build(kind, topo.live_npus, size=18 * 4096, chunks_per_npu=2,
                 root=0 if kind == "broadcast" else None)
    got = []
    for most in (distances.BFS_MAX_NODES, 0):
        monkeypatch.setattr(distances, "BFS_MAX_NODES", most)
        b = lower_bound(topo, coll)
        got.append((b.value, b.latency, b.bandwidth, b.model))
    assert got[0] == got[1] and got[0][1] > 0
