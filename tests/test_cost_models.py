"""Cost models: textbook closed forms on their home topologies, agreement with the matching
baseline schedules, and placement-aware bandwidth on the physical links."""

from __future__ import annotations

import math

import pytest

import tacos
from tacos.builders import fully_connected, hypercube, multi_dim, ring, star
from tacos.cost import compare, estimate
from tacos.cost.models import Context
from tacos.cost.placement import machine
from tacos.errors import TacosError

A, B = 1e-6, 50e9  # α 1 µs, 50 GB/s
M = 64 << 20


def _dgx_a100(nodes: int):
    return tacos.parse(f"use dgx_a100(nodes={nodes})").topology


def _close(x: float, y: float, rel: float = 1e-9) -> bool:
    return math.isclose(x, y, rel_tol=rel)


def _rows(topo, kind, models, root=None, size=M):
    return {r.estimate.model: r for r in compare(topo, kind, size, models=models,
                                                 root=root).rows}


# -- home topologies: the textbook closed forms ----------------------------------------------
@pytest.mark.parametrize("n", [4, 8])
def test_ring_allreduce_on_a_ring_is_the_textbook_formula(n: int) -> None:
    topo = ring(n, bandwidth=B, latency=A)
    row = _rows(topo, "allreduce", ["ring"])["ring"]
    assert _close(row.estimate.time, 2 * (n - 1) * (A + M / (n * B)))
    assert _close(row.simulated, row.estimate.time)
    assert row.estimate.alpha == A and _close(row.estimate.beta, B)


def test_ring_allgather_reducescatter_and_pipelined_broadcast() -> None:
    n = 8
    topo = ring(n, bandwidth=B, latency=A)
    for kind in ("allgather", "reducescatter"):
        row = _rows(topo, kind, ["ring"])["ring"]
        assert _close(row.estimate.time, (n - 1) * (A + M / (n * B)))
        assert _close(row.simulated, row.estimate.time)
    # broadcast of k chunks pipelined down the N-1 hop chain: (N - 2 + k)(α + M/(kβ))
    k = 4
    est = estimate(topo, "broadcast", M, model="ring", root=3, chunks=k)
    assert _close(est.time, (n - 2 + k) * (A + M / (k * B)))


