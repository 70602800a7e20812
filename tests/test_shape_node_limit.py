"""The shape search refuses, before lowering them, instance counts whose program the runtime's
XML parser cannot hold (1 algo + ngpus + thread blocks + steps per rank), and never chooses a
program over that limit."""

from __future__ import annotations

from dataclasses import replace

from msccl_programs import node, verified

from tacos.model import patterns
from tacos.msccl.lower import MscclOptions
from tacos.msccl.shape import Shape, parsed_nodes, shape_problems, shapes
from tacos.msccl.shape_choose import ShapeCache, choose_shape, limits_for
from tacos.synthesize import synthesize

NBYTES = 1 << 26


def _plan():
    topo = node("dgx_a100_node")
    group = sorted(topo.live_npus)
    sched = synthesize(topo, patterns.build("allreduce", group, size=NBYTES),
                       solver="nccl-ring", trials=1, workers=1)
    return topo, sched


def test_parsed_nodes_grow_with_instances_as_the_search_assumes():
    topo, sched = _plan()
    cache, base = ShapeCache(), MscclOptions(inplace=True)
    one = cache.program(sched, Shape(1), base)
    head = 1 + len(one.gpus)
    for k in (2, 4):
        many = cache.program(sched, Shape(k), base)
        want = {r: head + k * (n - head) for r, n in parsed_nodes(one).items()}
        assert parsed_nodes(many) == want


def test_shapes_over_the_parser_limit_are_refused_before_lowering():
    topo, sched = _plan()
    base = MscclOptions(inplace=True)
    cache = ShapeCache()
    one = cache.program(sched, Shape(1), base)
    head = 1 + len(one.gpus)
    # room for two instances of the program, not four
    cap = head + 3 * max(n - head for n in parsed_nodes(one).values())
    lim = replace(limits_for(topo), max_nodes=cap)
    assert shape_problems(cache.program(sched, Shape(4), base), lim)
    assert not shape_problems(one, lim)
    cands = shapes(instances=(1, 2, 4, 8), port_orders=(False,))
    got = choose_shape({"ring": sched}, topo, NBYTES, base=base, cache=ShapeCache(),
                       candidates=cands, limits=lim)
    assert got.shape.instances <= 2
    assert max(parsed_nodes(got.program).values()) <= cap
    refused = [c for c in got.considered if c.problems and "parsed nodes" in c.problems[0]]
    assert refused and all(c.shape.instances >= 4 for c in refused)
    verified(got.program)


def test_plans_with_more_peers_than_sms_are_refused_without_lowering():
    from tacos.msccl.allpairs_program import AllPairsAllReduce
    from tacos.msccl.shape_refuse import peer_counts
    from tacos.solvers.allpairs import allpairs_schedule

    topo, sched = _plan()
    group = sched.collective.group
    pairs = allpairs_schedule(topo, patterns.build("allreduce", group, size=NBYTES,
                                                   chunks_per_npu=1))
    plans = {"ring": sched, "allpairs": pairs, "staged": AllPairsAllReduce(pairs.collective)}
    assert peer_counts(pairs)[1:] == (len(group) - 1, len(group) - 1)
    assert peer_counts(plans["staged"])[1:] == (len(group) - 1, len(group) - 1)
    assert max(peer_counts(sched)[1:]) < len(group) - 1
    base = MscclOptions(inplace=True)
    cands = shapes(instances=(1, 2), port_orders=(False,))
    lim = replace(limits_for(topo), sms=len(group) - 2)  # one SM short of a tb per peer
    cache = ShapeCache()
    got = choose_shape(plans, topo, NBYTES, base=base, cache=cache, candidates=cands,
                       limits=lim)
    assert got.plan == "ring"
    for name in ("allpairs", "staged"):
        mine = [c for c in got.considered if c.plan == name]
        assert len(mine) == len(cands)
        assert all(c.time is None and c.problems[0].startswith("refused before lowering")
                   for c in mine)
    # nothing of the refused plans was lowered
    assert not any(k[0] == cache.structure(pairs) or k[0] == ("family", plans["staged"])
                   for k in cache._programs)
    # with room for a thread block per peer, they are searched as before
    roomy = choose_shape(plans, topo, NBYTES, base=base, cache=ShapeCache(),
                         candidates=cands, limits=replace(lim, sms=len(group) - 1))
    assert not any(c.problems and c.problems[0].startswith("refused before lowering")
                   for c in roomy.considered)
    verified(got.program)


