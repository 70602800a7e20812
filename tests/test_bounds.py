"""Lower bounds: Appendix A numbers (ForestColl cut bound, TACOS chunk-granular), validity."""

from __future__ import annotations

import math

import pytest

import tacos
from tacos.builders import mesh, torus
from tacos.check.bounds import (
    Bound,
    chunk_granular_bound,
    cut_bound,
    ingress_egress_bound,
    latency_bound,
    lower_bound,
    min_cut_ratio,
)
from tacos.check.simulate import simulate
from tacos.check.verify import verify_schedule
from tacos.model.patterns import build
from tacos.model.schedule import Schedule, Transfer
from tacos.model.topology import Link, Npu, Switch, Topology

GiB = 2**30
MiB = 2**20
GB = 1e9
US = 1e-6


def grid(dims: tuple[int, ...], wrap: bool, alpha: float = 0.5 * US,
         bw: float = 50 * GiB) -> Topology:
    """Mesh (wrap=False) or torus (wrap=True), one link each way between neighbours."""
    return (torus if wrap else mesh)(*dims, bandwidth=bw, latency=alpha)


def ag(topo: Topology, size: int, k: int = 1):
    return build("allgather", range(topo.n_npus), size=size, chunks_per_npu=k)


# -- Appendix A1: ForestColl's OptimalBranchingsAlgo numbers, 1 GiB all-gather -------------
@pytest.mark.parametrize("dims,wrap,expected_us", [
    ((4, 4), False, 9375.0),
    ((8, 8), True, 4921.9),
    ((8, 8), False, 9843.8),
])
def test_cut_bound_reproduces_forestcoll_a1(dims, wrap, expected_us):
    topo = grid(dims, wrap)
    assert cut_bound(topo, ag(topo, GiB)) / US == pytest.approx(expected_us, abs=0.05)


# -- Appendix A1b: bound = max(min-cut bandwidth bound, diameter x alpha) at 64 MiB ---------
@pytest.mark.parametrize("dims,wrap,expected_us", [
    ((4, 4), False, 585.9),
    ((8, 8), False, 615.2),
    ((8, 8), True, 307.6),
    ((4, 4, 4), True, 205.1),
])
def test_lower_bound_reproduces_a1b(dims, wrap, expected_us):
    topo = grid(dims, wrap)
    b = lower_bound(topo, ag(topo, 64 * MiB))
    assert isinstance(b, Bound)
    assert b.value / US == pytest.approx(expected_us, abs=0.05)
    assert b.kind == "cut"
    assert b.value == max(b.latency, b.bandwidth)


# -- TACOS C++ lands exactly on the chunk-granular bound (A1, A1b) --------------------------
@pytest.mark.parametrize("dims,wrap,size,k,tacos_us", [
    ((4, 4), False, GiB, 1, 10004),
    ((8, 8), False, GiB, 1, 10016),
    ((4, 4, 4), True, GiB, 1, 3443),
    ((4, 4), False, 64 * MiB, 1, 629.0),
    ((4, 4), False, 64 * MiB, 4, 600.9),
    ((8, 8), False, 64 * MiB, 1, 641.0),
])
def test_chunk_granular_bound_matches_tacos_results(dims, wrap, size, k, tacos_us):
    topo = grid(dims, wrap)
    assert chunk_granular_bound(topo, ag(topo, size, k)) / US == pytest.approx(tacos_us,
                                                                              abs=0.5)


def test_chunk_granular_formula_and_heterogeneous_none():
    topo = grid((3, 3), False, alpha=1 * US, bw=10 * GB)
    coll = ag(topo, 9 * 4 * 1000, k=4)  # 1000-byte chunks
    step = 1 * US + 1000 / (10 * GB)
    # corner in-degree 2: ceil(8*4/2) = 16 steps > diameter 4
    assert chunk_granular_bound(topo, coll) == pytest.approx(16 * step)
    slow = topo.with_links([Link(lk.src, lk.dst, lk.alpha, lk.bandwidth / (1 + (i == 0)))
                            for i, lk in enumerate(topo.links)])
    assert chunk_granular_bound(slow, coll) is None


