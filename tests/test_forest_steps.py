"""Step merging in bulk (forest_steps) leaves every schedule as it was: the transfers of the
list schedule with ``batch='steps'`` on tori (dimension-ordered trees), a crossbar (shared
binomial trees) and a small DGX-like system (NIC-merged trees), and of the whole solver, hash
to the digests recorded with the per-slice list schedule it replaced
(tests/fixtures/forest/steps_golden.json).  Every schedule is verified."""

from __future__ import annotations

import hashlib
import json
import math
from importlib import resources
from pathlib import Path

import pytest
from forest_topologies import mini_dgx as _mini
from forest_topologies import tdl_torus as _tdl_torus

import tacos
from tacos.builders import star, torus
from tacos.check.verify import verify_schedule
from tacos.model.patterns import build
from tacos.model.schedule import Schedule
from tacos.solvers.forest.candidates import _dims, _nic, _shared
from tacos.solvers.forest.solver import ForestSolver, plan_forest, taper
from tacos.solvers.forest.steps import step_groups, step_table
from tacos.solvers.forest.view import RouteView

GB = 1e9
US = 1e-6
GOLDEN = json.loads((Path(__file__).parent / "fixtures" / "forest" / "steps_golden.json")
                    .read_text())["sha256"]


def _digest(s: Schedule) -> str:
    rows = [[t.start, t.end, t.src, t.dst, list(t.route), list(t.chunks), t.op]
            for t in s.transfers]
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()


SYSTEMS = {
    "torus3x3x3": lambda: torus(3, 3, 3, bandwidth=GB, latency=US),
    "torus4x4": lambda: _tdl_torus(4, 4),
    "star8": lambda: star(8, bandwidth=100 * GB, latency=US),
    "mini3": lambda: _mini(3),
    "dgx1": lambda: tacos.load(str(resources.files("tacos") / "presets" / "dgx1.tdl")).topology,
}
MAKERS = {"dims": _dims, "shared": _shared, "nic": _nic}
STEP_CASES = [pytest.param(k, marks=pytest.mark.slow) if k.startswith("torus3x3x3/") else k
              for k in sorted(GOLDEN) if not k.endswith("/solve")]  # 27 NPUs: 0.5-1 s each
SOLVE_CASES = [pytest.param(k, marks=pytest.mark.slow) if k.startswith("torus3x3x3") else k
               for k in sorted(GOLDEN) if k.endswith("/solve")]  # 27 NPUs: 3-5 s each


@pytest.mark.parametrize("case", STEP_CASES)
def test_step_merged_schedules_are_unchanged(case):
    system, kind, packing = case.split("/")
    topo = SYSTEMS[system]()
    group = tuple(topo.live_npus)
    coll = build(kind, group, size=len(group) * 2**20)
    phases = [("copy", False)] if kind == "allgather" else [("reduce", True), ("copy", False)]
    forests = [plan_forest(topo, group, group, phase, rev, 1) for phase, rev in phases]
    made = MAKERS[packing](forests, topo, group)
    assert made is not None
    view = RouteView(topo)
    big_k = math.lcm(*(f.rate.k for f in made))
    for rounds in ([1], taper(2, 0), taper(3, -1)):  # one and several rounds, whole last stage
        s = ForestSolver()._schedule(coll, view, made, big_k, 1, rounds, "steps")
        assert verify_schedule(s).ok
        assert _digest(s) == GOLDEN[case][str(rounds)], rounds


@pytest.mark.slow  # whole solves, 1-2 s each; the list schedule digests above stay
@pytest.mark.parametrize("case", SOLVE_CASES)
def test_solver_schedules_are_unchanged(case):
    system, kind, _ = case.split("/")
    topo = SYSTEMS[system]()
    s = tacos.synthesize(topo, build(kind, topo.live_npus, size=len(topo.live_npus) * 2**20),
                         solver="forest")
    assert verify_schedule(s).ok
    assert _digest(s) == GOLDEN[case]


def test_groups_list_their_members_in_order_and_feed_their_children():
    # the table's arrays agree with the Python view: every member in its group once, groups
    # numbered by first member, and a group's feeds count the members whose parent it holds
    topo = SYSTEMS["torus4x4"]()
    group = tuple(topo.live_npus)
    (f,) = _dims([plan_forest(topo, group, group, "copy", False, 1)], topo, group)
    arcs: dict = {}
    hop_ids = [[arcs.setdefault(e, len(arcs)) for e in t.edges] for t in f.trees]
    npu_of = [list(range(topo.n_nodes))] * len(f.trees)
    rounds = [2] * len(f.trees)
    t = step_table(f.trees, npu_of, hop_ids, rounds)
    group_of, members, step_of = step_groups(f.trees, npu_of, hop_ids, rounds)
    assert len(group_of) == sum(len(tr.edges) for tr in f.trees) * 2
    firsts = [group_of[i, e, j] for i, j, e in (m[0] for m in members)]
    assert firsts == sorted(firsts) == list(range(len(members)))
    parent_edge = [{y: e for e, (_, y) in enumerate(tr.edges)} for tr in f.trees]
    fed: dict = {}
    for g, mem in enumerate(members):
        assert len({(hop_ids[i][e], f.trees[i].steps[e]) for i, _, e in mem}) == 1
        for i, j, e in mem:
            p = parent_edge[i].get(f.trees[i].edges[e][0])
            if p is not None:
                key = (group_of[i, p, j], g)
                fed[key] = fed.get(key, 0) + 1
    got = {(h, int(t.feed_group[k])): int(t.feed_count[k])
           for h in range(t.n_groups) for k in range(t.feed_ptr[h], t.feed_ptr[h + 1])}
    assert got == fed
    assert step_of == t.step.tolist() and min(step_of) == 1
