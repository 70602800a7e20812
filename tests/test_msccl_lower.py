"""Lowering Schedule -> MSCCL Program: layouts, fusion, scratch, tbs/channels, limits, errors.

Every lowered program is emitted, parsed back and verified with the independent MSCCL
verifier (emit -> parse -> verify), and every schedule goes through ``verify_schedule``.
"""

from __future__ import annotations

import copy
from collections import Counter
from pathlib import Path

import pytest

from tacos import builders
from tacos.check.verify import verify_schedule
from tacos.errors import TacosError
from tacos.model import patterns
from tacos.model.collective import combine
from tacos.model.schedule import Schedule, Transfer
from tacos.model.topology import Link, Npu, Topology
from tacos.msccl.lower import MscclOptions, lower
from tacos.msccl.verify import verify_program, verify_xml
from tacos.msccl.xml_reader import load_xml, parse_xml
from tacos.msccl.xml_writer import emit_xml
from tacos.synthesize import synthesize

FIXTURES = Path(__file__).parent / "fixtures" / "msccl"
BW, ALPHA = 1e9, 1e-6


# ------------------------------------------------------------------------------------------
# hand-built topologies and schedules
# ------------------------------------------------------------------------------------------

def topo(n: int, edges) -> Topology:
    links = tuple(Link(u, v, ALPHA, BW) for u, v in edges)
    return Topology(tuple(Npu(i, f"n{i}") for i in range(n)), (), links)


def uni_ring(n: int) -> Topology:
    return topo(n, [(i, (i + 1) % n) for i in range(n)])


def line(n: int) -> Topology:
    return topo(n, [(i, i + 1) for i in range(n - 1)] + [(i + 1, i) for i in range(n - 1)])


def full(n: int) -> Topology:
    return topo(n, [(i, j) for i in range(n) for j in range(n) if i != j])


def make(t: Topology, coll, hops) -> Schedule:
    """``hops`` = [(step, src, dst, chunks, op)]; each step lasts one α-β slot."""
    size = sum(coll.chunks[c].size for c in hops[0][3])
    d = ALPHA + 4 * size / BW
    ts = []
    for step, u, v, chunks, op in hops:
        ts.append(Transfer(step * d, step * d + ALPHA + sum(coll.chunks[c].size for c in chunks)
                           / BW, u, v, (t.link_index(u, v),), tuple(chunks), op))
    s = Schedule(t, coll, tuple(ts))
    rep = verify_schedule(s)
    assert rep.ok, rep.text()
    return s


def ring_allgather(n: int, k: int = 1) -> Schedule:
    coll = patterns.build("allgather", range(n), size=n * k * 1024, chunks_per_npu=k)
    hops = [(s, r, (r + 1) % n, tuple(((r - s) % n) * k + j for j in range(k)), "copy")
            for s in range(n - 1) for r in range(n)]
    return make(uni_ring(n), coll, hops)


def ring_allgather_pipelined(n: int, k: int) -> Schedule:
    """One chunk per transfer: many more steps per tb."""
    coll = patterns.build("allgather", range(n), size=n * k * 1024, chunks_per_npu=k)
    hops = [(s * k + j, r, (r + 1) % n, (((r - s) % n) * k + j,), "copy")
            for s in range(n - 1) for j in range(k) for r in range(n)]
    return make(uni_ring(n), coll, hops)


def ring_allreduce(n: int) -> Schedule:
    coll = patterns.build("allreduce", range(n), size=n * 1024)
    hops = [(s, r, (r + 1) % n, ((r - s) % n,), "reduce") for s in range(n - 1) for r in range(n)]
    hops += [(n - 1 + s, r, (r + 1) % n, ((r + 1 - s) % n,), "copy")
             for s in range(n - 1) for r in range(n)]
    return make(uni_ring(n), coll, hops)


def ring_reducescatter(n: int) -> Schedule:
    coll = patterns.build("reducescatter", range(n), size=n * 1024)
    hops = [(s, r, (r + 1) % n, ((r - s - 1) % n,), "reduce")
            for s in range(n - 1) for r in range(n)]
    return make(uni_ring(n), coll, hops)


def line_broadcast(n: int) -> Schedule:
    coll = patterns.build("broadcast", range(n), size=1024, root=0)
    return make(line(n), coll, [(s, s, s + 1, (0,), "copy") for s in range(n - 1)])


