"""forest's speed-ups give the plans of the full computation: the reduction phase's reused
packing, the slice search's unassembled last phase and the tree packer's skipped max-flows,
each against the computation it replaces, on small multi-node groups."""

from __future__ import annotations

import pytest
from forest_topologies import mini_dgx

import tacos
from tacos.check.verify import verify_schedule
from tacos.model.patterns import build
from tacos.solvers.forest import memo
from tacos.solvers.forest import pack as forest_pack
from tacos.solvers.forest import solver as forest_solver
from tacos.solvers.forest.flow import INF
from tacos.solvers.forest.packing import Forest


def _plain_test(self, t: dict, x: int, y: int) -> int:
    """The packer's arc test as a plain max-flow from x (no cap, no shortcut)."""
    self.tests += 1
    mult = t["tree"].mult
    self.net.set_cap(self.to_hub[x], INF)
    self.net.set_cap(t["hub"], 0)
    value, _ = self.net.max_flow(x, y)
    self.net.set_cap(self.to_hub[x], 0)
    self.net.set_cap(t["hub"], mult)
    return max(0, min(mult, self.caps[(x, y)], value - (self.live - mult)))


def _plan(topo, kind: str) -> tuple[str, int]:
    """The JSON plan of a cold forest solve (verified) and the number of packings made."""
    calls = []
    real = forest_pack.pack_trees

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    memo.clear()
    forest_pack.pack_trees = counting
    try:
        coll = build(kind, topo.live_npus, size=len(topo.live_npus) << 20)
        sched = tacos.synthesize(topo, coll, solver="forest")
    finally:
        forest_pack.pack_trees = real
        memo.clear()
    assert verify_schedule(sched).ok
    return tacos.emit(sched, "json"), len(calls)


@pytest.mark.parametrize("nodes", [2, pytest.param(3, marks=pytest.mark.slow)])  # 3: ~0.6 s
def test_all_reduce_gives_the_plan_of_the_full_computation(nodes, monkeypatch):
    monkeypatch.setenv("TACOS_CACHE_DIR", "")  # pack every time: no packing read from disk
    topo = mini_dgx(nodes)
    fast, packed = _plan(topo, "allreduce")
    with monkeypatch.context() as m:
        # every phase packed anew, the slice search's schedules assembled, every test a flow
        m.setattr(forest_solver, "pack_cached",
                  lambda cache, *args, **kwargs: forest_pack.pack_trees(*args, **kwargs))
        m.setattr(forest_solver, "PHASE_ALONE", False)
        m.setattr(forest_pack._Packer, "test", _plain_test)
        full, repacked = _plan(topo, "allreduce")
    assert fast == full
    assert packed < repacked  # the reduction phase reused the copy phase's packings


def _counted_plan(topo, trees) -> tuple[Forest, int]:
    """The copy phase's packing and the max-flows solved for it."""
    from tacos.solvers.forest.flow import FlowNetwork

    real, flows = FlowNetwork.max_flow, []

    def counting(self, *args, **kwargs):
        flows.append(1)
        return real(self, *args, **kwargs)

    FlowNetwork.max_flow = counting
    try:
        group = tuple(topo.live_npus)
        return forest_solver.plan_forest(topo, group, group, "copy", False, trees), len(flows)
    finally:
        FlowNetwork.max_flow = real


@pytest.mark.parametrize(("make", "trees"), [
    (lambda: mini_dgx(2), "auto"), (lambda: mini_dgx(3, 8), "auto"), (lambda: mini_dgx(3, 8), 2),
    pytest.param(lambda: tacos.parse("use mi250(nodes=2)").topology, 2,  # ~0.6 s
                 marks=pytest.mark.slow)],
    ids=["2x4", "3x8", "3x8-k2", "2x MI250-k2"])
def test_the_packers_shortcut_gives_the_max_flow_trees(make, trees, monkeypatch):
    monkeypatch.setenv("TACOS_CACHE_DIR", "")  # pack every time: no packing read from disk
    topo = make()
    fast, fast_flows = _counted_plan(topo, trees)
    with monkeypatch.context() as m:
        m.setattr(forest_pack._Packer, "test", _plain_test)
        full, full_flows = _counted_plan(topo, trees)
    assert fast.packing == "lovasz"
    assert fast.tests == full.tests > 0
    assert fast_flows < full_flows  # some tests were answered without a max-flow
    assert [(t.root, t.mult, t.edges, t.paths) for t in fast.trees] == [
        (t.root, t.mult, t.edges, t.paths) for t in full.trees]


def test_a_cached_packing_is_a_copy():
    topo = mini_dgx(2)
    group = tuple(topo.live_npus)
    packs: dict = {}
    first = forest_solver.plan_forest(topo, group, group, "copy", False, 2, packs=packs)
    first.trees[0].edges.append((0, 0))  # a caller rebuilding its trees
    again = forest_solver.plan_forest(topo, group, group, "copy", False, 2, packs=packs)
    assert len([key for key in packs if key[0] != "split"]) == 1  # one packing, kept
    assert (0, 0) not in again.trees[0].edges