def test_a_large_program_gets_the_quick_search_and_the_rest_is_reported(monkeypatch):
    from tacos.msccl import shape_choose

    topo, sched = _plan()
    base = MscclOptions(inplace=True)
    cands = shapes(instances=(1, 2, 4))
    full = choose_shape({"ring": sched}, topo, NBYTES, base=base, cache=ShapeCache(),
                        candidates=cands)
    assert not any(c.problems and c.problems[0].startswith("skipped") for c in full.considered)
    quick = choose_shape({"ring": sched}, topo, NBYTES, base=base, cache=ShapeCache(),
                         candidates=cands, quick=True)
    monkeypatch.setattr(shape_choose, "LARGE_PROGRAM_STEPS", 1)
    narrow = choose_shape({"ring": sched}, topo, NBYTES, base=base, cache=ShapeCache(),
                          candidates=cands)
    assert (narrow.plan, narrow.shape) == (quick.plan, quick.shape)
    assert narrow.time == quick.time
    skipped = [c for c in narrow.considered if c.problems and c.problems[0].startswith("skipped")]
    assert skipped and {(c.plan, c.shape) for c in skipped}.isdisjoint(
        {(c.plan, c.shape) for c in narrow.considered if c.time is not None})
    assert any(line.startswith("skipped") for line in narrow.lines())
    verified(narrow.program)


def test_the_cache_keeps_programs_within_its_step_budget():
    from tacos.msccl.shape_choose import _program_steps

    topo, sched = _plan()
    base = MscclOptions(inplace=True)
    one = ShapeCache().program(sched, Shape(1), base)
    cache = ShapeCache(max_steps=3 * _program_steps(one))
    for k in (1, 2, 4):
        cache.program(sched, Shape(k), base)
    kept = [p for p in cache._programs.values() if not isinstance(p, str)]
    assert sum(_program_steps(p) for p in kept) <= 3 * _program_steps(one) or len(kept) == 1
    assert kept and kept[-1].nchunksperloop == 4 * one.nchunksperloop  # the newest stays
    assert cache._steps == sum(_program_steps(p) for p in kept)


def test_a_plan_over_the_parser_limit_in_every_shape_is_refused_before_lowering():
    from tacos.msccl.shape_refuse import busiest_steps, refusal

    topo, sched = _plan()
    base = MscclOptions(inplace=True)
    for pair in (False, True):  # any lowering gives a rank at least that many nodes
        one = ShapeCache().program(sched, Shape(1, "Simple", False, pair), base)
        rank, nodes, _ = busiest_steps(sched)
        assert max(parsed_nodes(one).values()) >= nodes
        assert parsed_nodes(one)[sched.collective.group.index(rank)] >= nodes
    lim = replace(limits_for(topo), max_nodes=nodes - 1)
    assert refusal(sched, replace(lim, max_nodes=nodes)) == ""
    why = refusal(sched, lim)
    assert why.startswith("refused before lowering") and f"NPU {rank}" in why
    cache = ShapeCache()
    lowered: list[Shape] = []
    real = cache.program
    cache.program = lambda s, shape, b: lowered.append(shape) or real(s, shape, b)
    try:
        choose_shape({"ring": sched}, topo, NBYTES, base=base, limits=lim, cache=cache,
                     candidates=shapes(instances=(1, 2)))
    except Exception as exc:  # nothing fits: the error names the refusal
        assert "refused before lowering" in str(exc)
    else:
        raise AssertionError("a plan over the parser limit in every shape was chosen")
    assert not lowered
