"""NCCL-faithful baselines: each reproduces its analytic time on its home topology, verified."""

from __future__ import annotations

from collections import defaultdict

import pytest

import tacos
from tacos.builders import TopologyBuilder, star
from tacos.check.bounds import lower_bound
from tacos.check.verify import verify_schedule
from tacos.errors import TacosError
from tacos.model.patterns import build
from tacos.model.topology import Link, Npu, Topology
from tacos.solvers.nccl.pat import pat_schedule, pat_steps
from tacos.solvers.nccl.rings import channel_rings, intra_rings, ring_schedule
from tacos.solvers.nccl.solver import nccl_algorithms, nccl_best, nccl_schedule
from tacos.solvers.nccl.system import system
from tacos.solvers.nccl.tree import tree_schedule

MiB = 1 << 20
NVLS = {"*nvswitch": {"multicast", "reduce"}}


def preset(name: str, **params) -> Topology:
    args = ", ".join(f"{k}={v}" for k, v in params.items())
    return tacos.parse(f"use {name}" + (f"({args})" if args else "")).topology


def ok(schedule):
    rep = verify_schedule(schedule)
    assert rep.ok, rep.text(5)
    return schedule


def port_bytes(schedule) -> dict[int, int]:
    """Bytes every physical link carries (a group's shared link counted once)."""
    out: dict[int, int] = defaultdict(int)
    seen: set[tuple[int, int]] = set()
    for t in schedule.transfers:
        for li in t.route:
            key = (li, t.group) if t.group is not None else None
            if key is not None and key in seen:
                continue
            if key is not None:
                seen.add(key)
            out[li] += schedule.transfer_bytes(t)
    return out


def test_dgx1_has_six_link_disjoint_rings_and_six_times_one_rings_bandwidth():
    topo = preset("dgx1")
    sys_ = system(topo, topo.live_npus)
    rings = intra_rings(sys_, sys_.nodes[0])
    assert len(rings) == 6
    used = defaultdict(int)
    for r in rings:
        for a, b in zip(r, r[1:] + r[:1], strict=True):
            used[(a, b)] += 1
    lanes = {(lk.src, lk.dst): lk.multiplicity for lk in topo.links}
    assert all(used[p] <= lanes[p] for p in used)  # never more rings than NVLink lanes
    size = 768 * MiB
    coll = build("allgather", topo.live_npus, size=size)
    alpha, bw, n = 0.7e-6, 25e9, 8
    for c in (1, 6):
        s = ok(ring_schedule(sys_, coll, c))
        assert s.makespan == pytest.approx((n - 1) * (alpha + size / (n * c * bw)), rel=1e-9)


def test_mi250_rings_use_six_of_seven_xgmi_lanes():
    topo = preset("mi250")
    sys_ = system(topo, topo.live_npus)
    assert len(intra_rings(sys_, sys_.nodes[0])) == 6


def test_multi_node_rings_cross_every_rail_once_per_direction():
    topo = preset("dgx_a100", nodes=2)
    sys_ = system(topo, topo.live_npus)
    assert [len(n) for n in sys_.nodes] == [8, 8] and sys_.rails == 8
    rings = channel_rings(sys_, 8)
    node = sys_.node_of
    crossings = defaultdict(int)
    for r in rings:
        assert sorted(r) == list(range(16))
        for a, b in zip(r, r[1:] + r[:1], strict=True):
            if node[a] != node[b]:
                assert a % 8 == b % 8  # rail-aligned: GPU g to GPU g of the other node
                crossings[(a, b)] += 1
    assert len(crossings) == 16 and set(crossings.values()) == {1}
    size = 1 << 30
    s = ok(ring_schedule(sys_, build("allgather", topo.live_npus, size=size), 8))
    ideal = (16 - 1) * size / (16 * 8 * 25e9)  # NIC-bound: 15 blocks of M/128 per rail
    assert ideal < s.makespan < 1.02 * ideal


