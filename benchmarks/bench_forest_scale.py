"""The forest solver at scale: synthesis wall/CPU, peak RSS and achieved fraction on tori.

Each (system, collective, size) runs in a fresh process (so that peak RSS is its own) with the
interpreter given by ``--python`` from the directory ``--cwd``: run it once with this tree's
venv and once with another checkout's interpreter to compare two versions in the same session
(``--interleave`` alternates the two per row).  The child times ``tacos.synthesize.solve``
alone (wall and CPU seconds), then simulates and verifies the schedule (not timed in the
synthesis figures; the verification's wall time is its own column).

Usage::

    python -m benchmarks.bench_forest_scale                         # every row, this tree
    python -m benchmarks.bench_forest_scale --only "8x8x8 torus" --kinds allgather
    python -m benchmarks.bench_forest_scale --before ../main:python --skip-before 216,512
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

SYSTEMS = {
    "4x4x4 torus": (4, 4, 4),
    "8x8 torus": (8, 8),
    "6x6x6 torus": (6, 6, 6),
    "8x8x8 torus": (8, 8, 8),
}
SIZES = {"1GiB": 1 << 30, "64MiB": 64 << 20}

CHILD = r"""
import json, resource, sys, time
import tacos
from tacos.patterns import build
from tacos.simulate import simulate
from tacos.synthesize import solve
from tacos.verify import verify_schedule

dims, kind, size = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
shape = ", ".join(map(str, dims))
topo = tacos.parse(f'topology "t"\ntorus t[{shape}] 50GiB/s 0.5us\n', source="t").topology
n = len(topo.live_npus)
coll = build(kind, topo.live_npus, size=size - size % n)
t0, c0 = time.perf_counter(), time.process_time()
res = solve(topo, coll, solver="forest", bound=False)
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
s = res.schedule
f = s.meta["forest"]
frac = simulate(s).algbw / f["optimal_algbw"]
t1 = time.perf_counter()
ok = verify_schedule(s).ok
verify = time.perf_counter() - t1
print(json.dumps({"wall": wall, "cpu": cpu, "fraction": frac, "trees": f["trees"],
                  "k": "/".join(str(p["k"]) for p in f["phases"]),
                  "packing": "/".join(p.get("packing", "lovasz") for p in f["phases"]),
                  "depth": max(p["depth"] for p in f["phases"]),
                  "slices": s.meta["pipeline"]["slices"], "transfers": len(s.transfers),
                  "verified": ok, "verify_s": verify,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def run(python: str, cwd: str, dims: tuple[int, ...], kind: str, size: int,
        timeout: float) -> dict:
    """One row in a child process; ``{"error": ...}`` when it fails or runs out of time."""
    cmd = ["nice", python, "-c", CHILD, json.dumps(list(dims)), kind, str(size)]
    try:
        out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                             check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"> {timeout:.0f} s"}
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr else "failed"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def row_text(label: str, system: str, kind: str, size: str, r: dict) -> str:
    """One markdown row."""
    if "error" in r:
        return f"| {label} | {system} | {kind} | {size} | {r['error']} |" + " |" * 9
    return (f"| {label} | {system} | {kind} | {size} | {r['wall']:.1f} | {r['cpu']:.1f} | "
            f"{r['rss_mb']:.0f} | {r['fraction']:.1%} | {r['trees']} | {r['k']} | "
            f"{r['packing']} | {r['depth']} | {r['slices']} | "
            f"{'yes' if r['verified'] else 'NO'} ({r['verify_s']:.1f} s) |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated system names")
    ap.add_argument("--kinds", default="allgather,allreduce")
    ap.add_argument("--sizes", default="1GiB,64MiB")
    ap.add_argument("--before", help="CWD:PYTHON of the reference version, run per row first")
    ap.add_argument("--skip-before", default="",
                    help="NPU counts not run with the reference (too slow)")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per row")
    args = ap.parse_args()
    only = set(args.only.split(",")) if args.only else None
    skip = {int(x) for x in args.skip_before.split(",") if x}
    print("| version | system | collective | size | wall (s) | CPU (s) | peak RSS (MB) | "
          "fraction | trees | k | packing | depth | slices | verified |")
    print("|" + "---|" * 14, flush=True)
    for system, dims in SYSTEMS.items():
        if only and system not in only:
            continue
        n = 1
        for d in dims:
            n *= d
        for kind in args.kinds.split(","):
            for size in args.sizes.split(","):
                if args.before and n not in skip:
                    cwd, python = args.before.split(":", 1)
                    r = run(python, cwd, dims, kind, SIZES[size], args.timeout)
                    print(row_text("before", system, kind, size, r), flush=True)
                r = run(sys.executable, ".", dims, kind, SIZES[size], args.timeout)
                print(row_text("after", system, kind, size, r), flush=True)


if __name__ == "__main__":
    main()
