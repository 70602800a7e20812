"""AxoNN's equations (seed 003, §V) on hand-computed inputs, and the 4D explorer."""

from __future__ import annotations

import math

import pytest

import tacos
from tacos.cost import axonn
from tacos.cost.explore import Config, configs, explore, grids
from tacos.errors import TacosError


def test_ring_equations_1_to_3() -> None:
    g, m, beta = 4, 1e9, 1e11
    assert math.isclose(axonn.t_allgather(g, m, beta), 3e9 / 1e11)        # (G-1) m / β
    assert math.isclose(axonn.t_reducescatter(g, m, beta), 0.75e9 / 1e11)  # (G-1)/G m / β
    assert math.isclose(axonn.t_allreduce(g, m, beta), 1.5e9 / 1e11)      # 2(G-1)/G m / β


def test_equation_10_group_bandwidths() -> None:
    # G_node = 4, β_intra = 100, β_inter = 25
    # (2,2,4,1): X 2 ≤ 4 and X·Y = 4 ≤ 4 inside a node; Z spans nodes behind 4 groups
    assert axonn.group_bandwidths((2, 2, 4, 1), 4, 100.0, 25.0) == (100.0, 100.0, 6.25, 6.25)
    # (1,1,8,2): Z spans nodes with nothing before it (β_inter); data behind 8 -> min(4, 8)
    assert axonn.group_bandwidths((1, 1, 8, 2), 4, 100.0, 25.0) == (100.0, 100.0, 25.0, 6.25)
    # (2,1,2,4) with G_node 8: X·Y·Z = 4 ≤ 8 inside; data behind 4 groups -> 25/4
    assert axonn.group_bandwidths((2, 1, 2, 4), 8, 100.0, 25.0) == (100.0, 100.0, 100.0, 6.25)


def test_equations_4_to_9_on_a_small_layer() -> None:
    layer = axonn.Layer(m=8, k=4, n=6)
    t = axonn.layer_times(layer, (4, 2, 2, 1), (1.0, 1.0, 1.0, 1.0))
    assert t == pytest.approx({
        "AG,z": (2 - 1) * 24 / (4 * 2 * 2),        # (4)  = 1.5
        "RS,z": (1 / 2) * 24 / (4 * 2),            # (5)  = 1.5
        "AR,y": 2 * (1 / 2) * 48 / (2 * 4),        # (6)  = 6
        "AR,x": 2 * (3 / 4) * 32 / (2 * 2),        # (7)  = 12
        "AR,data": 0.0,                            # (8)  G_data = 1
    })
    assert axonn.layer_time(layer, (4, 2, 2, 1), (1.0,) * 4) == pytest.approx(21.0)  # (9)


def test_transposed_layer_swaps_x_and_y() -> None:
    layer = axonn.Layer(m=8, k=4, n=6, transposed=True)
    t = axonn.layer_times(layer, (4, 2, 2, 1), (3.0, 1.0, 1.0, 1.0))
    # (6) now runs on X (G_x = 4, β_x = 3): 2/3 · 3/4 · mn/(G_z·G_y) = 0.5 · 48/4
    assert t["AR,x"] == pytest.approx(2 / 3 * 3 / 4 * 48 / (2 * 2))
    # (7) now runs on Y (G_y = 2): 2 · 1/2 · mk/(G_z·G_x)
    assert t["AR,y"] == pytest.approx(2 * 1 / 2 * 32 / (2 * 4))
    assert t["AG,z"] == pytest.approx(1.5) and t["RS,z"] == pytest.approx(1.5)


def test_data_parallel_allreduce_and_bytes_per_element() -> None:
    layer = axonn.Layer(m=8, k=4, n=6)
    t = axonn.layer_times(layer, (1, 1, 1, 4), (1.0, 1.0, 1.0, 2.0), bytes_per_element=2)
    assert t["AR,data"] == pytest.approx(2 / 2 * 3 / 4 * 24 * 2)  # (8)


def test_gpt_layers_hold_the_models_parameters() -> None:
    n_layers, hidden, _ = axonn.GPT_MODELS["gpt-20b"]
    layers = axonn.transformer_layers(n_layers, hidden, 2048)
    params = sum(lay.k * lay.n for lay in layers)
    assert params == 12 * n_layers * hidden ** 2  # ≈ 19.7 B
    assert sum(lay.transposed for lay in layers) == len(layers) // 2


def test_grids_and_placements() -> None:
    assert len(grids(8)) == 20  # ordered factorizations of 8 into four factors
    assert all(math.prod(g) == 8 for g in grids(8))
    cfg = Config((2, 2, 1, 2), ("x", "y", "z", "data"))
    groups = cfg.groups(list(range(8)))
    assert groups["x"] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert groups["y"] == [[0, 2], [1, 3], [4, 6], [5, 7]]  # the paper's example
    assert groups["data"][0] == [0, 4]
    swapped = Config((2, 2, 1, 2), ("data", "x", "y", "z")).groups(list(range(8)))
    assert swapped["data"][0] == [0, 1]
    assert len(configs(8, "axonn")) == 20
    assert len(configs(8)) > 20


@pytest.fixture(scope="module")
def small():
    return tacos.parse("use dgx_a100(nodes=2)").topology


def test_explore_ranks_by_the_model_and_synthesizes_the_top(small) -> None:
    layers = axonn.transformer_layers(2, 1024, 2048)
    ranked = explore(small, layers, gpus=8, top=1, trials=2)
    assert ranked == sorted(ranked, key=lambda r: (r.model, r.axonn, r.config.grid,
                                                    r.config.order))
    assert ranked[0].synthesized is not None and ranked[0].synthesized > 0
    assert all(r.synthesized is None for r in ranked[1:])
    # 8 GPUs inside one node: every group gets the NVSwitch, AxoNN's β_intra everywhere
    pure_data = next(r for r in ranked if r.config.grid == (1, 1, 1, 8))
    kn = sum(lay.k * lay.n for lay in layers) * 2
    assert pure_data.axonn == pytest.approx(2 * 7 / 8 * kn / 300e9)


def test_explore_across_nodes_prefers_fast_inner_groups(small) -> None:
    layers = axonn.transformer_layers(1, 2048, 4096)
    ranked = explore(small, layers, algorithm="ring", synthesize=None, placements="axonn")
    best = ranked[0].config
    # the X and Y all-reduces move activations: the winner keeps them inside a node
    assert best.grid[0] * best.grid[1] <= 8
    with pytest.raises(TacosError, match="cannot place"):
        explore(small, layers, gpus=64, synthesize=None)
