"""The default solver (``tacosc`` without ``--solver``) at scale: CPU seconds and peak memory.

Issue 31's rows: all-gather 1 GiB on k DGX-A100 nodes (``use dgx_a100(nodes=K)``), the
16x16x16 torus all-gather (64 MiB, ``--trials 1``) and the 8x8x8 torus all-reduce (64 MiB)
written as MSCCL XML, the last two against the greedy alone (``--solver greedy``).

Every run is one ``tacosc`` process (``python -c`` calling ``tacos.cli.main`` in the tree
measured, so ``--before DIR`` runs the package exported there); its CPU seconds (user + system)
and peak resident memory come from ``os.wait4``.  A run still going after ``--timeout`` wall
seconds is stopped and reported with the CPU it had used.  The line ``plan`` of the report
(which candidate won) is kept.

Usage::

    nice python -m benchmarks.bench_scale_default --nodes 8,32,128
    nice python -m benchmarks.bench_scale_default --xml --before /tmp/before
    nice python -m benchmarks.bench_scale_default --xml --xml-k 8x8x4,8 --report
    nice python -m benchmarks.bench_scale_default --xml --report --before /tmp/before \
        --before-solvers default --save /tmp/runs
    nice python -m benchmarks.bench_scale_default --torus --torus-k 8,16 --cold
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.growth import exponent

HERE = Path(__file__).resolve().parent.parent
MAIN = "import sys; from tacos.cli import main; sys.exit(main())"


def dgx_file(nodes: int) -> str:
    """The k-node DGX-A100 all-gather of 1 GiB."""
    return f"use dgx_a100(nodes={nodes})\ncollective allgather size 1GiB\n"


def dims(spec: str) -> tuple[int, int, int]:
    """``"8"`` -> (8, 8, 8); ``"8x8x4"`` -> (8, 8, 4)."""
    parts = [int(x) for x in spec.split("x")]
    a, b, c = parts if len(parts) == 3 else parts * 3
    return a, b, c


def torus_file(k: int | tuple[int, int, int], kind: str) -> str:
    """A k x k x k torus (or a, b, c; 50 GiB/s, 0.5 µs links) running ``kind`` on 64 MiB
    (rounded down to a multiple of the NPU count: 12x12x12 runs 67,108,608 B)."""
    a, b, c = (k, k, k) if isinstance(k, int) else k
    size = 64 << 20
    size = "64MiB" if size % (a * b * c) == 0 else f"{size - size % (a * b * c)}B"
    return (f'topology "torus {a}x{b}x{c}"\ntorus t[{a}, {b}, {c}] 50GiB/s 0.5us\n'
            f"collective {kind} size {size}\n")


def tree_rss_mib(pid: int) -> float:
    """Resident MiB of a process and its descendants (``/proc``; 0 where unreadable)."""
    kids: dict[int, list[int]] = {}
    rss: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            pages = int((entry / "statm").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(int(fields[1]), []).append(int(entry.name))
        rss[int(entry.name)] = pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0.0)
        todo.extend(kids.get(p, []))
    return total


def run(tree: Path, args: list[str], timeout: float, rss_limit_mib: float = 6144.0,
        cold: bool = False) -> dict:
    """One ``tacosc`` process: ``{"cpu", "rss_mib", "wall", "finished", "plan", "rc",
    "load"}``; killed past ``timeout`` wall seconds or ``rss_limit_mib`` resident (with its
    workers).  ``cold``: with an empty ``TACOS_CACHE_DIR`` of its own (a first compile: NCCL's
    ring search and the forest's trees not remembered); ``load``: the 1-minute load average
    at its start and end."""
    t0 = time.perf_counter()
    env = dict(os.environ)
    if cold:
        env["TACOS_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench-scale-cache-")
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen([sys.executable, "-c", MAIN, *args], cwd=tree, stdout=out,
                                stderr=subprocess.STDOUT, text=True, env=env)
        finished = True
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if (time.perf_counter() - t0 > timeout
                    or tree_rss_mib(proc.pid) > rss_limit_mib):
                finished = False
                proc.send_signal(signal.SIGKILL)
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.2)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read()
    plan = next((line.split(None, 1)[1] for line in text.splitlines()
                 if line.startswith(("plan ", "wrote "))), "")
    time_line = next((line.split(None, 1)[1] for line in text.splitlines()
                      if line.startswith("runtime ")), "")
    return {"cpu": usage.ru_utime + usage.ru_stime, "rss_mib": usage.ru_maxrss / 1024,
            "wall": time.perf_counter() - t0, "finished": finished, "rc": proc.returncode,
            "plan": plan, "runtime": time_line, "load": [load0, os.getloadavg()[0]],
            "tail": "" if finished and proc.returncode == 0 else text[-600:], "text": text}


def _save(folder: Path, stem: str, text: str, cargs: list[str]) -> None:
    """Keep a run's output as ``folder/stem.txt`` and the plan it wrote (``-o``) as
    ``folder/stem.xml``."""
    import shutil

    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{stem}.txt").write_text(text)
    if "-o" in cargs:
        written = Path(cargs[cargs.index("-o") + 1])
        if written.exists():
            shutil.move(str(written), folder / f"{stem}.xml")


def main(argv: list[str] | None = None) -> None:
    """Run the rows asked for and print a Markdown table (and JSON lines on stderr)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="", help="DGX-A100 node counts, e.g. 8,32,128")
    ap.add_argument("--torus", action="store_true",
                    help="the 4096-NPU all-gather, default vs greedy")
    ap.add_argument("--xml", action="store_true",
                    help="the 512-NPU all-reduce as MSCCL XML, default vs greedy")
    ap.add_argument("--solvers", default="default,greedy",
                    help="of --torus and --xml: which of default,greedy to run")
    ap.add_argument("--before", type=Path, help="also run the package exported in DIR")
    ap.add_argument("--save", type=Path,
                    help="keep every run's output (and of --xml its plan) in DIR, to diff")
    ap.add_argument("--before-solvers", default="",
                    help="of --before: only these solvers in DIR (default: every one), e.g. "
                    "'default' to compare the greedy alone once")
    ap.add_argument("--timeout", type=float, default=1200.0, help="wall seconds per run")
    ap.add_argument("--rss-limit", type=float, default=6144.0,
                    help="MiB resident (a run and its workers) past which a run is stopped")
    ap.add_argument("--torus-k", default="16",
                    help="of --torus: the torus sides k (k x k x k), e.g. 8,12,16")
    ap.add_argument("--xml-k", default="8", help="of --xml: the torus shapes, e.g. 8,8x8x4")
    ap.add_argument("--report", action="store_true", help="of --xml: pass --report")
    ap.add_argument("--cold", action="store_true",
                    help="every run with an empty TACOS_CACHE_DIR of its own (first compiles)")
    args = ap.parse_args(argv)
    trees = [("after", HERE)] + ([("before", args.before)] if args.before else [])
    tmp = Path(tempfile.mkdtemp(prefix="bench-scale-default-"))
    cases: list[tuple[str, int, str, list[str]]] = []
    for k in [int(x) for x in args.nodes.split(",") if x]:
        f = tmp / f"dgx{k}.tdl"
        f.write_text(dgx_file(k))
        cases.append((f"{k}x DGX-A100 all-gather 1 GiB", 8 * k, "default", [str(f)]))
    solvers = [x for x in args.solvers.split(",") if x]
    torus_cases = [(dims(k), "allgather", f"{k}x{k}x{k} torus all-gather 64 MiB, --trials 1",
                    lambda f, solver: [str(f), "--trials", "1"])
                   for k in args.torus_k.split(",")] if args.torus else []
    if args.xml:
        report = ["--report"] if args.report else []
        for k in args.xml_k.split(","):
            d = dims(k)
            torus_cases.append((d, "allreduce", f"{'x'.join(map(str, d))} torus all-reduce "
                                f"64 MiB, -o plan.xml{' --report' if report else ''}",
                                lambda f, solver: [str(f), "-o",
                                                   str(tmp / f"{solver}.xml"), *report]))
    for d, kind, name, command in torus_cases:
        f = tmp / f"torus{'x'.join(map(str, d))}{kind}.tdl"
        f.write_text(torus_file(d, kind))
        for solver in solvers:
            extra = [] if solver == "default" else ["--solver", "greedy"]
            cases.append((name, d[0] * d[1] * d[2], solver, [*command(f, solver), *extra]))
    print("| case | NPUs | solver | tree | CPU s | peak RSS MiB | finished | plan |")
    print("|---|---:|---|---|---:|---:|---|---|")
    results: dict[tuple[str, str], list[tuple[int, float]]] = {}
    before_only = {x for x in args.before_solvers.split(",") if x}
    for name, npus, solver, cargs in cases:
        for label, tree in trees:
            if label == "before" and before_only and solver not in before_only:
                continue
            r = run(tree, cargs, args.timeout, args.rss_limit, args.cold)
            text = r.pop("text")
            if args.save:
                _save(args.save, f"{npus}-{solver}-{label}", text, cargs)
            print(json.dumps({"case": name, "npus": npus, "solver": solver, "tree": label,
                              **r}), file=sys.stderr, flush=True)
            done = "yes" if r["finished"] and r["rc"] == 0 else \
                ("no (stopped)" if not r["finished"] else f"error {r['rc']}")
            print(f"| {name} | {npus} | {solver} | {label} | {r['cpu']:.1f} | "
                  f"{r['rss_mib']:.0f} | {done} | {r['plan']} |", flush=True)
            family = "DGX-A100 nodes" if "DGX" in name else \
                "torus all-gathers" if "all-gather" in name else ""
            if r["finished"] and r["rc"] == 0 and family:
                results.setdefault((family, solver, label), []).append((npus, r["cpu"]))
    for (family, solver, label), pts in results.items():
        e = exponent([p[0] for p in pts], [p[1] for p in pts])
        if e is not None:
            print(f"\n{solver} ({label}) on {family}: CPU ~ N^{e:.2f} "
                  f"over {', '.join(str(p[0]) for p in pts)} NPUs")


if __name__ == "__main__":
    main()
