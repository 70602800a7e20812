"""Simulator: textbook ring times, retiming of gaps and of link overlaps, utilization."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tacos.check.simulate import busbw_factor, simulate
from tacos.check.verify import verify_schedule
from tacos.model.patterns import build, custom
from tacos.model.schedule import Schedule, Transfer
from tacos.model.topology import Link, Npu, Topology

ALPHA = 2e-6
BW = 10e9
SIZE = 3 * 2**20


def ring(n: int, multiplicity: int = 1) -> Topology:
    links = tuple(Link(i, (i + 1) % n, ALPHA, BW, multiplicity) for i in range(n))
    return Topology(tuple(Npu(i, f"n{i}") for i in range(n)), (), links)


def ring_allreduce(n: int, gap: float = 1.0) -> Schedule:
    """Ring all-reduce (reduce-scatter then all-gather); ``gap`` stretches every step."""
    topo = ring(n)
    coll = build("allreduce", range(n), size=SIZE)
    step = topo.links[0].time(coll.chunks[0].size)
    ts = []
    for s in range(2 * (n - 1)):
        t0 = s * step * gap
        for i in range(n):
            if s < n - 1:
                ts.append(Transfer(t0, t0 + step, i, (i + 1) % n, (i,), ((i - s - 1) % n,),
                                   "reduce"))
            else:
                ts.append(Transfer(t0, t0 + step, i, (i + 1) % n, (i,), ((i - s + n - 1) % n,)))
    return Schedule(topo, coll, tuple(ts))


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_ring_allreduce_textbook_time(n):
    s = ring_allreduce(n, gap=1.7)
    assert verify_schedule(s).ok
    res = simulate(s)
    step = ALPHA + (SIZE / n) / BW  # α + M/N/B
    assert res.time == pytest.approx(2 * (n - 1) * step, rel=1e-12)
    assert res.original_time > res.time
    assert verify_schedule(res.schedule).ok, verify_schedule(res.schedule).text()
    assert res.algbw == pytest.approx(SIZE / res.time)
    assert res.busbw == pytest.approx(res.algbw * 2 * (n - 1) / n)
    # every ring link is busy whenever the collective runs
    assert all(u == pytest.approx(1.0) for u in res.link_utilization)


def test_retime_false_measures_as_is():
    s = ring_allreduce(4, gap=2.0)
    res = simulate(s, retime=False)
    assert res.schedule is s
    assert res.time == s.makespan
    step = s.transfers[0].end - s.transfers[0].start
    busy = 2 * 3 * step  # 2(n-1) steps on every link
    assert all(u == pytest.approx(busy / s.makespan) for u in res.link_utilization)
    assert res.time > simulate(s).time


def _line_two_chunks(multiplicity: int) -> Schedule:
    """0 -> 1 -> 2, two chunks from 0 sent together, congestion-obliviously."""
    npus = tuple(Npu(i, f"n{i}") for i in range(3))
    topo = Topology(npus, (), (Link(0, 1, ALPHA, BW, multiplicity), Link(1, 2, ALPHA, BW,
                                                                          multiplicity)))
    coll = custom([({0}, {1, 2}, False, 4096), ({0}, {1, 2}, False, 4096)])
    d = topo.links[0].time(4096)
    ts = (
        Transfer(0, d, 0, 1, (0,), (0,)), Transfer(0, d, 0, 1, (0,), (1,)),
        Transfer(d, 2 * d, 1, 2, (1,), (0,)), Transfer(d, 2 * d, 1, 2, (1,), (1,)),
    )
    return Schedule(topo, coll, ts)


def test_overlapping_transfers_are_serialized():
    s = _line_two_chunks(1)
    assert "overlap" in verify_schedule(s).rules()
    res = simulate(s)
    assert verify_schedule(res.schedule).ok, verify_schedule(res.schedule).text()
    d = s.topology.links[0].time(4096)
    starts = [t.start for t in res.schedule.transfers]
    assert starts == pytest.approx([0, d, d, 2 * d])  # original order kept per link
    assert res.time == pytest.approx(3 * d)


def test_multiplicity_keeps_parallel_transfers():
    s = _line_two_chunks(2)
    assert verify_schedule(s).ok
    res = simulate(s)
    assert res.time == pytest.approx(s.makespan)
    assert verify_schedule(res.schedule).ok
    assert res.link_utilization[0] == pytest.approx(0.5)


def test_reduction_read_before_later_write_keeps_order():
    """NPU 2 sends its own contribution, is overwritten by NPU 1's, then sends again.

    Replaying the overwrite early would make the first send carry NPU 1's contribution.
    """
    npus = tuple(Npu(i, f"n{i}") for i in range(4))
    links = (Link(2, 3, ALPHA, BW), Link(1, 2, ALPHA, BW), Link(0, 3, ALPHA, BW))
    topo = Topology(npus, (), links)
    coll = custom([({0, 1, 2}, {3}, True, 4096), ({2}, {3}, False, 4096)])
    d = links[0].time(4096)
    ts = (
        Transfer(0, d, 2, 3, (0,), (1,)),                   # occupies 2->3 first
        Transfer(d, 2 * d, 2, 3, (0,), (0,), "reduce"),     # read: {2}
        Transfer(5 * d, 6 * d, 1, 2, (1,), (0,), "copy"),   # write: 2 now holds {1}
        Transfer(7 * d, 8 * d, 2, 3, (0,), (0,), "reduce"), # read: {1}
        Transfer(0, d, 0, 3, (2,), (0,), "reduce"),         # {0}
    )
    s = Schedule(topo, coll, ts)
    assert verify_schedule(s).ok, verify_schedule(s).text()
    res = simulate(s)
    assert verify_schedule(res.schedule).ok, verify_schedule(res.schedule).text()
    new = res.schedule.transfers
    assert new[2].start >= new[1].start
    assert res.time < s.makespan


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(0.0, 3.0), min_size=14, max_size=14),
       st.lists(st.floats(0.0, 1.0), min_size=8, max_size=8), st.integers(2, 5))
def test_retimed_schedule_verifies_and_is_no_slower(gaps, stretch, n):
    """Random idle time and over-long transfers are removed; nothing gets slower."""
    s = ring_allreduce(n)
    step = s.transfers[0].end - s.transfers[0].start
    ts, shift = [], 0.0
    for k, t in enumerate(s.transfers):
        st_idx = k // n
        if k % n == 0:
            shift += gaps[st_idx] * step
        slack = gaps[st_idx + 1] * step  # idle time before the next step
        ts.append(replace(t, start=t.start + shift,
                          end=t.end + shift + stretch[k % len(stretch)] * slack))
    slow = Schedule(s.topology, s.collective, tuple(ts))
    assert verify_schedule(slow).ok, verify_schedule(slow).text()
    res = simulate(slow)
    assert verify_schedule(res.schedule).ok
    for a, b in zip(res.schedule.transfers, slow.transfers, strict=True):
        assert a.start <= b.start + 1e-15
    assert res.time <= slow.makespan
    assert res.time == pytest.approx(2 * (n - 1) * step, rel=1e-9)


def test_busbw_factors():
    assert busbw_factor("allgather", 8) == pytest.approx(7 / 8)
    assert busbw_factor("reducescatter", 4) == pytest.approx(3 / 4)
    assert busbw_factor("allreduce", 4) == pytest.approx(1.5)
    assert busbw_factor("alltoall", 8) == pytest.approx(7 / 8)  # nccl-tests alltoall
    assert busbw_factor("broadcast", 4) == 1.0


def test_ring_allgather_busbw_matches_link_bandwidth_at_large_size():
    n = 4
    topo = ring(n)
    coll = build("allgather", range(n), size=1 << 30)
    step = topo.links[0].time(coll.chunks[0].size)
    ts = tuple(Transfer(s * step, (s + 1) * step, i, (i + 1) % n, (i,), ((i - s) % n,))
               for s in range(n - 1) for i in range(n))
    res = simulate(Schedule(topo, coll, ts))
    assert res.busbw == pytest.approx(BW, rel=1e-4)  # ring busbw -> link bandwidth


# -- report ---------------------------------------------------------------------------------
def test_report_facts_and_json_safety():
    import json

    from tacos.check.bounds import lower_bound
    from tacos.report import format_report, report

    n = 4
    s = ring_allreduce(n, gap=1.5)
    s.meta.update(solver="ring", seed=7, trials=3, status="feasible", synthesis_time=0.25,
                  owners={0: 1}, lower_bound=float("inf"))
    r = report(s)
    json.dumps(r, allow_nan=False)  # JSON-safe: no inf/nan, only plain types
    step = ALPHA + (SIZE / n) / BW
    assert r["time"] == pytest.approx(2 * (n - 1) * step)
    assert r["schedule_time"] == pytest.approx(s.makespan)
    b = lower_bound(s.topology, s.collective)
    assert r["bound"]["value"] == pytest.approx(b.value)
    assert r["gap"] == pytest.approx(r["time"] / b.value) and r["gap"] >= 1
    assert r["transfers"] == len(s.transfers) == 2 * (n - 1) * n
    assert r["bytes_moved"] == 2 * (n - 1) * n * (SIZE // n)
    assert r["solver"] == {"solver": "ring", "seed": 7, "trials": 3, "status": "feasible",
                           "synthesis_time": 0.25}
    assert r["verified"] is True and r["violations"] == 0
    text = format_report(s)
    assert "gap" in text and f"{r['gap']:.3f}x" in text
    assert "seed 7" in text and "3 trials" in text
    assert "verified" not in report(s, verify=False)


def test_report_flags_broken_schedule():
    from tacos.report import format_report, report

    s = ring_allreduce(3)
    broken = Schedule(s.topology, s.collective, s.transfers[1:])
    r = report(broken)
    assert r["verified"] is False and r["violations"] > 0
    assert "NO (" in format_report(broken)
