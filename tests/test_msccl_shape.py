"""Runtime-shaped lowering: port order as dependencies, paired peers and byte balance, runtime
limits, the shape chooser and the size windows.  Every program is verified."""

from __future__ import annotations

from pathlib import Path

import pytest
from msccl_programs import node, verified

import tacos
from tacos.check.verify import verify_schedule
from tacos.model import patterns
from tacos.msccl.lower import MscclOptions, lower
from tacos.msccl.lower_ports import port_order
from tacos.msccl.program import Program
from tacos.msccl.shape import RuntimeLimits, Shape, balance, shape_problems, shapes, tb_bytes
from tacos.msccl.shape_choose import NEAR, ShapeCache, choose_shape
from tacos.msccl.sweep_xml import check_set, write_windows
from tacos.solvers.allpairs import allpairs_schedule
from tacos.synthesize import synthesize


def reachable(program: Program, rank: int, a: tuple[int, int], b: tuple[int, int]) -> bool:
    """Whether step ``b`` (tb, index) of ``rank`` happens after step ``a``: program order and
    dependencies."""
    tbs = {tb.id: tb for tb in program.gpu(rank).tbs}
    succ: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for tb in tbs.values():
        for i, st in enumerate(tb.steps):
            if i:
                succ.setdefault((tb.id, i - 1), []).append((tb.id, i))
            if st.depid >= 0:
                succ.setdefault((st.depid, st.deps), []).append((tb.id, i))
    seen, todo = {a}, [a]
    while todo:
        x = todo.pop()
        for y in succ.get(x, ()):
            if y not in seen:
                seen.add(y)
                todo.append(y)
    return b in seen


def toy_estimator(program: Program, topology, nbytes: int) -> float:
    """A stand-in runtime: per-step protocol latency plus the busiest thread block's bytes at
    one CTA's rate (LL at half the payload rate)."""
    lat = {"LL": 1e-6, "LL128": 3e-6, "Simple": 6e-6}[program.proto]
    rate = {"LL": 5e9, "LL128": 9e9, "Simple": 10e9}[program.proto]
    steps = max(len(tb.steps) for g in program.gpus for tb in g.tbs)
    return lat * steps + max(tb_bytes(program, nbytes).values()) / rate


# ------------------------------------------------------------------------------------------
# rule: a serialized port order becomes dependencies
# ------------------------------------------------------------------------------------------

def test_a_serialized_port_order_becomes_dependencies():
    """The link-level direct all-gather sends GPU 0's block to its 7 peers one after another
    through its one NVSwitch port; with ``port_order`` each send waits for the previous one
    (another thread block), without it the sends are unordered."""
    topo = node()
    coll = patterns.build("allgather", topo.live_npus, size=1 << 20, chunks_per_npu=1)
    sched = synthesize(topo, coll, solver="direct")
    assert verify_schedule(sched).ok
    order = port_order(sched)
    assert order.ordered == 8 * 6 and order.unenforced == 0
    peers = [t.dst for t in sorted((t for t in sched.transfers if t.src == 0),
                                   key=lambda t: t.start)]
    assert len(peers) == 7
    for kept in (True, False):
        prog = verified(lower(sched, options=MscclOptions(inplace=True, port_order=kept)))
        send_step = {}
        for tb in prog.gpu(0).tbs:
            sends = [i for i, st in enumerate(tb.steps) if st.type == "s"]
            if tb.send >= 0:
                assert len(sends) == 1
                send_step[tb.send] = (tb.id, sends[0])
        chained = [reachable(prog, 0, send_step[a], send_step[b])
                   for a, b in zip(peers, peers[1:], strict=False)]
        assert all(chained) if kept else not any(chained)


def test_port_order_keeps_instances_side_by_side():
    """Pieces of a chunk (instances) are separate port lanes: piece 0 of one send never waits
    for piece 1 of another."""
    topo = node()
    coll = patterns.build("allgather", topo.live_npus, size=1 << 20, chunks_per_npu=1)
    sched = synthesize(topo, coll, solver="direct")
    prog = verified(lower(sched, options=MscclOptions(inplace=True, port_order=True,
                                                      instances=2)))
    chan_of = {tb.id: tb.chan for tb in prog.gpu(0).tbs}
    for tb in prog.gpu(0).tbs:
        for st in tb.steps:
            if st.depid >= 0 and tb.send >= 0:
                assert chan_of[st.depid] == tb.chan  # the same instance's channel


