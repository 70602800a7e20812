"""The independent flow-level simulator of ``benchmarks/flowsim.py``: max-min fair sharing of the
physical links, dependencies from the schedule, and agreement with a feasible plan's time."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the benchmarks folder is run from the checkout, not installed

import tacos  # noqa: E402
from benchmarks.flowsim import dependencies, simulate_flows  # noqa: E402
from tacos.builders import star  # noqa: E402
from tacos.model.patterns import build  # noqa: E402
from tacos.model.schedule import Schedule, Transfer  # noqa: E402

BW, ALPHA = 100e9, 1e-6


def step(topo, u, v, size, t0=0.0, chunks=(0,)):
    r = topo.routing.best(u, v)
    return Transfer(t0, t0 + r.time(size), u, v, r.links, chunks)


def test_two_flows_on_one_port_share_it_fairly():
    topo = star(3, bandwidth=BW, latency=ALPHA)
    coll = build("broadcast", range(3), size=4096, root=0)
    both = Schedule(topo, coll, (step(topo, 0, 1, 4096), step(topo, 0, 2, 4096)))
    res = simulate_flows(both)
    # each gets half of npu 0's up-port: both end at 2 alpha + 2 * 4096 / BW
    assert res.finish == pytest.approx([2 * ALPHA + 2 * 4096 / BW] * 2)


def test_a_forwarded_chunk_waits_for_its_arrival():
    topo = star(3, bandwidth=BW, latency=ALPHA)
    coll = build("broadcast", range(3), size=4096, root=0)
    a = step(topo, 0, 1, 4096)
    b = step(topo, 1, 2, 4096, t0=a.end)
    sched = Schedule(topo, coll, (a, b))
    assert dependencies(sched) == [[], [0]]
    assert simulate_flows(sched).time == pytest.approx(2 * a.end)


@pytest.mark.parametrize("solver", ["ring", "direct", "greedy"])
def test_a_verified_plan_runs_in_its_predicted_time_when_released_as_planned(solver):
    spec = tacos.load(ROOT / "examples" / "leafspine_4to1.tdl")
    coll = build("allgather", spec.topology.live_npus, size=16 << 20)
    sched = tacos.synthesize(spec.topology, coll, solver=solver, trials=1, workers=1)
    assert simulate_flows(sched, release="planned").time == pytest.approx(sched.makespan,
                                                                        rel=1e-9)
    # released as soon as their data is there, the flows may do better or worse, never beat
    # the fabric: every host still receives 15/16 of the buffer over its own link
    host = spec.topology.links[spec.topology.out_links[0][0]].bandwidth
    assert simulate_flows(sched).time >= 15 / 16 * coll.size / host


def test_an_overloaded_uplink_slows_a_plan_down():
    spec = tacos.load(ROOT / "examples" / "leafspine_4to1.tdl")
    topo = spec.topology
    size = 64 << 20
    coll = build("allgather", topo.live_npus, size=16 * size)
    # hosts 0 and 1 (leaf 0) both send across the fabric on the same uplink at the same time:
    # a plan the physical model rejects; the flows share the uplink and finish late
    r0 = topo.routing.routes(0, 4)[0]
    r1 = next(r for r in topo.routing.routes(1, 5) if r.links[1] == r0.links[1])
    ts = tuple(Transfer(0.0, r.time(size), r.src, r.dst, r.links, (c,))
               for c, r in ((0, r0), (1, r1)))
    sched = Schedule(topo, coll, ts)
    assert simulate_flows(sched, release="planned").time > 1.5 * sched.makespan
