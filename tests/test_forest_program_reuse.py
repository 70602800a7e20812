"""forest's integer programs are asked once where one answer serves: all-reduce's reduction phase
takes the copy phase's step-timed trees when the two programs are the same, and the
depth-bounded fallback is skipped once the step-timed program built trees for any tree count.
The shortcuts keep the plan's fraction of the optimum, its verification and its bytes per seed."""

from __future__ import annotations

from importlib import resources

import pytest
from tacos.backends.json_schedule import dumps
from test_forest_timed import BOXES

import tacos
from tacos.check.verify import verify_schedule
from tacos.model.patterns import build
from tacos.solvers.forest import candidates as cands
from tacos.solvers.forest import memo
from tacos.solvers.forest import solver as forest_solver
from tacos.solvers.forest.candidates import Candidate, Context, named_candidates
from tacos.solvers.forest.shallow import have_cp_sat
from tacos.solvers.forest.timed_links import link_program

needs_cp_sat = pytest.mark.skipif(not have_cp_sat(),
                                  reason="OR-Tools (the ilp extra) is not installed")


def _boxes():
    topo = tacos.parse(BOXES, source="boxes").topology
    return topo, tuple(topo.live_npus)


def _fraction(s) -> float:
    return s.meta["forest"]["optimal_time"] / s.makespan


def test_a_symmetric_topology_and_its_reversal_have_the_same_link_program():
    topo, group = _boxes()
    forward = link_program(topo, group)
    assert forward is not None
    assert link_program(topo.reversed(), group) == forward
    # a topology whose links differ one way is another program
    lopsided = tacos.parse(BOXES.replace("link g[4*n] <-> g[4*n+2] 50GB/s 1us",
                                         "link g[4*n] -> g[4*n+2] 50GB/s 1us\n"
                                         "  link g[4*n+2] -> g[4*n] 25GB/s 1us"),
                           source="lopsided").topology
    assert link_program(lopsided.reversed(), group) != link_program(lopsided, group)


def _allreduce(monkeypatch: pytest.MonkeyPatch, share: bool) -> tuple[object, int]:
    """2x-MI250-like boxes, all-reduce at two trees per root, from a cold cache; the schedule
    and how many step-timed programs were solved."""
    topo, group = _boxes()
    calls = [0]
    solve = cands.timed_link_trees

    def counted(*args, **kwargs):
        calls[0] += 1
        return solve(*args, **kwargs)

    monkeypatch.setattr(cands, "timed_link_trees", counted)
    monkeypatch.setattr(cands, "PHASES_SHARE_PROGRAM", share)
    memo.clear()
    coll = build("allreduce", group, size=len(group) * 2**23)
    s = tacos.synthesize(topo, coll, solver="forest", trees=2)
    memo.clear()
    return s, calls[0]


@needs_cp_sat
def test_the_reduction_phase_takes_the_copy_phases_trees_and_keeps_the_fraction(monkeypatch):
    fast, solved = _allreduce(monkeypatch, True)
    full, solved_full = _allreduce(monkeypatch, False)
    assert (solved, solved_full) == (1, 2)  # one program instead of one per phase
    for s in (fast, full):
        rep = verify_schedule(s)
        assert rep.ok, rep.text(5)
        assert "timed" in {t["packing"] for t in s.meta["forest"]["tried"]}
    # the shortcut's plan is within half a point of the full search's fraction of the optimum
    assert _fraction(fast) >= _fraction(full) - 0.005
    assert _fraction(fast) <= 1 + 1e-9


@pytest.mark.slow  # ~1.5 s: two more all-reduce syntheses on 32 GCDs
@needs_cp_sat
def test_the_shared_program_gives_the_same_bytes_every_time(monkeypatch):
    first, _ = _allreduce(monkeypatch, True)
    again, _ = _allreduce(monkeypatch, True)
    assert dumps(first) == dumps(again)


def _ctx() -> Context:
    return Context([], None, (0, 1), order=True, fixed=False, stepped={}, deep={})


def test_a_fallback_is_not_asked_once_its_program_built_trees_for_another_tree_count():
    asked: list[str] = []
    fallback = Candidate("b", "b", lambda ctx: asked.append("b") or [["B"]], lambda ctx: True,
                         ("test",), instead_of="a", costly=True)
    assert named_candidates((fallback,), _ctx(), {}, None, {"a"}) == []
    assert asked == []
    assert named_candidates((fallback,), _ctx(), {}, None, set()) == [("b", [["B"]])]
    assert asked == ["b"]


@pytest.mark.slow  # ~35 s: the step-timed and depth-bounded programs on 32 GCDs
@needs_cp_sat
def test_2x_mi250_skips_the_depth_bounded_program_and_keeps_its_fraction(monkeypatch):
    path = resources.files("tacos") / "presets" / "mi250.tdl"
    topo = tacos.load(str(path), params={"nodes": 2}).topology
    coll = build("allgather", tuple(topo.live_npus), size=2**26)
    out = {}
    for once in (True, False):
        monkeypatch.setattr(forest_solver, "FALLBACK_ONCE", once)
        memo.clear()
        s = tacos.synthesize(topo, coll, solver="forest")
        assert verify_schedule(s).ok
        out[once] = (s, [t["packing"] for t in s.meta["forest"]["tried"]])
    memo.clear()
    (fast, tried), (full, tried_full) = out[True], out[False]
    assert "timed" in tried
    # the full search times one packing more: the depth-bounded trees at one tree per root
    assert tried_full[:len(tried)] == tried and len(tried_full) == len(tried) + 1
    assert _fraction(fast) >= _fraction(full) - 0.005
