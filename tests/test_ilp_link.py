"""The ILP's link formulation: proven optima equal an independent brute force on 3-4 NPUs,
the warm start is never worse than the greedy, the gap and bound are reported and sound, and
the plan's simulated time is its objective."""

from __future__ import annotations

import itertools
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # benchmarks: from the checkout

from benchmarks.bench_ilp import random_graph  # noqa: E402  (the benchmark's graphs)
from tacos.check.simulate import simulate  # noqa: E402
from tacos.check.verify import verify_schedule  # noqa: E402
from tacos.errors import UsageError  # noqa: E402
from tacos.model.patterns import build  # noqa: E402
from tacos.model.topology import Link, Npu, Topology  # noqa: E402
from tacos.solvers.ilp.link_grid import LinkGrid, replay_in_ticks  # noqa: E402
from tacos.solvers.ilp.solver import IlpSolver  # noqa: E402
from tacos.solvers.registry import Problem, get_solver  # noqa: E402

pytest.importorskip("ortools.sat.python.cp_model")

MB = 1_000_000
ALPHA = 0.5e-6


def topo(n: int, edges) -> Topology:
    """``n`` NPUs and directed links ``(u, v, GB/s)`` with α = 0.5 µs."""
    links = tuple(Link(u, v, ALPHA, gbs * 1e9) for u, v, gbs in edges)
    return Topology(tuple(Npu(i, f"n{i}") for i in range(n)), (), links)


def both(edges):
    return [x for u, v, b in edges for x in ((u, v, b), (v, u, b))]


# heterogeneous links: the greedy's choices are not obviously optimal
CASES = {
    "fc3_allgather": (topo(3, both([(0, 1, 100), (1, 2, 50), (0, 2, 200)])),
                      build("allgather", range(3), size=3 * MB)),
    "fc3_allgather_2chunks": (topo(3, both([(0, 1, 50), (1, 2, 200), (0, 2, 100)])),
                              build("allgather", range(3), size=6 * MB, chunks_per_npu=2)),
    "line4_broadcast_2chunks": (topo(4, both([(0, 1, 100), (1, 2, 50), (2, 3, 200)])),
                                build("broadcast", range(4), size=2 * MB, chunks_per_npu=2,
                                      root=0)),
    "ring4_chord_allgather": (topo(4, [(0, 1, 100), (1, 2, 200), (2, 3, 50), (3, 0, 100),
                                       (0, 2, 50)]),
                              build("allgather", range(4), size=4 * MB)),
    "star4_broadcast_3chunks": (topo(4, both([(0, 1, 200), (0, 2, 100), (1, 3, 50),
                                              (2, 3, 50)])),
                                build("broadcast", range(4), size=3 * MB, chunks_per_npu=3,
                                      root=0)),
}


def brute_force(topology: Topology, collective) -> float:
    """The shortest one-chunk-per-transfer, store-and-forward schedule, by enumeration.

    Some optimal schedule is semi-active: fixed by which link brings each chunk to each NPU
    that needs it (a tree per chunk) and by the order of the sends on every link, each send
    starting as soon as its chunk has arrived and the send before it on the link has ended.
    Every NPU here needs every chunk it does not hold, so no relays.  Enumerates all trees
    and all link orders and times each combination by longest paths.
    """
    links = topology.links
    assert all(lk.multiplicity == 1 for lk in links)
    chunks = collective.chunks
    trees_per_chunk = []
    for ch in chunks:
        need = sorted(ch.post - ch.pre)
        choices = [[li for li in topology.in_links[v]] for v in need]
        trees = []
        for pick in itertools.product(*choices):
            parent = dict(zip(need, pick, strict=True))
            if all(_roots(v, parent, links, ch.pre) for v in need):
                trees.append(parent)
        trees_per_chunk.append(trees)
    best = float("inf")
    for forest in itertools.product(*trees_per_chunk):
        sends = [(ch.id, li) for ch, parent in zip(chunks, forest, strict=True)
                 for li in parent.values()]
        on_link: dict[int, list[tuple[int, int]]] = {}
        for s in sends:
            on_link.setdefault(s[1], []).append(s)
        groups = list(on_link.values())
        for orders in itertools.product(*(itertools.permutations(g) for g in groups)):
            t = _time(orders, forest, chunks, links)
            best = min(best, t)
    return best


def _roots(v, parent, links, pre) -> bool:
    seen = set()
    while v not in pre:
        if v in seen or v not in parent:
            return False
        seen.add(v)
        v = links[parent[v]].src
    return True


def _time(orders, forest, chunks, links) -> float:
    """Makespan of the semi-active schedule, or inf when the orders deadlock."""
    prev = {}
    for order in orders:
        for a, b in itertools.pairwise(order):
            prev[b] = a
    end: dict[tuple[int, int], float] = {}
    state: dict[tuple[int, int], int] = {}

    def finish(s) -> float:
        if s in end:
            return end[s]
        if state.get(s) == 1:
            raise RecursionError  # a cycle: this combination deadlocks
        state[s] = 1
        c, li = s
        u = links[li].src
        ready = 0.0
        if u not in chunks[c].pre:
            ready = finish((c, forest[c][u]))
        if s in prev:
            ready = max(ready, finish(prev[s]))
        end[s] = ready + links[li].time(chunks[c].size)
        return end[s]

    try:
        return max(finish(s) for order in orders for s in order)
    except RecursionError:
        return float("inf")


