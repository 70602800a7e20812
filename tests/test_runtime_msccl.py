"""Executor semantics of the runtime model on programs small enough to time by hand."""

from __future__ import annotations

import math

import pytest

from tacos.msccl.program import Gpu, Program, Step, Threadblock
from tacos.msccl.verify import verify_program
from tacos.runtime import estimate_program, hardware
from tacos.topology import Link, Npu, Topology

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
