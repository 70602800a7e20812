"""One :class:`ShapeCache` shared by the ranking's quick search and the written file's full
search (what ``tacosc -o plan.xml`` does) gives exactly what a fresh search gives; the cache
misses when a base option the lowering depends on changes."""

from __future__ import annotations

from dataclasses import replace

import pytest
from msccl_programs import node, verified

import tacos.msccl.shape_choose as shape_choose
from tacos.model import patterns
from tacos.msccl.lower import MscclOptions
from tacos.msccl.shape import Shape, shapes
from tacos.msccl.shape_choose import ShapeCache, choose_shape
from tacos.runtime import estimate_program
from tacos.solvers.allpairs import allpairs_schedule
from tacos.synthesize import synthesize

NBYTES = 1 << 20
BASE = MscclOptions(inplace=True)


@pytest.fixture(scope="module")
def case():
    topo = node("dgx_a100_node")
    group = sorted(topo.live_npus)
    plans = {"nccl-ring": synthesize(topo, patterns.build("allreduce", group, size=NBYTES),
                                     solver="nccl-ring", trials=1, workers=1),
             "allpairs": allpairs_schedule(topo, patterns.build("allreduce", group,
                                                                size=NBYTES, chunks_per_npu=1))}
    return topo, plans


def _lowerings(monkeypatch) -> list:
    calls: list = []
    real = shape_choose.lower

    def spy(schedule, options=None, **kw):
        calls.append(options)
        return real(schedule, options=options, **kw)

    monkeypatch.setattr(shape_choose, "lower", spy)
    return calls


def test_shared_cache_chooses_and_writes_what_a_fresh_search_does(case, monkeypatch):
    topo, plans = case
    cands = shapes(protos=("Simple", "LL"), instances=(1, 2))
    calls = _lowerings(monkeypatch)
    fresh = choose_shape(plans, topo, NBYTES, base=BASE, cache=ShapeCache(), candidates=cands)
    lowered_fresh = len(calls)
    shared = ShapeCache()
    choose_shape(plans, topo, NBYTES, base=BASE, cache=shared, quick=True,
                 candidates=shapes(protos=("Simple", "LL"), instances=(1,),
                                     port_orders=(False,)))
    calls.clear()
    again = choose_shape(plans, topo, NBYTES, base=BASE, cache=shared, candidates=cands)
    assert (again.plan, again.shape, again.time, again.bound) == \
        (fresh.plan, fresh.shape, fresh.time, fresh.bound)
    assert [(c.plan, c.shape, c.time, c.problems) for c in again.considered] == \
        [(c.plan, c.shape, c.time, c.problems) for c in fresh.considered]
    assert again.xml() == fresh.xml()
    verified(again.program)
    assert len(calls) < lowered_fresh  # the quick search's lowerings were reused
    # the kept estimate is the runtime model's estimate of the chosen program
    group = list(again.schedule.collective.group)
    est = estimate_program(again.program, topo, NBYTES, ranks=group)
    assert again.estimate is not None
    assert (again.estimate.time, again.estimate.bound) == (est.time, est.bound)


@pytest.mark.parametrize("change", [dict(inplace=False, outofplace=True),
                                    dict(max_steps_per_tb=32)])
def test_a_changed_base_option_misses(case, monkeypatch, change):
    topo, plans = case
    cache = ShapeCache()
    shape = Shape(1, "Simple", False, True)
    first = cache.program(plans["nccl-ring"], shape, BASE)
    calls = _lowerings(monkeypatch)
    assert cache.program(plans["nccl-ring"], shape, BASE) is first  # the same: a hit
    assert calls == []
    other = cache.program(plans["nccl-ring"], shape, replace(BASE, **change))
    assert len(calls) == 1 and other is not first
    if "inplace" in change:
        assert (other.inplace, first.inplace) == (0, 1)


def test_another_collective_with_the_same_transfers_misses(case):
    _, plans = case
    ring = plans["nccl-ring"]
    coll = ring.collective
    other = replace(ring, collective=replace(coll, chunks_per_npu=coll.chunks_per_npu + 1))
    cache = ShapeCache()
    assert cache.structure(ring) != cache.structure(other)