# -- A2: ForestColl optimal all-gather algbw on its own topologies --------------------------
def a100_2x8() -> Topology:
    """2 nodes x 8 A100: NVSwitch (300 GB/s per GPU) and a 25 GB/s NIC per GPU on one of two
    IB switches (odd/even rails)."""
    npus = tuple(Npu(i, f"gpu{i}") for i in range(16))
    switches = (Switch(16, "nvs0"), Switch(17, "nvs1"), Switch(18, "ib_even"),
                Switch(19, "ib_odd"))
    links = []
    for g in range(16):
        nvs, ib = 16 + g // 8, 18 + g % 2
        links += [Link(g, nvs, 0, 300 * GB), Link(nvs, g, 0, 300 * GB),
                  Link(g, ib, 0, 25 * GB), Link(ib, g, 0, 25 * GB)]
    return Topology(npus, switches, tuple(links))


def mi250_16() -> Topology:
    """The MI250 preset (its xGMI matrix is checked in test_tdl_examples)."""
    return tacos.parse("use mi250\n").topology


def test_forestcoll_a100_2x8_algbw():
    topo = a100_2x8()
    coll = build("allgather", range(16), size=GiB)
    algbw = coll.size / cut_bound(topo, coll)
    assert algbw / GB == pytest.approx(346.67, abs=0.005)  # 16 * 325 / 15
    x, cut = min_cut_ratio(topo, range(16))
    assert len(set(range(16)) - cut) == 1  # binding cut: everything but one GPU
    # the per-GPU ingress bound agrees here; the whole-node cut alone would give 400 GB/s
    assert coll.size / ingress_egress_bound(topo, coll) / GB == pytest.approx(346.67, abs=0.005)


def test_forestcoll_mi250_algbw_needs_the_pair_cut():
    topo = mi250_16()
    coll = build("allgather", range(16), size=GiB)
    algbw = coll.size / cut_bound(topo, coll)
    assert algbw / GB == pytest.approx(342.86, abs=0.005)  # 16 * 300 / 14
    _, cut = min_cut_ratio(topo, range(16))
    assert set(range(16)) - cut == {0, 1}  # the GCD pair joined by 4 xGMI links
    # the per-GPU ingress bound misses it: 15 shards over 7 x 50 GB/s -> 16 * 350 / 15
    assert coll.size / ingress_egress_bound(topo, coll) / GB == pytest.approx(373.33, abs=0.005)


# -- combining collectives and others ------------------------------------------------------
def test_reducescatter_uses_reversed_topology():
    # NPU 0 receives over a fat link but sends over a thin one: all-gather is limited by
    # the other NPUs' ingress, reduce-scatter by NPU 0's egress.
    npus = tuple(Npu(i, f"n{i}") for i in range(3))
    links = (Link(1, 0, 0, 10 * GB), Link(2, 0, 0, 10 * GB), Link(0, 1, 0, 1 * GB),
             Link(1, 2, 0, 1 * GB), Link(2, 1, 0, 1 * GB))
    topo = Topology(npus, (), links)
    size = 3 * 10**6
    agb = cut_bound(topo, build("allgather", range(3), size=size))
    rsb = cut_bound(topo, build("reducescatter", range(3), size=size))
    assert rsb == pytest.approx(cut_bound(topo.reversed(),
                                          build("allgather", range(3), size=size)))
    # reduce-scatter: NPU 0's contributions to the chunks of 1 and 2 (2 x 1 MB) leave over 1 GB/s
    assert rsb == pytest.approx(2e6 / 1e9)
    # all-gather: NPU 2 must receive 2 MB but only NPU 1 feeds it (1 GB/s)
    assert agb == pytest.approx(2e6 / 1e9)
    ar = cut_bound(topo, build("allreduce", range(3), size=size))
    assert ar == pytest.approx(agb + rsb)  # composition bound


