"""The greedy on the physical model: ports shared in time, ECMP, islands, groups, chunk counts."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

import tacos
from tacos.builders import mesh, star, torus
from tacos.check.verify import verify_schedule
from tacos.errors import InfeasibleError
from tacos.model.patterns import build
from tacos.solvers.greedy.chunks import chunk_counts, synthesize_chunked
from tacos.solvers.greedy.solver import GreedySolver
from tacos.solvers.islands import find_islands
from tacos.solvers.registry import Problem
from tacos.synthesize import synthesize

ROOT = Path(__file__).resolve().parents[1]
MiB = 1 << 20


def checked(sched):
    rep = verify_schedule(sched)
    assert rep.ok, rep.text(5)
    return sched


def preset(name: str, **params):
    args = ", ".join(f"{k}={v}" for k, v in params.items())
    return tacos.parse(f"use {name}({args})" if args else f"use {name}").topology


def bytes_over(sched, pred) -> int:
    topo = sched.topology
    return sum(sched.transfer_bytes(t) for t in sched.transfers
               if any(pred(topo, li) for li in t.route))


def test_a_switch_port_serves_one_peer_at_a_time_at_full_rate():
    bw, alpha, n = 100e9, 1e-6, 6
    topo = star(n, bandwidth=bw, latency=alpha)
    coll = build("allgather", range(n), size=n * MiB)
    sched = checked(synthesize(topo, coll, solver="greedy", trials=4, workers=1, max_merge=1))
    # one chunk per step through each up- and down-port: n-1 steps of the full-rate route
    assert sched.makespan == pytest.approx((n - 1) * (2 * alpha + MiB / bw), rel=1e-9)
    assert all(len(t.route) == 2 for t in sched.transfers)
    # the unwound view gives each peer a fifth of the port: every chunk takes 5x longer
    slow = checked(synthesize(topo, coll, solver="greedy", trials=4, workers=1, max_merge=1,
                              model="unwound"))
    assert slow.meta["model"] == "unwound" and sched.meta["model"] == "physical"
    assert sched.makespan < slow.makespan


def test_dgx_node_allreduce_is_no_slower_than_the_ring_baseline():
    topo = preset("dgx_a100_node")
    coll = build("allreduce", topo.live_npus, size=64 * MiB)
    greedy = checked(synthesize(topo, coll, solver="greedy", trials=4, workers=1))
    ring = synthesize(topo, coll, solver="ring")
    assert greedy.makespan <= ring.makespan * (1 + 1e-9)
    assert greedy.makespan >= greedy.meta["lower_bound"] * (1 - 1e-9)


def test_a_process_group_uses_only_its_members_ports_at_full_rate():
    spec = tacos.load(ROOT / "examples" / "dgx_a100_group4.tdl")
    topo, coll = spec.topology, spec.collective
    greedy = checked(synthesize(topo, coll, solver="greedy", trials=4, workers=1))
    ring = synthesize(topo, coll, solver="ring")
    assert greedy.makespan <= ring.makespan * (1 + 1e-9)
    members = set(coll.group)
    assert {t.src for t in greedy.transfers} | {t.dst for t in greedy.transfers} <= members
    # the group's transfers touch only the members' ports
    ports = {li for t in greedy.transfers for li in t.route}
    assert all({topo.links[li].src, topo.links[li].dst} & members for li in ports)


def test_ecmp_routes_spread_over_the_spines():
    topo = tacos.load(ROOT / "examples" / "fattree.tdl").topology
    coll = build("allgather", topo.live_npus, size=16 * MiB, chunks_per_npu=2)
    sched = checked(synthesize(topo, coll, solver="greedy", trials=2, workers=1))
    spines = Counter(topo.node_name(topo.links[t.route[1]].dst) for t in sched.transfers
                     if len(t.route) == 4)
    assert len(spines) == 2 and min(spines.values()) >= 0.4 * max(spines.values())


def test_islands_are_found_from_capacities_alone():
    a100 = preset("dgx_a100", nodes=2)
    assert find_islands(a100, a100.live_npus) == [tuple(range(8)), tuple(range(8, 16))]
    four_to_one = tacos.load(ROOT / "examples" / "leafspine_4to1.tdl").topology
    leaves = [tuple(range(i, i + 4)) for i in range(0, 16, 4)]
    assert find_islands(four_to_one, four_to_one.live_npus) == leaves
    full = tacos.load(ROOT / "examples" / "leafspine.tdl").topology
    assert find_islands(full, full.live_npus) == []  # full bisection: no scarce cut
    mi250 = preset("mi250")
    assert find_islands(mi250, mi250.live_npus) == [(i, i + 1) for i in range(0, 16, 2)]
    assert find_islands(torus(4, 4, 4, bandwidth=50e9), range(64)) == []
    # a process group inside one node has no island
    assert find_islands(a100, range(8)) == []


def test_a_shard_crosses_an_oversubscribed_leaf_boundary_once():
    topo = tacos.load(ROOT / "examples" / "leafspine_4to1.tdl").topology
    coll = build("allgather", topo.live_npus, size=64 * MiB, chunks_per_npu=2)

    def into_leaf(t, li):
        lk = t.links[li]
        return t.is_switch(lk.src) and t.is_switch(lk.dst) and "spine" in t.node_name(lk.src)

    aware = checked(synthesize(topo, coll, solver="greedy", trials=2, workers=1))
    blind = checked(synthesize(topo, coll, solver="greedy", trials=2, workers=1, islands=False))
    minimum = 4 * (12 * 4 * MiB)  # 12 remote shards of 4 MiB enter each of the 4 leaves
    assert bytes_over(aware, into_leaf) == minimum
    assert bytes_over(blind, into_leaf) > minimum
    assert aware.makespan < blind.makespan


def test_node_nics_carry_fewer_copies_with_islands():
    topo = preset("dgx_a100", nodes=2)
    coll = build("allgather", topo.live_npus, size=64 * MiB, chunks_per_npu=4)

    def nic(t, li):
        lk = t.links[li]
        return lk.tag == "nic" and t.is_switch(lk.src)

    aware = checked(synthesize(topo, coll, solver="greedy", trials=2, workers=1, seed=1))
    blind = checked(synthesize(topo, coll, solver="greedy", trials=2, workers=1, seed=1,
                               islands=False))
    assert bytes_over(aware, nic) < bytes_over(blind, nic)
    assert aware.meta["islands"] == [list(range(8)), list(range(8, 16))]


def test_same_seed_same_bytes_on_the_physical_model():
    topo = preset("dgx_a100", nodes=2)
    coll = build("allgather", topo.live_npus, size=16 * MiB, chunks_per_npu=2)
    a = checked(synthesize(topo, coll, solver="greedy", trials=3, workers=1, seed=4))
    b = synthesize(topo, coll, solver="greedy", trials=3, workers=2, seed=4)
    assert a.transfers == b.transfers
    c = synthesize(topo, coll, solver="greedy", trials=3, workers=1, seed=5)
    assert a.transfers != c.transfers


def test_relays_through_non_members_only_when_allowed():
    # 0 and 2 of a 4-NPU line only meet through 1: a group {0, 2} needs relays='all'
    topo = mesh(4, 1, bandwidth=10e9, latency=1e-6)
    coll = build("allgather", (0, 2), size=2 * MiB)
    with pytest.raises(InfeasibleError):
        synthesize(topo, coll, solver="greedy", trials=1, workers=1)
    sched = checked(synthesize(topo, coll, solver="greedy", trials=1, workers=1, relays="all"))
    assert 1 in {t.dst for t in sched.transfers}
    # the greedy itself keeps to the rule it is given
    res = GreedySolver().solve(Problem(topo, coll, {"workers": 1, "trials": 1}))
    assert res.status == "infeasible"


def test_chunk_count_chosen_by_synthesis_pipelines_across_nodes():
    topo = preset("dgx_a100", nodes=2)
    coll = build("allgather", topo.live_npus, size=256 * MiB)
    assert chunk_counts(coll)[:4] == [1, 2, 4, 8]
    best = checked(synthesize_chunked(topo, coll, trials=2, workers=1, seed=3))
    tried = best.meta["chunks_tried"]
    assert best.collective.chunks_per_npu > 1 and tried[1] > best.makespan
    assert best.makespan == min(tried.values())
    again = synthesize_chunked(topo, coll, trials=2, workers=1, seed=3)
    assert tacos.emit(again, "json") == tacos.emit(best, "json")
    # a single switch needs no pipelining: one chunk per NPU stays
    node = preset("dgx_a100_node")
    one = synthesize_chunked(node, build("allgather", node.live_npus, size=8 * MiB),
                             trials=2, workers=1)
    assert one.collective.chunks_per_npu == 1


def test_tacosc_chooses_chunks_for_the_greedy(tmp_path):
    import json

    from tacos.cli import main

    out = tmp_path / "plan.json"
    topo = str(ROOT / "tacos" / "presets" / "dgx_a100.tdl")
    assert main([topo, "--param", "nodes=2", "-c", "allgather", "--size", "64MiB",
                 "--solver", "greedy", "--trials", "2", "--workers", "1", "-q",
                 "-o", str(out)]) == 0
    assert json.loads(out.read_text())["collective"]["chunks_per_npu"] > 1
    assert main(["verify", str(out), "--topology", topo, "--param", "nodes=2"]) == 0
    fixed = tmp_path / "one.json"
    assert main([topo, "--param", "nodes=2", "-c", "allgather", "--size", "64MiB",
                 "--chunks", "1", "--solver", "greedy", "--trials", "2", "--workers", "1", "-q",
                 "-o", str(fixed)]) == 0
    assert json.loads(fixed.read_text())["collective"]["chunks_per_npu"] == 1