def solve(topology, collective, **options):
    options.setdefault("time_limit", 30)
    res = IlpSolver().solve(Problem(topology, collective, options))
    assert verify_schedule(res.schedule).ok
    return res


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow)  # ~3 s
                                  if n == "fc3_allgather_2chunks" else n for n in sorted(CASES)])
def test_proven_optimum_equals_brute_force(name):
    topology, collective = CASES[name]
    optimum = brute_force(topology, collective)
    # shortest paths as the start: the model has to find the optimum itself
    res = solve(topology, collective, max_merge=1, upper_bound="shortest_path")
    assert res.status == "optimal", res.stats
    assert res.schedule.makespan == pytest.approx(optimum, rel=1e-9)
    assert res.lower_bound == pytest.approx(optimum, rel=1e-9)
    assert res.stats["optimality_gap"] == pytest.approx(0.0, abs=1e-9)
    assert res.stats["bound_scope"] == "transfers of at most 1 chunk(s)"
    # with merged transfers allowed the optimum can only be as good, and the bound covers all
    merged = solve(topology, collective, upper_bound="shortest_path")
    assert merged.status == "optimal"
    assert merged.schedule.makespan <= optimum * (1 + 1e-9)
    assert merged.stats["bound_scope"] == "all schedules"


def test_merged_transfer_pays_alpha_once():
    # α = 10 µs, 1 µs of wire per chunk: carrying both chunks together wins on a line
    links = tuple(Link(u, v, 10e-6, 1e9) for u, v in ((0, 1), (1, 2)))
    topology = Topology(tuple(Npu(i, f"n{i}") for i in range(3)), (), links)
    collective = build("broadcast", range(3), size=2 * 1000, chunks_per_npu=2, root=0)
    one = solve(topology, collective, max_merge=1, upper_bound="shortest_path")
    assert one.schedule.makespan == pytest.approx(33e-6)  # 11 + 11 pipelined + 11
    two = solve(topology, collective, upper_bound="shortest_path")
    assert two.status == "optimal"
    assert two.schedule.makespan == pytest.approx(24e-6)  # 12 + 12
    assert brute_force(topology, collective) == pytest.approx(33e-6)


@pytest.mark.parametrize("seed", range(4))
def test_warm_start_never_worse_than_the_greedy_and_gap_is_sound(seed):
    rng = random.Random(seed)
    n = rng.randint(4, 6)
    topology = random_graph(rng, n)
    collective = build("allgather", range(n), size=n * MB)
    greedy = get_solver("greedy").solve(Problem(topology, collective, {"trials": 16}))
    for limit in (0.2, 20):  # cut short or not, never slower than the greedy it starts from
        res = solve(topology, collective, time_limit=limit)
        starts = [t for src, t in res.stats["candidates"].items() if src.startswith("greedy")]
        assert starts and res.schedule.makespan <= min(starts)
        gap = res.stats["optimality_gap"]
        assert 0 <= gap < 1
        assert res.lower_bound == pytest.approx(res.schedule.makespan * (1 - gap))
        assert res.lower_bound >= res.stats["bound_tacos"] * (1 - 1e-12)
    # with time for all 16 trials: never slower than the greedy run on its own
    assert res.schedule.makespan <= greedy.schedule.makespan * (1 + 1e-12)
    assert res.status == "optimal" and gap == 0


def test_simulated_time_is_the_objective():
    topology, collective = CASES["ring4_chord_allgather"]
    res = solve(topology, collective, upper_bound="shortest_path")
    sim = simulate(res.schedule).schedule.makespan
    assert sim == pytest.approx(res.schedule.makespan, rel=1e-12)
    assert res.stats["candidates"]["ilp"] == pytest.approx(res.schedule.makespan, rel=1e-12)
    assert res.schedule.meta["formulation"] == "link"


def test_replay_keeps_a_schedule_valid_on_the_grid():
    topology, collective = CASES["fc3_allgather_2chunks"]
    greedy = get_solver("greedy").solve(Problem(topology, collective, {"trials": 4}))
    grid = LinkGrid.of(topology, collective)
    assert grid.exact and grid.tick == pytest.approx(1e-9)
    moves = replay_in_ticks(grid, list(greedy.schedule.transfers), max_merge=64)
    replayed = greedy.schedule.__class__(topology, collective, tuple(grid.transfers(moves)))
    assert verify_schedule(replayed).ok
    assert grid.makespan(moves) * grid.tick <= greedy.schedule.makespan * (1 + 1e-9)


def test_cluster_mode_is_verified_and_not_worse():
    rng = random.Random(7)
    topology = random_graph(rng, 6)
    collective = build("allgather", range(6), size=6 * MB)
    exact = solve(topology, collective)
    clustered = solve(topology, collective, mode="cluster", cluster_steps=1)
    assert clustered.stats["n_windows"] >= 1
    assert clustered.schedule.makespan >= exact.schedule.makespan * (1 - 1e-9)
    greedy = get_solver("greedy").solve(Problem(topology, collective, {"trials": 16}))
    assert clustered.schedule.makespan <= greedy.schedule.makespan * (1 + 1e-12)


def test_option_errors():
    topology, collective = CASES["fc3_allgather"]
    with pytest.raises(UsageError, match="CP-SAT model"):
        solve(topology, collective, formulation="link", backend="highs")
    with pytest.raises(UsageError, match="gap must be"):
        solve(topology, collective, gap=1.5)
    with pytest.raises(UsageError, match="formulation"):
        solve(topology, collective, formulation="tree")
    # a MILP back end picks the TEN, as before
    res = solve(topology, collective, backend="highs")
    assert res.schedule.meta.get("formulation") is None and "horizon" in res.stats