def line_reduce(n: int) -> Schedule:
    coll = patterns.build("reduce", range(n), size=1024, root=0)
    return make(line(n), coll, [(s, n - 1 - s, n - 2 - s, (0,), "reduce") for s in range(n - 1)])


def direct_alltoall(n: int) -> Schedule:
    coll = patterns.build("alltoall", range(n), size=n * 1024)
    hops = [(0, u, v, (u * n + v,), "copy") for u in range(n) for v in range(n) if u != v]
    return make(full(n), coll, hops)


def relay_alltoall() -> Schedule:
    """3-NPU line: the chunks 0->2 and 2->0 pass through rank 1 (scratch)."""
    coll = patterns.build("alltoall", range(3), size=3 * 1024)
    hops = [(0, 0, 1, (1,), "copy"), (1, 0, 1, (2,), "copy"), (2, 1, 2, (2,), "copy"),
            (0, 1, 0, (3,), "copy"), (0, 1, 2, (5,), "copy"), (0, 2, 1, (7,), "copy"),
            (1, 2, 1, (6,), "copy"), (2, 1, 0, (6,), "copy")]
    return make(line(3), coll, hops)


def check(schedule: Schedule, options: MscclOptions | None = None):
    """Lower, emit, parse back and verify; returns the program."""
    opts = options or MscclOptions()
    assert verify_schedule(schedule).ok
    program = lower(schedule, options=opts)
    text = emit_xml(program)
    assert parse_xml(text) == program
    rep = verify_xml(text, strict=True, max_steps=opts.max_steps_per_tb)
    assert rep.ok, rep.text()
    return program


def steps_of(program, rank=None):
    return [st for g in program.gpus if rank is None or g.id == rank
            for tb in g.tbs for st in tb.steps]


# ------------------------------------------------------------------------------------------
# agreement with msccl-tools output for the same algorithm
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("schedule, fixture", [
    (ring_allgather(4), "mscclang_allgather_ring_4gpu_1ch.xml"),
    (ring_allreduce(4), "mscclang_allreduce_ring_4gpu.xml"),
])
def test_ring_matches_msccl_tools_program(schedule, fixture):
    ref = load_xml(FIXTURES / fixture)
    program = check(schedule, MscclOptions(inplace=True))
    assert program.gpus == ref.gpus
    assert (program.nchannels, program.nchunksperloop, program.coll, program.inplace) == \
        (ref.nchannels, ref.nchunksperloop, ref.coll, ref.inplace)
    assert (program.outofplace, program.minBytes, program.maxBytes) == (0, 0, 0)


def test_allreduce_ring_uses_rrs_then_rrcs_then_rcs():
    program = check(ring_allreduce(5), MscclOptions(inplace=True))
    for g in program.gpus:
        (tb,) = g.tbs
        assert [st.type for st in tb.steps] == ["s", "rrs", "rrs", "rrs", "rrcs", "rcs", "rcs",
                                                "rcs", "r"]
        assert g.s_chunks == 0


# ------------------------------------------------------------------------------------------
# layouts: in-place vs out-of-place, geometry per collective
# ------------------------------------------------------------------------------------------

def test_out_of_place_allgather_copies_local_share():
    program = check(ring_allgather(4))
    assert (program.inplace, program.outofplace) == (0, 1)
    for g in program.gpus:
        assert (g.i_chunks, g.o_chunks, g.s_chunks) == (1, 4, 0)
        cpys = [st for st in steps_of(program, g.id) if st.type == "cpy"]
        assert [(c.srcbuf, c.srcoff, c.dstbuf, c.dstoff) for c in cpys] == [("i", 0, "o", g.id)]
        # the own chunk leaves from the input buffer, not from the copy
        first_send = next(st for st in steps_of(program, g.id) if st.type == "s")
        assert (first_send.srcbuf, first_send.srcoff) == ("i", 0)


