"""The step-timed trees over physical links built without solving the whole program
(forest/timed_build.py): a list construction, then a CP-SAT repair of its last steps.  Every
answer is a packing of the program (checked constraint by constraint), the same inputs give the
same packing, and the plans keep the whole program's fraction of the optimum (within half a
point) and verify."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from tacos.backends.json_schedule import dumps
from test_forest_timed import BOXES

import tacos
from tacos.check.verify import verify_schedule
from tacos.model.patterns import build
from tacos.solvers.forest import memo, timed_build, timed_links
from tacos.solvers.forest.shallow import have_cp_sat
from tacos.solvers.forest.solver import plan_forest
from tacos.solvers.islands import find_islands

needs_cp_sat = pytest.mark.skipif(not have_cp_sat(),
                                  reason="OR-Tools (the ilp extra) is not installed")


def _inputs(topo, k: int = 2, extra: int = 0):
    """The step-timed program's inputs for ``topo`` at k trees per root, at the capacity bound
    plus ``extra`` steps (as timed_link_trees builds them)."""
    group = tuple(topo.live_npus)
    forest = plan_forest(topo, group, group, "copy", False, k)
    arcs, lanes = timed_links.link_arcs(topo, group)
    caps = forest.rate.caps
    images, reps = timed_links.representatives(
        forest.roots, timed_links._symmetries(group, arcs, lanes, caps))
    islands = [tuple(i) for i in find_islands(topo, group)
               if len(i) > 1 and timed_links._tight(i, forest.roots, k, caps)]
    busy: dict = {}
    for hops, d in arcs.values():
        for h in hops:
            busy[h] = max(busy.get(h, 0), d)
    low = max(math.ceil(caps.get(h, 0) * d / lanes[h]) for h, d in busy.items())
    return group, reps, k, arcs, caps, lanes, list(images.values()), islands, low + extra


def _boxes():
    return tacos.parse(BOXES, source="boxes").topology


@pytest.fixture(scope="module")
def boxes_inputs():
    """Two small boxes' program at 8 steps (the capacity bound, 7, has no packing)."""
    return _inputs(_boxes(), extra=1)


def test_the_construction_builds_a_packing_of_the_program_and_the_same_one_twice(boxes_inputs):
    inputs = boxes_inputs
    found = timed_build.built_packing(*inputs)
    assert found is not None
    assert timed_build.violations(found, *inputs) == []
    assert timed_build.built_packing(*inputs) == found  # same inputs, same packing
    # every tree edge is timed: a tree at 8 steps, parents before children
    assert all(max(s + inputs[3][u, v][1] - 1 for v, (u, s) in edges.items()) <= inputs[-1]
               for edges in found.values())


def test_the_checker_names_what_a_broken_packing_breaks(boxes_inputs):
    inputs = boxes_inputs
    found = timed_build.built_packing(*inputs)
    assert found is not None
    arcs = inputs[3]
    tree = next(iter(found))
    edges = found[tree]
    # an edge started before its parent has the data
    v, (u, s) = next((v, e) for v, e in edges.items() if e[0] != tree[0])
    early = {**found, tree: {**edges, v: (u, 1)}}
    assert any("out of order" in b for b in timed_build.violations(early, *inputs))
    # a node left out
    short = {**found, tree: {w: e for w, e in edges.items() if w != v}}
    assert any("does not reach" in b for b in timed_build.violations(short, *inputs))
    # one step fewer: some edge ends after the last step
    tight = inputs[:-1] + (max(s + arcs[u, w][1] - 1 for edges in found.values()
                               for w, (u, s) in edges.items()) - 1,)
    assert timed_build.violations(found, *tight)
    # one lane fewer on every hop: some step holds more than its lanes
    fewer = {h: n - 1 for h, n in inputs[5].items()}
    thin = inputs[:5] + (fewer,) + inputs[6:]
    assert any("lanes" in b for b in timed_build.violations(found, *thin))


@needs_cp_sat
def test_the_repair_completes_a_construction_cut_after_any_step(boxes_inputs):
    inputs = boxes_inputs
    found = timed_build.built_packing(*inputs)
    assert found is not None
    shape = timed_build._shape(*inputs)
    for t0 in (1, 3, 5):
        kept = {tr: {v: (u, s) for v, (u, s) in edges.items() if s <= t0}
                for tr, edges in found.items()}
        repaired = timed_build._repair(shape, kept, t0, inputs[7], 1.0)
        assert repaired is not None
        assert timed_build.violations(repaired, *inputs) == []
        for tr, edges in kept.items():  # what was kept stays
            assert all(repaired[tr][v] == e for v, e in edges.items())


def _plan(kind: str, build_on: bool, monkeypatch: pytest.MonkeyPatch, topo, size: int):
    monkeypatch.setattr(timed_links, "BUILD", build_on)
    memo.clear()
    coll = build(kind, tuple(topo.live_npus), size=size)
    s = tacos.synthesize(topo, coll, solver="forest", trees=2)
    memo.clear()
    return s


@needs_cp_sat
@pytest.mark.slow  # (1.5 s: four forest solves of two small boxes)
def test_plans_from_the_construction_keep_the_whole_programs_fraction(monkeypatch, tmp_path):
    monkeypatch.setenv("TACOS_CACHE_DIR", str(tmp_path))
    topo = _boxes()
    for kind in ("allgather", "allreduce"):
        built = _plan(kind, True, monkeypatch, topo, 8 * 2**20)
        solved = _plan(kind, False, monkeypatch, topo, 8 * 2**20)
        for s in (built, solved):
            rep = verify_schedule(s)
            assert rep.ok, rep.text(5)
            assert "timed" in {t["packing"] for t in s.meta["forest"]["tried"]}
        frac = {id(s): s.meta["forest"]["optimal_time"] / s.makespan for s in (built, solved)}
        assert frac[id(built)] >= frac[id(solved)] - 0.005
        again = _plan(kind, True, monkeypatch, topo, 8 * 2**20)
        assert dumps(again) == dumps(built)  # deterministic: the same bytes


@needs_cp_sat
@pytest.mark.slow  # (about 3 s: two constructions and one forest solve of 2x MI250)
def test_2x_mi250_is_built_at_the_capacity_bound_and_its_plan_verifies(monkeypatch, tmp_path):
    monkeypatch.setenv("TACOS_CACHE_DIR", str(tmp_path))
    preset = Path(tacos.__file__).parent / "presets" / "mi250.tdl"
    assert preset.exists()
    topo = tacos.parse('topology "2x MI250"\nuse mi250(nodes=2)\n', source="mi250").topology
    inputs = _inputs(topo)
    assert inputs[-1] == 10 and len(inputs[1]) == 4  # 4 representatives, 8 images each
    found = timed_build.built_packing(*inputs)
    assert found is not None and timed_build.violations(found, *inputs) == []
    assert timed_build.built_packing(*inputs) == found
    # the solver takes these trees (no whole program solved) and its plan verifies
    monkeypatch.setattr(timed_links, "_solve", lambda *a, **k: pytest.fail("program solved"))
    memo.clear()
    coll = build("allgather", tuple(topo.live_npus), size=2**30)
    s = tacos.synthesize(topo, coll, solver="forest", trees=2)
    memo.clear()
    assert "timed" in {t["packing"] for t in s.meta["forest"]["tried"]}
    rep = verify_schedule(s)
    assert rep.ok, rep.text(5)
