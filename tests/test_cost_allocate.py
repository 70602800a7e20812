"""Bandwidth allocation across dimensions: against the exhaustive grid, closed forms, and the
simulated hierarchical baseline."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tacos
from tacos.cost.allocate import GB, Op, allocate, grid, parse_op, with_bandwidths, workload_terms
from tacos.cost.confirm import confirm, seed_prices
from tacos.errors import TacosError


def _dims(shape: str, lats: list[str]):
    bws = ", ".join(f"100GB/s {lat}" for lat in lats)
    return tacos.parse(f"dims npu {shape} {bws}").topology


@pytest.fixture(scope="module")
def r2f4s8():
    return _dims("Ring(2)_FullyConnected(4)_Switch(8)", ["0.5us", "0.5us", "1us"])


def test_parse_op() -> None:
    assert parse_op("allreduce:64MiB") == Op("allreduce", 64 << 20)
    assert parse_op("allgather:1GB:inner=16:x3") == Op("allgather", 10 ** 9, inner=16, count=3)
    assert parse_op("allreduce:2KiB:outer=8") == Op("allreduce", 2048, outer=8)
    assert Op("allreduce", 1, outer=2).groups(list(range(8))) == [[0, 4], [1, 5], [2, 6],
                                                                  [3, 7]]
    for bad in ("allreduce", "allreduce:lots", "allreduce:1MiB:sideways=2"):
        with pytest.raises(TacosError):
            parse_op(bad)


def test_grid_enumerates_every_split() -> None:
    pts = grid(3, 300 * GB, 10 * GB, 1 * GB)
    assert len(pts) == math.comb(29, 2)  # 30 steps of 10 GB/s in 3 positive parts
    assert np.allclose(pts.sum(axis=1), 300 * GB) and pts.min() >= 10 * GB


def test_sequential_split_is_exact_and_beats_the_grid(r2f4s8) -> None:
    terms = workload_terms(r2f4s8, [Op("allreduce", 64 << 20)])
    alloc = allocate(terms, 300 * GB)
    assert alloc.method.startswith("exact")
    assert alloc.time <= alloc.grid_time * (1 + 1e-12)
    assert "beaten" not in alloc.method
    # T = A + Σ C_k / b_k: the optimum has b_k ∝ √C_k
    c = sum(st.w[0] for _, steps in terms.ops for st in steps)
    assert np.allclose(alloc.bandwidth / alloc.bandwidth.sum(), np.sqrt(c) / np.sqrt(c).sum())
    assert alloc.time < alloc.references["EqualBW"][1]


def test_model_matches_the_hierarchical_baseline_at_any_split(r2f4s8) -> None:
    ops = [Op("allreduce", 64 << 20)]
    terms = workload_terms(r2f4s8, ops)
    splits = {"a": np.array([150.0, 100.0, 50.0]) * GB, "b": np.array([60, 120, 120.0]) * GB}
    rows = confirm(r2f4s8, ops, splits, solver=None, dims=terms.dims)
    for row in rows:
        b = np.array(row["bandwidth"]) * GB
        assert row["baseline"] == pytest.approx(terms.time(b)[0], rel=1e-9)
    # the rebuilt topology carries the split on every link of each dimension
    topo = with_bandwidths(r2f4s8, {0: 1e9, 1: 2e9, 2: 3e9})
    assert {lk.dim: lk.bandwidth for lk in topo.links} == {0: 1e9, 1: 2e9, 2: 3e9}


@pytest.mark.parametrize("shape,lats,ops,pipelined", [
    ("Ring(4)_Switch(8)", ["0.5us", "1us"], ["allreduce:64MiB"], False),
    ("Ring(2)_FullyConnected(4)_Switch(8)", ["0.5us", "0.5us", "1us"],
     ["allreduce:256MiB:inner=8", "allreduce:1GiB:outer=8"], False),
    ("Ring(2)_FullyConnected(4)_Switch(8)", ["0.5us", "0.5us", "1us"],
     ["allreduce:256MiB:inner=8", "allreduce:1GiB:outer=8"], True),
    ("Ring(2)_FullyConnected(4)_Ring(2)_Switch(4)", ["0.5us"] * 3 + ["1us"],
     ["allreduce:128MiB:inner=16", "allgather:64MiB"], False),
    ("Ring(2)_FullyConnected(4)_Ring(2)_Switch(4)", ["0.5us"] * 3 + ["1us"],
     ["allreduce:128MiB:inner=16", "allgather:64MiB"], True),
])
def test_allocator_beats_the_exhaustive_grid(shape, lats, ops, pipelined) -> None:
    topo = _dims(shape, lats)
    terms = workload_terms(topo, [parse_op(o) for o in ops], pipelined=pipelined)
    alloc = allocate(terms, 300 * GB)
    assert "beaten" not in alloc.method, alloc.method
    assert alloc.time <= alloc.grid_time * (1 + 1e-9)
    assert alloc.bandwidth.sum() == pytest.approx(300 * GB)


def test_time_times_cost_objective(r2f4s8) -> None:
    terms = workload_terms(r2f4s8, [Op("allreduce", 64 << 20)])
    prices = seed_prices(r2f4s8)
    assert prices == [1.0, 3.0, 74.0]  # ring of 2, FC(4), switch per seed 000 Table II
    alloc = allocate(terms, 300 * GB, prices=prices)
    assert alloc.objective == "time x cost" and "SLSQP" in alloc.method
    value = alloc.time * alloc.cost
    assert value <= alloc.grid_time * (1 + 1e-9)
    # the expensive switch dimension gets less than under the time objective
    plain = allocate(terms, 300 * GB)
    assert alloc.bandwidth[2] < plain.bandwidth[2]


def test_confirm_synthesizes_a_plan(r2f4s8) -> None:
    ops = [Op("allreduce", 16 << 20)]
    rows = confirm(r2f4s8, ops, {"equal": np.full(3, 100 * GB)}, trials=2)
    assert rows[0]["synthesized"] > 0 and rows[0]["baseline"] > 0


def test_allocation_needs_dimensions() -> None:
    with pytest.raises(TacosError, match="multi-dimensional"):
        workload_terms(tacos.parse("use dgx1").topology, [Op("allreduce", 1 << 20)])
    topo = _dims("Ring(4)_Switch(4)", ["0.5us", "1us"])
    terms = workload_terms(topo, [Op("allreduce", 1 << 20)])
    with pytest.raises(TacosError, match="minimum"):
        allocate(terms, 1 * GB, minimum=1 * GB)


def test_plot_allocation(tmp_path, r2f4s8) -> None:
    pytest.importorskip("matplotlib")
    from tacos.cost.plots import plot_allocation

    for shape, lats in (("Ring(2)_FullyConnected(2)_Ring(2)_Switch(2)", ["0.5us"] * 4),):
        topo = _dims(shape, lats)
        terms = workload_terms(topo, [Op("allreduce", 1 << 20)])
        alloc = allocate(terms, 200 * GB)
        out = plot_allocation(alloc, terms, tmp_path / f"{len(alloc.dims)}.png",
                              confirmed=[{"name": "opt", "bandwidth": list(alloc.bandwidth / GB),
                                          "baseline": alloc.time, "synthesized": alloc.time}])
        assert out.stat().st_size > 10_000


# -- the seed's 1024-NPU examples (seed 000, Table III/IV) -----------------------------------
SEED = {
    "2D": ("Ring(8)_Switch(128)", ["0.5us", "1us"]),
    "3D": ("Ring(8)_FullyConnected(8)_Switch(16)", ["0.5us", "0.5us", "1us"]),
    "4D": ("Ring(2)_FullyConnected(8)_Ring(8)_Switch(8)", ["0.5us", "0.5us", "0.5us", "1us"]),
}
WORKLOADS = {
    "Transformer-17B": ["allreduce:34GB"],
    "GPT-3": ["allreduce:50MB:inner=16:x768", "allreduce:21875MB:outer=64"],
    "Transformer-1T": ["allreduce:100MB:inner=128:x1024", "allreduce:256GB:outer=8"],
}


@pytest.mark.slow
@pytest.mark.parametrize("net", sorted(SEED))
@pytest.mark.parametrize("work", sorted(WORKLOADS))
def test_seed_examples_beat_the_grid(net, work) -> None:
    """(The time it takes is measured by benchmarks/bench_cost.py, docs/benchmarks/cost.md.)"""
    shape, lats = SEED[net]
    topo = _dims(shape, lats)
    terms = workload_terms(topo, [parse_op(o) for o in WORKLOADS[work]])
    alloc = allocate(terms, 300 * GB)
    assert alloc.time <= alloc.grid_time * (1 + 1e-9) and "beaten" not in alloc.method
