"""Symmetric synthesis at data-center scale: multi-rail Clos all-reduce and torus all-gather.

Each case runs in a fresh process (its peak RSS is its own ``ru_maxrss``): it builds the system
(:class:`tacos.model.clos.ClosFabric` or :class:`tacos.model.torus_axes.TorusAxes`), runs
:func:`tacos.scale.synthesize.synthesize_symmetric` (CPU seconds of the process), then
:func:`tacos.check.symmetric.verify_symmetric` (CPU seconds), and compares the plan's time with
the closed-form physical bound (:func:`tacos.check.bounds_symmetric.symmetric_bound`: on the
``-sharp`` fabrics, whose switches reduce, the in-network bound, otherwise the composition
bound).  The
growth exponent of a series is the least-squares slope of log(CPU) against log(NPUs).

Usage::

    nice python -m benchmarks.bench_scale_clos                 # every case, one after another
    nice python -m benchmarks.bench_scale_clos --only clos-1024
    nice python -m benchmarks.bench_scale_clos --only clos-1024-sharp clos-5000-sharp
    nice python -m benchmarks.bench_scale_clos --json out.json
    nice python -m benchmarks.bench_scale_clos --expanded       # unexpanded vs expanded check
    nice python -m benchmarks.bench_scale_clos --cli            # tacosc -o plan.json; verify
    nice python -m benchmarks.bench_scale_clos --breakdown      # shared digits: α, fill, drain

``--expanded`` compares, on systems small enough, :func:`verify_symmetric` with writing the plan
out (:func:`tacos.model.symmetric_plan.expand`) and running the full verifier on it, each in a
process of its own after the same synthesis (CPU of the check alone; peak RSS of the process).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys

GiB = 1 << 30

# name -> (system kind, shape options, collective, sizes in GiB)
CASES: dict[str, tuple[str, dict, str, tuple[float, ...]]] = {
    "clos-64": ("clos", {"nodes": 64, "tiers": 2}, "allreduce", (1, 4)),
    "clos-256": ("clos", {"nodes": 256, "tiers": 2}, "allreduce", (1, 4)),
    "clos-1024": ("clos", {"nodes": 1024, "tiers": 2}, "allreduce", (1, 4, 16)),
    "clos-5000": ("clos", {"nodes": 5000, "tiers": 3, "hosts_per_leaf": 25,
                           "leaves_per_pod": 25}, "allreduce", (1, 4, 16)),
    "clos-1024-sharp": ("clos", {"nodes": 1024, "tiers": 2, "sharp": True}, "allreduce",
                        (1 / 16, 1, 16)),
    "clos-5000-sharp": ("clos", {"nodes": 5000, "tiers": 3, "hosts_per_leaf": 25,
                                 "leaves_per_pod": 25, "sharp": True}, "allreduce",
                        (1 / 16, 1, 16)),
    "clos-1024-ag": ("clos", {"nodes": 1024, "tiers": 2}, "allgather", (1,)),
    "clos-1024-rs": ("clos", {"nodes": 1024, "tiers": 2}, "reducescatter", (1,)),
    "clos-5000-ag": ("clos", {"nodes": 5000, "tiers": 3, "hosts_per_leaf": 25,
                              "leaves_per_pod": 25}, "allgather", (1,)),
    "clos-5000-rs": ("clos", {"nodes": 5000, "tiers": 3, "hosts_per_leaf": 25,
                              "leaves_per_pod": 25}, "reducescatter", (1,)),
    "torus-8": ("torus", {"shape": (8, 8, 8)}, "allgather", (1,)),
    "torus-16": ("torus", {"shape": (16, 16, 16)}, "allgather", (1,)),
    "torus-34": ("torus", {"shape": (34, 34, 34)}, "allgather", (1,)),
}
SERIES = {"clos 2-tier/3-tier all-reduce": ("clos-64", "clos-256", "clos-1024", "clos-5000"),
          "clos with SHARP all-reduce": ("clos-1024-sharp", "clos-5000-sharp"),
          "torus all-gather": ("torus-8", "torus-16", "torus-34")}

CHILD = r"""
import json, resource, sys, time
from tacos.check.bounds_symmetric import symmetric_bound
from tacos.check.symmetric import verify_symmetric
from tacos.model.clos import ClosFabric
from tacos.model.torus_axes import TorusAxes
from tacos.scale.synthesize import synthesize_symmetric

