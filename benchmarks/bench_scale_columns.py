"""Verified greedy schedules at scale, column-backed against Transfer objects.

``python -m benchmarks.bench_scale_columns [--sides 8,12,16] [--repeats 3] [--before]``

All-gather of 64 MiB on k x k x k tori (every link 50 GiB/s, 0.5 µs, 1 chunk per NPU), one
greedy trial (``max_merge=1``, seed 0, one worker, no lower bound), then
:func:`tacos.check.verify.verify_schedule` (the schedule check of ``tacosc verify --topology``) and
``tacos.emit(schedule, "json")``.  Each measurement runs in a fresh process (its peak RSS is
its own) that first loads the numba kernels on a 2x2 mesh (timed apart); CPU is
``time.process_time()`` of each phase.

``--before`` also runs every row with the interpreter given by ``--before-python`` (default
``python``) from outside this tree, so it imports the installed ``tacos`` -- main, the
reference.  ``--cap-gib`` bounds each child's address space (``RLIMIT_AS``): a run that does not
fit is reported as such instead of swapping the machine.  ``--json`` adds the ``to_json`` time
(sides up to 8: the text grows to gigabytes) and a hash of its bytes, to compare versions.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import tacos

MiB = 1 << 20
GiB = 1 << 30
HERE = Path(__file__).resolve()


def child(k: int, with_json: bool) -> dict:
    """One measurement in this process (imports whichever ``tacos`` is on the path)."""
    from tacos import builders
    from tacos.check.verify import verify_schedule
    from tacos.model.patterns import build

    clock = time.process_time
    t = clock()
    small = builders.mesh(2, 2, bandwidth=50 * GiB, latency=0.5e-6)
    from tacos.solvers.greedy import jit as greedy_jit

    greedy_jit.kernels()
    tacos.synthesize(small, build("allgather", range(4), size=4 * MiB), solver="greedy",
                     trials=1, workers=1, bound=False)
    warm = clock() - t
    topo = builders.torus(k, k, k, bandwidth=50 * GiB, latency=0.5e-6)
    n = topo.n_npus
    coll = build("allgather", range(n), size=64 * MiB // n * n, chunks_per_npu=1)
    spent = {"trial": 0.0, "to_schedule": 0.0}
    greedy = sys.modules["tacos.solvers.greedy.solver"]
    for name in spent:  # CPU of the trial and of turning it into a Schedule, apart
        real = getattr(greedy, name if name != "trial" else "run_trial")

        def timed(*a, _real=real, _name=name, **kw):
            t = clock()
            try:
                return _real(*a, **kw)
            finally:
                spent[_name] += clock() - t

        setattr(greedy, name if name != "trial" else "run_trial", timed)
    t0 = clock()
    sched = tacos.synthesize(topo, coll, solver="greedy", trials=1, max_merge=1, workers=1,
                             bound=False)
    t1 = clock()
    rep = verify_schedule(sched)
    t2 = clock()
    out = {"npus": n, "warm_s": warm, "synth_s": t1 - t0, "trial_s": spent["trial"],
           "to_schedule_s": spent["to_schedule"], "verify_s": t2 - t1, "ok": rep.ok,
           "transfers": len(sched.transfers), "makespan_us": sched.makespan * 1e6,
           "columnar": type(sched.transfers).__name__ != "tuple",
           "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    if with_json:
        t3 = clock()
        text = tacos.emit(sched, "json")
        out["json_s"] = clock() - t3
        out["json_bytes"] = len(text)
        import hashlib

        out["json_sha"] = hashlib.sha256(text.encode()).hexdigest()[:16]
    return out


def run(python: str, k: int, with_json: bool, cap_gib: float | None, tree: bool) -> dict:
    """Run :func:`child` in a fresh process: this tree's ``tacos`` (``tree``) or the
    installed one (the script run by path from outside the tree)."""
    def limit() -> None:
        os.nice(5)
        if cap_gib:
            cap = int(cap_gib * GiB)
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    if tree:
        argv, cwd = [python, "-m", "benchmarks.bench_scale_columns"], str(HERE.parents[1])
    else:
        argv, cwd = [python, str(HERE)], "/"
    argv += ["--child", str(k)] + (["--json"] if with_json else [])
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    t = time.monotonic()
    p = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, env=env,
                       preexec_fn=limit)
    wall = time.monotonic() - t
    if p.returncode:
        tail = (p.stderr.strip().splitlines() or ["?"])[-1]
        return {"failed": tail[:120], "wall_s": wall}
    r = json.loads(p.stdout.strip().splitlines()[-1])
    r["wall_s"] = wall
    return r


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sides", default="8,12,16")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--before", action="store_true", help="also run the installed tacos")
    ap.add_argument("--before-python", default="python")
    ap.add_argument("--cap-gib", type=float, default=None, help="RLIMIT_AS of each child")
    ap.add_argument("--json", action="store_true", help="time to_json (sides <= 8)")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.json)))
        return 0
    print(f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, load average {os.getloadavg()[0]:.1f}; "
          f"{dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}\n")
    print("| torus | NPUs | version | synthesis CPU | of which trial | of which to_schedule | "
          "verify CPU | synth + verify CPU | to_json CPU | peak RSS | transfers | "
          "makespan (µs) | verified | runs |")
    print("|" + "---|" * 14)
    for k in (int(x) for x in args.sides.split(",")):
        with_json = args.json and k <= 8
        rows: dict[str, list[dict]] = {"before": [], "after": []}
        for _ in range(args.repeats):
            if args.before:
                rows["before"].append(run(args.before_python, k, with_json, args.cap_gib,
                                          tree=False))
            rows["after"].append(run(sys.executable, k, with_json, args.cap_gib, tree=True))
        for version, rs in rows.items():
            if not rs:
                continue
            good = [r for r in rs if "failed" not in r]
            if not good:
                print(f"| {k}x{k}x{k} | {k ** 3} | {version} | failed: {rs[0]['failed']} "
                      f"(after {rs[0]['wall_s']:.0f} s wall) | | | | | | | | | | | "
                      f"{len(rs)} |")
                continue

            def med(key: str, rs: list[dict] = good) -> float:
                return statistics.median(r[key] for r in rs)

            both = statistics.median(r["synth_s"] + r["verify_s"] for r in good)
            js = f"{med('json_s'):.2f} s" if with_json else "-"
            print(f"| {k}x{k}x{k} | {k ** 3} | {version} | {med('synth_s'):.2f} s | "
                  f"{med('trial_s'):.2f} s | {med('to_schedule_s'):.2f} s | "
                  f"{med('verify_s'):.2f} s | {both:.2f} s | {js} | "
                  f"{med('peak_rss_mib'):.0f} MiB | {good[0]['transfers']} | "
                  f"{good[0]['makespan_us']:.1f} | {'yes' if all(r['ok'] for r in good) else 'NO'}"
                  f" | {len(good)} |", flush=True)
            if with_json:
                print(f"<!-- {version} json sha256[:16] {good[0]['json_sha']} "
                      f"{good[0]['json_bytes']} bytes -->")
    return 0


if __name__ == "__main__":
    sys.exit(main())
