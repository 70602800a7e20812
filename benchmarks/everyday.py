"""CPU seconds of the everyday commands: ``python -m benchmarks.everyday [--only NAMES]``.

Runs, each in a fresh process, the default compile (``tacosc EXAMPLE``, solver ``auto``) of
every shipped example with at most 64 NPUs that declares one collective, and the README's
commands, and prints a Markdown table of CPU seconds (user + system of the child, which a
shared machine inflates far less than wall time) with the verdict line.  Target (issue 29):
at most 5 s CPU per example, 60 s for the README sweep.
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
EXAMPLES = ROOT / "examples"
# examples whose statements are not one collective (reshard, jobs, several collectives, none)
NOT_ONE_COLLECTIVE = {"reshard_p3", "jobs_fattree", "multijob_fattree", "multitenant",
                      "node", "dgx1_broadcast", "hypercube", "custom"}
MAX_NPUS = 64


def _run(argv: list[str], cwd: Path = ROOT, save: Path | None = None
         ) -> tuple[float, float, str]:
    """(CPU seconds, wall seconds, last output line) of one run of ``argv`` in ``cwd`` (whose
    ``tacos`` package ``python -m tacos`` runs); ``save``: a file its standard output goes
    to."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": ""})
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if save is not None:
        save.parent.mkdir(parents=True, exist_ok=True)
        save.write_text(done.stdout)
    text = (done.stdout.strip() or done.stderr.strip()).splitlines()
    last = next((line for line in text if "won" in line or line.startswith("wrote ")),
                text[-1] if text else "")
    return cpu, wall, last.strip()


def _npus(path: Path) -> int:
    """NPU count of a TDL file (through the library, not timed)."""
    import tacos

    return len(tacos.load(str(path)).topology.npus)


def commands() -> list[tuple[str, list[str]]]:
    """(label, argv) of every measured command."""
    tacosc = [sys.executable, "-m", "tacos"]
    out = [("README first command", tacosc + ["examples/ndv2_2node.tdl", "-o",
                                              "/tmp/tacos-everyday-plan.xml"]),
           ("former README command", tacosc + ["examples/mesh4x4.tdl", "--collective",
                                               "allreduce", "--size", "64MiB", "-o",
                                               "/tmp/tacos-everyday-mesh.xml", "--report"])]
    for path in sorted(EXAMPLES.glob("*.tdl")):
        if path.stem in NOT_ONE_COLLECTIVE or _npus(path) > MAX_NPUS:
            continue
        out.append((f"{path.stem} ({_npus(path)} NPUs)", tacosc + [str(path.relative_to(ROOT))]))
    out.append(("README sweep", tacosc + ["examples/mesh4x4.tdl", "--collective", "allreduce",
                                          "--sizes", "1KiB:4GiB:x4"]))
    return out


def main(argv: list[str] | None = None) -> int:
    """Measure and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated label prefixes")
    parser.add_argument("--before", default="",
                        help="a checkout (e.g. `git archive` of an earlier commit) whose tacos "
                             "runs each command first, in the same run")
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs of each command (with --before: paired, alternating "
                             "checkouts); the table shows their median and each run")
    parser.add_argument("--save", default="",
                        help="a folder: each command's full output is written to "
                             "SAVE/after/LABEL.txt (and SAVE/before/LABEL.txt), to be diffed")
    args = parser.parse_args(argv)
    only = [x for x in args.only.split(",") if x]
    print(f"machine: {platform.machine()} {os.cpu_count()} cores (shared), "
          f"python {platform.python_version()}, date {dt.date.today()}, "
          f"load average {_load()}")
    if args.before:
        print("| command | before CPU s | CPU s | wall s | verdict |\n|---|---:|---:|---:|---|")
    else:
        print("| command | CPU s | wall s | verdict |\n|---|---:|---:|---|")
    for label, cmd in commands():
        if only and not any(label.startswith(p) for p in only):
            continue
        save = Path(args.save) if args.save else None
        name = label.split(" (")[0].replace(" ", "_") + ".txt"
        before: list[float] = []
        after: list[tuple[float, float, str]] = []
        for _ in range(max(1, args.repeat)):
            if args.before:
                before.append(_run(cmd, Path(args.before), save and save / "before" / name)[0])
            after.append(_run(cmd, ROOT, save and save / "after" / name))
        first = f" {_cell(before)} |" if args.before else ""
        cpu = _cell([a[0] for a in after])
        wall = statistics.median(a[1] for a in after)
        print(f"| {label} |{first} {cpu} | {wall:.1f} | {after[-1][2][:110]} |", flush=True)
    print(f"load average at the end: {_load()}")
    return 0


def _cell(values: list[float]) -> str:
    """One value, or the median of several followed by each of them."""
    if len(values) == 1:
        return f"{values[0]:.1f}"
    runs = " / ".join(f"{v:.2f}" for v in values)
    return f"**{statistics.median(values):.2f}** ({runs})"


def _load() -> str:
    """The 1, 5 and 15 minute load averages."""
    try:
        return " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:  # pragma: no cover - not on every platform
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