# ------------------------------------------------------------------------------------------
# rule: bytes per thread block balanced (tolerance 5 %)
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["allreduce", "allgather", "reducescatter"])
def test_paired_peers_balance_bytes_across_thread_blocks(kind):
    topo = node()
    coll = patterns.build(kind, topo.live_npus, size=1 << 20, chunks_per_npu=1)
    sched = allpairs_schedule(topo, coll)
    assert verify_schedule(sched).ok
    for inst in (1, 4):
        prog = verified(lower(sched, options=Shape(inst, "LL", paired=True).options(
            MscclOptions(inplace=True))))
        assert balance(prog, 1 << 20) <= 1.05
        assert max(len(g.tbs) for g in prog.gpus) == 7 * inst
        assert prog.nchannels == inst and prog.proto == "LL"
    single = verified(lower(sched, options=Shape(4, paired=False).options(
        MscclOptions(inplace=True))))
    # single peers: the reduce-scatter's last reduction feeds one send -> uneven tbs
    assert kind != "allreduce" or balance(single, 1 << 20) > 1.3


def test_tb_bytes_count_what_each_thread_block_moves():
    topo = node()
    coll = patterns.build("allgather", topo.live_npus, size=1 << 20, chunks_per_npu=1)
    prog = verified(lower(allpairs_schedule(topo, coll),
                          options=Shape(2).options(MscclOptions(inplace=True))))
    loads = tb_bytes(prog, 8 << 20)
    # 8 MiB message, 16 chunks of 512 KiB; every tb sends one piece and receives one
    assert set(loads.values()) == {2 * (8 << 20) / 16}


# ------------------------------------------------------------------------------------------
# the staged all-pairs all-reduce program
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("inplace", [True, False])
def test_staged_allpairs_allreduce_verifies_and_spreads_the_reduction(inplace):
    from tacos.msccl.allpairs_program import AllPairsAllReduce

    topo = node()
    coll = patterns.build("allreduce", topo.live_npus, size=1 << 20, chunks_per_npu=1)
    for inst in (1, 3):
        prog = verified(AllPairsAllReduce(coll).lower(Shape(inst, "LL"),
                                                      MscclOptions(inplace=inplace)))
        assert prog.nchannels == inst and prog.nchunksperloop == 64 * inst
        for g in prog.gpus:
            assert len(g.tbs) == 8 * inst
            reducers = [tb for tb in g.tbs if any(st.type == "re" for st in tb.steps)]
            assert len(reducers) == 8 * inst  # every tb sums one sub-chunk
        # the peers' thread blocks carry the same bytes
        assert balance(prog, 1 << 20) == pytest.approx(1.0)


def test_staged_allpairs_matches_microsofts_pairs_plan_in_the_runtime_model():
    """Two instances give Microsoft's ``allreduce_pairs`` structure (2 channels, 16 tbs):
    the runtime model times them alike; four instances are faster."""
    from tacos.msccl.allpairs_program import AllPairsAllReduce
    from tacos.msccl.xml_reader import load_xml
    from tacos.runtime import estimate_program

    topo = node()
    ms = load_xml(Path(__file__).parent / "fixtures" / "msccl" / "executor_ndv4_ap2ll.xml")
    coll = patterns.build("allreduce", topo.live_npus, size=1 << 20, chunks_per_npu=1)
    fam = AllPairsAllReduce(coll)
    two = verified(fam.lower(Shape(2, "LL"), MscclOptions(inplace=True)))
    four = verified(fam.lower(Shape(4, "LL"), MscclOptions(inplace=True)))
    for n in (4096, 32768):
        theirs = estimate_program(ms, topo, n).time
        assert estimate_program(two, topo, n).time == pytest.approx(theirs, rel=0.01)
        assert estimate_program(four, topo, n).time < theirs


# ------------------------------------------------------------------------------------------
# limits and the chooser
# ------------------------------------------------------------------------------------------

def test_shape_problems_name_the_limit():
    topo = node()
    coll = patterns.build("allreduce", topo.live_npus, size=1 << 20, chunks_per_npu=1)
    prog = lower(allpairs_schedule(topo, coll), options=Shape(16).options(
        MscclOptions(inplace=True)))
    assert max(len(g.tbs) for g in prog.gpus) == 112
    problems = shape_problems(prog, RuntimeLimits(sms=108))
    assert problems and "112 thread blocks > 108 SMs" in problems[0]
    assert shape_problems(prog, RuntimeLimits(sms=132)) == []


