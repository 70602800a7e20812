"""The shape search refuses an instance count before lowering when the chunks a rank receives
into its output buffer cannot share steps (tacos/msccl/shape_refuse.py, instances_refusal):
the bound holds rank by rank on lowered programs, and the search keeps its choice."""

from __future__ import annotations

import pytest
from msccl_programs import synthesized

import tacos
from tacos.errors import TacosError
from tacos.model.patterns import build
from tacos.msccl import shape_choose
from tacos.msccl.lower import MscclOptions, lower
from tacos.msccl.shape import RuntimeLimits, parsed_nodes, shapes
from tacos.msccl.shape_choose import ShapeCache, choose_shape
from tacos.msccl.shape_refuse import (
    chunks_refusal,
    instances_refusal,
    kept_receipts,
    receipts_per_rank,
)

RING = 'topology "r"\nbiring r[8] 100GB/s 1us\n'
TORUS = 'topology "t"\ntorus t[3, 3, 2] 50GiB/s 0.5us\n'


@pytest.mark.parametrize("text,kind,solver,chunks,inplace", [
    (RING, "allreduce", "nccl-tree", 4, True),
    pytest.param(RING, "allreduce", "greedy", 2, False, marks=pytest.mark.slow),
    (RING, "allgather", "greedy", 2, True),
    (TORUS, "reducescatter", "greedy", 1, True),
    pytest.param(TORUS, "allgather", "nccl-ring", 1, False, marks=pytest.mark.slow),
])
def test_every_rank_has_at_least_the_nodes_the_refusal_counts(text, kind, solver, chunks,
                                                               inplace):
    _, coll, sched = synthesized(text, kind, solver, chunks)
    every = receipts_per_rank(sched, inplace=inplace)
    assert every and any(r.kept for r in every.values())
    group = list(coll.group)
    for instances in (2, 3):
        program = lower(sched, options=MscclOptions(inplace=inplace, outofplace=not inplace,
                                                     instances=instances, fit_fifo=False))
        nodes = parsed_nodes(program)
        for npu, got in every.items():
            assert nodes[group.index(npu)] >= 1 + len(group) + instances * got.per_instance
    busiest = kept_receipts(sched, inplace=inplace)
    assert busiest.per_instance == max(r.per_instance for r in every.values())


def test_no_bound_where_output_slots_can_hold_another_chunk():
    _, _, sched = synthesized(RING, "allreduce", "greedy", 1)
    assert kept_receipts(sched, inplace=True) is not None
    topo = tacos.parse(RING, source="test").topology
    a2a = build("alltoall", topo.live_npus, size=8 * 8 * 4096)
    plan = tacos.synthesize(topo, a2a, solver="greedy", trials=1, workers=1)
    assert kept_receipts(plan, inplace=True) is None
    assert kept_receipts(plan, inplace=False) is not None
    lim = RuntimeLimits(max_nodes=10)
    assert instances_refusal(sched, 1, lim, inplace=True) == ""  # one instance: no bound
    assert "refused before lowering" in instances_refusal(sched, 2, lim, inplace=True)


def test_the_search_keeps_its_choice_and_lowers_no_refused_count(monkeypatch):
    topo, coll, tree = synthesized(RING, "allreduce", "nccl-tree", 4)
    plans = {"tree": tree, "greedy": synthesized(RING, "allreduce", "greedy", 4)[2]}
    lim = RuntimeLimits(max_nodes=200)  # 4 and 8 instances of either plan do not fit
    cands = shapes(protos=("Simple",), instances=(1, 2, 4, 8), port_orders=(False,),
                   paired=(True,))

    def search(cache: ShapeCache):
        return choose_shape(plans, topo, coll.size, limits=lim, cache=cache, candidates=cands)

    lowered: list[int] = []
    cache = ShapeCache()
    real = cache.program

    def spy(schedule, shape, base):
        lowered.append(shape.instances)
        return real(schedule, shape, base)

    monkeypatch.setattr(cache, "program", spy)
    got = search(cache)
    refused = [c for c in got.considered if c.time is None
               and c.problems[0].startswith("refused before lowering: at")]
    assert refused and all(c.shape.instances >= 4 for c in refused)
    assert not {4, 8} & set(lowered)
    monkeypatch.setattr(shape_choose, "instances_refusal", lambda *a, **k: "")
    full = search(ShapeCache())  # the lowering itself finds them over the limits
    assert (full.plan, full.shape) == (got.plan, got.shape)
    assert full.time == got.time
    assert [(c.plan, c.shape, c.time) for c in full.considered] == \
        [(c.plan, c.shape, c.time) for c in got.considered]


def test_a_chunk_count_that_does_not_divide_the_message_is_refused_before_lowering():
    topo, _, tree = synthesized(RING, "allreduce", "nccl-tree", 3)  # refined: 48 chunks
    for instances in (1, 2):
        program = lower(tree, options=MscclOptions(instances=instances, fit_fifo=False))
        assert program.nchunksperloop == len(tree.collective.chunks) * instances
    assert chunks_refusal(tree, 24 * 1024) == ""
    assert "does not divide" in chunks_refusal(tree, 1 << 20)
    cache = ShapeCache()
    with pytest.raises(TacosError, match="refused before lowering: nchunksperloop"):
        choose_shape({"tree": tree}, topo, 1 << 22, cache=cache,
                     candidates=shapes(protos=("Simple",), instances=(1, 2)))
    assert not cache._programs  # nothing lowered