def line(n: int, alpha=1e-6, bw=10e9) -> Topology:
    links = []
    for i in range(n - 1):
        links += [Link(i, i + 1, alpha, bw), Link(i + 1, i, alpha, bw)]
    return Topology(tuple(Npu(i, f"g{i}") for i in range(n)), (), tuple(links), "line")


@pytest.mark.parametrize("slices", [1, 4, 16])
def test_tree_all_reduce_is_a_pipelined_chain(slices):
    topo = line(4)
    sys_ = system(topo, topo.live_npus)
    size = 64 * MiB
    s = ok(tree_schedule(sys_, build("allreduce", range(4), size=size), 1, slices))
    step = 1e-6 + size / slices / 10e9
    assert s.makespan == pytest.approx((2 * 3 + slices - 1) * step, rel=1e-9)


def test_double_binary_tree_across_nodes_verifies():
    topo = preset("dgx_h100", nodes=4)
    sys_ = system(topo, topo.live_npus)
    s = ok(tree_schedule(sys_, build("allreduce", topo.live_npus, size=32 * MiB), 2, 2))
    inter = {(t.src // 8, t.dst // 8) for t in s.transfers if t.src // 8 != t.dst // 8}
    assert inter  # the trees cross nodes, on rails only
    assert all(t.src % 8 == t.dst % 8 for t in s.transfers if t.src // 8 != t.dst // 8)


def test_nvls_all_reduce_moves_each_byte_once_up_and_once_down_a_port():
    topo = preset("dgx_h100").with_capabilities(NVLS)
    size = 1 << 30
    coll = build("allreduce", topo.live_npus, size=size)
    s = ok(nccl_schedule("nvls", topo, coll))
    assert any(t.group is not None for t in s.transfers)
    carried = port_bytes(s)
    for li in range(len(topo.links)):
        assert carried[li] == size, topo.routing.link_name(li)
    optimum = size / 450e9  # in-switch optimum: M over the port bandwidth
    bound = lower_bound(topo, coll).value
    assert bound == pytest.approx(optimum)
    assert optimum < s.makespan < 1.15 * optimum  # 1.12x: slices pay α, shards drain
    ring = nccl_schedule("ring", topo, coll)
    assert s.makespan < ring.makespan / 1.5


@pytest.mark.slow
def test_nvls_across_nodes_uses_sharp_rails_when_they_reduce():
    size = 64 * MiB
    plain = preset("dgx_h100", nodes=4)
    coll = build("allreduce", plain.live_npus, size=size)
    tree = ok(nccl_schedule("nvls", plain, coll))
    assert tree.meta["tuned"]["sharp"] is False  # no SHARP: NVLS_TREE
    topo = preset("dgx_h100", nodes=4, sharp=1)
    s = ok(nccl_schedule("nvls", topo, coll))
    assert s.meta["tuned"]["sharp"] is True
    assert s.makespan < tree.makespan / 1.3
    carried = port_bytes(s)
    nics = [li for li, lk in enumerate(topo.links) if lk.tag == "nic"]
    assert len(nics) == 2 * 32
    for li in nics:  # each shard once up and once down every NIC: M / 8 each way
        assert carried[li] == size // 8, topo.routing.link_name(li)


def test_nvls_needs_the_capability():
    assert preset("dgx_h100").switches[0].capabilities == {"multicast", "reduce"}  # NVLS
    topo = preset("dgx_h100").with_capabilities({"*nvswitch": ()})
    coll = build("allreduce", topo.live_npus, size=MiB)
    assert "nvls" not in nccl_algorithms(system(topo, topo.live_npus), coll)
    with pytest.raises(TacosError, match="declares multicast and reduce"):
        nccl_schedule("nvls", topo, coll)


def hosts(n: int, caps=("reduce", "multicast")) -> Topology:
    """n hosts with one GPU each: a fast GPU-NIC hop (node-local) and an IB switch."""
    b = TopologyBuilder("hosts")
    gpus = b.npus(n, "gpu")
    ib = b.switch("ib")
    nics = [b.switch(f"nic{i}") for i in range(n)]
    for g, nic in zip(gpus, nics, strict=True):
        b.link(g, nic, bandwidth=100e9, latency=0.5e-6)
        b.link(nic, g, bandwidth=100e9, latency=0.5e-6)
        b.link(nic, ib, bandwidth=25e9, latency=1e-6)
        b.link(ib, nic, bandwidth=25e9, latency=1e-6)
    topo = b.build()
    return topo.with_capabilities({"ib": caps}) if caps else topo


def test_collnet_reduces_in_the_ib_switch():
    topo = hosts(4)
    sys_ = system(topo, topo.live_npus)
    assert sys_.one_per_node and sys_.rails == 1
    coll = build("allreduce", topo.live_npus, size=64 * MiB)
    assert "collnet" in nccl_algorithms(sys_, coll)
    s = ok(nccl_schedule("collnet", topo, coll))
    nic_up = [li for li, lk in enumerate(topo.links) if topo.node_name(lk.dst) == "ib"]
    assert {port_bytes(s)[li] for li in nic_up} == {64 * MiB}  # each byte up each NIC once
    with pytest.raises(TacosError, match="does not declare 'reduce'"):
        nccl_schedule("collnet", hosts(4, caps=()), coll)


def test_pat_is_log_steps_of_aggregated_trees():
    assert pat_steps(8) == [(4, [0]), (2, [0, 4]), (1, [0, 2, 4, 6])]
    assert sum(len(o) for _, o in pat_steps(6)) == 5  # N-1 blocks in all
    topo = star(8, bandwidth=25e9, latency=1e-6)
    sys_ = system(topo, topo.live_npus)
    size = 8 * MiB
    s = ok(pat_schedule(sys_, build("allgather", range(8), size=size)))
    block = size / 8
    expected = sum(2e-6 + len(o) * block / 25e9 for _, o in pat_steps(8))
    assert s.makespan == pytest.approx(expected, rel=1e-9)
    rs = ok(pat_schedule(sys_, build("reducescatter", range(8), size=size)))
    assert rs.makespan == pytest.approx(expected, rel=1e-9)
    assert "pat" in nccl_algorithms(system(hosts(8), range(8)), build("allgather", range(8),
                                                                       size=size))


def test_point_to_point_all_to_all_on_a_switch():
    topo = star(6, bandwidth=25e9, latency=1e-6)
    size = 6 * MiB
    s = ok(nccl_schedule("p2p", topo, build("alltoall", range(6), size=size)))
    assert s.makespan == pytest.approx(5 * (2e-6 + size / 6 / 25e9), rel=1e-9)


@pytest.mark.slow
def test_nccl_best_is_the_fastest_model_and_says_which():
    topo = preset("dgx_h100", nodes=2).with_capabilities(NVLS)
    coll = build("allreduce", topo.live_npus, size=256 * MiB)
    name, sched, results = nccl_best(topo, coll)
    assert set(results) == {"ring", "tree", "nvls"}
    assert sched.makespan == min(r.makespan for r in results.values())
    assert name == "nvls"
    for r in results.values():
        ok(r)


def test_refined_plans_are_bounded_with_their_own_chunks():
    topo = preset("dgx1")
    coll = build("allgather", topo.live_npus, size=64 * MiB)
    s = tacos.synthesize(topo, coll, solver="nccl-ring")
    ok(s)
    assert s.collective.chunks_per_npu == 6  # six channels
    assert s.meta["gap"] >= 1.0  # against the bound of the six-piece collective
    bound = lower_bound(topo, coll)
    assert bound.value <= s.makespan  # the physical bound holds for every plan
    assert max(bound.model.values()) > s.makespan  # whole chunks could not go that fast


def test_nccl_solvers_run_through_synthesize():
    topo = preset("dgx_a100", nodes=2)
    coll = build("allgather", topo.live_npus, size=16 * MiB)
    s = tacos.synthesize(topo, coll, solver="nccl")
    ok(s)
    assert s.collective.size == coll.size and s.collective.n_chunks % coll.n_chunks == 0
    assert s.meta["lower_bound"] <= s.makespan
