"""The size-window set ``tacosc TOPO -c COLL -o plans/`` writes, measured as the user gets it.

For each system (an ``examples/NAME.tdl``, or a preset ``NAME:nodes=4`` written to a
temporary ``use NAME(nodes=4)`` file) and collective, the benchmark

1. runs the real command, ``python -m tacos.cli TOPO -c COLL -o DIR/``, in a child process
   and takes its CPU seconds and peak RSS from ``wait4`` (the sweep's worker processes
   included), unless ``--reuse`` finds ``DIR`` already written;
2. runs ``tacosc verify DIR`` (every file verified, the windows checked as one set) and keeps
   its exit status;
3. reads every XML file of ``DIR`` back (:func:`tacos.msccl.xml_reader.parse_xml`, the ranks
   from the file's own ``tacos ranks`` comment) and, at every size of ``--sizes`` (default
   every power of 4 from 1 KiB to 1 GiB), times the file whose ``[minBytes, maxBytes]``
   window holds that size in the runtime model (:func:`tacos.runtime.estimate_program`),
   against NCCL's modelled best without in-switch reduction (the faster of ring and tree,
   :func:`tacos.cli_shape.nccl_time`, what the window table of ``tacosc`` prints).

``python -m benchmarks.bench_window_sets [--systems dgx_a100_2node,ndv2_2node]
[--collectives allreduce,allgather] [--out /tmp/window-sets] [--reuse]`` prints a markdown
table per system and collective, its geometric mean over 64 MiB-1 GiB and the sizes where the
set is slower than NCCL.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.__main__ import machine
from tacos.model.units import format_size

ROOT = Path(__file__).resolve().parent.parent
SIZES = [1024 * 4 ** i for i in range(11)]  #: 1 KiB, 4 KiB, ..., 1 GiB
LARGE = (64 << 20, 1 << 30)  #: the size range of the geometric-mean target


@dataclass
class Run:
    """One ``tacosc ... -o DIR/`` run: CPU seconds, peak RSS (MiB), wall seconds, exit
    status (None: not run, the folder was reused)."""

    cpu: float
    rss_mib: float
    wall: float
    status: int | None


def topology_file(name: str, scratch: Path) -> Path:
    """``examples/NAME.tdl``, or for ``NAME:nodes=4`` a file ``use NAME(nodes=4)``."""
    if ":" not in name:
        return ROOT / "examples" / f"{name}.tdl"
    base, _, params = name.partition(":")
    args = ", ".join(p for p in params.split(";") if p)
    path = scratch / f"{base}-{params.replace('=', '').replace(';', '-')}.tdl"
    path.write_text(f"use {base}({args})\n", encoding="utf-8")
    return path


def run_command(argv: list[str], log: Path) -> Run:
    """Run ``argv`` with its output in ``log``; CPU (user + system) and peak RSS of the child
    and the processes it waited for."""
    t0 = time.perf_counter()
    with open(log, "w", encoding="utf-8") as fh:
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    return Run(usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024,
               time.perf_counter() - t0, proc.returncode)


@dataclass
class Window:
    """One file of a set: its window (``hi`` 0: no limit), program, ranks and label."""

    name: str
    lo: int
    hi: int
    program: object
    ranks: tuple[int, ...] | None
    label: str


def read_set(folder: Path) -> list[Window]:
    """Every MSCCL XML file of ``folder``, parsed back."""
    from tacos.msccl.ranks import declared_ranks
    from tacos.msccl.xml_reader import parse_xml

    out = []
    for path in sorted(folder.glob("*.xml")):
        text = path.read_text(encoding="utf-8")
        program = parse_xml(text, source=str(path))
        out.append(Window(path.name, program.minBytes or 0, program.maxBytes or 0, program,
                          declared_ranks(text), program.name))
    return out


def window_at(windows: list[Window], nbytes: int) -> Window | None:
    """The window holding ``nbytes``, or None (the runtime would run NCCL there)."""
    for w in windows:
        if w.lo <= nbytes and (w.hi == 0 or nbytes <= w.hi):
            return w
    return None


def measure(topo_path: Path, kind: str, windows: list[Window], sizes: list[int]
            ) -> list[tuple[int, Window | None, float, float]]:
    """Per size: the window, its runtime-model time and NCCL's modelled best (s)."""
    from tacos import load
    from tacos.cli_shape import nccl_time
    from tacos.runtime import estimate_program

    topo = load(topo_path).topology
    nccl = nccl_time(topo, kind, list(topo.live_npus))
    rows = []
    for n in sizes:
        w = window_at(windows, n)
        t = (float(estimate_program(w.program, topo, n, ranks=w.ranks).time)  # type: ignore
             if w is not None else math.nan)
        rows.append((n, w, t, nccl(n) or math.nan))
    return rows


