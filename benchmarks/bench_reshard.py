"""Cross-mesh resharding on seed 001's Table 2 cases: tacos against the bound and the baselines.

Cases: the seed's microbenchmark suite (Table 2; the extracted table lost its specs, so they
come from the suite the seed's code ships with, ``perf_n_to_m_suite``: tensor (1024, 1024, 512)
float32, case 6 (3072, 1024, 170); case 8's specs, duplicated from case 7 there, are read from
the text: one broadcast between (2, 3) and (3, 2) meshes, i.e. RRR -> RRR).

Systems:

* ``p3`` -- the seed's testbed: p3.8xlarge nodes (4x V100, one 10 Gb/s interface each), the
  Table 2 mesh shapes exactly (host x GPU);
* ``ndv2`` -- 8-GPU nodes (DGX-1 with one 100 Gb/s InfiniBand NIC on GPU 0), every mesh twice
  as wide (a (2, 4) mesh becomes (2, 8): two 2-node meshes of 8-GPU nodes);
* ``dgx_a100`` -- the same meshes on DGX-A100 nodes (one 200 Gb/s NIC per GPU, rails).

For every case: the bound (tacos.check.bounds.lower_bound, whose group cut sees the host
interfaces), tacos's plan (multicast tree packing, pieces per tile chosen by trial), and the
baselines on the same physical model: send/recv (Alpa without local all-gather), Alpa (send/recv
+ local all-gather) and the seed's load-balanced broadcast.  Every plan is verified.

Usage::

    python benchmarks/bench_reshard.py                       # every system, markdown to stdout
    python benchmarks/bench_reshard.py --systems p3 --cases 3,4
    python benchmarks/bench_reshard.py --docs                # also docs/benchmarks/reshard.csv
    python benchmarks/bench_reshard.py --render docs/benchmarks/reshard.csv   # its tables
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path

import tacos
from tacos.model.units import format_time
from tacos.reshard import DeviceMesh, Reshard, plan_reshard

# case: (tensor, source mesh, source spec, destination mesh, destination spec)
CASES = {
    1: ((1024, 1024, 512), (2, 4), "S0RR", (2, 4), "S0RR"),
    2: ((1024, 1024, 512), (2, 4), "RRR", (2, 4), "S0RR"),
    3: ((1024, 1024, 512), (2, 4), "RS0R", (2, 4), "S0RR"),
    4: ((1024, 1024, 512), (2, 4), "RS01R", (2, 4), "S01RR"),
    5: ((1024, 1024, 512), (2, 4), "S1RR", (2, 4), "S0RR"),
    6: ((3072, 1024, 170), (2, 4), "S0RR", (3, 4), "S0RR"),
    7: ((1024, 1024, 512), (1, 4), "S1RR", (2, 4), "RRR"),
    8: ((1024, 1024, 512), (2, 3), "RRR", (3, 2), "RRR"),
    9: ((1024, 1024, 512), (2, 4), "RS0R", (2, 4), "RRS0"),
}
# what the seed reports for its broadcast schedule against Alpa (§5.1.2)
SEED_CLAIM = {1: "similar", 2: "similar", 3: "3-10x", 4: "up to 10x", 5: "similar",
              6: "similar", 7: "up to 2.5x", 8: "up to 2.5x", 9: "3-10x"}
# system: (preset, GPUs per node, mesh widening factor)
SYSTEMS = {"p3": ("p3_8xlarge", 4, 1), "ndv2": ("ndv2", 8, 2), "dgx_a100": ("dgx_a100", 8, 2)}


def meshes(system: str, case: int) -> tuple[tacos.Topology, Reshard]:
    """The topology (just enough nodes) and the reshard of ``case`` on ``system``."""
    preset, per_node, widen = SYSTEMS[system]
    shape, src_shape, src_spec, dst_shape, dst_spec = CASES[case]
    src_shape = (src_shape[0], src_shape[1] * widen)
    dst_shape = (dst_shape[0], dst_shape[1] * widen)
    nodes = src_shape[0] + dst_shape[0]
    topo = tacos.parse(f"use {preset}(nodes={nodes})\n").topology

    def mesh(first: int, hosts_gpus: tuple[int, int]) -> DeviceMesh:
        hosts, gpus = hosts_gpus
        return DeviceMesh.of([(first + h) * per_node + g for h in range(hosts)
                              for g in range(gpus)], hosts_gpus)

    return topo, Reshard.of(shape, mesh(0, src_shape), src_spec, mesh(src_shape[0], dst_shape),
                            dst_spec, name=f"case {case}")


def run(system: str, case: int, seed: int, relays: str = "members") -> dict:
    topo, r = meshes(system, case)
    t0 = time.perf_counter()
    result = plan_reshard(topo, r, seed=seed, relays=relays)
    wall = time.perf_counter() - t0
    b = result.bound.value
    row = {
        "system": system, "case": case, "tensor": "x".join(map(str, r.shape)),
        "src": f"{r.src_spec} {r.src.shape[0]}x{r.src.shape[1]}",
        "dst": f"{r.dst_spec} {r.dst.shape[0]}x{r.dst.shape[1]}",
        "tasks": len(r.tasks), "bound_ms": b * 1e3, "bound_kind": result.bound.kind,
        "tacos_ms": result.plan.time * 1e3, "tacos_gap": result.plan.time / b,
        "pieces": result.plan.pieces, "wall_s": wall,
    }
    for name, c in result.baselines.items():
        row[f"{name}_ms"] = c.time * 1e3
        row[f"{name}_gap"] = c.time / b
        row[f"{name}_speedup"] = c.time / result.plan.time
    return row


def _ms(x: float) -> str:
    return format_time(float(x) / 1e3)


def table(rows: list[dict]) -> str:
    head = ("| case | tensor | source | destination | tasks | bound | tacos (gap, pieces) | "
            "seed broadcast (gap) | Alpa (x tacos) | send/recv (x tacos) | "
            "seed: broadcast vs Alpa | plan time |")
    out = [head, "|" + " --- |" * (head.count("|") - 1)]
    for r in rows:
        r = {k: (float(v) if k.endswith(("_ms", "_gap", "_speedup", "_s")) else v)
             for k, v in r.items()}
        out.append(
            f"| {r['case']} | {r['tensor']} | {r['src']} | {r['dst']} | {r['tasks']} | "
            f"{_ms(r['bound_ms'])} | {_ms(r['tacos_ms'])} ({r['tacos_gap']:.3f}x, "
            f"{r['pieces']}) | {_ms(r['broadcast_ms'])} ({r['broadcast_gap']:.3f}x) | "
            f"{_ms(r['alpa_ms'])} ({r['alpa_speedup']:.2f}x) | {_ms(r['sendrecv_ms'])} "
            f"({r['sendrecv_speedup']:.2f}x) | {SEED_CLAIM[int(r['case'])]} | "
            f"{r['wall_s']:.1f} s |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--cases", default=",".join(map(str, CASES)))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--relays", choices=("members", "all"), default="members",
                    help="which NPUs tacos may relay through (default: the meshes' own)")
    ap.add_argument("--docs", action="store_true",
                    help="write docs/benchmarks/reshard.csv (the page's tables: --render it)")
    ap.add_argument("--render", metavar="CSV", help="only print the tables of a results CSV")
    args = ap.parse_args()
    if args.render:
        with open(args.render, newline="") as fh:
            rows = list(csv.DictReader(fh))
        for system in SYSTEMS:
            mine = sorted((r for r in rows if r["system"] == system), key=lambda r: int(r["case"]))
            if mine:
                print(f"### {system} ({SYSTEMS[system][0]})\n\n{table(mine)}\n")
        return
    systems = args.systems.split(",")
    cases = [int(c) for c in args.cases.split(",")]
    sections = []
    rows_all = []
    for system in systems:
        rows = [run(system, c, args.seed, args.relays) for c in cases]
        rows_all += rows
        sections.append(f"### {system} ({SYSTEMS[system][0]})\n\n{table(rows)}\n")
        print(sections[-1], flush=True)
    if args.docs:
        out = Path(__file__).parent.parent / "docs" / "benchmarks"
        with open(out / "reshard.csv", "w", newline="") as fh:
            keys = sorted({k for r in rows_all for k in r})
            w = csv.DictWriter(fh, fieldnames=keys)
            w.writeheader()
            w.writerows(rows_all)


if __name__ == "__main__":
    main()
