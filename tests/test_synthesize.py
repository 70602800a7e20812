"""synthesize(): every collective on many topologies, inversion, multi-tenant, feasibility."""

from __future__ import annotations

import itertools

import pytest

from tacos.check.verify import verify_schedule
from tacos.errors import InfeasibleError, UsageError
from tacos.model.collective import STANDARD_COLLECTIVES, Chunk, Collective, combine
from tacos.model.patterns import build, custom
from tacos.model.schedule import Schedule, Transfer
from tacos.model.topology import Link, Npu, Switch, Topology
from tacos.synthesize import solve, synthesize

KiB = 1 << 10
ROOTED = ("broadcast", "reduce", "scatter", "gather")


def npus(n: int, failed: tuple[int, ...] = ()) -> tuple[Npu, ...]:
    return tuple(Npu(i, f"n{i}", i in failed) for i in range(n))


def bidir(pairs, alpha=1e-6, bw=1e9) -> list[Link]:
    out = []
    for u, v in pairs:
        out += [Link(u, v, alpha, bw), Link(v, u, alpha, bw)]
    return out


def ring(n: int) -> Topology:
    return Topology(npus(n), (), tuple(bidir((i, (i + 1) % n) for i in range(n))), "ring")


def mesh(r: int, c: int, wrap: bool = False, slow_rows: bool = False) -> Topology:
    links = []
    for i, j in itertools.product(range(r), range(c)):
        v = i * c + j
        for di, dj in ((0, 1), (1, 0)):
            a, b = i + di, j + dj
            if wrap:
                a, b = a % r, b % c
            elif a >= r or b >= c:
                continue
            w = a * c + b
            if w != v:
                bw = 0.25e9 if slow_rows and di == 0 else 1e9
                links += bidir([(v, w)], bw=bw)
    return Topology(npus(r * c), (), tuple(links), "torus" if wrap else "mesh")


def fully_connected(n: int) -> Topology:
    return Topology(npus(n), (), tuple(bidir(itertools.combinations(range(n), 2))), "fc")


def switched(n: int, policy: str, degree: int | None = None) -> Topology:
    sw = Switch(n, "sw", policy, degree)
    links = []
    for i in range(n):
        links += [Link(i, n, 0.5e-6, 2e9), Link(n, i, 0.5e-6, 2e9)]
    return Topology(npus(n), (sw,), tuple(links), f"switch-{policy}")


def with_failed_link(topo: Topology, u: int, v: int) -> Topology:
    keep = tuple(lk for lk in topo.links if (lk.src, lk.dst) != (u, v))
    gone = tuple(lk for lk in topo.links if (lk.src, lk.dst) == (u, v))
    return Topology(topo.npus, topo.switches, keep, topo.name, gone)


TOPOLOGIES = {
    "ring5": ring(5),
    "mesh3x3": mesh(3, 3),
    "torus3x3": mesh(3, 3, wrap=True),
    "fc4": fully_connected(4),
    "switch-full": switched(4, "full"),
    "switch-ring": switched(4, "ring"),
    "switch-biring": switched(5, "biring"),
    "switch-degree2": switched(5, "degree", 2),
    "hetero-mesh": mesh(2, 3, slow_rows=True),
    "failed-link": with_failed_link(ring(5), 0, 1),
}


def check(schedule: Schedule) -> Schedule:
    report = verify_schedule(schedule)
    assert report.ok, report.text(5)
    return schedule


def standard(kind: str, group, k: int = 1) -> Collective:
    group = list(group)
    return build(kind, group, size=len(group) * k * 4 * KiB, chunks_per_npu=k,
                 root=group[1] if kind in ROOTED else None)


@pytest.mark.parametrize("name", sorted(TOPOLOGIES))
@pytest.mark.parametrize("kind", STANDARD_COLLECTIVES)
def test_every_standard_collective_on_every_topology_verifies(name, kind):
    topo = TOPOLOGIES[name]
    coll = standard(kind, topo.live_npus, k=2 if kind != "alltoall" else 1)
    sched = check(synthesize(topo, coll, trials=2, workers=1, seed=4, solver="greedy"))
    assert sched.collective is coll
    assert sched.makespan >= sched.meta["lower_bound"] * (1 - 1e-9)
    if topo.switches:
        # physical routes: NPU -> switch -> NPU on the topology itself
        assert sched.topology is topo
        assert all(len(t.route) == 2 and topo.links[t.route[0]].dst == topo.switches[0].id
                   for t in sched.transfers)


def test_meta_and_status():
    topo = TOPOLOGIES["torus3x3"]
    coll = standard("allreduce", range(9))
    res = solve(topo, coll, trials=3, seed=11, workers=1, solver="greedy")
    assert res.status == "feasible"
    meta = res.schedule.meta
    assert meta["solver"] == "greedy" and meta["seed"] == 11 and meta["trials"] == 3
    assert meta["status"] == "feasible" and meta["synthesis_time"] > 0
    assert meta["lower_bound"] == res.lower_bound and meta["gap"] >= 1 - 1e-9


