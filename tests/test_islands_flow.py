"""Islands found with OR-Tools' integer max-flow equal those networkx's max-flow finds."""

from __future__ import annotations

import pytest

import tacos
from tacos.solvers import islands

SYSTEMS = [
    "use dgx2(nodes=2)",
    pytest.param("use mi250(nodes=2)", marks=pytest.mark.slow),  # about 1.4 s
    "fattree host[16] leaves=4 spines=2 down 64GB/s 1us up 32GB/s 1us",
    "dragonfly d[4, 5] local 400GB/s 0.5us global 200GB/s 1us",
]


@pytest.mark.parametrize("text", SYSTEMS)
def test_same_islands_with_either_max_flow(text, monkeypatch):
    topo = tacos.parse(text).topology
    npus = topo.live_npus
    g = islands._flow_graph(topo, npus)
    assert islands._integer_arcs(g) is not None  # whole B/s: the OR-Tools path runs
    found = []
    for integer in (True, False):
        if not integer:
            monkeypatch.setattr(islands, "_integer_arcs", lambda g: None)
        for group in (npus, npus[: len(npus) // 3]):
            islands._CACHE.clear()
            found.append(islands.find_islands(topo, group))
    half = len(found) // 2
    assert found[:half] == found[half:]
    assert found[0]  # each of these systems has islands


def test_fractional_rates_use_networkx():
    topo = tacos.parse("fattree host[8] leaves=2 spines=1 down 50.5B/s 1us up 25.25B/s 1us"
                       ).topology
    g = islands._flow_graph(topo, topo.live_npus)
    assert islands._integer_arcs(g) is None
    inside = topo.live_npus[:4]
    outside = topo.live_npus[4:]
    # into one leaf's four hosts: its one uplink, narrower than the hosts' 4 x 50.5 B/s
    assert islands.cut_into(g, inside, outside) == pytest.approx(25.25)