def test_chooser_takes_the_fastest_fitting_shape_and_says_why():
    topo = node()
    coll = patterns.build("allreduce", topo.live_npus, size=1 << 20, chunks_per_npu=1)
    plans = {"allpairs": allpairs_schedule(topo, coll),
             "ring": synthesize(topo, coll, solver="nccl-ring")}
    cache = ShapeCache()
    cands = shapes(instances=(1, 4, 16))
    small = choose_shape(plans, topo, 4096, base=MscclOptions(inplace=True),
                         candidates=cands, estimator=toy_estimator, cache=cache)
    big = choose_shape(plans, topo, 1 << 30, base=MscclOptions(inplace=True),
                       candidates=cands, estimator=toy_estimator, cache=cache)
    for ch in (small, big):
        verified(ch.program)
        timed = [c for c in ch.considered if c.time is not None]
        fastest = min(c.time for c in timed)
        assert fastest <= ch.time <= (1 + NEAR) * fastest
        # within NEAR of the fastest, the fewest thread blocks win
        assert not any(c.time <= (1 + NEAR) * fastest and c.shape.instances < ch.shape.instances
                       for c in timed)
        assert ch.time == toy_estimator(ch.program, topo, ch.nbytes)
        # allpairs at 16 instances needs 112 tbs: rejected, with the reason
        assert any(c.plan == "allpairs" and c.shape.instances == 16 and c.time is None
                   and "SMs" in c.problems[0] for c in ch.considered)
        assert "why" in "\n".join(ch.lines())
    assert small.shape.proto == "LL" and big.shape.proto == "Simple"
    assert "LL" in small.lines()[0] and "channels" in small.lines()[0]


@pytest.mark.slow  # ~1 s; test_cli_shape checks a folder of windows as a set in the default run
def test_size_windows_are_a_verified_set(tmp_path):
    from tacos.sweep import sweep
    from tacos.sweep_shaped import choose_windows, window_table

    topo = node()
    res = sweep(topo, "allgather", "1KiB:16MiB:x16", trials=1, workers=1)
    choices = choose_windows(res, base=MscclOptions(inplace=True),
                             instances=(1, 4), estimator=toy_estimator)
    assert [c.nbytes for c in choices] == [r.size for r in res.rows]
    assert choices[0].shape.proto == "LL"
    text = window_table(res.rows, choices)
    assert "allpairs" in text or "forest" in text
    paths = write_windows(res, tmp_path / "plans", inplace=True, choices=choices)
    assert check_set(paths) == []
    spans = sorted((p.minBytes, p.maxBytes) for p in map(tacos_load_xml, paths))
    assert spans[0][0] == 0 and spans[-1][1] == 0  # from the smallest size to no limit
    for p in paths:
        assert tacos.verify(p).ok


def tacos_load_xml(path):
    from tacos.msccl.xml_reader import load_xml

    return load_xml(path)


# ------------------------------------------------------------------------------------------
# rules in the runtime model: LL below the crossover, channels grow with size
# ------------------------------------------------------------------------------------------

def _node_plans(topo, kind: str) -> dict:
    """The all-pairs plan and NCCL's ring for ``kind`` on ``topo``, the chooser's candidates."""
    coll = patterns.build(kind, topo.live_npus, size=1 << 20, chunks_per_npu=1)
    return {"allpairs": allpairs_schedule(topo, coll),
            "ring": synthesize(topo, coll, solver="nccl-ring")}


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["allreduce", "allgather"])
def test_runtime_model_picks_ll_small_and_more_channels_large(kind):
    """On an NVSwitch node the runtime model's best shape is LL for small messages and Simple
    (or LL128) above the crossover, and the channels (CTAs per connection) grow with the
    size."""
    topo = node()
    plans = _node_plans(topo, kind)
    cache = ShapeCache()
    base = MscclOptions(inplace=True)
    picks = {n: choose_shape(plans, topo, n, base=base, cache=cache)
             for n in (4 << 10, 1 << 30)}
    small, big = picks[4 << 10], picks[1 << 30]
    for ch in picks.values():
        verified(ch.program)
    assert small.shape.proto == "LL"
    assert big.shape.proto != "LL"
    assert big.program.nchannels > small.program.nchannels


