"""Trees that merge roots' slices on the NIC rails (forest_nic) on small DGX-like systems: the
layout is found only on three or more rail-joined switch islands, the trees span and fit the
capacities, every NIC sends to the nodes the assignment gives it and makes one transfer per
such node, step and round, and the solver's all-gather and all-reduce plans verify (schedule
and MSCCL XML)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
from forest_topologies import mini_dgx as _mini
from forest_topologies import mini_dgx_tdl as _mini_tdl

import tacos
from tacos.builders import star
from tacos.check.simulate import simulate
from tacos.check.verify import verify_schedule
from tacos.cli import main
from tacos.model.patterns import build
from tacos.msccl.rounds import first_round
from tacos.msccl.xml_writer import schedule_to_xml
from tacos.solvers.forest.nic import nic_loads, nic_merge_trees, nic_peers, rail_layout
from tacos.solvers.forest.pack import check_packing
from tacos.solvers.forest.solver import ForestSolver, plan_forest, taper
from tacos.solvers.forest.view import RouteView

GB = 1e9
US = 1e-6


def _forest(topo):
    group = tuple(topo.live_npus)
    return group, plan_forest(topo, group, group, "copy", False, 1)


def test_layout_needs_three_rail_joined_islands():
    group, f = _forest(_mini(3))
    layout = rail_layout(group, f.rate.caps, _mini(3).is_switch)
    assert layout is not None and len(layout.islands) == 3 and len(layout.rails) == 4
    assert [isl[1] for isl in layout.islands] == [1, 5, 9]  # position 1 of every node
    one_switch = tacos.parse(_mini_tdl(3).replace("switch rail[4] unwind ring",
                                                  "switch ib unwind ring")
                             .replace("rail[i]", "ib")).topology  # all NICs on one switch
    for topo in (_mini(2), one_switch, star(8, bandwidth=100 * GB, latency=US)):
        group, f = _forest(topo)
        assert rail_layout(group, f.rate.caps, topo.is_switch) is None


@pytest.mark.parametrize("n,offsets,split", [(8, 3, 2), (8, 4, 0), (8, 2, 0), (4, 3, 2)])
def test_nic_loads_give_every_nic_its_share_and_few_offsets(n, offsets, split):
    loads = nic_loads(n, offsets, 1, offsets)
    assert nic_loads(n, offsets, 1, offsets - 1) is None  # the share does not fit
    assert [sum(w.values()) for w in loads] == [offsets] * n  # the exact share
    for f in range(1, offsets + 1):
        assert sum(w.get(f, 0) for w in loads) == n  # every root reaches every offset
    # NICs serve one offset, two only where an offset runs out inside a NIC's share
    assert sorted(len(w) for w in loads) == [1] * (n - split) + [2] * split


@pytest.mark.parametrize("nodes,peers", [(3, [1, 1, 1, 1]), (4, [1, 2, 2, 1])])
def test_trees_span_fit_and_each_nic_sends_to_its_offsets(nodes, peers):
    topo = _mini(nodes)
    group, f = _forest(topo)
    trees, rate = nic_merge_trees(group, f.roots, f.rate, topo.is_switch)
    assert rate.exact and rate.k == 1 and len(trees) >= len(group)
    load = check_packing(group, f.roots, trees, rate.k, rate.caps)  # raises if not
    layout = rail_layout(group, f.rate.caps, topo.is_switch)
    for isl in layout.islands:
        for i, v in enumerate(isl):
            assert load[v, layout.rails[i]] == nodes - 1  # every NIC its exact share
    got = nic_peers(trees)
    assert [[len(got[isl[i]]) for i in range(4)] for isl in layout.islands] == [peers] * nodes
    # NIC g of every node sends to GPU g of other nodes only
    pos = {v: i for isl in layout.islands for i, v in enumerate(isl)}
    assert all(pos[x] == pos[y] for x, ys in got.items() for y in ys)


@pytest.mark.parametrize("kind", ["allgather", pytest.param("allreduce", marks=pytest.mark.slow)])
def test_one_nic_transfer_per_peer_step_and_round(kind):
    topo = _mini(4)
    group, f = _forest(topo)
    trees, rate = nic_merge_trees(group, f.roots, f.rate, topo.is_switch)
    nic_f = replace(f, trees=trees, rate=rate)
    coll = build("allgather", group, size=len(group) * 2**20)
    rounds = taper(1, -2)  # 4, 2, 1 slices
    s = ForestSolver()._schedule(coll, RouteView(topo), [nic_f], 1, 1, rounds, "steps")
    assert verify_schedule(s).ok and verify_schedule(first_round(s)).ok
    nic_links = {i for i, lk in enumerate(topo.links) if lk.tag == "nic"}
    per_pair = Counter((t.src, t.dst) for t in s.transfers if nic_links & set(t.route))
    peers = nic_peers(trees)
    assert set(per_pair) == {(x, y) for x, ys in peers.items() for y in ys}
    assert set(per_pair.values()) == {len(rounds)}  # all roots' slices of a round: one transfer
    # the solver's plan for the collective
    full = build(kind, group, size=len(group) * 2**20)
    plan = tacos.synthesize(topo, full, solver="forest", in_switch=False)
    assert verify_schedule(plan).ok


@pytest.mark.parametrize("kind", [
    "allgather", pytest.param("allreduce", marks=pytest.mark.slow)])
def test_solver_keeps_the_merged_trees_where_faster_and_lowers_them(tmp_path, kind):
    tdl = tmp_path / "mini.tdl"
    tdl.write_text(_mini_tdl(3), encoding="utf-8")
    topo = _mini(3)
    coll = build(kind, topo.live_npus, size=len(topo.live_npus) * 2**20)
    merged = tacos.synthesize(topo, coll, solver="forest")
    plain = tacos.synthesize(topo, coll, solver="forest", nic=False)
    assert verify_schedule(merged).ok and verify_schedule(plain).ok
    assert len(merged.meta["forest"]["tried"]) == len(plain.meta["forest"]["tried"]) + 1
    # three nodes: every NIC serves one other node, one transfer per round instead of two
    assert simulate(merged).schedule.makespan < 0.9 * simulate(plain).schedule.makespan
    out = tmp_path / f"{kind}.xml"
    text = schedule_to_xml(merged)
    out.write_text(text, encoding="utf-8")
    assert main(["verify", str(out), "--topology", str(tdl)]) == 0
    again = tacos.synthesize(topo, coll, solver="forest")
    assert schedule_to_xml(again) == text  # same input, same bytes
