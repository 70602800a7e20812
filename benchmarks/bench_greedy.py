"""Greedy solver vs TACOS C++ on the reference all-gather rows (reference.md Appendix A).

Every row of tables A1 (1 GiB, 1 chunk/NPU) and A1b (64 MiB, 1 and 4 chunks/NPU), links
50 GiB/s and 0.5 µs, plus 1 GiB with 4 chunks/NPU.  For each row and mode:

* ``chunk``: ``max_merge=1`` (TACOS's chunk-granular model), as many trials as TACOS's runs;
* ``merged``: ``max_merge='auto'`` (multi-chunk transfers), ``--trials`` trials.

Reported: best collective time, the ideal bound max((N-1)/N·M/(d_min·B), diameter·α) and the
ratio to it, the chunk-granular bound max(ceil((N-1)k/d_min), diameter)·(α + chunk/B), TACOS
C++'s time/ratio from the tables, and the median synthesis time (wall and CPU).  Every schedule
of up to ``--verify-max`` NPUs is checked with the independent verifier.

Usage::

    python benchmarks/bench_greedy.py                 # rows up to 256 NPUs
    python benchmarks/bench_greedy.py --big           # also the 512/1024-NPU rows
    python benchmarks/bench_greedy.py --only 'torus3d 8x8x8' --modes merged
    python benchmarks/bench_greedy.py --allreduce     # 32x32 mesh all-reduce
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections import deque

from tacos.builders import mesh, torus
from tacos.model.patterns import build
from tacos.model.topology import Topology
from tacos.solvers.greedy.solver import GreedySolver
from tacos.solvers.registry import Problem

MiB = 1 << 20
GiB = 1 << 30
BW = 50 * GiB
ALPHA = 0.5e-6

# (topology, dims, size, chunks/NPU, TACOS C++ best time µs, TACOS median synthesis s, runs)
A1 = [
    ("mesh2d", (4, 4), GiB, 1, 10004.0, 0.14e-3, 10),
    ("mesh2d", (8, 8), GiB, 1, 10016.0, 6.1e-3, 3),
    ("torus2d", (8, 8), GiB, 1, 5321.0, 4.2e-3, 3),
    ("torus3d", (4, 4, 4), GiB, 1, 3443.0, 3.4e-3, 3),
    ("mesh2d", (16, 16), GiB, 1, 10064.0, 0.47, 1),
    ("torus3d", (8, 8, 8), GiB, 1, 3402.0, 4.07, 1),
]
A1B = [
    ("mesh2d", (4, 4), 64 * MiB, 1, 629.0, 0.2e-3, 3),
    ("mesh2d", (4, 4), 64 * MiB, 4, 600.9, 1.5e-3, 3),
    ("mesh2d", (8, 8), 64 * MiB, 1, 641.0, 6.7e-3, 3),
    ("mesh2d", (8, 8), 64 * MiB, 4, 678.2, 90.4e-3, 3),
    ("mesh2d", (16, 16), 64 * MiB, 1, 689.0, 535.1e-3, 3),
    ("mesh2d", (16, 16), 64 * MiB, 4, 877.6, 8.55, 3),
    ("torus2d", (8, 8), 64 * MiB, 1, 340.5, 4.6e-3, 3),
    ("torus2d", (8, 8), 64 * MiB, 4, 344.5, 58.4e-3, 3),
    ("torus2d", (16, 16), 64 * MiB, 1, 349.9, 343.7e-3, 3),
    ("torus2d", (16, 16), 64 * MiB, 4, 440.5, 6.53, 3),
    ("torus3d", (4, 4, 4), 64 * MiB, 1, 220.3, 3.6e-3, 3),
    ("torus3d", (4, 4, 4), 64 * MiB, 4, 231.5, 46.4e-3, 3),
    ("torus3d", (8, 8, 8), 64 * MiB, 1, 253.0, 3.06, 3),
    ("torus3d", (8, 8, 8), 64 * MiB, 4, 378.6, 57.25, 3),
    ("hypercube3d", (4, 4, 4), 64 * MiB, 1, 420.7, 4.8e-3, 3),
    ("hypercube3d", (4, 4, 4), 64 * MiB, 4, 452.2, 60.3e-3, 3),
    ("hypercube3d", (8, 8, 8), 64 * MiB, 1, 503.0, 4.16, 3),
    ("hypercube3d", (8, 8, 8), 64 * MiB, 4, 757.3, 71.00, 3),
    ("mesh2d", (32, 32), 64 * MiB, 1, 881.0, 55.47, 1),
    ("mesh2d", (32, 32), 64 * MiB, 4, None, None, 1),  # TACOS: did not finish in 600 s
]
GIB_K4 = [
    ("mesh2d", (4, 4), GiB, 4, None, None, 3),
    ("mesh2d", (8, 8), GiB, 4, None, None, 3),
    ("torus2d", (8, 8), GiB, 4, None, None, 3),
    ("torus3d", (4, 4, 4), GiB, 4, None, None, 3),
    ("mesh2d", (16, 16), GiB, 4, None, None, 1),
    ("torus3d", (8, 8, 8), GiB, 4, None, None, 1),
]


def grid(dims: tuple[int, ...], wrap: bool) -> Topology:
    """Mesh (no wrap-around) or torus with bidirectional 50 GiB/s, 0.5 µs links."""
    return (torus if wrap else mesh)(*dims, bandwidth=BW, latency=ALPHA)


def diameter(topo: Topology) -> int:
    """Largest BFS hop distance (these grids are vertex-transitive or corner-limited)."""
    n = topo.n_npus
    adj: list[list[int]] = [[] for _ in range(n)]
    for lk in topo.links:
        adj[lk.src].append(lk.dst)
    sources = [0] if n > 256 else range(n)  # node 0 is a corner/any node: eccentricity = diam
    worst = 0
    for s in sources:
        dist = [-1] * n
        dist[s] = 0
        q = deque([s])
        while q:
            v = q.popleft()
            for w in adj[v]:
                if dist[w] < 0:
                    dist[w] = dist[v] + 1
                    q.append(w)
        worst = max(worst, max(dist))
    return worst


def bounds(topo: Topology, size: int, k: int) -> tuple[float, float]:
    """(ideal bound, chunk-granular bound) in seconds for an all-gather of ``size`` bytes."""
    n = topo.n_npus
    d_min = min(topo.in_degree(v) for v in range(n))
    diam = diameter(topo)
    ideal = max((n - 1) / n * size / (d_min * BW), diam * ALPHA)
    chunk = size // (n * k)
    steps = max(math.ceil((n - 1) * k / d_min), diam)
    return ideal, steps * (ALPHA + chunk / BW)


def run(topo: Topology, size: int, k: int, max_merge, trials: int, reps: int, workers: int,
        verify_max: int, kind: str = "allgather") -> dict:
    """Best makespan over ``reps`` solves of ``trials`` trials, median times."""
    coll = build(kind, range(topo.n_npus), size=size, chunks_per_npu=k)
    best, walls, cpus, sched = math.inf, [], [], None
    for rep in range(reps):
        w0, c0 = time.perf_counter(), time.process_time()
        if kind == "allgather":
            res = GreedySolver().solve(Problem(topo, coll, dict(
                seed=rep, trials=trials, workers=workers, max_merge=max_merge)))
            s = res.schedule
        else:
            from tacos.synthesize import synthesize
            s = synthesize(topo, coll, seed=rep, trials=trials, workers=workers,
                           max_merge=max_merge, bound=False)
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
        if s.makespan < best:
            best, sched = s.makespan, s
    ok = None
    if topo.n_npus <= verify_max:
        from tacos.check.verify import verify_schedule
        ok = verify_schedule(sched).ok
    return dict(time=best, wall=statistics.median(walls), cpu=statistics.median(cpus),
                verified=ok, cap=sched.meta.get("best_cap"))


def fmt_s(x: float | None) -> str:
    if x is None:
        return "—"
    return f"{x * 1e3:.1f} ms" if x < 1 else f"{x:.2f} s"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--big", action="store_true", help="include the 512/1024-NPU rows")
    ap.add_argument("--only", default="", help="substring filter on 'topology dims size k'")
    ap.add_argument("--modes", default="chunk,merged")
    ap.add_argument("--trials", type=int, default=8, help="trials in merged mode (small rows)")
    ap.add_argument("--big-trials", type=int, default=4, help="merged trials, >= 512 NPUs")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--verify-max", type=int, default=256)
    ap.add_argument("--allreduce", action="store_true", help="32x32 mesh all-reduce rows")
    args = ap.parse_args()
    modes = args.modes.split(",")
    if args.allreduce:
        topo = grid((32, 32), False)
        for mode, mm in (("chunk", 1), ("merged", "auto")):
            if mode in modes:
                r = run(topo, 64 * MiB, 1, mm, 1 if mode == "chunk" else args.big_trials, 1,
                        args.workers, 0, kind="allreduce")
                print(f"| mesh2d 32x32 all-reduce 64 MiB k=1 | {mode} | {r['time'] * 1e6:.1f} | "
                      f"{fmt_s(r['wall'])} | {fmt_s(r['cpu'])} |", flush=True)
        return
    print("| topology | N | size | k | mode | ours (µs) | ideal (µs) | ratio | chunk bound (µs) "
          "| TACOS C++ (µs) | TACOS ratio | synthesis wall | synthesis CPU | TACOS synthesis "
          "| cap | verified |")
    print("|" + "---|" * 16)
    for name, dims, size, k, ref, ref_s, runs in A1 + A1B + GIB_K4:
        n = math.prod(dims)
        label = f"{name} {'x'.join(map(str, dims))} {'1 GiB' if size == GiB else '64 MiB'} {k}"
        if args.only and args.only not in label:
            continue
        if n >= 512 and not args.big:
            continue
        topo = grid(dims, name.startswith("torus"))
        ideal, cg = bounds(topo, size, k)
        for mode in modes:
            if mode == "chunk" and ref is None:
                continue
            big = n >= 512
            if mode == "chunk":
                r = run(topo, size, k, 1, 1, runs, args.workers, args.verify_max)
            else:
                r = run(topo, size, k, "auto", args.big_trials if big else args.trials, 1,
                        args.workers, args.verify_max)
            ours = r["time"]
            print(f"| {name} {'x'.join(map(str, dims))} | {n} | "
                  f"{'1 GiB' if size == GiB else '64 MiB'} | {k} | {mode} | {ours * 1e6:.1f} | "
                  f"{ideal * 1e6:.1f} | {ours / ideal:.3f} | {cg * 1e6:.1f} | "
                  f"{'—' if ref is None else f'{ref:.1f}'} | "
                  f"{'—' if ref is None else f'{ref * 1e-6 / ideal:.3f}'} | {fmt_s(r['wall'])} | "
                  f"{fmt_s(r['cpu'])} | {fmt_s(ref_s)} | {r['cap'] or 1} | "
                  f"{'—' if r['verified'] is None else ('yes' if r['verified'] else 'NO')} |",
                  flush=True)


if __name__ == "__main__":
    main()