@pytest.mark.slow  # 11 sizes
@pytest.mark.parametrize("kind", ["allreduce", "allgather"])
def test_runtime_model_ll_up_to_one_crossover(kind):
    """LL up to some size, then never again."""
    topo = node()
    plans = _node_plans(topo, kind)
    cache = ShapeCache()
    base = MscclOptions(inplace=True)
    sizes = [4 ** k for k in range(5, 16)]
    protos = [choose_shape(plans, topo, n, base=base, cache=cache).shape.proto for n in sizes]
    first = next(i for i, p in enumerate(protos) if p != "LL")
    assert 0 < first and "LL" not in protos[first:]


def test_a_plan_the_estimator_cannot_time_is_rejected_with_its_reason():
    from tacos.errors import TacosError

    topo = node()
    coll = patterns.build("allgather", topo.live_npus, size=1 << 20, chunks_per_npu=1)
    plans = {"allpairs": allpairs_schedule(topo, coll),
             "ring": synthesize(topo, coll, solver="nccl-ring")}

    def picky(program, topology, nbytes):
        if program.nchannels == 1 and max(len(g.tbs) for g in program.gpus) > 2:
            raise TacosError("no route for this connection")
        return toy_estimator(program, topology, nbytes)

    ch = choose_shape(plans, topo, 4096, base=MscclOptions(inplace=True),
                      candidates=shapes(instances=(1,)), estimator=picky)
    verified(ch.program)
    assert any(c.problems == ["no route for this connection"] for c in ch.considered)
    assert ch.plan == "ring"


# ------------------------------------------------------------------------------------------
# the chooser never loses to the fixed lowering, and its bounds are bounds
# ------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_the_fixed_lowering_is_a_candidate_and_never_beaten_by_a_slower_choice():
    """On a 4x4 mesh a tree plan lowered with paired peers is several times slower than with
    single peers; the choice still times the fixed lowering's shape (1 instance, Simple,
    single peers) and never returns anything slower (64 MiB, where LL is slower than
    Simple)."""
    from tacos.msccl.shape_choose import default_shape
    from tacos.runtime import estimate_program

    spec = tacos.load(Path(tacos.__file__).parent.parent / "examples" / "mesh4x4.tdl")
    topo = spec.topology
    coll = patterns.build("allreduce", topo.live_npus, size=64 << 20, chunks_per_npu=1)
    tree = synthesize(topo, coll, solver="nccl-tree")
    base = MscclOptions()
    ch = choose_shape({"tree": tree}, topo, 64 << 20, base=base)
    fixed = estimate_program(lower(tree, options=base), topo, 64 << 20).time
    assert ch.default == pytest.approx(fixed)
    assert ch.time <= fixed
    assert any(c.shape == default_shape(base) and c.time for c in ch.considered)
    assert ch.shape.proto != "LL"
    verified(ch.program)


@pytest.mark.parametrize("nbytes,proto", [  # Simple at 1 GiB: ~0.7 s, -m slow
    pytest.param(nbytes, proto, marks=pytest.mark.slow)
    if (nbytes, proto) == (1 << 30, "Simple") else (nbytes, proto)
    for nbytes in (4 << 10, 1 << 30) for proto in ("LL", "LL128", "Simple")])
def test_program_bounds_never_exceed_the_runtime_model_time(proto, nbytes):
    from dataclasses import replace

    from tacos.msccl.shape_bounds import program_bounds
    from tacos.runtime import estimate_program

    topo = node()
    coll = patterns.build("allreduce", topo.live_npus, size=nbytes, chunks_per_npu=1)
    for sched in (synthesize(topo, coll, solver="nccl-ring"), allpairs_schedule(topo, coll)):
        for inst in (1, 4):
            prog = replace(lower(sched, options=MscclOptions(instances=inst)), proto=proto)
            b = program_bounds(prog, topo, nbytes, proto)
            t = estimate_program(prog, topo, nbytes).time
            assert 0 < b.time <= t * (1 + 1e-9)
            assert max(b.link, b.cta) > 0