def test_reduce_scatter_is_a_reversed_allgather():
    topo = mesh(2, 3, slow_rows=True)
    coll = standard("reducescatter", range(6), k=2)
    rs = check(synthesize(topo, coll, trials=3, workers=1, solver="greedy"))
    assert {t.op for t in rs.transfers} == {"reduce"}
    horizon = rs.makespan
    # flip every reduce v->u over [s, e] into a copy u->v over [T-e, T-s] on the reversed
    # topology: the result must be a valid all-gather from each chunk's owner
    flipped = tuple(sorted(Transfer(horizon - t.end, horizon - t.start, t.dst, t.src, t.route[::-1],
                                    t.chunks) for t in rs.transfers))
    ag = Collective("custom", tuple(Chunk(c.id, c.size, c.post, c.pre) for c in coll.chunks),
                    coll.group, coll.size)
    check(Schedule(rs.topology.reversed(), ag, flipped))


def test_reduce_is_a_reversed_broadcast():
    topo = ring(6)
    coll = standard("reduce", range(6))
    red = check(synthesize(topo, coll, trials=2, workers=1, solver="greedy"))
    into_root = [t for t in red.transfers if t.dst == coll.root]
    assert into_root and {t.op for t in red.transfers} == {"reduce"}
    # the root never sends: it only collects
    assert all(t.src != coll.root for t in red.transfers)


def test_allreduce_is_reduce_scatter_then_allgather():
    topo = mesh(3, 3, wrap=True)
    coll = standard("allreduce", range(9), k=2)
    sched = check(synthesize(topo, coll, trials=2, workers=1, solver="greedy"))
    reduce_end = max(t.end for t in sched.transfers if t.op == "reduce")
    copy_start = min(t.start for t in sched.transfers if t.op == "copy")
    assert reduce_end <= copy_start + 1e-15
    phases = sched.meta["phases"]
    assert sched.makespan == pytest.approx(phases["reduce"] + phases["copy"], rel=1e-12)
    # owners are balanced: chunk c is owned by group member c // k
    assert sched.meta["owners"] == {c: c // 2 for c in range(18)}


def test_custom_mixed_collective_and_chunk_ids():
    topo = mesh(3, 3)
    coll = custom([
        ((0,), (8, 4), False, 2048),          # copy to two NPUs
        ((1, 2, 3), (7,), True, 1024),        # reduce to one NPU
        ((0, 4, 8), (2, 6), True, 1024),      # reduce to several NPUs
        ((5,), (5,), False, 512),             # nothing to do
    ])
    sched = check(synthesize(topo, coll, trials=2, workers=1, solver="greedy"))
    assert {c for t in sched.transfers for c in t.chunks} == {0, 1, 2}
    assert {t.op for t in sched.transfers if 1 in t.chunks} == {"reduce"}


def test_multi_tenant_is_solved_jointly():
    topo = mesh(3, 3)
    a = build("allgather", [0, 1, 2, 3], size=4 * 4 * KiB)
    b = build("reduce", [4, 5, 6, 7, 8], size=8 * KiB, root=8)
    c = build("broadcast", [0, 4, 8], size=8 * KiB, chunks_per_npu=2, root=0)
    multi = combine([a, b, c])
    sched = check(synthesize(topo, multi, trials=2, workers=1, solver="greedy"))
    assert sched.collective is multi
    tenants = {multi.chunks[ch].tenant for t in sched.transfers for ch in t.chunks}
    assert tenants == {0, 1, 2}


def test_unreachable_npu_is_named_with_the_chunk():
    links = tuple(Link(i, (i + 1) % 5, 1e-6, 1e9) for i in range(5) if i != 2)
    topo = Topology(npus(5), (), links, "broken-ring", (Link(2, 3, 1e-6, 1e9),))
    coll = build("allgather", range(5), size=5 * KiB)
    with pytest.raises(InfeasibleError) as err:
        synthesize(topo, coll, workers=1, solver="greedy")
    msg = err.value.message
    assert "npu 3 cannot receive chunk" in msg and "no path from npu" in msg
    assert "failure" in (err.value.hint or "")


def test_reduction_contribution_that_cannot_reach_the_root():
    links = tuple(Link(i, i + 1, 1e-6, 1e9) for i in range(3))  # 0 -> 1 -> 2 -> 3 only
    topo = Topology(npus(4), (), links)
    coll = build("reduce", range(4), size=KiB, root=1)
    with pytest.raises(InfeasibleError, match=r"npu 1 cannot receive chunk 0.*npu [23]"):
        synthesize(topo, coll, workers=1, solver="greedy")


def test_failed_npu_in_the_collective_is_rejected():
    topo = Topology(npus(4, failed=(2,)), (), tuple(bidir([(0, 1), (1, 3), (3, 0)])))
    coll = build("allgather", range(4), size=4 * KiB)
    with pytest.raises(InfeasibleError, match="failed npu 2"):
        synthesize(topo, coll, workers=1, solver="greedy")
    ok = check(synthesize(topo, build("allgather", topo.live_npus, size=3 * KiB), workers=1,
                          solver="greedy"))
    assert all(2 not in (t.src, t.dst) for t in ok.transfers)


def test_unknown_solver_is_a_usage_error():
    with pytest.raises(UsageError, match="did you mean"):
        synthesize(ring(3), standard("allgather", range(3)), solver="greedyy")


def test_combining_phases_report_progress():
    seen = []
    synthesize(ring(4), standard("allreduce", range(4)), trials=3, workers=1, max_merge=1,
               progress=lambda d, t: seen.append((d, t)), solver="greedy")
    assert seen[-1] == (6, 6) and [d for d, _ in seen] == list(range(1, 7))
