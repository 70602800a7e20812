"""Bounds and feasibility at scale: ``python -m benchmarks.bench_bounds_scale [--sizes 8,12,16]
[--tree PATH]``.

Times each part of :func:`tacos.check.bounds.lower_bound` (latency, ingress/egress, chunk-granular,
min-cut) and :func:`tacos.passes.feasibility.check_feasible` for an all-gather on k x k x k
tori (CPU seconds, ``time.process_time``), and prints the values so that two trees can be
compared: ``--tree /path/to/other/checkout`` imports tacos from there instead (run both in one
session on a shared machine and compare the ratios).
"""

from __future__ import annotations

import argparse
import sys
import time


def main(argv: list[str] | None = None) -> int:
    """Time every part for every size and print a Markdown table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="8,12,16")
    ap.add_argument("--tree", default=None, help="import tacos from this checkout")
    args = ap.parse_args(argv)
    if args.tree:
        sys.path.insert(0, args.tree)
    import tacos
    from tacos import builders
    from tacos.check import bounds
    from tacos.model import patterns
    from tacos.passes.feasibility import check_feasible

    print(f"tacos from {tacos.__file__}\n")
    print("| torus | NPUs | latency + chunk-granular (s) | ingress/egress (s) | cut (s) | "
          "feasibility (s) | latency bound (µs) | chunk-granular (µs) |")
    print("|---|---|---|---|---|---|---|---|")
    for k in (int(x) for x in args.sizes.split(",")):
        topo = builders.torus(k, k, k, bandwidth=50e9, latency=5e-7)
        n = topo.n_npus
        coll = patterns.build("allgather", range(n), size=n * 2 ** 16)
        clock = time.process_time
        t = clock()
        lat = bounds.latency_bound(topo, coll)
        cg = bounds.chunk_granular_bound(topo, coll)
        t_lat = clock() - t
        t = clock()
        bounds.ingress_egress_bound(topo, coll)
        t_ie = clock() - t
        t = clock()
        bounds.cut_bound(topo, coll)
        t_cut = clock() - t
        t = clock()
        check_feasible(topo, coll)
        t_feas = clock() - t
        print(f"| {k}x{k}x{k} | {n} | {t_lat:.2f} | {t_ie:.2f} | {t_cut:.2f} | {t_feas:.2f} | "
              f"{lat * 1e6:.3f} | {cg * 1e6:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
