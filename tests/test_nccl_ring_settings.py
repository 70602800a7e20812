"""NCCL's ring settings pruned by their egress floor: the floor is under every setting's
makespan, and the bounded choice is the one of building every setting (also on near-ties)."""

from __future__ import annotations

import pytest

import tacos
from tacos.check.verify import verify_schedule
from tacos.model.patterns import build
from tacos.solvers.nccl.lower import best_of, best_of_bounded
from tacos.solvers.nccl.rings import max_channels, nccl_ring, ring_floor, ring_schedule
from tacos.solvers.nccl.system import system

MiB = 1 << 20


def _system(tdl: str):
    topo = tacos.parse(tdl).topology
    return topo, system(topo, topo.live_npus)


@pytest.mark.parametrize("tdl,kind", [
    ("torus t[4, 4] 50GiB/s 0.5us\n", "allgather"),
    ("mesh m[4, 4] 50GB/s 1us\n", "allreduce"),
    ("use dgx1\n", "reducescatter"),
    ("ring r[8] 50GB/s 1us\n", "broadcast"),
])
def test_the_floor_is_under_every_settings_makespan(tdl: str, kind: str) -> None:
    topo, sys_ = _system(tdl)
    root = {"root": topo.live_npus[0]} if kind == "broadcast" else {}
    coll = build(kind, topo.live_npus, size=8 * MiB, **root)
    floors = []
    for c in sorted({1, 2, max_channels(sys_)}):
        for slices in ((1, 4) if kind == "broadcast" else (1,)):
            floor = ring_floor(sys_, coll, c, slices)
            sched = ring_schedule(sys_, coll, c, slices)
            assert verify_schedule(sched).ok
            made = sched.makespan
            assert 0 < floor <= made
            floors.append(floor / made)
    assert max(floors) > 0.5  # not a trivial bound: it prunes the one-channel ring


@pytest.mark.parametrize("tdl", ["torus t[4, 4] 50GiB/s 0.5us\n", "use dgx1\n"])
def test_the_bounded_ring_is_the_one_of_building_every_setting(tdl: str, monkeypatch) -> None:
    from tacos.solvers.nccl import rings

    topo, sys_ = _system(tdl)
    coll = build("allgather", topo.live_npus, size=64 * MiB)
    built = []
    real = rings.ring_schedule

    def counted(*args, **kwargs):
        built.append(args[2])
        return real(*args, **kwargs)

    monkeypatch.setattr(rings, "ring_schedule", counted)
    got = nccl_ring(sys_, coll)
    pruned = list(built)
    monkeypatch.setattr(rings, "best_of_bounded", lambda settings, make, floor:
                        best_of(settings, make))
    want = nccl_ring(sys_, coll)
    assert got.meta["tuned"] == want.meta["tuned"]
    assert got.transfers == want.transfers
    assert verify_schedule(got).ok
    assert len(pruned) < len(built) - len(pruned)  # settings were skipped


class _Fake:
    def __init__(self, makespan: float) -> None:
        self.makespan = makespan


@pytest.mark.parametrize("times,floors", [
    ([4.0, 2.0, 1.0], [3.9, 1.9, 0.9]),  # the usual case: the last setting wins, others pruned
    ([1.0, 2.0, 1.0], [0.9, 1.9, 0.9]),  # an exact tie: the first of them
    ([1.0, 2.0, 1.0 + 1e-13], [1.0, 1.9, 0.9]),  # within the tolerance: the scan's answer
    ([3.0, 1.0, 2.0], [0.5, 0.5, 0.5]),  # weak floors: everything is built
    ([2.0, 1.0 - 1e-13, 1.0, 5.0], [1.0, 0.5, 0.5, 0.1]),
])
def test_bounded_best_of_answers_as_the_scan_on_ties(times, floors) -> None:
    settings = [{"k": i} for i in range(len(times))]
    built = []

    def make(s):
        built.append(s["k"])
        return _Fake(times[s["k"]])

    got = best_of_bounded(settings, make, lambda s: floors[s["k"]])
    assert got.setting == best_of(settings, lambda s: _Fake(times[s["k"]])).setting
    assert len(set(built)) == len(built)  # never built twice
    if floors == [3.9, 1.9, 0.9]:
        assert built == [2]