@pytest.mark.slow  # ~1.4 s: the whole portfolio shaped
def test_auto_ranks_plans_by_their_shaped_program_when_writing_xml():
    """``emit='shaped'``: every candidate's time is that of a runtime-shaped program (at least
    as fast as its fixed lowering), the winner is the fastest of them, and its shaped
    program, rebuilt by the chooser, has that time."""
    from tacos.runtime import estimate_program
    from tacos.solvers.auto import run_portfolio

    topo = node()
    coll = patterns.build("allreduce", topo.live_npus, size=64 << 20, chunks_per_npu=1)
    winner, sched, facts = run_portfolio(topo, coll, in_switch=False, emit="shaped",
                                         candidates=("greedy", "nccl"), keep_plans=True)
    times = facts["times"]
    assert facts["ranked_by"] == "runtime model (shaped MSCCL XML)"
    assert winner == min(times, key=times.__getitem__)
    assert "runtime-shaped" in facts["runtime"][winner]["of"]
    for label, t in times.items():
        fixed = estimate_program(lower(facts["plans"][label]), topo, 64 << 20).time
        assert t <= fixed * (1 + 1e-9)
    ch = choose_shape({winner: sched}, topo, 64 << 20)
    assert ch.time <= times[winner] * (1 + 1e-9)
    verified(ch.program)


@pytest.mark.slow
def test_sync_bound_prunes_without_changing_the_choice():
    """Each sending step pays a hop latency in its thread block, whatever the instance count:
    on the 4x4 mesh the all-pairs plan's long forwarding chains lose to that bound alone, so
    they are not lowered at every instance count, and the choice is the unpruned one."""
    from dataclasses import replace

    from tacos.msccl.shape_bounds import program_bounds
    from tacos.msccl.shape_choose import runtime_estimator
    from tacos.runtime import estimate_program

    topo = tacos.load(Path(tacos.__file__).parent.parent / "examples" / "mesh4x4.tdl").topology
    nbytes = 1 << 20
    group = list(range(16))
    coll = patterns.build("allreduce", group, size=nbytes, chunks_per_npu=1)
    plans = {"greedy": synthesize(topo, patterns.build("allreduce", group, size=nbytes),
                                  solver="greedy"),
             "allpairs": allpairs_schedule(topo, coll)}
    for proto in ("LL", "LL128", "Simple"):
        prog = replace(lower(plans["allpairs"], options=MscclOptions(instances=2)), proto=proto)
        b = program_bounds(prog, topo, nbytes, proto)
        assert 0 < b.base + b.sync <= estimate_program(prog, topo, nbytes).time * (1 + 1e-9)
    base = MscclOptions(inplace=True)
    cands = shapes(instances=(1, 2, 4), port_orders=(False,), paired=(True,))
    pruned = choose_shape(plans, topo, nbytes, base=base, cache=ShapeCache(), candidates=cands)
    assert any(c.problems and "synchronization bound" in c.problems[0]
               for c in pruned.considered)
    full = choose_shape(plans, topo, nbytes, base=base, cache=ShapeCache(), candidates=cands,
                        estimator=runtime_estimator(group))
    assert (pruned.plan, pruned.shape) == (full.plan, full.shape)
    assert pruned.time == pytest.approx(full.time, rel=1e-12)
    assert sum(c.time is not None for c in pruned.considered) < \
        sum(c.time is not None for c in full.considered)
    verified(pruned.program)


def test_shape_cache_bounds_its_programs_and_remembers_times():
    topo = node()
    coll = patterns.build("allreduce", topo.live_npus, size=1 << 20)
    sched = synthesize(topo, coll, solver="nccl-ring")
    base = MscclOptions(inplace=True)
    cache = ShapeCache(max_programs=2)
    cache.same_as(sched, Shape(1, "Simple", True, True), base)  # remembers the port order
    progs = [cache.program(sched, Shape(i, "Simple", False, True), base) for i in (1, 2, 4)]
    assert all(isinstance(p, Program) for p in progs)
    assert len(cache._programs) <= 2
    calls = []

    def estimate(program, topology, nbytes):
        calls.append(nbytes)
        return float(program.nchannels)

    group = topo.live_npus
    assert cache.time(progs[2], topo, group, 1 << 20, estimate) == 4.0
    assert cache.time(progs[2], topo, group, 1 << 20, estimate) == 4.0
    assert cache.time(progs[2], topo, group, 1 << 21, estimate) == 4.0
    assert calls == [1 << 20, 1 << 21]
    verified(progs[2])
