"""Executor semantics of the runtime model on programs small enough to time by hand."""

from __future__ import annotations

import math

import pytest

from tacos.model.topology import Link, Npu, Topology
from tacos.msccl.program import Gpu, Program, Step, Threadblock
from tacos.msccl.verify import verify_program
from tacos.runtime import estimate_program, hardware

A100 = hardware("a100")
MIB = 1 << 20


def _pair(bandwidth: float) -> Topology:
    """Two GPUs joined by one NVLink-class link each way (``bandwidth`` B/s line rate)."""
    npus = (Npu(0, "g0"), Npu(1, "g1"))
    links = (Link(0, 1, 1e-6, bandwidth, tag="nvlink"), Link(1, 0, 1e-6, bandwidth, tag="nvlink"))
    return Topology(npus, (), links, "pair")


def _send_program(proto: str, tbs: int) -> Program:
    """Broadcast from rank 0: it sends chunk k to rank 1 on channel k with its own tb,
    k < ``tbs``, and copies its input to its output with one more tb."""
    send = tuple(Threadblock(k, 1, -1, k, (Step(0, "s", "i", k, "o", k, 1),))
                 for k in range(tbs))
    local = Threadblock(tbs, -1, -1, 0, tuple(Step(k, "cpy", "i", k, "o", k, 1)
                                             for k in range(tbs)))
    send = send + (local,)  # the root's own output: a local copy, beside the sends
    recv = tuple(Threadblock(k, -1, 0, k, (Step(0, "r", "i", k, "o", k, 1),))
                 for k in range(tbs))
    return Program("t", proto, tbs, tbs, 2, "broadcast", 0, 1, 0, 0,
                   (Gpu(0, tbs, tbs, 0, send), Gpu(1, tbs, tbs, 0, recv)))


def test_programs_are_valid():
    for proto in ("Simple", "LL"):
        for tbs in (1, 2):
            assert verify_program(_send_program(proto, tbs)).ok


def test_one_cta_one_slice():
    """1 MiB in one Simple call: base + one hop latency + bytes at the CTA's rate."""
    topo = _pair(100e9)  # 76.7 GB/s effective: the CTA (10 GB/s) is the limit
    est = estimate_program(_send_program("Simple", 1), topo, MIB, hardware="a100")
    expect = A100.base_latency("Simple") + A100.hop_latency("Simple", "nvlink3") + \
        MIB / A100.cta_rate["Simple"]
    assert est.time == pytest.approx(expect, rel=1e-9)
    assert est.bound.startswith("cta")
    assert est.model == "msccl-executor/a100"


def test_two_ctas_share_a_port():
    """Two CTAs crossing one port each get half its effective rate when that is below their
    own rate."""
    line = 8e9 / A100.link_efficiency["nvlink3"]  # 8 GB/s effective < 2 x 10 GB/s
    topo = _pair(line)
    est = estimate_program(_send_program("Simple", 2), topo, 2 * MIB, hardware="a100")
    share = 8e9 / 2
    expect = A100.base_latency("Simple") + A100.hop_latency("Simple", "nvlink3") + MIB / share
    assert est.time == pytest.approx(expect, rel=1e-9)
    assert est.bound.startswith("link")
    one = estimate_program(_send_program("Simple", 1), topo, MIB, hardware="a100")
    assert one.time < est.time  # alone, the CTA runs at its own 10 GB/s


def test_ll_vs_simple_on_one_hop():
    """LL wins small messages (lower latency), Simple large ones (full payload, no flags)."""
    topo = _pair(100e9)
    for nbytes in (1024, 64 * MIB):
        got = {p: estimate_program(_send_program(p, 1), topo, nbytes, hardware="a100")
               for p in ("LL", "Simple")}
        for p, est in got.items():
            per_call = A100.chunk_payload(p)
            iters = math.ceil(nbytes / per_call)
            first = min(nbytes, per_call)
            rate = min(A100.cta_rate[p], 100e9 * A100.link_efficiency["nvlink3"]
                       * A100.payload(p))
            hop = A100.hop_latency(p, "nvlink3")
            one = hop + first / rate
            steady = hop + per_call / rate
            last = nbytes - per_call * (iters - 1)
            expect = A100.base_latency(p) + one
            if iters > 1:
                expect += steady * (iters - 2) + hop + last / rate
            assert est.time == pytest.approx(expect, rel=1e-9), p
        if nbytes == 1024:
            assert got["LL"].time < got["Simple"].time
        else:
            assert got["Simple"].time < got["LL"].time