@pytest.mark.parametrize("make_schedule, coll, geometry_oop, geometry_ip, live", [
    (lambda: ring_allgather(4, 2), "allgather", (2, 8), (0, 8), "o"),
    (lambda: ring_reducescatter(4), "reducescatter", (4, 1), (4, 0), "i"),
    (lambda: ring_allreduce(4), "allreduce", (4, 4), (4, 0), "i"),
    (lambda: direct_alltoall(4), "alltoall", (4, 4), (4, 0), "i"),
    (lambda: line_broadcast(4), "broadcast", (1, 1), (1, 0), "i"),
    (lambda: line_reduce(4), "reduce", (1, 1), (1, 0), "i"),
])
def test_layout_geometry_and_aliasing(make_schedule, coll, geometry_oop, geometry_ip, live):
    s = make_schedule()
    oop = check(s)
    ip = check(s, MscclOptions(inplace=True))
    assert oop.coll == ip.coll == coll
    assert {(g.i_chunks, g.o_chunks) for g in oop.gpus} == {geometry_oop}
    assert {(g.i_chunks, g.o_chunks) for g in ip.gpus} == {geometry_ip}
    used = {b for st in steps_of(ip) if not st.is_nop for b in (st.srcbuf, st.dstbuf)}
    assert used <= {live, "s"}
    assert (ip.inplace, ip.outofplace, oop.inplace, oop.outofplace) == (1, 0, 0, 1)


def test_reducescatter_out_of_place_never_writes_input():
    program = check(ring_reducescatter(4))
    for st in steps_of(program):
        assert all(buf != "i" for buf, _, _ in st.writes())


def test_relay_uses_scratch_only_on_the_relay():
    program = check(relay_alltoall())
    assert [g.s_chunks for g in program.gpus] == [0, 2, 0]
    relayed = sorted((st.type, st.dstbuf, st.dstoff) for st in steps_of(program, 1)
                     if st.receives and st.dstbuf == "s")
    assert relayed == [("rcs", "s", 0), ("rcs", "s", 1)]  # received and forwarded at once
    for r in (0, 2):
        assert all(buf != "s" for st in steps_of(program, r) for buf, _, _ in st.writes())


def test_broadcast_line_forwards_with_rcs_and_reduce_line_with_rrs():
    b = check(line_broadcast(4), MscclOptions(inplace=True))
    assert [[st.type for st in steps_of(b, r)] for r in range(4)] == \
        [["s"], ["rcs"], ["rcs"], ["r"]]
    r = check(line_reduce(4))
    assert [[st.type for st in steps_of(r, k)] for k in range(4)] == \
        [["rrc"], ["rrs"], ["rrs"], ["s"]]
    assert [g.s_chunks for g in r.gpus] == [0, 0, 0, 0]  # rrs stores nothing
    (root_step,) = steps_of(r, 0)
    assert (root_step.srcbuf, root_step.dstbuf) == ("i", "o")


def test_direct_alltoall_has_one_tb_per_direction_and_peer():
    program = check(direct_alltoall(4))
    for g in program.gpus:
        peers = Counter((tb.send, tb.recv) for tb in g.tbs)
        assert sorted(p for p in peers if p[0] >= 0) == [(p, -1) for p in range(4) if p != g.id]
        assert sorted(p for p in peers if p[1] >= 0) == [(-1, p) for p in range(4) if p != g.id]


def test_inplace_alltoall_stages_busy_slots_in_scratch():
    # rank 1's chunk lands on rank 0 in slot 1 while rank 0's own chunk for rank 1, which
    # occupies that slot in-place, has not left yet: rank 0 stages it and copies it later
    coll = patterns.build("alltoall", range(2), size=2 * 1024)
    s = make(line(2), coll, [(0, 1, 0, (2,), "copy"), (1, 0, 1, (1,), "copy")])
    program = check(s, MscclOptions(inplace=True))
    assert [g.s_chunks for g in program.gpus] == [1, 0]
    cpys = [(st.srcbuf, st.srcoff, st.dstbuf, st.dstoff) for st in steps_of(program, 0)
            if st.type == "cpy"]
    assert cpys == [("s", 0, "i", 1)]
    assert not any(st.type == "cpy" for st in steps_of(program, 1))
    # out-of-place needs no staging at all
    assert [g.s_chunks for g in check(s).gpus] == [0, 0]