def plan_of(label: str) -> str:
    """``plan proto xN`` from a file's name attribute (``tacos PLAN PROTO xN NAME``)."""
    words = label.split()
    return " ".join(words[1:4]) if len(words) >= 4 and words[0] == "tacos" else label


def report(system: str, kind: str, run: Run, verified: int,
           rows: list[tuple[int, Window | None, float, float]], nfiles: int) -> list[str]:
    """The markdown section of one system and collective."""
    cpu = "reused" if run.status is None else f"{run.cpu:.1f} s CPU, {run.rss_mib:.0f} MiB"
    lines = [f"### {system} {kind}", "",
             f"`-o DIR/`: {cpu}, {nfiles} files, `tacosc verify DIR` exit {verified}", "",
             "| size | window file | plan | tacos µs | NCCL µs | vs NCCL |",
             "|---|---|---|---|---|---|"]
    logs, short = [], []
    for n, w, t, nccl in rows:
        sp = nccl / t if t > 0 else math.nan
        mark = "" if sp >= 1 else " **short**"
        lines.append(f"| {format_size(n)} | {w.name if w else '-'} | "
                     f"{plan_of(w.label) if w else 'NCCL (no window)'} | {t * 1e6:.1f} | "
                     f"{nccl * 1e6:.1f} | {sp:.2f}x{mark} |")
        if LARGE[0] <= n <= LARGE[1] and sp == sp:
            logs.append(math.log(sp))
        if not sp >= 1:
            short.append(format_size(n))
    lines.append("")
    if logs:
        lines.append(f"geometric mean vs NCCL at 64 MiB-1 GiB: "
                     f"{math.exp(sum(logs) / len(logs)):.2f}x; minimum "
                     f"{min(nccl / t for _, _, t, nccl in rows if t > 0):.2f}x; "
                     f"short of NCCL at: {', '.join(short) or 'none'}")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--systems", default="dgx_a100_2node")
    ap.add_argument("--collectives", default="allreduce")
    ap.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "window-sets"),
                    help="where the folders are written (one per system and collective)")
    ap.add_argument("--reuse", action="store_true",
                    help="measure a folder already written instead of writing it again")
    ap.add_argument("--sizes", default=",".join(str(s) for s in SIZES))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"<!-- {dt.date.today().isoformat()}, {machine()}, load "
          f"{os.getloadavg()[0]:.1f} -->", flush=True)
    for system in args.systems.split(","):
        topo_path = topology_file(system, out)
        for kind in args.collectives.split(","):
            folder = out / f"{system.replace(':', '-').replace('=', '')}-{kind}"
            if args.reuse and folder.is_dir() and any(folder.glob("*.xml")):
                run = Run(math.nan, math.nan, math.nan, None)
            else:
                for old in folder.glob("*.xml"):
                    old.unlink()
                run = run_command([sys.executable, "-m", "tacos.cli", str(topo_path), "-c", kind,
                                   "-o", f"{folder}/"], folder.with_suffix(".log"))
                if run.status:
                    print(f"### {system} {kind}: tacosc exit {run.status} (see "
                          f"{folder.with_suffix('.log')})", flush=True)
                    continue
            check = run_command([sys.executable, "-m", "tacos.cli", "verify", str(folder)],
                                folder.with_suffix(".verify.log"))
            windows = read_set(folder)
            rows = measure(topo_path, kind, windows, sizes)
            print("\n".join(report(system, kind, run, check.status or 0, rows, len(windows))),
                  flush=True)
            print(flush=True)


if __name__ == "__main__":
    main()