def test_iterations_pipeline_on_the_busiest_resource():
    """A 3-call message: the first iteration timed event by event, two more at the pace of the
    busiest CTA."""
    topo = _pair(100e9)
    per_call = A100.chunk_payload("Simple")
    est = estimate_program(_send_program("Simple", 1), topo, 3 * int(per_call),
                           hardware="a100")
    assert est.detail["iterations"] == 3
    step = A100.hop_latency("Simple", "nvlink3") + per_call / A100.cta_rate["Simple"]
    assert est.time == pytest.approx(A100.base_latency("Simple") + 3 * step, rel=1e-9)


def test_to_json_has_the_contract_keys():
    est = estimate_program(_send_program("LL", 1), _pair(100e9), 4096, hardware="a100")
    assert set(est.to_json()) == {"time", "algbw", "busbw", "model", "bound"}
    assert est.algbw == pytest.approx(4096 / est.time)


def test_mscclpp_ring_plan_is_cta_bound_and_scales_linearly():
    """Microsoft's 4-GPU ring all-gather plan runs one CTA per GPU: at large sizes its time
    grows with the bytes one CTA moves (3 of 4 chunks at the per-CTA rate)."""
    from pathlib import Path

    from tacos.msccl.mscclpp_reader import load_plan
    from tacos.msccl.verify_mscclpp import verify_mscclpp_file
    from tacos.runtime import estimate_mscclpp

    path = Path(__file__).parent / "fixtures" / "msccl" / "mscclpp_ring_allgather_4.json"
    assert verify_mscclpp_file(path).ok
    plan, problems = load_plan(path)
    assert not problems
    topo = Topology(tuple(Npu(i, f"g{i}") for i in range(4)), (),
                    tuple(Link(i, j, 1e-6, 100e9, tag="nvlink")
                          for i in range(4) for j in range(4) if i != j), "quad")
    small = estimate_mscclpp(plan, topo, 1 << 28, hardware="a100")
    big = estimate_mscclpp(plan, topo, 1 << 30, hardware="a100")
    chunk = (1 << 30) / 4
    assert big.bound.startswith("cta")
    assert big.time - small.time == pytest.approx(3 * (chunk - chunk / 4)
                                                  / A100.cta_rate["Simple"], rel=1e-6)


def test_tdl_hardware_statement_and_presets():
    import tacos
    from tacos.errors import TacosError
    from tacos.runtime import hardware_for

    text = 'topology "box"\nhardware "H100"\nnpu a[2]\nlink a[0] <-> a[1] 10GB/s 1us'
    assert hardware_for(tacos.parse(text).topology).name == "h100"
    unnamed = 'topology "box"\nnpu a[2]\nlink a[0] <-> a[1] 10GB/s 1us'
    assert hardware_for(tacos.parse(unnamed).topology).name == "generic"
    with pytest.raises(TacosError, match="known generations"):
        tacos.parse('topology "box"\nhardware "b200"\nnpu a[2]')
    outer = 'topology "two"\nhardware "a100"\nuse dgx_h100_node'
    assert tacos.parse(outer).topology.hardware == "a100"  # the outermost statement wins
    from tacos.frontends.tdl_includes import preset_folder

    for preset, gen in (("dgx_a100", "a100"), ("dgx_h100", "h100"), ("ndv2", "v100"),
                        ("mi250", "mi250")):
        topo = tacos.load(preset_folder() / f"{preset}.tdl").topology
        assert hardware_for(topo).name == gen


def test_a_relay_forwards_while_it_receives():
    """0 -> 1 -> 2 with ``rcs`` on rank 1: cut-through, one hop latency per hop, the bytes
    once (not store-and-forward's twice)."""
    npus = tuple(Npu(i, f"g{i}") for i in range(3))
    links = tuple(Link(a, b, 1e-6, 100e9, tag="nvlink") for a, b in ((0, 1), (1, 0), (1, 2),
                                                                      (2, 1)))
    topo = Topology(npus, (), links, "chain")
    r0 = (Threadblock(0, 1, -1, 0, (Step(0, "s", "i", 0, "o", 0, 1),)),
          Threadblock(1, -1, -1, 0, (Step(0, "cpy", "i", 0, "o", 0, 1),)))
    r1 = (Threadblock(0, 2, 0, 0, (Step(0, "rcs", "i", 0, "o", 0, 1),)),)
    r2 = (Threadblock(0, -1, 1, 0, (Step(0, "r", "i", 0, "o", 0, 1),)),)
    prog = Program("chain", "Simple", 1, 1, 3, "broadcast", 0, 1, 0, 0,
                   (Gpu(0, 1, 1, 0, r0), Gpu(1, 1, 1, 0, r1), Gpu(2, 1, 1, 0, r2)))
    assert verify_program(prog).ok
    est = estimate_program(prog, topo, MIB, hardware="a100")
    hop = A100.hop_latency("Simple", "nvlink3")
    expect = A100.base_latency("Simple") + 2 * hop + MIB / A100.cta_rate["Simple"]
    assert est.time == pytest.approx(expect, rel=1e-9)
