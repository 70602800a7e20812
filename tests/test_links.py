"""One route-cost rule: routes, the vectorized tables and the link arrays agree."""

from __future__ import annotations

import numpy as np
import pytest

import tacos
from tacos.model.links import LinkArrays, route_cost, route_time


@pytest.fixture(scope="module")
def fabric() -> tacos.Topology:
    return tacos.parse("dims npu Ring(4)_Switch(2) 100GB/s 0.5us, 25GB/s 2us").topology


def test_routes_cost_what_the_rule_says(fabric: tacos.Topology) -> None:
    seen = 0
    for u in fabric.live_npus:
        for routes in fabric.routing.from_npu(u).values():
            for r in routes:
                links = [fabric.links[i] for i in r.links]
                assert (r.alpha, r.bandwidth, r.lanes) == route_cost(links)
                assert r.time(1e6) == route_time(links, 1e6)
                assert r.alpha == pytest.approx(sum(lk.alpha for lk in links))
                assert r.bandwidth == min(lk.bandwidth for lk in links)
                seen += 1
    assert seen > len(fabric.live_npus)


def test_link_arrays_are_built_once_and_read_only(fabric: tacos.Topology) -> None:
    a = fabric.link_arrays
    assert a is fabric.link_arrays and len(a) == len(fabric.links)
    assert a.alpha.tolist() == [lk.alpha for lk in fabric.links]
    assert a.multiplicity.dtype == np.int64
    with pytest.raises(ValueError):
        a.bandwidth[0] = 1.0


def test_vectorized_costs_match_the_rule(fabric: tacos.Topology) -> None:
    rng = np.random.default_rng(0)
    routes = [tuple(rng.integers(0, len(fabric.links), size=rng.integers(1, 4)).tolist())
              for _ in range(50)]
    owner = np.repeat(np.arange(len(routes)), [len(r) for r in routes])
    link = np.concatenate([np.asarray(r) for r in routes])
    alpha, bw = fabric.link_arrays.route_costs(owner, link, len(routes))
    for i, r in enumerate(routes):
        a, b, _ = route_cost(fabric.links[j] for j in r)
        assert alpha[i] == pytest.approx(a) and bw[i] == b
    one = np.arange(len(fabric.links))  # one link per route: the fast path, same answer
    a1, b1 = fabric.link_arrays.route_costs(one, one, len(one))
    assert a1.tolist() == fabric.link_arrays.alpha.tolist()
    assert b1.tolist() == fabric.link_arrays.bandwidth.tolist()


def test_malformed_routes_get_a_cost_the_checks_can_report() -> None:
    arrays = LinkArrays.of([])
    alpha, bw = arrays.route_costs(np.array([0]), np.array([5]), 2)
    assert alpha.tolist() == [0.0, 0.0] and bw.tolist() == [1.0, 1.0]
    with pytest.raises(ValueError):
        route_cost([])