kind, opts, coll, size = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], int(sys.argv[4])
c0 = time.process_time()
system = ClosFabric(**opts) if kind == "clos" else TorusAxes(tuple(opts["shape"]))
plan = synthesize_symmetric(system, coll, size)
c1 = time.process_time()
rep = verify_symmetric(plan)
c2 = time.process_time()
bound = symmetric_bound(system, coll, plan.size)
print(json.dumps({"npus": system.n_npus, "links": system.n_links, "synth_cpu": c1 - c0,
                  "verify_cpu": c2 - c1, "verified": rep.ok, "makespan": plan.makespan,
                  "bound": bound, "ratio": plan.makespan / bound, "parts": len(plan.parts),
                  "phases": len(plan.phases), "templates": plan.meta["templates"],
                  "transfers": plan.n_transfers, "size": plan.size,
                  "fused": plan.meta.get("fused_digits", ""),
                  "shared": plan.meta.get("shared", ""),
                  "mixed": plan.meta.get("mixed_phases", 0),
                  "lead": plan.meta.get("lead", 0),
                  "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


EXPANDED = {"clos-8": ("clos", {"nodes": 8, "tiers": 2, "hosts_per_leaf": 4}, "allreduce"),
            "clos-32": ("clos", {"nodes": 32, "tiers": 2, "hosts_per_leaf": 8}, "allreduce"),
            "torus-6": ("torus", {"shape": (6, 6, 6)}, "allgather"),
            "torus-8": ("torus", {"shape": (8, 8, 8)}, "allgather")}

CHILD_EXPANDED = r"""
import json, resource, sys, time
from tacos.check.symmetric import verify_symmetric
from tacos.check.verify import verify_schedule
from tacos.model.clos import ClosFabric
from tacos.model.symmetric_plan import expand
from tacos.model.torus_axes import TorusAxes
from tacos.scale.synthesize import synthesize_symmetric

kind, opts, coll, size, how = (sys.argv[1], json.loads(sys.argv[2]), sys.argv[3],
                               int(sys.argv[4]), sys.argv[5])
system = ClosFabric(**opts) if kind == "clos" else TorusAxes(tuple(opts["shape"]))
plan = synthesize_symmetric(system, coll, size, solvers=("greedy", "direct"))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
c0 = time.process_time()
if how == "symbolic":
    ok, n = verify_symmetric(plan).ok, plan.n_transfers
else:
    s = expand(plan)
    ok, n = verify_schedule(s).ok, len(s.transfers)
print(json.dumps({"cpu": time.process_time() - c0, "ok": ok, "transfers": n,
                  "rss_before": before,
                  "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def run_expanded() -> None:
    """The unexpanded check against the expanded one, per small system."""
    print("| system | NPUs | collective | check | CPU (s) | peak RSS (MiB; after synthesis) | "
          "transfers | verified |")
    print("|" + "---|" * 8)
    for name, (kind, opts, coll) in EXPANDED.items():
        for how in ("symbolic", "expanded"):
            out = subprocess.run([sys.executable, "-P", "-c", CHILD_EXPANDED, kind,
                                  json.dumps(opts), coll, str(64 << 20), how],
                                 capture_output=True, text=True, check=True)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            npus = 8 * opts["nodes"] if kind == "clos" else math.prod(opts["shape"])
            print(f"| {name} | {npus} | {coll} 64 MiB | {how} | {r['cpu']:.2f} | "
                  f"{r['rss_mib']:.0f} ({r['rss_before']:.0f}) | {r['transfers']:,} | "
                  f"{'yes' if r['ok'] else 'NO'} |", flush=True)


CHILD_CLI = r"""
import json, resource, sys
from tacos.cli import main
rc = main(sys.argv[1:])
use = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"cpu": use.ru_utime + use.ru_stime, "rss_mib": use.ru_maxrss / 1024}),
      file=sys.stderr)
