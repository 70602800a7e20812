"""Trees that share switch hops across roots (Bruck spreading) and step merging: transfer counts
checked by hand on crossbar switches, unchanged results where nothing is shared, and verified
schedules and MSCCL plans."""

from __future__ import annotations

import math
from collections import Counter
from importlib import resources

import pytest

import tacos
from tacos.builders import ring, star
from tacos.check.simulate import simulate
from tacos.check.verify import verify_schedule
from tacos.cli import main
from tacos.model.patterns import build
from tacos.msccl.rounds import first_round
from tacos.msccl.xml_writer import schedule_to_xml
from tacos.solvers.forest.pack import check_packing
from tacos.solvers.forest.shared import share_switch_hops
from tacos.solvers.forest.solver import ForestSolver, plan_forest, taper
from tacos.solvers.forest.view import RouteView

GB = 1e9
US = 1e-6


def _shared_forest(topo, k=1):
    group = tuple(topo.live_npus)
    f = plan_forest(topo, group, group, "copy", False, k)
    trees = share_switch_hops(f.trees, group, f.roots, f.rate.k, f.rate.caps, topo.is_switch)
    return f, trees


@pytest.mark.parametrize("n", [8, 16])
def test_crossbar_stars_become_binomial_trees_on_log2_n_pairs(n):
    topo = star(n, bandwidth=100 * GB, latency=US)
    f, trees = _shared_forest(topo)
    assert trees is not None and len(trees) == n
    check_packing(tuple(topo.live_npus), f.roots, trees, f.rate.k, f.rate.caps)
    peers = {v: set() for v in topo.live_npus}
    for t in trees:
        assert t.steps and all(s is not None for s in t.steps)
        assert t.depth() == int(math.log2(n))  # binomial: one step per bit
        for x, y in t.edges:
            peers[x].add(y)
    # every root uses the pairs (v, v + 2^b): log2 n receivers per NPU over all trees
    assert {len(p) for p in peers.values()} == {int(math.log2(n))}


@pytest.mark.parametrize("n", [8, 16])
def test_step_merging_makes_log2_n_transfers_per_gpu(n):
    topo = star(n, bandwidth=100 * GB, latency=US)
    f, trees = _shared_forest(topo)
    from dataclasses import replace

    coll = build("allgather", topo.live_npus, size=n * 2**20)
    view = RouteView(topo)
    solver = ForestSolver()
    for rounds in ([1], taper(2, 0), taper(1, -1)):
        s = solver._schedule(coll, view, [replace(f, trees=trees)], 1, 1, rounds, "steps")
        assert verify_schedule(s).ok
        sent = Counter(t.src for t in s.transfers)
        # the roots' own data is all there: every step's rounds go as one transfer
        assert set(sent.values()) == {int(math.log2(n))}
        plain = solver._schedule(coll, view, [f], 1, 1, rounds, True)
        assert verify_schedule(plain).ok
        assert len(plain.transfers) >= n * (n - 1) * len(rounds) // 2  # n - 1 edges per tree
        # α paid log2 n times, not n - 1 per round
        assert simulate(s).schedule.makespan < simulate(plain).schedule.makespan


def test_ring_has_nothing_to_share_and_the_result_is_unchanged():
    topo = ring(6, bandwidth=50 * GB, latency=US)
    f, trees = _shared_forest(topo)
    assert trees is None
    coll = build("allgather", topo.live_npus, size=6 * 2**22)
    a = tacos.synthesize(topo, coll, solver="forest")
    b = tacos.synthesize(topo, coll, solver="forest", share=False)
    assert a.transfers == b.transfers and verify_schedule(a).ok


def test_solver_keeps_the_shared_trees_when_faster_and_lowers_them():
    topo = star(8, bandwidth=100 * GB, latency=2 * US)
    coll = build("allreduce", topo.live_npus, size=2**22)
    shared = tacos.synthesize(topo, coll, solver="forest", in_switch=False)
    plain = tacos.synthesize(topo, coll, solver="forest", in_switch=False, share=False)
    assert verify_schedule(shared).ok and verify_schedule(plain).ok
    assert shared.meta["pipeline"]["batched"] == "steps" and shared.meta["forest"]["shared"]
    assert not plain.meta["forest"]["shared"]
    assert simulate(shared).schedule.makespan < simulate(plain).schedule.makespan
    base = first_round(shared)  # the MSCCL program: one round, still verified
    assert verify_schedule(base).ok
    assert 'nchunksperloop="' in schedule_to_xml(shared)