def test_bidirectional_ring_halves_the_steps() -> None:
    n = 8
    topo = ring(n, bandwidth=B, latency=A)
    row = _rows(topo, "allreduce", ["biring"])["biring"]
    assert _close(row.estimate.time, 2 * (n // 2) * (A + M / (n * B)))
    assert _close(row.simulated, row.estimate.time)


def test_direct_on_fully_connected_and_on_a_switch() -> None:
    n = 8
    row = _rows(fully_connected(n, bandwidth=B, latency=A), "allgather", ["direct"])["direct"]
    assert _close(row.estimate.time, A + M / (n * B))
    assert _close(row.simulated, row.estimate.time)
    # behind a switch an NPU sends to one peer at a time at the full port rate
    est = estimate(star(n, bandwidth=B, latency=A), "allgather", M, model="direct")
    assert _close(est.time, (n - 1) * (2 * A + M / (n * B)))
    assert _close(est.beta, B / (n - 1)) and _close(est.alpha, (n - 1) * 2 * A)


@pytest.mark.parametrize("topo_name", ["hypercube", "star"])
def test_halving_doubling_home_topologies(topo_name: str) -> None:
    n = 8
    topo = (hypercube(n, bandwidth=B, latency=A) if topo_name == "hypercube"
            else star(n, bandwidth=B, latency=A))
    hop = A if topo_name == "hypercube" else 2 * A  # a switch path is two links
    row = _rows(topo, "allreduce", ["halving-doubling"])["halving-doubling"]
    assert _close(row.estimate.time, 2 * (3 * hop + (n - 1) / n * M / B))
    assert _close(row.schedule_time, row.estimate.time)
    bc = estimate(topo, "broadcast", M, model="halving-doubling", root=0)
    assert _close(bc.time, 3 * (hop + M / B))


def test_double_binary_tree_on_fully_connected() -> None:
    n, k = 8, 1
    topo = fully_connected(n, bandwidth=B, latency=A)
    depth = 3  # NCCL's in-order binary tree of 8 ranks
    chunks_per_tree = n * k // 2
    row = _rows(topo, "allreduce", ["tree"])["tree"]
    assert _close(row.estimate.time, (2 * depth + chunks_per_tree - 1) * (A + M / (n * B)))
    assert _close(row.simulated, row.estimate.time)
    bc = _rows(topo, "broadcast", ["tree"], root=0)["tree"]
    assert _close(bc.estimate.time, depth * (A + M / B))
    assert _close(bc.simulated, bc.estimate.time)


def test_hierarchical_stages_on_a_multi_dimensional_topology() -> None:
    # Ring(4)_FC(2)_Switch(8): RS dim 0 ring, dim 1 direct, dim 2 halving-doubling, then AG back
    bw, lat = [100e9, 100e9, 50e9], [0.5e-6, 0.5e-6, 1e-6]
    topo = multi_dim([("Ring", 4), ("FullyConnected", 2), ("Switch", 8)], bw, lat)
    rs = (3 * (lat[0] + M / 4 / bw[0])
          + (lat[1] + M / 4 / 2 / bw[1])
          + 3 * 2 * lat[2] + (7 / 8) * (M / 8) / bw[2])
    rows = _rows(topo, "allreduce", ["hierarchical"])
    row = rows["hierarchical"]
    assert _close(row.estimate.time, 2 * rs)
    assert _close(row.schedule_time, row.estimate.time)


# -- every model against its baseline, on the topologies the targets name --------------------
SWITCH_FREE = {
    "ring8": lambda: ring(8, bandwidth=B, latency=A),
    "fc8": lambda: fully_connected(8, bandwidth=B, latency=A),
    "hypercube16": lambda: hypercube(16, bandwidth=B, latency=A),
    "ring4_fc2_ring4": lambda: multi_dim([("Ring", 4), ("FullyConnected", 2), ("Ring", 4)],
                                         [100e9, 100e9, 50e9], [0.5e-6, 0.5e-6, 1e-6]),
}
HOME = {"ring8": ["ring", "biring"], "fc8": ["direct", "tree"], "hypercube16":
        ["halving-doubling"], "ring4_fc2_ring4": ["hierarchical", "nccl"]}


@pytest.mark.parametrize("name", sorted(SWITCH_FREE))
@pytest.mark.parametrize("kind", ["allgather", "reducescatter", "allreduce"])
def test_models_agree_with_baselines_within_one_percent_without_switches(name, kind) -> None:
    topo = SWITCH_FREE[name]()
    for model, row in _rows(topo, kind, HOME[name]).items():
        assert row.simulated is not None, (model, row.note)
        assert abs(row.error) <= 0.01, (name, kind, model, row.error)


SWITCHED = {
    "star8": (lambda: star(8, bandwidth=B, latency=A), ["ring", "halving-doubling", "direct"]),
    "ring4_switch8": (lambda: multi_dim([("Ring", 4), ("Switch", 8)], [100e9, 50e9],
                                        [0.5e-6, 1e-6]), ["hierarchical", "ring", "nccl"]),
    "dgx_a100x2": (lambda: _dgx_a100(2),
                   ["ring", "halving-doubling", "nccl"]),
}


@pytest.mark.parametrize("name", [  # ring4_switch8: ~0.7 s, hierarchical synthesis
    pytest.param(n, marks=pytest.mark.slow) if n == "ring4_switch8" else n
    for n in sorted(SWITCHED)])
def test_models_agree_with_baselines_within_five_percent_on_switched_topologies(name) -> None:
    build, models = SWITCHED[name]
    topo = build()
    for model, row in _rows(topo, "allreduce", models).items():
        # the baseline's own timing routes every transfer on the physical ports
        assert row.schedule_time is not None, (model, row.note)
        err = (row.estimate.time - row.schedule_time) / row.schedule_time
        assert abs(err) <= 0.05, (name, model, err)


# -- placement-aware bandwidth on a pair of DGX-A100 nodes -----------------------------------
@pytest.fixture(scope="module")
def dgx2():
    return Context(_dgx_a100(2))


def test_dgx_a100_pair_bandwidth_per_process_group(dgx2) -> None:
    topo = dgx2.topology
    names = {n.name: n.id for n in topo.npus}
    node0 = [names[f"node[0].gpu[{g}]"] for g in range(8)]
    size = 1 << 30
    inside = estimate(dgx2, "allreduce", size, model="ring", groups=[node0])
    assert _close(inside.beta, 300e9) and _close(inside.alpha, 1.4e-6)  # NVSwitch up + down
    across = estimate(dgx2, "allreduce", size, model="ring")
    assert _close(across.beta, 25e9) and _close(across.alpha, 4e-6)  # one NIC, two rail hops
    assert _close(across.time, 2 * 15 * (4e-6 + size / 16 / 25e9))
    rails = [[names[f"node[0].gpu[{g}]"], names[f"node[1].gpu[{g}]"]] for g in range(8)]
    eight = estimate(dgx2, "allreduce", size, model="ring", groups=rails)
    assert _close(eight.beta, 25e9)  # eight concurrent groups, each on its own rail
    # one NPU sending to all seven node-mates through its single NVSwitch port
    direct = estimate(dgx2, "allgather", size, model="direct", groups=[node0])
    assert _close(direct.beta, 300e9 / 7)


def test_nccl_channels_use_every_rail_on_a_dgx_a100_pair(dgx2) -> None:
    size = 1 << 30
    est = estimate(dgx2, "allreduce", size, model="nccl")
    assert "8 channels" in est.notes[0]
    # 8 channels, each crossing nodes on its own NIC: the ring moves M/(16·8) per NIC step
    assert _close(est.time, 2 * 15 * (4e-6 + size / (16 * 8) / 25e9))
    row = _rows(dgx2.topology, "allreduce", ["nccl"], size=64 << 20)["nccl"]
    assert abs(row.error) < 0.01  # the channel schedule, verified and simulated


def test_axonn_variant_reads_node_bandwidths_off_the_topology(dgx2) -> None:
    mach = machine(dgx2.graph)
    assert mach.g_node == 8 and len(mach.nodes) == 2
    assert _close(mach.beta_intra, 300e9) and _close(mach.beta_inter, 200e9)
    est = estimate(dgx2, "allreduce", M, model="axonn")
    assert _close(est.time, 2 * 15 / 16 * M / 200e9)


def test_relays_through_members_only_or_any_npu() -> None:
    topo = ring(8, bandwidth=B, latency=A)
    # 0 and 2 share no link; the only relays (1, 3, ...) are outside the group
    est = estimate(topo, "allreduce", M, model="ring", groups=[[0, 2]])
    assert est.time is None and "through the process groups' NPUs" in est.reason
    rows = {r.estimate.model: r for r in compare(topo, "allreduce", M, models=["ring"],
                                                 groups=[[0, 2]], relays="all").rows}
    row = rows["ring"]
    # each ring edge is two relayed hops, and round 2 forwards what round 1 delivered:
    # the chain of 2 rounds crosses both edges, 4 hops of α + (M/2)/β
    assert row.estimate.time == pytest.approx(4 * (A + M / 2 / B))
    assert abs(row.error) <= 0.01


# -- errors ----------------------------------------------------------------------------------
def test_estimate_rejects_bad_requests() -> None:
    topo = ring(4, bandwidth=B, latency=A)
    with pytest.raises(TacosError, match="did you mean"):
        estimate(topo, "allreduce", M, model="rign")
    with pytest.raises(TacosError, match="two concurrent groups"):
        estimate(topo, "allreduce", M, groups=[[0, 1], [1, 2]])
    with pytest.raises(TacosError, match="root"):
        estimate(topo, "broadcast", M, groups=[[0, 1]], root=3)
    est = estimate(tacos.parse("use dgx1").topology, "allreduce", M, model="hierarchical")
    assert est.time is None and "dimension" in est.reason
