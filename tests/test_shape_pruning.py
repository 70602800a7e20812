"""The shape search's bounds (port, synchronization and CTA bounds, the port bound checked
before a shape is lowered) prune shapes without changing the choice: the search with them
picks what the same search picks timing every shape it reaches."""

from __future__ import annotations

from pathlib import Path

import pytest
from msccl_programs import node, verified

import tacos
from tacos.model import patterns
from tacos.msccl.lower import MscclOptions
from tacos.msccl.shape import shapes
from tacos.msccl.shape_choose import ShapeCache, choose_shape, runtime_estimator
from tacos.solvers.allpairs import allpairs_schedule
from tacos.synthesize import synthesize


def _plans(topo, solver: str, nbytes: int) -> dict:
    group = sorted(topo.live_npus)
    one = patterns.build("allreduce", group, size=nbytes, chunks_per_npu=1)
    return {solver: synthesize(topo, patterns.build("allreduce", group, size=nbytes),
                               solver=solver, trials=1, workers=1),
            "allpairs": allpairs_schedule(topo, one)}


CASES = [("dgx_a100_node", "nccl-ring", 1 << 16), ("dgx_a100_node", "nccl-ring", 1 << 26),
         pytest.param("mesh4x4", "greedy", 1 << 20, marks=pytest.mark.slow)]


@pytest.mark.parametrize("where,solver,nbytes", CASES)
def test_pruned_search_chooses_what_the_unpruned_search_chooses(where, solver, nbytes):
    topo = node(where) if where != "mesh4x4" else tacos.load(
        Path(tacos.__file__).parent.parent / "examples" / "mesh4x4.tdl").topology
    plans = _plans(topo, solver, nbytes)
    group = next(iter(plans.values())).collective.group
    base = MscclOptions(inplace=True)
    cands = shapes(instances=(1, 2, 4), port_orders=(False,))
    pruned = choose_shape(plans, topo, nbytes, base=base, cache=ShapeCache(), candidates=cands)
    full = choose_shape(plans, topo, nbytes, base=base, cache=ShapeCache(), candidates=cands,
                        estimator=runtime_estimator(group))
    assert (pruned.plan, pruned.shape) == (full.plan, full.shape)
    assert pruned.time == pytest.approx(full.time, rel=1e-9)
    timed = sum(c.time is not None for c in pruned.considered)
    assert timed < sum(c.time is not None for c in full.considered)
    assert any(c.problems and c.problems[0].startswith("pruned") for c in pruned.considered)
    verified(pruned.program)