def test_broadcast_cut_is_buffer_over_maxflow():
    topo = grid((4,), True, alpha=0, bw=GB)  # bidirectional 4-ring
    coll = build("broadcast", range(4), size=8 * 10**6, root=0)
    assert cut_bound(topo, coll) == pytest.approx(8e6 / (2 * GB))
    # all-to-all: the bisection {0, 1} | {2, 3} carries 4 chunks of 1000 B over 2 links
    assert cut_bound(topo, build("alltoall", range(4), size=4000)) == pytest.approx(
        4000 / (2 * GB))


def test_latency_bound_takes_fastest_path_and_farthest_contribution():
    npus = tuple(Npu(i, f"n{i}") for i in range(4))
    # 0 -> 3 directly over a slow link, or 0 -> 1 -> 2 -> 3 over fast ones
    links = (Link(0, 3, 1 * US, 1e6), Link(0, 1, 1 * US, 1e9), Link(1, 2, 1 * US, 1e9),
             Link(2, 3, 1 * US, 1e9), Link(3, 0, 1 * US, 1e9))
    topo = Topology(npus, (), links)
    coll = build("broadcast", range(4), size=1000, root=0)
    hop = 1 * US + 1000 / 1e9
    assert latency_bound(topo, coll) == pytest.approx(3 * hop)  # 3 fast hops < 1 slow hop
    red = build("reduce", range(4), size=1000, root=0)
    # contributions reach 0 only through 3 -> 0: NPU 1 is 3 hops away (1->2->3->0)
    assert latency_bound(topo, red) == pytest.approx(3 * hop)


def test_unreachable_npu_gives_infinite_bound():
    npus = tuple(Npu(i, f"n{i}") for i in range(3))
    topo = Topology(npus, (), (Link(0, 1, 0, GB), Link(1, 0, 0, GB)))
    coll = build("allgather", range(3), size=3000)
    assert math.isinf(latency_bound(topo, coll))
    assert math.isinf(cut_bound(topo, coll))
    assert math.isinf(lower_bound(topo, coll).value)


def _ring(n: int, alpha: float, bw: float) -> Topology:
    return Topology(tuple(Npu(i, f"n{i}") for i in range(n)), (),
                    tuple(Link(i, (i + 1) % n, alpha, bw) for i in range(n)))


def _ring_allreduce(n: int, size: int) -> Schedule:
    topo = _ring(n, 1 * US, 10 * GB)
    coll = build("allreduce", range(n), size=size)
    step = topo.links[0].time(coll.chunks[0].size)
    ts = []
    for s in range(2 * (n - 1)):
        for i in range(n):
            c = (i - s - 1) % n if s < n - 1 else (i - s + n - 1) % n
            op = "reduce" if s < n - 1 else "copy"
            ts.append(Transfer(s * step, (s + 1) * step, i, (i + 1) % n, (i,), (c,), op))
    return Schedule(topo, coll, tuple(ts))


@pytest.mark.parametrize("n", [3, 4, 6])
@pytest.mark.parametrize("size", [6 * 1024, 6 * 2**26])
def test_bounds_hold_for_ring_allreduce_and_are_tight_when_large(n, size):
    s = _ring_allreduce(n, size)
    assert verify_schedule(s).ok
    t = simulate(s).time
    b = lower_bound(s.topology, s.collective)
    for part in b.parts.values():
        assert part is None or part <= t * (1 + 1e-12)
    if size > 2**30:
        assert t / b.value < 1.001  # ring all-reduce is bandwidth-optimal on a ring
        assert b.kind == "composition"


@pytest.mark.parametrize("make,group_algbw", [(lambda: grid((4, 4), False), None),
                                               (mi250_16, 342.86)])
def test_networkx_max_flow_fallback_agrees(make, group_algbw, monkeypatch):
    import tacos.check.bounds as b

    topo = make()
    fast = b.min_cut_ratio(topo, range(16))
    monkeypatch.setattr(b, "_has_ortools", lambda: False)
    slow = b.min_cut_ratio(topo, range(16))
    assert slow[0] == pytest.approx(fast[0], rel=1e-9)
    assert slow[1] == fast[1]
    if group_algbw is not None:
        assert 16 / slow[0] / GB == pytest.approx(group_algbw, abs=0.005)