def test_contiguous_chunks_travel_as_one_step():
    # every rank sends its 3 chunks before receiving: one Simple call each fits the FIFO's 8
    # slots only while 3 chunks share a call (1 MiB window); at any size 3 calls of 4 slots
    # would hang on every rank, so a window without a top splits the run into steps of at
    # most 2 chunks (2 calls of 4 slots), which runs at every size
    program = check(ring_allgather(4, 3), MscclOptions(inplace=True, max_bytes=1 << 20))
    assert {st.cnt for st in steps_of(program)} == {3}
    capped = lower(ring_allgather(4, 3), options=MscclOptions(inplace=True))
    assert {st.cnt for st in steps_of(capped) if st.type != "nop"} <= {1, 2}
    assert verify_xml(emit_xml(capped)).ok
    merged = lower(ring_allgather(4, 3), options=MscclOptions(inplace=True, fit_fifo=False))
    unbounded = verify_xml(emit_xml(merged))  # the merged run, judged at any size, hangs
    assert not unbounded.ok
    assert {v.rule for v in unbounded.violations} == {"deadlock"}
    assert all("free FIFO slot" in v.message for v in unbounded.violations)
    # chunks 0 and 2 of a rank are not adjacent in the buffer: two steps per transfer
    coll = patterns.build("allgather", range(2), size=2 * 3 * 1024, chunks_per_npu=3)
    s = make(uni_ring(2), coll, [(0, 0, 1, (0, 2), "copy"), (1, 0, 1, (1,), "copy"),
                                 (0, 1, 0, (3, 4, 5), "copy")])
    p = check(s, MscclOptions(inplace=True, max_bytes=1 << 20))  # 3 chunks fit one call
    assert sorted(st.cnt for st in steps_of(p, 0) if st.sends) == [1, 1, 1]
    assert [st.cnt for st in steps_of(p, 1) if st.sends] == [3]


# ------------------------------------------------------------------------------------------
# threadblocks, channels, step limit, instances
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("limit", [4, 6, 11])
def test_step_limit_spreads_work_over_channels(limit):
    s = ring_allgather_pipelined(4, 6)
    wide = check(s)
    assert wide.nchannels == 1 and max(len(tb.steps) for g in wide.gpus for tb in g.tbs) > limit
    narrow = check(s, MscclOptions(max_steps_per_tb=limit))
    assert max(len(tb.steps) for g in narrow.gpus for tb in g.tbs) <= limit
    assert narrow.nchannels > 1
    assert Counter(st.type for st in steps_of(narrow) if not st.is_nop)["s"] + \
        Counter(st.type for st in steps_of(narrow))["rcs"] >= 4 * 3 * 6 // 2
    assert verify_xml(emit_xml(narrow), max_steps=limit).ok


def test_step_limit_that_cannot_be_met_is_a_clear_error():
    with pytest.raises(TacosError, match="channels|step"):
        lower(ring_allgather_pipelined(6, 12), options=MscclOptions(max_steps_per_tb=2,
                                                                    max_channels=2))


def test_connection_ownership_and_tb_numbering():
    program = check(synthesize(builders.mesh(2, 3, bandwidth=BW, latency=ALPHA),
                               patterns.build("allreduce", range(6), size=6 * 4096,
                                              chunks_per_npu=2), seed=0, solver="greedy"))
    for g in program.gpus:
        assert [tb.id for tb in g.tbs] == list(range(len(g.tbs)))
        owners = Counter((tb.chan, d, p) for tb in g.tbs
                         for d, p in (("s", tb.send), ("r", tb.recv)) if p >= 0)
        assert max(owners.values()) == 1


def test_instances_split_chunks_over_channels():
    one = check(ring_allgather(4), MscclOptions(inplace=True))
    two = check(ring_allgather(4), MscclOptions(inplace=True, instances=2))
    assert two.nchunksperloop == 2 * one.nchunksperloop
    assert two.nchannels == 2 * one.nchannels
    assert two.num_tbs == 2 * one.num_tbs


# ------------------------------------------------------------------------------------------
# synthesized schedules on several topologies
# ------------------------------------------------------------------------------------------

TOPOLOGIES = {
    "ring5": lambda: builders.ring(5, bandwidth=BW, latency=ALPHA),
    "mesh2x2": lambda: builders.mesh(2, 2, bandwidth=BW, latency=ALPHA),
    "switch4": lambda: builders.star(4, bandwidth=BW, latency=ALPHA),
}
KINDS = ["allgather", "reducescatter", "allreduce", "alltoall", "broadcast", "reduce"]


