"""CPU seconds of the ``forest`` solver on multi-node groups (issue 31's forest target).

For every system of the target (2x DGX-2, 2x/4x DGX-A100, 2x/4x DGX-H100, 2x MI250), each
collective and size asked, one fresh process runs :func:`tacos.synthesize.solve` with
``solver='forest'`` and reports the CPU seconds of that call alone (``time.process_time``,
every thread of the process; imports and numba loading excluded), its wall seconds, the
fraction of the min-cut optimum (the simulator's algbw of the verified schedule, α included)
and the SHA-256 of the schedule's JSON, so that a speed-up can be checked byte for byte
against another checkout.

Usage::

    python -m benchmarks.bench_forest_multinode                       # every row
    python -m benchmarks.bench_forest_multinode --only "2x MI250" --kinds allgather
    python -m benchmarks.bench_forest_multinode --tree /tmp/before   # another checkout's tacos
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

SYSTEMS = {
    "2x DGX-2": "use dgx2(nodes=2)",
    "2x DGX-A100": "use dgx_a100(nodes=2)",
    "4x DGX-A100": "use dgx_a100(nodes=4)",
    "2x DGX-H100": "use dgx_h100(nodes=2)",
    "4x DGX-H100": "use dgx_h100(nodes=4)",
    "2x MI250": "use mi250(nodes=2)",
}
"""The target's systems as TDL (the same presets as examples/dgx2_2node.tdl,
dgx_a100_2node.tdl, dgx_h100_4node.tdl and mi250_2node.tdl)."""

_CHILD = r"""
import hashlib, json, sys, time
from tacos.backends.json_schedule import dumps
from tacos.check.simulate import simulate
from tacos.check.verify import verify_schedule
from tacos.model.patterns import build
from tacos.model.units import parse_quantity
from tacos.synthesize import solve
import tacos

text, kind, size = sys.argv[1], sys.argv[2], sys.argv[3]
topo = tacos.parse('topology "bench"\n' + text + "\n", source="bench").topology
coll = build(kind, topo.live_npus, size=int(parse_quantity(size, "size", default_unit="B")))
t0, c0 = time.perf_counter(), time.process_time()
res = solve(topo, coll, solver="forest", bound=False)
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
s = res.schedule
opt = s.meta["forest"]["optimal_algbw"]
print(json.dumps({"cpu": cpu, "wall": wall, "fraction": simulate(s).algbw / opt,
                  "verified": verify_schedule(s).ok,
                  "sha": hashlib.sha256(dumps(s).encode()).hexdigest()[:16]}))
"""


def run_row(text: str, kind: str, size: str, tree: str | None) -> dict:
    """One row in a fresh process (``tree``: a checkout whose ``tacos`` to import)."""
    env = dict(os.environ)
    cwd = None
    if tree:
        env["PYTHONPATH"] = str(Path(tree).resolve())
        cwd = tree
    out = subprocess.run([sys.executable, "-c", _CHILD, text, kind, size], env=env, cwd=cwd,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated system names")
    ap.add_argument("--kinds", default="allgather,allreduce")
    ap.add_argument("--sizes", default="64MiB,1GiB")
    ap.add_argument("--repeat", type=int, default=1, help="processes per row (median CPU)")
    ap.add_argument("--tree", help="import tacos from this checkout instead")
    args = ap.parse_args()
    only = set(args.only.split(",")) if args.only else None
    print("| system | coll. | size | CPU (s) | wall (s) | fraction | verified "
          "| schedule sha256[:16] |")
    print("|---|---|---|---|---|---|---|---|")
    for name, text in SYSTEMS.items():
        if only and name not in only:
            continue
        for kind in args.kinds.split(","):
            for size in args.sizes.split(","):
                runs = [run_row(text, kind, size, args.tree) for _ in range(args.repeat)]
                cpu = statistics.median(r["cpu"] for r in runs)
                wall = statistics.median(r["wall"] for r in runs)
                r = runs[0]
                shas = {x["sha"] for x in runs}
                print(f"| {name} | {kind} | {size} | {cpu:.2f} | {wall:.2f} | "
                      f"{r['fraction']:.2%} | {'yes' if r['verified'] else 'NO'} | "
                      f"{'/'.join(sorted(shas))} |", flush=True)


if __name__ == "__main__":
    main()
