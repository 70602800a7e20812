"""Benchmarks of the ILP (seed paper Tables I and II, random graphs, back-end comparison).

Usage::

    python benchmarks/bench_ilp.py table1 [--sizes 8 16 32 64] [--time-limit 120]
    python benchmarks/bench_ilp.py random [--count 20] [--time-limit 60] [--chunks 1]
    python benchmarks/bench_ilp.py table2 [--et-limit 300]
    python benchmarks/bench_ilp.py backends

Each prints a Markdown table to paste into ``docs/benchmarks/ilp.md``.  All-reduce is run as
the reduce-scatter (solved as the dual all-gather on the reversed topology) followed by the
all-gather, exactly as :func:`tacos.synthesize` does; ``--time-limit`` applies to each phase.
Every schedule is checked with :func:`tacos.check.verify.verify_schedule`.

``table1`` and ``random`` run the greedy (16 trials, default merging) and the ILP (default:
the link formulation) side by side, in-process, and report CPU seconds; the proven bound is the
ILP's (for all-reduce the sum of its phases' bounds, valid for schedules that reduce-scatter
then all-gather), the gaps are ``(time - bound) / time``.  ``random`` draws ``--count``
connected graphs of 4-8 NPUs from a seeded generator (each link 50, 100 or 200 GB/s,
α = 0.5 µs, both directions), all-gather of 1 MiB per NPU.  ``table2`` and ``backends``
measure the seed's time-expanded-network formulation (``formulation="ten"``).
"""

from __future__ import annotations

import argparse
import platform
import random
import resource
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


def cpu_seconds() -> float:
    """CPU seconds of this process and its finished children so far."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def measured(topology: Topology, collective, solver: str, options: dict
             ) -> tuple[float, list[SolveResult], float]:
    """:func:`run_phases` with CPU seconds instead of wall seconds."""
    c0 = cpu_seconds()
    span, results, _ = run_phases(topology, collective, solver, options)
    return span, results, cpu_seconds() - c0


def compare(topology: Topology, collective, limit: float, backend: str | None
            ) -> dict[str, object]:
    """Greedy (16 trials, default merging) against the ILP (default formulation) side by side:
    both in-process (``workers=1``) so that CPU seconds are all counted."""
    greedy, _, g_cpu = measured(topology, collective, "greedy", {"trials": 16, "workers": 1})
    opts: dict[str, object] = {"time_limit": limit, "workers": 1}
    if backend:
        opts["backend"] = backend
    ilp, results, i_cpu = measured(topology, collective, "ilp", opts)
    proven = sum(r.lower_bound or 0.0 for r in results)  # RS + AG: their bounds add up
    tacos_bound = sum(r.stats.get("bound_tacos") or 0.0 for r in results)
    return {"greedy": greedy, "ilp": ilp, "results": results, "greedy_cpu": g_cpu,
            "ilp_cpu": i_cpu, "proven": proven, "tacos_bound": tacos_bound,
            "gap": (ilp - proven) / ilp if ilp > 0 else 0.0,
            "greedy_gap": (greedy - proven) / greedy if greedy > 0 else 0.0,
            "source": "+".join(str(r.stats.get("source", "")) for r in results),
            "scope": "+".join(str(r.stats.get("bound_scope", "TEN")) for r in results)}


HEADER = ("ILP (µs) | greedy (µs) | ILP / greedy | status | ILP from | proven bound (µs) | "
          "ILP gap | greedy gap | ILP CPU | greedy CPU | bound holds for | tacos bound (µs) |")


def _cells(r: dict) -> str:
    return (f"{r['ilp'] * 1e6:.2f} | {r['greedy'] * 1e6:.2f} | {r['ilp'] / r['greedy']:.3f} | "
            f"{_fmt_status(r['results'])} | {r['source']} | {r['proven'] * 1e6:.2f} | "
            f"{r['gap']:.2%} | {r['greedy_gap']:.2%} | {r['ilp_cpu']:.2f} s | "
            f"{r['greedy_cpu']:.2f} s | {r['scope']} | {r['tacos_bound'] * 1e6:.2f} |")


def _summary(rows: list[dict]) -> None:
    worse = sum(r["ilp"] > r["greedy"] * (1 + 1e-12) for r in rows)
    far = [r for r in rows if r["greedy_gap"] >= 0.03]
    beaten = sum(r["ilp"] <= r["greedy"] * 0.97 for r in far)
    within = sum(r["gap"] <= 0.01 for r in rows)
    print(f"\nILP slower than greedy: {worse} of {len(rows)}; proven within 1%: {within} of "
          f"{len(rows)}; greedy >= 3% from the proven bound: {len(far)}, of which the ILP "
          f"beats the greedy by >= 3%: {beaten}; median ILP CPU "
          f"{statistics.median(r['ilp_cpu'] for r in rows):.2f} s, median greedy CPU "
          f"{statistics.median(r['greedy_cpu'] for r in rows):.2f} s")


def table1(sizes: list[int], limit: float, backend: str | None) -> None:
    """Table I shapes, all-reduce (reduce-scatter + all-gather), ILP against greedy."""
    print("| NPUs | " + HEADER)
    print("|---" * 13 + "|")
    rows = []
    for n in sizes:
        r = compare(ring_fc_switch(n), build("allreduce", range(n), size=n * MIB), limit,
                    backend)
        rows.append(r)
        print(f"| {n} | " + _cells(r), flush=True)
    _summary(rows)


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


def random_table(count: int, limit: float, seed: int = 0, backend: str | None = None,
                 chunks: int = 1) -> None:
    """ILP against greedy on ``count`` seeded random graphs (see the module docstring),
    ``chunks`` chunks of 1 MiB per NPU."""
    rng = random.Random(seed)
    print("| # | NPUs | links | " + HEADER)
    print("|---" * 15 + "|")
    rows = []
    for i in range(count):
        n = rng.randint(4, 8)
        topo = random_graph(rng, n)
        r = compare(topo, build("allgather", range(n), size=n * chunks * MIB,
                                chunks_per_npu=chunks), limit, backend)
        rows.append(r)
        print(f"| {i} | {n} | {len(topo.links)} | " + _cells(r), flush=True)
    _summary(rows)


def table2(et_limit: float) -> None:
    topo = torus(8, 8, bandwidth=100e9, latency=0.5e-6)
    coll = build("allreduce", range(64), size=64 * MIB)
    greedy, _, g_time = run_phases(topo, coll, "greedy", {"max_merge": 1, "trials": 16})
    rows = []
    for label, solver, opts in [
        ("early termination (ILP alone)", "ilp",
         {"time_limit": et_limit, "upper_bound": "shortest_path", "cluster_first": False,
          "formulation": "ten"}),
        ("time clustering (ILP alone)", "ilp",
         {"mode": "cluster", "time_limit": et_limit, "upper_bound": "shortest_path",
          "formulation": "ten"}),
        ("exact, defaults (greedy start, clustering first if large)", "ilp",
         {"time_limit": et_limit, "formulation": "ten"}),
        ("time clustering, greedy upper bound", "ilp",
         {"mode": "cluster", "time_limit": et_limit, "formulation": "ten"}),
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
                    "backend": b, "time_limit": 120, "upper_bound": "shortest_path",
                    "formulation": "ten"}))
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
    ap.add_argument("--chunks", type=int, default=1, help="random: chunks per NPU")
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
        random_table(args.count, args.time_limit, backend=args.backend, chunks=args.chunks)
    elif args.what == "table2":
        table2(args.et_limit)
    else:
        backend_table(args.repeats)


if __name__ == "__main__":
    main()