@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("tname", sorted(TOPOLOGIES))
def test_synthesized_schedules_lower_and_verify(tname, kind, inplace):
    t = TOPOLOGIES[tname]()
    n = t.n_npus
    coll = patterns.build(kind, range(n), size=n * n * 2 * 4096, chunks_per_npu=2,
                          root=1 if kind in ("broadcast", "reduce") else None)
    s = synthesize(t, coll, seed=0, solver="greedy")
    program = check(s, MscclOptions(inplace=inplace))
    assert program.ngpus == n and program.coll == kind


# ------------------------------------------------------------------------------------------
# input, determinism, errors
# ------------------------------------------------------------------------------------------

def test_lowering_is_deterministic_and_leaves_input_alone():
    s = synthesize(builders.ring(4, bandwidth=BW, latency=ALPHA),
                   patterns.build("allreduce", range(4), size=4 * 4096), seed=3, solver="greedy")
    before = copy.deepcopy(s)
    a = lower(s)
    b = lower(s, options=MscclOptions())
    assert a == b and emit_xml(a) == emit_xml(b)
    assert s == before and s.meta == before.meta


@pytest.mark.parametrize("kind", ["scatter", "gather"])
def test_collectives_msccl_cannot_express(kind):
    t = builders.ring(4, bandwidth=BW, latency=ALPHA)
    s = synthesize(t, patterns.build(kind, range(4), size=4096, root=0), seed=0, solver="greedy")
    with pytest.raises(TacosError, match=f"cannot express the collective '{kind}'") as exc:
        lower(s)
    assert "JSON" in exc.value.hint


def test_custom_and_multi_tenant_are_refused():
    t = builders.ring(4, bandwidth=BW, latency=ALPHA)
    custom = patterns.custom([([0], [1, 2], False, 1024)])
    with pytest.raises(TacosError, match="custom"):
        lower(Schedule(t, custom, ()))
    multi = combine([patterns.build("allgather", range(4), size=4096),
                     patterns.build("broadcast", range(4), size=4096, root=0)])
    with pytest.raises(TacosError, match="multi-tenant"):
        lower(Schedule(t, multi, ()))


def test_transfer_through_npu_outside_the_group_is_refused():
    coll = patterns.build("broadcast", [0, 2], size=1024, root=0)
    s = make(line(3), coll, [(0, 0, 1, (0,), "copy"), (1, 1, 2, (0,), "copy")])
    with pytest.raises(TacosError, match="NPU 1, which is not a rank"):
        lower(s)


def test_group_order_defines_ranks():
    # the group (2, 0, 1): NPU 2 is rank 0, so its chunk goes to output slot 0
    coll = patterns.build("allgather", [2, 0, 1], size=3 * 1024)
    hops = [(0, 2, 0, (0,), "copy"), (1, 0, 1, (0,), "copy"), (0, 0, 1, (1,), "copy"),
            (1, 1, 2, (1,), "copy"), (0, 1, 2, (2,), "copy"), (1, 2, 0, (2,), "copy")]
    program = check(make(uni_ring(3), coll, hops))
    rank0 = program.gpu(0)  # NPU 2
    assert {tb.send for tb in rank0.tbs if tb.send >= 0} == {1}  # sends to NPU 0 = rank 1


@pytest.mark.parametrize("opts, match", [
    (dict(inplace=True, outofplace=True), "in-place or out-of-place"),
    (dict(inplace=False, outofplace=False), "in-place or out-of-place"),
    (dict(proto="LL64"), "protocol"),
    (dict(max_bytes=10, min_bytes=20), "max_bytes"),
    (dict(instances=0), "instances"),
    (dict(max_channels=33), "max_channels"),
    (dict(name='a"b'), "name"),
    (dict(redop="avg"), "reduction operator"),
])
def test_bad_options(opts, match):
    with pytest.raises(TacosError, match=match):
        lower(ring_allgather(3), options=MscclOptions(**opts))


def test_options_reach_the_header():
    p = check(ring_allreduce(3), MscclOptions(name="ar3", proto="LL128", min_bytes=1024,
                                              max_bytes=1 << 20))
    assert (p.name, p.proto, p.minBytes, p.maxBytes, p.redop) == \
        ("ar3", "LL128", 1024, 1 << 20, "sum")
    assert lower(ring_allgather(3)).redop is None
    assert verify_program(p).ok
