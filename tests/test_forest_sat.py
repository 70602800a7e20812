"""The step-timed program built through forest/sat.py (OR-Tools' C++ model helper, no pandas) is
the program ``cp_model`` builds, proto for proto, so CP-SAT gives the same answer."""

from __future__ import annotations

import pytest
from test_forest_timed import BOXES

import tacos
from tacos.solvers.forest import timed_links
from tacos.solvers.forest.shallow import have_cp_sat
from tacos.solvers.forest.solver import plan_forest
from tacos.solvers.islands import find_islands

pytestmark = [pytest.mark.skipif(not have_cp_sat(),
                                 reason="OR-Tools (the ilp extra) is not installed"),
              pytest.mark.slow]  # (1.7 s: cp_model's import and two solves)


def _inputs():
    """The step-timed program of two small 2x-MI250-like boxes at k = 2 and 8 steps."""
    topo = tacos.parse(BOXES, source="boxes").topology
    group = tuple(topo.live_npus)
    forest = plan_forest(topo, group, group, "copy", False, 2)
    arcs, lanes = timed_links.link_arcs(topo, group)
    caps = forest.rate.caps
    images, reps = timed_links.representatives(
        forest.roots, timed_links._symmetries(group, arcs, lanes, caps))
    islands = [tuple(i) for i in find_islands(topo, group)
               if len(i) > 1 and timed_links._tight(i, forest.roots, 2, caps)]
    return group, reps, 2, arcs, caps, lanes, list(images.values()), islands, 8


def test_the_lean_model_is_cp_models_proto_and_gives_its_answer():
    from ortools.sat.python import cp_model

    from tacos.solvers.forest import sat

    inputs = _inputs()
    ours, theirs = sat.Model(), cp_model.CpModel()
    y_ours = timed_links._program(ours, *inputs)
    y_theirs = timed_links._program(theirs, *inputs)
    assert list(y_ours) == list(y_theirs)
    assert str(ours.proto) == str(theirs.proto) and len(y_ours) > 200
    solver, reference = sat.Solver(), cp_model.CpSolver()
    for s in (solver, reference):
        s.parameters.num_workers = 1
        s.parameters.max_deterministic_time = 2.0
    assert solver.solve(ours) in (sat.OPTIMAL, sat.FEASIBLE)
    assert reference.solve(theirs) in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    first = {key: solver.value(v) for key, v in y_ours.items()}
    assert first == {key: reference.value(v) for key, v in y_theirs.items()}
    # the improvement's hint and objective too
    timed_links._earliest(ours, y_ours, inputs[3], first)
    timed_links._earliest(theirs, y_theirs, inputs[3], first)
    assert str(ours.proto) == str(theirs.proto)
    assert "objective" in str(ours.proto) and "solution_hint" in str(ours.proto)
    # and the answer _solved reads back from CP-SAT is that packing
    found = timed_links._solved(*inputs, 2.0, 0.0)
    assert found == {(r, i): {v: (u, s) for (r2, i2, (u, v), s), on in first.items()
                              if on and (r2, i2) == (r, i)}
                     for r in inputs[1] for i in range(2)}