sys.exit(rc)
"""

CLI_CASES = {"clos-1024": "use clos_h100(nodes=1024, tiers=2)\n",
             "clos-5000": "use clos_h100(nodes=5000, tiers=3, hosts_per_leaf=25, "
                          "leaves_per_pod=25)\n",
             "clos-1024-sharp": "use clos_h100(nodes=1024, tiers=2, sharp=1)\n",
             "clos-5000-sharp": "use clos_h100(nodes=5000, tiers=3, hosts_per_leaf=25, "
                                "leaves_per_pod=25, sharp=1)\n"}


def run_cli(size: str = "1GiB", only: list[str] | None = None) -> None:
    """``tacosc clos.tdl -c allreduce --size 1GiB -o plan.json`` then ``tacosc verify
    plan.json``, each a process of its own: CPU (user + system) and peak RSS of that process."""
    import tempfile
    from pathlib import Path

    print("| system | command | CPU (s) | peak RSS (MiB) | file (KiB) | output |")
    print("|" + "---|" * 6)
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in CLI_CASES.items():
            if only and name not in only:
                continue
            tdl = Path(tmp) / f"{name}.tdl"
            tdl.write_text(text)
            plan = Path(tmp) / f"{name}.json"
            for cmd in (["-c", "allreduce", "--size", size, "-o", str(plan), "-q"],
                        ["verify", str(plan)]):
                argv = cmd if cmd[0] == "verify" else [str(tdl), *cmd]
                out = subprocess.run([sys.executable, "-P", "-c", CHILD_CLI, *argv],
                                     capture_output=True, text=True, check=True)
                own = json.loads(out.stderr.strip().splitlines()[-1])
                shown = " ".join(["tacosc", *(a if a != str(tdl) else tdl.name for a in argv)])
                shown = shown.replace(str(plan), "plan.json")
                line = out.stdout.strip().splitlines()[-1].replace(str(plan), "plan.json")
                print(f"| {name} | `{shown}` | {own['cpu']:.1f} | {own['rss_mib']:.0f} | "
                      f"{plan.stat().st_size / 1024:.0f} | {line} |", flush=True)


def rail_breakdown(plan) -> dict:
    """Where a Clos all-reduce plan's time above the bandwidth term goes: the route α of the
    rail phases' transfers out of one NIC (member 0 of each template), the rails' idle time
    before the first and after the last rail phase (fill, drain) and between rail phases."""
    system = plan.system
    rail = sorted((p for p in plan.phases if system.tier(p.axis) > 0), key=lambda p: p.start)
    alpha = 0.0
    for p in rail:
        sent = {}   # a joint transfer's members (one group) pay the route's alpha once
        for k, t in enumerate(p.template.transfers):
            if t.src == 0:
                sent.setdefault(("g", t.group) if t.group is not None else k, t.route)
        alpha += sum(sum(p.template.topology.links[li].alpha for li in r)
                     for r in sent.values())
    busy = sum(p.template.makespan for p in rail)
    first, last = rail[0].start, max(p.end for p in rail)
    return {"alpha": alpha, "fill": first, "drain": plan.makespan - last,
            "gaps": last - first - busy}


def run_breakdown(size_gib: float = 1) -> None:
    """Shared-digit layouts of the 1,024- and 5,000-node fabrics with ``direct`` templates
    (fast; the benchmarked plans use the default solvers): time / bound and where the time
    above the bound goes, per layout the model ranks best."""
    from tacos.check.bounds_symmetric import symmetric_bound
    from tacos.model.clos import ClosFabric
    from tacos.scale import shared
    from tacos.scale.mixed import mixed_template
    from tacos.scale.synthesize import TemplateSolver

    print("| case | mixed phases | layout (weights:cuts) | time / bound | rail α on one NIC (µs) "
          "| fill (µs) | drain (µs) | gaps (µs) |")
    print("|" + "---|" * 8)
    for name in ("clos-1024", "clos-5000"):
        system = ClosFabric(**CASES[name][1])
        size = int(size_gib * GiB) // system.n_npus * system.n_npus
        solve = TemplateSolver(("direct",), 0)
        bound = symmetric_bound(system, "allreduce", size)
        for mix in (None, mixed_template):
            layout = shared.candidates(system, "allreduce", size, solve, keep=1, mix=mix)[0]
            plan = shared.build(system, "allreduce", size, layout, solve,
                                mix=mix if layout.mixed else None)
            b = rail_breakdown(plan)
            print(f"| {name} | {plan.meta.get('mixed_phases', 0)} | {plan.meta['shared']} | "
                  f"{plan.makespan / bound:.4f} | "
                  f"{b['alpha'] * 1e6:.0f} | {b['fill'] * 1e6:.0f} | {b['drain'] * 1e6:.0f} | "
                  f"{b['gaps'] * 1e6:.1f} |", flush=True)


def run(name: str, size_gib: float) -> dict:
    """One case in a fresh interpreter; its JSON line."""
    kind, opts, coll, _ = CASES[name]
    out = subprocess.run([sys.executable, "-P", "-c", CHILD, kind, json.dumps(opts), coll,
                          str(int(size_gib * GiB))], capture_output=True, text=True, check=True)
    row = json.loads(out.stdout.strip().splitlines()[-1])
    row.update(case=name, collective=coll, size_gib=size_gib)
    return row


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of log y against log x."""
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True)) / \
        sum((a - mx) ** 2 for a in lx)


