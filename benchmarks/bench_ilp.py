"""Benchmarks of the TEN ILP (seed paper Tables I and II, back-end comparison).

Usage::

    python benchmarks/bench_ilp.py table1 [--sizes 8 16 32 64] [--time-limit 120]
    python benchmarks/bench_ilp.py table2 [--et-limit 300]
    python benchmarks/bench_ilp.py backends
    python benchmarks/bench_ilp.py random [--count 20] [--time-limit 60]

Each prints a Markdown table (collective times normalized to chunk-granular TACOS-Greedy, as in
the seed paper) to paste into ``docs/benchmarks/ilp.md``.  All-reduce is run as the
reduce-scatter (solved as the dual all-gather on the reversed topology) followed by the
all-gather, exactly as :func:`tacos.synthesize` does; ``--time-limit`` applies to each phase.
Every schedule is checked with :func:`tacos.check.verify.verify_schedule`.  ``gap`` is the ILP
schedule's time over the proven continuous lower bound (for all-reduce the sum of its phases'
bounds, valid for schedules that reduce-scatter then all-gather), minus one.

``random`` draws ``--count`` connected graphs of 4-8 NPUs from a seeded generator (each link 50,
100 or 200 GB/s, α = 0.5 µs, both directions) and compares the ILP with the greedy on an
all-gather of 1 MiB per NPU.
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import time
from dataclasses import replace

from tacos.builders import multi_dim, torus
from tacos.check.verify import verify_schedule
from tacos.model.patterns import build
from tacos.model.topology import Link, Npu, Topology
from tacos.passes.inversion import assemble, plan_inversion
from tacos.passes.unwind import unwind_switches
from tacos.solvers.ilp import backends as ilp_backends
from tacos.solvers.registry import Problem, SolveResult, get_solver

MIB = 2**20


def ring_fc_switch(n: int) -> Topology:
    """``Ring(2)_FullyConnected(4)_Switch(n/8)``: 200/100/50 GB/s, α = 0.5 µs per link.

    As in the seed paper (§VII), the scale-out switch is unwound with degree 1 (a ring over the
    switch at full port bandwidth); 8 NPUs have no switch dimension.
    """
    dims = [("Ring", 2), ("FullyConnected", 4)] + ([("Switch", n // 8)] if n > 8 else [])
    t = multi_dim(dims, [200e9, 100e9, 50e9][:len(dims)], [0.5e-6] * len(dims))
    t = replace(t, switches=tuple(replace(s, policy="ring") for s in t.switches))
    return unwind_switches(t)


def run_phases(topology: Topology, collective, solver: str, options: dict
               ) -> tuple[float, list[SolveResult], float]:
    """All-reduce as reduce-scatter (by inversion) + all-gather; (makespan, results, seconds)."""
    t0 = time.perf_counter()
    impl = get_solver(solver)
    if not collective.combining or impl.capabilities.combining:
        res = impl.solve(Problem(topology, collective, dict(options)))
        assert verify_schedule(res.schedule).ok
        return res.schedule.makespan, [res], time.perf_counter() - t0
    plan = plan_inversion(collective)
    dual = impl.solve(Problem(topology.reversed(), plan.dual, dict(options)))
    fwd = impl.solve(Problem(topology, plan.forward, dict(options)))
    seconds = time.perf_counter() - t0
    schedule = assemble(topology, collective, plan, dual.schedule, fwd.schedule)
    report = verify_schedule(schedule)
    assert report.ok, report.violations[:3]
    return schedule.makespan, [dual, fwd], seconds


def _fmt_status(results: list[SolveResult]) -> str:
    return "+".join(r.status for r in results)


def table1(sizes: list[int], limit: float, backend: str | None) -> None:
    print("| NPUs | TEN-ILP | ILP status (RS+AG) | ILP schedule from | ILP time | gap | Greedy | "
          "Greedy time | Greedy (merge) | TACCL-like | Ring | Direct |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for n in sizes:
        topo = ring_fc_switch(n)
        coll = build("allreduce", range(n), size=n * MIB)
        greedy, _, g_time = run_phases(topo, coll, "greedy", {"max_merge": 1, "trials": 16})
        merged, _, _ = run_phases(topo, coll, "greedy", {"trials": 16})
        opts = {"time_limit": limit}
        if backend:
            opts["backend"] = backend
        ilp, results, i_time = run_phases(topo, coll, "ilp", opts)
        others = [run_phases(topo, coll, s, {})[0] for s in ("taccl", "ring", "direct")]
        source = "+".join(str(r.stats.get("source", "")) for r in results)
        bound = sum(r.lower_bound or 0.0 for r in results)
        gap = f"{ilp / bound - 1:.1%}" if bound > 0 else "n/a"
        row = [f"{ilp / greedy:.2f}", _fmt_status(results), source, f"{i_time:.2f} s", gap,
               "1.00",
               f"{g_time * 1e3:.0f} ms", f"{merged / greedy:.2f}"]
        row += [f"{x / greedy:.2f}" for x in others]
        print(f"| {n} | " + " | ".join(row) + f" |  <!-- greedy {greedy * 1e6:.2f} us -->")


def random_graph(rng: random.Random, n: int) -> Topology:
    """A connected graph on ``n`` NPUs: a random spanning tree plus about n/2 more links, each
    both ways at 50, 100 or 200 GB/s with α = 0.5 µs."""
    order = list(range(n))
    rng.shuffle(order)
    pairs = {tuple(sorted((order[i], order[rng.randrange(i)]))) for i in range(1, n)}
    for _ in range(n // 2):
        u, v = rng.sample(range(n), 2)
        pairs.add((min(u, v), max(u, v)))
    links = []
    for u, v in sorted(pairs):
        bw = rng.choice((50e9, 100e9, 200e9))
        links += [Link(u, v, 0.5e-6, bw), Link(v, u, 0.5e-6, bw)]
    return Topology(tuple(Npu(i, f"n{i}") for i in range(n)), (), tuple(links))


def random_table(count: int, limit: float, seed: int = 0) -> None:
    """ILP against greedy on ``count`` seeded random graphs (see the module docstring)."""
    rng = random.Random(seed)
    print("| # | NPUs | links | greedy (µs) | ILP (µs) | ILP / greedy | ILP status | ILP from | "
          "ILP time | bound (µs) | greedy gap | ILP gap |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for i in range(count):
        n = rng.randint(4, 8)
        topo = random_graph(rng, n)
        coll = build("allgather", range(n), size=n * MIB)
        greedy, _, _ = run_phases(topo, coll, "greedy", {"trials": 16})
        ilp, results, i_time = run_phases(topo, coll, "ilp", {"time_limit": limit})
        bound = results[0].lower_bound or 0.0
        gaps = [f"{x / bound - 1:.1%}" if bound > 0 else "n/a" for x in (greedy, ilp)]
        print(f"| {i} | {n} | {len(topo.links)} | {greedy * 1e6:.2f} | {ilp * 1e6:.2f} | "
              f"{ilp / greedy:.3f} | {results[0].status} | {results[0].stats.get('source', '')} "
              f"| {i_time:.1f} s | {bound * 1e6:.2f} | {gaps[0]} | {gaps[1]} |", flush=True)


def table2(et_limit: float) -> None:
    topo = torus(8, 8, bandwidth=100e9, latency=0.5e-6)
    coll = build("allreduce", range(64), size=64 * MIB)
    greedy, _, g_time = run_phases(topo, coll, "greedy", {"max_merge": 1, "trials": 16})
    rows = []
    for label, solver, opts in [
        ("early termination (ILP alone)", "ilp",
         {"time_limit": et_limit, "upper_bound": "shortest_path", "cluster_first": False}),
        ("time clustering (ILP alone)", "ilp",
         {"mode": "cluster", "time_limit": et_limit, "upper_bound": "shortest_path"}),
        ("exact, defaults (greedy start, clustering first if large)", "ilp",
         {"time_limit": et_limit}),
        ("time clustering, greedy upper bound", "ilp",
         {"mode": "cluster", "time_limit": et_limit}),
        ("greedy (max_merge=1)", "greedy", {"max_merge": 1, "trials": 16}),
        ("TACCL-like", "taccl", {}),
        ("ring", "ring", {}),
        ("direct", "direct", {}),
    ]:
        span, results, secs = run_phases(topo, coll, solver, opts)
        source = "+".join(str(r.stats.get("source", "")) for r in results)
        rows.append((label, span, secs, _fmt_status(results), source))
    et = rows[0][1]
    print("| method | time / early termination | time / greedy | collective time | "
          "synthesis time | status (RS+AG) | schedule from |")
    print("|---|---|---|---|---|---|---|")
    for label, span, secs, status, source in rows:
        print(f"| {label} | {span / et:.2f} | {span / greedy:.2f} | {span * 1e6:.1f} µs | "
              f"{secs:.1f} s | {status} | {source} |")


def backend_table(repeats: int) -> None:
    """Time to proven optimum per back end on small problems (ILP alone, no greedy)."""
    cases = {
        "torus 3x3 all-gather": (torus(3, 3, bandwidth=100e9), build("allgather", range(9),
                                                                    size=9 * MIB)),
        "torus 4x4 all-gather, 2 chunks/NPU": (
            torus(4, 4, bandwidth=100e9), build("allgather", range(16), size=32 * MIB,
                                                chunks_per_npu=2)),
        "Ring(2)_FC(4)_Switch(2) all-gather": (ring_fc_switch(16),
                                                build("allgather", range(16), size=16 * MIB)),
        "Ring(2)_FC(4) all-to-all": (ring_fc_switch(8), build("alltoall", range(8),
                                                               size=8 * MIB)),
    }
    names = ilp_backends.available_backends()
    print("| problem | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for label, (topo, coll) in cases.items():
        cells = []
        for b in names:
            times, status = [], set()
            for _ in range(repeats):
                t0 = time.perf_counter()
                res = get_solver("ilp").solve(Problem(topo, coll, {
                    "backend": b, "time_limit": 120, "upper_bound": "shortest_path"}))
                times.append(time.perf_counter() - t0)
                status.add(res.status)
                assert verify_schedule(res.schedule).ok
            cells.append(f"{statistics.median(times):.2f} s ({'/'.join(sorted(status))}, "
                         f"T={res.stats['horizon']})")
        print(f"| {label} | " + " | ".join(cells) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["table1", "table2", "backends", "random"])
    ap.add_argument("--count", type=int, default=20)
    ap.add_argument("--sizes", type=int, nargs="*", default=[8, 16, 32, 64])
    ap.add_argument("--time-limit", type=float, default=120.0)
    ap.add_argument("--et-limit", type=float, default=300.0)
    ap.add_argument("--backend", default=None)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    print(f"<!-- {platform.platform()}, Python {platform.python_version()}, "
          f"{time.strftime('%Y-%m-%d %H:%M')} -->")
    if args.what == "table1":
        table1(args.sizes, args.time_limit, args.backend)
    elif args.what == "random":
        random_table(args.count, args.time_limit)
    elif args.what == "table2":
        table2(args.et_limit)
    else:
        backend_table(args.repeats)


if __name__ == "__main__":
    main()
