"""The channel floor of a lowering (tacos/msccl/channel_floor.py): never above the channels of
the real lowering, and its refusal only where the lowering fails; the shape search keeps its
choice and never lowers a refused instance count."""

from __future__ import annotations

import pytest
from msccl_programs import synthesized

from tacos.errors import TacosError
from tacos.msccl import shape_choose
from tacos.msccl.channel_floor import busiest_pair, channel_floor, channels_refusal
from tacos.msccl.lower import MscclOptions, lower
from tacos.msccl.shape import shapes
from tacos.msccl.shape_choose import ShapeCache, choose_shape

RING = 'topology "r"\nbiring r[6] 100GB/s 1us\n'
TORUS = 'topology "t"\ntorus t[3, 2] 50GiB/s 0.5us\n'
MESH = 'topology "m"\nmesh m[4] 50GiB/s 0.5us\n'


CASES = [
    pytest.param(RING, "allreduce", "nccl-ring", 2, marks=pytest.mark.slow),
    pytest.param(RING, "allgather", "greedy", 3, marks=pytest.mark.slow),
    pytest.param(TORUS, "allreduce", "greedy", 2, marks=pytest.mark.slow),
    pytest.param(TORUS, "reducescatter", "nccl-ring", 2, marks=pytest.mark.slow),
    pytest.param(MESH, "allgather", "greedy", 4, marks=pytest.mark.slow),
]


@pytest.mark.parametrize("text,kind,solver,chunks", CASES)
def test_floor_never_above_the_lowering_and_refusal_only_where_it_fails(text, kind, solver,
                                                                         chunks):
    _, _, sched = synthesized(text, kind, solver, chunks)
    inplace = kind in ("allreduce", "allgather")
    refused = fitted = 0
    for max_steps in (2, 3, 5, 8, 64):
        got = busiest_pair(sched, max_steps)
        assert got is not None and got.channels >= 1
        for instances in (1, 2, 3):
            floor = channel_floor(sched, instances, max_steps, inplace=inplace)
            opts = MscclOptions(inplace=inplace, outofplace=not inplace, instances=instances,
                                max_steps_per_tb=max_steps, fit_fifo=False)
            try:
                program = lower(sched, options=opts)
            except TacosError:
                program = None
            if program is not None:
                assert floor <= program.nchannels, (max_steps, instances)
                fitted += 1
            for cap in (1, 2, 4, 8, 16, 32):
                why = channels_refusal(sched, instances, max_steps, cap, inplace=inplace)
                assert bool(why) == (floor > cap)
                if why:
                    refused += 1
                    with pytest.raises(TacosError):
                        lower(sched, options=MscclOptions(
                            inplace=inplace, outofplace=not inplace, instances=instances,
                            max_steps_per_tb=max_steps, max_channels=cap, fit_fifo=False))
    assert refused and fitted


@pytest.mark.parametrize("chunks", [4])
def test_from_two_instances_a_kept_chunk_is_a_run_of_its_own(chunks):
    _, _, sched = synthesized(RING, "allreduce", "nccl-tree", chunks)
    plain = busiest_pair(sched, 4)
    split = busiest_pair(sched, 4, kept_runs=True)
    assert sum(split.per_lane) > sum(plain.per_lane)  # tree transfers carry several chunks
    lowered = 0
    for max_steps, instances in ((4, 2), (8, 2), (16, 2), (16, 3), (64, 2)):
        floor = channel_floor(sched, instances, max_steps, inplace=True)
        assert floor == instances * busiest_pair(sched, max_steps, kept_runs=True).channels
        try:
            program = lower(sched, options=MscclOptions(
                inplace=True, instances=instances, max_steps_per_tb=max_steps,
                fit_fifo=False))
        except TacosError:
            continue
        assert floor <= program.nchannels
        lowered += 1
    assert lowered


def test_floor_counts_the_cuts_of_a_long_lane():
    _, _, sched = synthesized(RING, "allreduce", "nccl-ring", 2)
    got = busiest_pair(sched, 4)
    # the ring's transfers to a neighbour never overlap in time: one lane
    assert len(got.per_lane) == 1
    assert got.per_lane[0] == max(sum(1 for t in sched.transfers if (t.src, t.dst) == pair)
                                  for pair in {(t.src, t.dst) for t in sched.transfers})
    assert got.per_lane[0] > 4
    assert got.channels == -(-got.per_lane[0] // 4)  # parts of ceil(0.9 x 4) = 4 units
    assert channel_floor(sched, 2, 4) == 2 * busiest_pair(sched, 4, kept_runs=True).channels
    assert channel_floor(sched, 1, 4) == got.channels
    program = lower(sched, options=MscclOptions(inplace=True, max_steps_per_tb=4,
                                                fit_fifo=False))
    assert got.channels <= program.nchannels


@pytest.mark.slow
def test_the_search_keeps_its_choice_and_lowers_no_refused_shape(monkeypatch):
    topo, coll, sched = synthesized(RING, "allreduce", "nccl-ring", 2)
    plans = {"ring": sched, "greedy": synthesized(RING, "allreduce", "greedy", 2)[2]}
    base = MscclOptions(inplace=True, max_steps_per_tb=4, max_channels=8)
    cands = shapes(protos=("Simple",), instances=(1, 2, 4), port_orders=(False,))

    def search(cache: ShapeCache, refuse: bool):
        if not refuse:
            monkeypatch.setattr(shape_choose, "channels_refusal", lambda *a, **k: "")
            monkeypatch.setattr(shape_choose, "busiest_pair", lambda *a, **k: None)
        else:
            monkeypatch.undo()
        return choose_shape(plans, topo, coll.size, base=base, cache=cache,
                            candidates=cands)

    lowered: list[tuple[str, int]] = []
    real = shape_choose.lower

    def counting(schedule, options):
        label = "ring" if schedule is plans["ring"] else "greedy"
        try:
            out = real(schedule, options=options)
        except TacosError:
            lowered.append((label, options.instances, False))
            raise
        lowered.append((label, options.instances, True))
        return out

    monkeypatch.setattr(shape_choose, "lower", counting)
    before = search(ShapeCache(), refuse=False)
    failed_before = {x[:2] for x in lowered if not x[2]}
    lowered.clear()
    monkeypatch.setattr(shape_choose, "lower", counting)
    after = search(ShapeCache(), refuse=True)
    assert (after.plan, after.shape, after.time) == (before.plan, before.shape, before.time)
    refused = [c for c in after.considered if c.problems
               and "channels >" in c.problems[0] and "refused before" in c.problems[0]]
    assert refused  # the case exercises the refusal
    for c in refused:
        assert (c.plan, c.shape.instances) in failed_before  # it failed when lowered
        assert (c.plan, c.shape.instances) not in {x[:2] for x in lowered}
    timed_before = {(c.plan, c.shape): c.time for c in before.considered if c.time}
    timed_after = {(c.plan, c.shape): c.time for c in after.considered if c.time}
    assert timed_after == timed_before