def _preset(name: str):
    return resources.files("tacos") / "presets" / f"{name}.tdl"


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["allgather", "allreduce"])
def test_two_dgx_a100_at_64mib_reach_ninety_percent(tmp_path, kind):
    topo = tacos.load(str(_preset("dgx_a100")), params={"nodes": 2}).topology
    coll = build(kind, topo.live_npus, size=64 * 2**20)
    s = tacos.synthesize(topo, coll, solver="forest")
    assert verify_schedule(s).ok
    assert s.meta["forest"]["optimal_time"] / simulate(s).schedule.makespan >= 0.90
    out = tmp_path / "plan.xml"
    out.write_text(schedule_to_xml(s), encoding="utf-8")
    assert main(["verify", str(out), "--topology", str(_preset("dgx_a100")),
                 "--param", "nodes=2"]) == 0


def test_only_stars_on_each_npus_fastest_switch_are_rebuilt():
    from tacos.solvers.forest.pack import Tree

    npus, fast, slow = range(5), 5, 6
    caps = {}
    for v in npus:  # v <-> fast: 10 units each way, v <-> slow: 4 (a NIC rail)
        caps[v, fast] = caps[fast, v] = 10
        caps[v, slow] = caps[slow, v] = 4

    def stars(w):
        return [Tree(r, 1, [(r, v) for v in npus if v != r],
                     [(r, w, v) for v in npus if v != r]) for r in npus]

    def is_switch(v):
        return v >= 5

    shared = share_switch_hops(stars(fast), tuple(npus), tuple(npus), 1, caps, is_switch)
    assert shared is not None and all(t.steps for t in shared)
    check_packing(tuple(npus), tuple(npus), shared, 1, caps)
    assert share_switch_hops(stars(slow), tuple(npus), tuple(npus), 1, caps, is_switch) is None


def test_rebuilt_trees_that_overload_a_port_are_given_back():
    from tacos.solvers.forest.pack import Tree

    npus, fast = range(6), 6
    # roots 0 and 1 spread as stars through the switch; NPUs 2..5 may not send at all
    caps = {(v, fast): 0 for v in npus} | {(fast, v): 10 for v in npus}
    caps[0, fast], caps[1, fast] = 5, 7
    trees = [Tree(r, 1, [(r, v) for v in npus if v != r], [(r, fast, v) for v in npus if v != r])
             for r in (0, 1)]

    def is_switch(v):
        return v == fast

    out = share_switch_hops(trees, tuple(npus), (0, 1), 1, caps, is_switch)
    # root 0's binomial tree (0 -> 1, 2, 4; 1 -> 3, 5) only makes NPU 1 forward and fits;
    # root 1's makes NPU 2 forward (capacity 0): it is given back and stays a star
    assert out is not None and [bool(t.steps) for t in out] == [True, False]
    check_packing(tuple(npus), (0, 1), out, 1, caps)


def test_rail_pair_trees_fill_two_dgx_h100_exactly():
    from tacos.solvers.forest.rails import rail_pair_trees

    topo = tacos.load(str(_preset("dgx_h100")), params={"nodes": 2}).topology
    group = tuple(topo.live_npus)
    f = plan_forest(topo, group, group, "copy", False, "auto")
    assert f.rate.k == 2 and f.rate.exact
    trees = rail_pair_trees(group, f.roots, f.rate.k, f.rate.caps, topo.is_switch)
    assert trees is not None and len(trees) == 2 * len(group)
    load = check_packing(group, f.roots, trees, 2, f.rate.caps)
    # 4n - 5 = 27 units through every GPU's NVSwitch port, 3 through its NIC: the capacities
    up = sorted({u for (x, _), u in load.items() if x in group})
    assert up == [3, 27]
    coll = build("allgather", group, size=len(group) * 2**20)
    from dataclasses import replace

    s = ForestSolver()._schedule(coll, RouteView(topo), [replace(f, trees=trees)], 2, 1,
                                 taper(1, -3), "steps")
    assert verify_schedule(s).ok and verify_schedule(first_round(s)).ok


def test_rail_pair_trees_need_two_islands():
    from tacos.solvers.forest.rails import rail_pair_trees

    topo = star(8, bandwidth=100 * GB, latency=US)
    group = tuple(topo.live_npus)
    f = plan_forest(topo, group, group, "copy", False, 2)
    assert rail_pair_trees(group, f.roots, 2, f.rate.caps, topo.is_switch) is None


@pytest.mark.slow
def test_two_dgx_h100_at_1gib_reach_ninety_seven_percent():
    topo = tacos.load(str(_preset("dgx_h100")), params={"nodes": 2}).topology
    coll = build("allreduce", topo.live_npus, size=2**30)
    s = tacos.synthesize(topo, coll, solver="forest")
    assert verify_schedule(s).ok
    assert s.meta["forest"]["optimal_time"] / simulate(s).schedule.makespan >= 0.97