def main(argv: list[str] | None = None) -> None:
    """Run the cases, print a markdown table and the growth exponents."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", help="case names")
    ap.add_argument("--json", help="also write the rows here")
    ap.add_argument("--sizes", nargs="*", type=float, help="only these sizes (GiB) of each case")
    ap.add_argument("--expanded", action="store_true",
                    help="compare the unexpanded check with the expanded one instead")
    ap.add_argument("--breakdown", action="store_true",
                    help="where the shared-digit plans' time above the bound goes")
    ap.add_argument("--cli", action="store_true",
                    help="time tacosc's symmetric path and tacosc verify instead")
    args = ap.parse_args(argv)
    if args.expanded:
        run_expanded()
        return
    if args.cli:
        run_cli(only=args.only)
        return
    if args.breakdown:
        run_breakdown()
        return
    rows = []
    print("| case | NPUs | collective | size | synthesis CPU (s) | verify CPU (s) | peak RSS "
          "(MiB) | time (ms) | bound (ms) | time / bound | parts | templates | transfers "
          "represented | fused digits per part (per group if shared) | shared groups "
          "(weights:cuts) | verified |")
    print("|" + "---|" * 16)
    for name in args.only or CASES:
        for size in [x for x in CASES[name][3] if not args.sizes or x in args.sizes]:
            r = run(name, size)
            rows.append(r)
            mixed = f" + {r['mixed']} mixed phases" if r.get("mixed") else ""
            if r.get("lead"):
                mixed = f"SHARP+NVLS, lead {r['lead']}, {r['mixed']} mixed node phases"
            print(f"| {name} | {r['npus']:,} | {r['collective']} | {size:g} GiB | "
                  f"{r['synth_cpu']:.1f} | {r['verify_cpu']:.2f} | {r['rss_mib']:.0f} | "
                  f"{r['makespan'] * 1e3:.3f} | {r['bound'] * 1e3:.3f} | {r['ratio']:.4f} | "
                  f"{r['parts']} | {r['templates']} | {r['transfers']:,} | "
                  f"{r.get('fused') or '-'} | {r.get('shared') or '-'}"
                  f"{mixed} | "
                  f"{'yes' if r['verified'] else 'NO'} |", flush=True)
    for series, names in SERIES.items():
        pts = [(r["npus"], r["synth_cpu"] + r["verify_cpu"], r["rss_mib"]) for r in rows
               if r["case"] in names and r["size_gib"] == 1]
        if len(pts) >= 2:
            xs = [p[0] for p in pts]
            print(f"growth, {series} at 1 GiB: CPU ~ N^{slope(xs, [p[1] for p in pts]):.2f}, "
                  f"peak RSS ~ N^{slope(xs, [p[2] for p in pts]):.2f}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
