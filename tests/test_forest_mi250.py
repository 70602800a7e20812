"""The depth-bounded packing (forest_shallow) on 1x MI250: loads, depth, verified plans."""

from __future__ import annotations

from importlib import resources

import pytest

import tacos
from tacos.check.verify import verify_schedule
from tacos.model.patterns import build
from tacos.msccl.verify import verify_xml_file
from tacos.msccl.xml_writer import schedule_to_xml
from tacos.solvers.forest import shallow as forest_shallow
from tacos.solvers.forest.pack import check_packing
from tacos.solvers.forest.shallow import automorphisms, have_cp_sat, shallow_trees
from tacos.solvers.forest.solver import plan_forest

needs_cp_sat = pytest.mark.skipif(not have_cp_sat(),
                                  reason="OR-Tools (the ilp extra) is not installed")


def _mi250():
    return tacos.load(str(resources.files("tacos") / "presets" / "mi250.tdl"), {}).topology


def _packed(trees):
    topo = _mi250()
    group = tuple(topo.live_npus)
    forest = plan_forest(topo, group, group, "copy", False, trees)
    packed = shallow_trees(group, forest.roots, forest.rate.k, forest.split, forest.rate.caps)
    return topo, group, forest, packed


@pytest.fixture(scope="module")
def single():
    """One tree per root (a program of a second or less)."""
    return _packed(1)


@pytest.fixture(scope="module")
def exact():
    """The exact k = 3 (about 15 s of CP-SAT)."""
    return _packed("exact")


def test_mi250_automorphisms_map_arcs_to_equal_capacities(single):
    _, group, forest, _ = single
    auts = automorphisms(group, forest.split.caps)
    assert len(auts) > 1  # the box has symmetries beyond the identity
    for m in auts:
        assert sorted(m.values()) == sorted(group)
        for (x, y), c in forest.split.caps.items():
            assert forest.split.caps.get((m[x], m[y]), 0) == c


@needs_cp_sat
def test_mi250_single_tree_packing_is_shallower_and_within_capacities(single):
    _, group, forest, trees = single
    assert trees is not None and len(trees) == len(group)
    check_packing(group, forest.roots, trees, 1, forest.rate.caps)
    assert max(t.depth() for t in trees) < max(t.depth() for t in forest.trees)


@needs_cp_sat
def test_mi250_shallow_packing_is_deterministic(single):
    _, group, forest, trees = single
    again = shallow_trees(group, forest.roots, forest.rate.k, forest.split, forest.rate.caps)
    assert [(t.root, t.edges) for t in again] == [(t.root, t.edges) for t in trees]


@pytest.mark.slow
@needs_cp_sat
def test_mi250_exact_packing_is_shallower_and_within_capacities(exact):
    _, group, forest, trees = exact
    assert forest.rate.exact and forest.rate.k == 3
    assert trees is not None
    load = check_packing(group, forest.roots, trees, forest.rate.k, forest.rate.caps)
    assert all(u <= forest.rate.caps[e] for e, u in load.items())
    assert sum(t.mult for t in trees) == 3 * len(group)
    greedy = max(t.depth() for t in forest.trees)
    assert max(t.depth() for t in trees) < greedy


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["allgather", "allreduce"])
def test_mi250_plan_verifies_and_msccl_xml_verifies(kind, tmp_path):
    topo = _mi250()
    coll = build(kind, topo.live_npus, size=len(topo.live_npus) * 2**24)
    s = tacos.synthesize(topo, coll, solver="forest")
    rep = verify_schedule(s)
    assert rep.ok, rep.text(5)
    assert s.makespan >= s.meta["forest"]["optimal_time"] * (1 - 1e-9)
    path = tmp_path / "plan.xml"
    path.write_text(schedule_to_xml(s))
    assert verify_xml_file(path, topology=topo).ok


def _preset(name, **params):
    return tacos.load(str(resources.files("tacos") / "presets" / f"{name}.tdl"), params).topology


def test_shallow_candidate_runs_only_where_npus_link_directly():
    from tacos.solvers.forest.candidates import _npu_fabric

    for topo, direct in ((_mi250(), True), (_preset("mi250", nodes=2), True),
                         (_preset("dgx_a100", nodes=2), False)):
        assert _npu_fabric(topo, tuple(topo.live_npus)) is direct


@needs_cp_sat
@pytest.mark.slow  # 4-5 s of CP-SAT
def test_dgx1_takes_the_shallow_trees_and_its_plan_verifies(tmp_path):
    topo = _preset("dgx1")
    group = tuple(topo.live_npus)
    lovasz = plan_forest(topo, group, group, "copy", False, "exact")
    coll = build("allgather", group, size=len(group) * 2**24)
    s = tacos.synthesize(topo, coll, solver="forest")
    rep = verify_schedule(s)
    assert rep.ok, rep.text(5)
    (phase,) = s.meta["forest"]["phases"]
    assert phase["k"] == lovasz.rate.k
    assert phase["depth"] < max(t.depth() for t in lovasz.trees)
    off = tacos.synthesize(topo, coll, solver="forest", shallow=False)
    assert s.makespan < off.makespan
    path = tmp_path / "plan.xml"
    path.write_text(schedule_to_xml(s))
    assert verify_xml_file(path, topology=topo).ok


def test_without_or_tools_there_is_no_shallow_candidate_and_the_plan_still_verifies(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``pip install tacos`` without the ilp extra: the forest keeps its other packings."""
    monkeypatch.setattr(forest_shallow, "have_cp_sat", lambda: False)
    topo = _preset("dgx1")
    group = tuple(topo.live_npus)
    forest = plan_forest(topo, group, group, "copy", False, 1)
    assert shallow_trees(group, forest.roots, 1, forest.split, forest.rate.caps) is None
    coll = build("allgather", group, size=len(group) * 2**20)
    s = tacos.synthesize(topo, coll, solver="forest")
    assert verify_schedule(s).ok
    assert s.makespan >= s.meta["forest"]["optimal_time"] * (1 - 1e-9)
