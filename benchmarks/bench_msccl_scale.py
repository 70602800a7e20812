"""MSCCL XML at scale: ``python -m benchmarks.bench_msccl_scale [--sizes 4,5,6,8] [--out DIR]``.

For each k, an all-reduce of 64 MiB on a k x k x k torus (50 GiB/s, 0.5 µs per link) is
synthesized by the greedy (one trial, one process), lowered to MSCCL, verified in memory,
written as XML (streamed) and then checked by ``tacosc verify`` in a fresh process.  Every
size runs in its own process, so peak memory (``ru_maxrss``) is per size.  CPU times are
``time.process_time()`` per phase (user + system of the ``tacosc verify`` child); the machine
is shared, so an empty ``python -c pass`` is timed in the same run as a reference.  Prints a
Markdown table and the fitted growth exponents (time ~ steps^e and ~ N^e, least squares on
log-log).  Targets (issue 13): at 512 NPUs synthesis + lowering + verification under 60 s and
2 GiB, ``tacosc verify`` under 10 s.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.growth import exponent

ROOT = Path(__file__).resolve().parent.parent


def child(k: int, out: Path) -> dict:
    """Run every phase for one torus size in this process; returns the measurements."""
    import tacos
    from tacos import builders
    from tacos.msccl.lower import MscclOptions, lower
    from tacos.msccl.verify import verify_program
    from tacos.msccl.xml_writer import write_xml

    row: dict = {"k": k, "npus": k ** 3}
    topo = builders.torus(k, k, k, bandwidth="50GiB/s", latency="0.5us")
    coll = tacos.collective("allreduce", list(range(k ** 3)), size="64MiB")
    t = time.process_time()
    schedule = tacos.synthesize(topo, coll, solver="greedy", seed=0, trials=1, workers=1)
    row["synthesis_s"] = time.process_time() - t
    row["transfers"] = len(schedule.transfers)
    t = time.process_time()
    program = lower(schedule, options=MscclOptions())
    row["lower_s"] = time.process_time() - t
    row["steps"] = program.num_steps
    t = time.process_time()
    report = verify_program(program)
    row["verify_s"] = time.process_time() - t
    row["verified"] = report.ok
    t = time.process_time()
    write_xml(program, out)
    row["write_s"] = time.process_time() - t
    row["bytes"] = out.stat().st_size
    row["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return row


def _timed(argv: list[str], cwd: str | Path | None = None) -> tuple[float, float, float, int]:
    """(wall s, CPU s, peak RSS MiB, exit code) of a child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          check=False, cwd=cwd)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, after.ru_maxrss / 1024, proc.returncode


_PEAK = ("import resource, runpy, sys; sys.argv = sys.argv[1:]; code = 0\n"
         "try: runpy.run_module(sys.argv[0], run_name='__main__')\n"
         "except SystemExit as e: code = e.code or 0\n"
         "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)")


def _peak_of(argv: list[str], cwd: str | Path | None = None) -> float:
    """Peak RSS (MiB) of ``python -m MODULE ARGS`` run on its own (``RUSAGE_CHILDREN`` would
    give the largest of all children so far)."""
    proc = subprocess.run([argv[0], "-c", _PEAK, *argv[2:]], capture_output=True, text=True,
                          check=False, cwd=cwd)
    return int(proc.stderr.strip().splitlines()[-1]) / 1024


def main(argv: list[str] | None = None) -> int:
    """Measure every size and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="4,5,6,8", help="torus side lengths k (k^3 NPUs)")
    ap.add_argument("--out", default=None, help="folder for the plans (default: a temp dir)")
    ap.add_argument("--tree", default=None,
                    help="time the tacos of another checkout (e.g. main, for a side-by-side "
                         "comparison in one session)")
    ap.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--plan", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.tree:
        sys.path.insert(0, args.tree)
        os.environ["PYTHONPATH"] = args.tree + os.pathsep + os.environ.get("PYTHONPATH", "")
    if args.child is not None:
        print(json.dumps(child(args.child, Path(args.plan))))
        return 0
    py = sys.executable
    ref = _timed([py, "-c", "pass"])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.out or tmp)
        for k in (int(x) for x in args.sizes.split(",")):
            plan = folder / f"torus{k}x{k}x{k}_allreduce.xml"
            tree = ["--tree", args.tree] if args.tree else []
            proc = subprocess.run([py, "-m", "benchmarks.bench_msccl_scale", "--child", str(k),
                                   "--plan", str(plan), *tree], cwd=ROOT, capture_output=True,
                                  text=True, check=True)
            row = json.loads(proc.stdout.strip().splitlines()[-1])
            verify = [py, "-m", "tacos", "verify", str(plan)]
            wall, cpu, _rss, code = _timed(verify, cwd=args.tree or ROOT)
            rss = _peak_of(verify, cwd=args.tree or ROOT)
            row.update(cli_verify_wall_s=wall, cli_verify_cpu_s=cpu, cli_verify_rss_mib=rss,
                       cli_verify_ok=code == 0)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    load = os.getloadavg()[0]
    print(f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, load average {load:.1f}; "
          f"{dt.date.today().isoformat()}; `python -c pass`: {ref[0]:.3f} s wall, "
          f"{ref[1]:.3f} s CPU.\n")
    print("| torus | NPUs | transfers | steps | XML | synthesis CPU | lowering CPU | "
          "verify (in memory) CPU | write CPU | synth+lower+verify CPU | peak RSS | "
          "`tacosc verify` CPU / wall | its peak RSS | ok |")
    print("|" + "---|" * 14)
    for r in rows:
        total = r["synthesis_s"] + r["lower_s"] + r["verify_s"]
        print(f"| {r['k']}x{r['k']}x{r['k']} | {r['npus']} | {r['transfers']} | {r['steps']} | "
              f"{r['bytes'] / 2**20:.1f} MiB | {r['synthesis_s']:.2f} s | {r['lower_s']:.2f} s | "
              f"{r['verify_s']:.2f} s | {r['write_s']:.2f} s | {total:.2f} s | "
              f"{r['peak_rss_mib']:.0f} MiB | {r['cli_verify_cpu_s']:.2f} s / "
              f"{r['cli_verify_wall_s']:.2f} s | {r['cli_verify_rss_mib']:.0f} MiB | "
              f"{'yes' if r['verified'] and r['cli_verify_ok'] else 'NO'} |")
    steps = [r["steps"] for r in rows]
    npus = [r["npus"] for r in rows]
    print()
    for name in ("synthesis_s", "lower_s", "verify_s", "cli_verify_cpu_s"):
        ys = [r[name] for r in rows]
        es, en = exponent(steps, ys), exponent(npus, ys)
        print(f"- {name}: ~ steps^{es:.2f}, ~ N^{en:.2f}" if es is not None else f"- {name}: -")
    print(f"- steps ~ N^{exponent(npus, steps):.2f}" if len(rows) > 1 else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
