"""Command-line start-up time: ``python -m benchmarks.startup [--runs N]``.

Runs each command ``--runs`` times in a fresh process (wall clock, subprocess start included)
and prints the median wall time and CPU time (user + system, which a loaded machine
inflates far less than wall time) as a Markdown table, with an empty ``python -c pass`` as the
reference measured in the same run (the machine is shared: compare ratios, not absolute
times).  The TDL grammar cache is warmed first; ``info (no grammar cache)`` runs with
``TACOS_CACHE_DIR=`` to show what the cache saves.  Bytecode caches are on (as after
``pip install``), even where the environment sets ``PYTHONDONTWRITEBYTECODE``.
Target: ``tacosc --help`` and ``tacosc info`` under 0.5 s.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = str(ROOT / "examples" / "mesh4x4.tdl")


def _run(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds user + system) of one run of ``argv``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   check=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> int:
    """Measure and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args(argv)
    py = sys.executable
    tacosc = [py, "-m", "tacos"]
    # as installed tacos runs: with bytecode caches (this machine's environment turns them off)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    nocache = dict(env, TACOS_CACHE_DIR="")
    cases = [
        ("python -c pass (reference)", [py, "-c", "pass"], env),
        ("tacosc --help", tacosc + ["--help"], env),
        ("tacosc info examples/mesh4x4.tdl", tacosc + ["info", EXAMPLE], env),
        ("tacosc info (no grammar cache)", tacosc + ["info", EXAMPLE], nocache),
    ]
    _run(tacosc + ["info", EXAMPLE], env)  # warm the grammar cache and the OS file cache
    walls: dict[str, list[float]] = {name: [] for name, _a, _e in cases}
    cpus: dict[str, list[float]] = {name: [] for name, _a, _e in cases}
    for _ in range(args.runs):  # interleaved, so load changes hit every command alike
        for name, cmd, e in cases:
            wall, cpu = _run(cmd, e)
            walls[name].append(wall)
            cpus[name].append(cpu)
    ref = statistics.median(walls[cases[0][0]])
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{dt.date.today()}, {platform.machine()} {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, {args.runs} runs each, load average "
          f"{load:.1f} at the end\n")
    print("| command | median wall (s) | min wall (s) | median CPU user+sys (s) | "
          "wall / reference |")
    print("| --- | --- | --- | --- | --- |")
    for name, _cmd, _e in cases:
        ws = walls[name]
        med = statistics.median(ws)
        print(f"| `{name}` | {med:.3f} | {min(ws):.3f} | {statistics.median(cpus[name]):.3f} "
              f"| {med / ref:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
