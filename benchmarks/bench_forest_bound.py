"""forest (and the default solver) on multi-node groups: CPU seconds and fraction of the optimum,
before and after a change, side by side in one run.

Every row runs in a fresh child process with ``--timeout`` seconds of wall time; the child
synthesizes an all-gather (or the collective of ``--kinds``) over every GPU of a preset with
``tacos.synthesize.solve`` (``bound=False``: the synthesis alone is timed, CPU seconds of the
child and its worker processes), simulates and verifies the schedule, and prints the fraction
of the optimum (forest's min-cut time, else the cut bound) that the simulated schedule reaches.

``--before DIR`` runs each row first with the package found in ``DIR`` (for example the
previous commit exported with ``git archive``), then with this tree.

Usage::

    python -m benchmarks.bench_forest_bound                            # forest rows, this tree
    python -m benchmarks.bench_forest_bound --before /tmp/tacos-before
    python -m benchmarks.bench_forest_bound --auto --nodes 8,32       # default solver, k DGX-A100
    python -m benchmarks.bench_forest_bound --sweep                   # both sizes in one process
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

SYSTEMS = {
    "2x DGX-2": ("dgx2", 2),
    "2x DGX-A100": ("dgx_a100", 2),
    "4x DGX-A100": ("dgx_a100", 4),
    "2x DGX-H100": ("dgx_h100", 2),
    "4x DGX-H100": ("dgx_h100", 4),
    "2x MI250": ("mi250", 2),
}
SIZES = {"64MiB": 64 << 20, "1GiB": 1 << 30}

CHILD = r"""
import json, os, sys
import tacos
from tacos.check.bounds import cut_bound
from tacos.check.simulate import simulate
from tacos.check.verify import verify_schedule
from tacos.model import patterns
from tacos.synthesize import solve

preset, nodes, kind, solver = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[5]
topo = tacos.parse(f"use {preset}(nodes={nodes})", source="bench").topology
npus = topo.live_npus
def cpu_now():  # this process and its finished children (the greedy's worker processes)
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system
for size in map(int, sys.argv[4].split(",")):  # one process: a sweep over the sizes
    coll = patterns.build(kind, npus, size=size - size % len(npus))
    c0 = cpu_now()
    res = solve(topo, coll, solver=solver, bound=False)
    cpu = cpu_now() - c0
    s = res.schedule
    makespan = simulate(s).schedule.makespan
    forest = s.meta.get("forest")
    optimal = forest["optimal_time"] if forest else cut_bound(topo, coll)
    print(json.dumps({"cpu": cpu, "fraction": optimal / makespan if optimal else None,
                      "makespan_us": makespan * 1e6, "solver": s.meta.get("solver", solver),
                      "verified": verify_schedule(s).ok}), flush=True)
"""


def run(cwd: str, preset: str, nodes: int, kind: str, sizes: list[int], solver: str,
        timeout: float) -> list[dict]:
    """The rows of ``sizes`` in one child process, one after the other; ``{"error": ...}``
    for the rows it did not finish."""
    cmd = [sys.executable, "-c", CHILD, preset, str(nodes), kind, ",".join(map(str, sizes)),
           solver]
    try:
        out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                             check=False)
    except subprocess.TimeoutExpired as exc:
        done = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        rows = [json.loads(x) for x in done.strip().splitlines() if x.startswith("{")]
        return rows + [{"error": f"> {timeout:.0f} s wall"}] * (len(sizes) - len(rows))
    rows = [json.loads(x) for x in out.stdout.strip().splitlines() if x.startswith("{")]
    lines = out.stderr.strip().splitlines()
    error = {"error": lines[-1] if lines else "failed"}
    return rows + [error] * (len(sizes) - len(rows))


def cell(r: dict) -> str:
    """CPU seconds and fraction (or the error) of one run."""
    if "error" in r:
        return f"{r['error']} | |"
    frac = f"{r['fraction']:.1%}" if r["fraction"] else "n/a"
    ok = "" if r["verified"] else " (NOT verified)"
    return f"{r['cpu']:.1f} | {frac}{ok} | {r['makespan_us']:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated system names")
    ap.add_argument("--kinds", default="allgather")
    ap.add_argument("--sizes", default="64MiB,1GiB")
    ap.add_argument("--solver", default="forest")
    ap.add_argument("--auto", action="store_true",
                    help="the default solver on --nodes DGX-A100 nodes instead of the systems")
    ap.add_argument("--nodes", default="8,32")
    ap.add_argument("--before", help="directory holding the reference version's tacos/")
    ap.add_argument("--timeout", type=float, default=300.0, help="wall seconds per process")
    ap.add_argument("--sweep", action="store_true",
                    help="all sizes of a row in one process (a size sweep), not one each")
    args = ap.parse_args()
    if args.auto:
        rows = [(f"{k}x DGX-A100", ("dgx_a100", int(k))) for k in args.nodes.split(",")]
        solver = "auto"
    else:
        only = set(args.only.split(",")) if args.only else None
        rows = [(n, s) for n, s in SYSTEMS.items() if not only or n in only]
        solver = args.solver
    here = str(Path(__file__).resolve().parent.parent)
    head = "| system | collective | size |"
    if args.before:
        head += " before CPU (s) | before fraction | before µs |"
    print(head + " CPU (s) | fraction | µs |")
    print("|---" * (head.count("|") + 2) + "|", flush=True)
    for name, (preset, nodes) in rows:
        for kind in args.kinds.split(","):
            labels = args.sizes.split(",")
            groups = [labels] if args.sweep else [[x] for x in labels]
            for group in groups:
                sizes = [SIZES[x] for x in group]
                before = (run(args.before, preset, nodes, kind, sizes, solver, args.timeout)
                          if args.before else None)
                after = run(here, preset, nodes, kind, sizes, solver, args.timeout)
                for i, size in enumerate(group):
                    line = f"| {name} | {kind} | {size}{' (sweep)' if args.sweep else ''} |"
                    if before is not None:
                        line += " " + cell(before[i]) + " |"
                    print(line + " " + cell(after[i]) + " |", flush=True)

if __name__ == "__main__":
    main()
