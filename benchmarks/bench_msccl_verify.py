"""``tacosc verify`` of large MSCCL XML plans, before and after, and its stages.

``python -m benchmarks.bench_msccl_verify FILE... [--runs 3] [--before TREE]`` runs
``python -m tacos verify FILE`` in a fresh child process per run, alternating the reference tree
(``--before``: a checkout run with plain ``python`` from its own directory, e.g. ../main) and
this tree (this interpreter), and prints CPU (user + system of that child, from ``wait4``), wall
time and peak RSS: medians and ranges, and the after/before ratio of the CPU medians.

``--stages FILE`` instead times, in this process with ``gc`` off, every stage of the columns
path of :mod:`tacos.msccl.verify_columns` (read, lex, structure, step columns, per-step rules,
each compiled check) and, for comparison, the in-memory verification of the parsed program
(:func:`tacos.msccl.verify.verify_program`: structure in Python, then the compiled checks).
``--python-passes FILE`` times the Python passes one by one (the reference; this file also runs
from another checkout, see :func:`python_passes`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_child(argv: list[str], cwd: str | Path) -> tuple[float, float, float, int]:
    """(CPU s, wall s, peak RSS MiB, exit code) of one child process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return ru.ru_utime + ru.ru_stime, wall, ru.ru_maxrss / 1024, proc.returncode


def _summary(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})"


def compare(files: list[str], runs: int, before: str | None) -> None:
    """Alternate before/after runs of ``tacosc verify`` per file and print a Markdown table."""
    trees = ([("before", ["python"], before)] if before else []) + \
        [("after", [sys.executable], str(ROOT))]
    print(f"# {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f} at start")
    ref = run_child(["python", "-c", "pass"], ROOT)
    print(f"# python -c pass: {ref[0]:.3f} s CPU")
    print("| file | tree | runs | CPU s median (range) | wall s median | peak RSS MiB | ok |")
    print("|---|---|---|---|---|---|---|")
    for f in files:
        got: dict[str, list[tuple[float, float, float, int]]] = {name: [] for name, *_ in trees}
        for _ in range(runs):
            for name, py, cwd in trees:
                got[name].append(run_child([*py, "-m", "tacos", "verify", f], cwd))
        for name, *_ in trees:
            rows = got[name]
            print(f"| {Path(f).name} | {name} | {runs} | {_summary([r[0] for r in rows])} | "
                  f"{statistics.median(r[1] for r in rows):.2f} | "
                  f"{statistics.median(r[2] for r in rows):.0f} | "
                  f"{'yes' if all(r[3] == 0 for r in rows) else 'NO'} |")
        if before:
            ratio = statistics.median(r[0] for r in got["after"]) / \
                statistics.median(r[0] for r in got["before"])
            print(f"| {Path(f).name} | after / before | | {ratio:.3f} | | | |")
    print(f"# load {os.getloadavg()[0]:.1f} at end")


def _stage_timer(out: list[tuple[str, float]]):
    """A ``timed(name, fn, *args, **kw)`` that runs ``fn`` and appends (name, CPU seconds)."""

    def timed(name, fn, *args, **kw):
        t = time.process_time()
        res = fn(*args, **kw)
        out.append((name, time.process_time() - t))
        return res

    return timed


def stages(path: str) -> None:
    """Per-stage CPU of the columns path and of the in-memory verification."""
    import numpy as np

    from tacos.msccl import verify_columns, verify_jit
    from tacos.msccl.verify import _modes, verify_program
    from tacos.msccl.verify_structure import check_structure
    from tacos.msccl.xml_reader import parse_xml_collect, parse_xml_runs, read_xml_text

    gc.disable()
    out: list[tuple[str, float]] = []
    timed = _stage_timer(out)

    text = timed("read", read_xml_text, path)
    outcome, tb_runs = timed("lex + tree (steps as spans)", parse_xml_runs, text, source=path,
                             strict=True)
    p = outcome.program
    timed("structure (step-less program)", check_structure, p)
    lens = np.fromiter((sum(r.count for r in runs) for runs in tb_runs), dtype=np.int64,
                       count=len(tb_runs))
    k = timed("import numba + kernels module", verify_jit.kernels)
    runs = [r for rs in tb_runs for r in rs]
    cols = timed("step columns (compiled scan; first kernel load)", verify_columns.step_columns,
                 text, runs)
    timed("per-step structure rules", verify_columns.steps_clean, p, lens, cols, 64)
    a = timed("arrays", verify_jit.assemble, p, lens, cols)
    fo = timed("fold into transmissions", k.fold, a.tb_start, a.typ, a.srcbuf, a.dstbuf,
               a.dstoff, a.depid, a.deps, a.hasdep)
    (tb_tx, pos_tx, tx_tb, tx_first, tx_last, tx_n, tx_post, tx_hasdep, tx_w0, tx_w1, w_dep,
     w_deps) = fo
    timed("dependencies", k.dependencies_clean, a.tb_start, a.tb_rank, a.tb_id, a.tbidx, a.typ,
          a.srcbuf, a.srcoff, a.dstbuf, a.dstoff, a.cnt, a.depid, a.deps, a.hasdep, pos_tx,
          tx_first, tx_last, tx_n, tx_post)
    sconn, rconn, csend, crecv = timed("connection ids", verify_jit._connections, a, p.ngpus)
    _, match = timed("pairing", k.pair, csend, crecv, tb_tx, sconn, rconn, tx_first, a.typ,
                     a.srcbuf, a.srcoff, a.dstbuf, a.dstoff, a.cnt)
    w_tb, w_rel = timed("wait targets", k.resolve_waits, a.tb_start, a.tb_rank, a.tbidx, pos_tx,
                        tx_tb, tx_w0, tx_w1, w_dep, w_deps)
    ptr, preds, order, _ = timed("happens-before", k.happens_before, tb_tx, tx_tb, tx_w0, tx_w1,
                                 w_rel, match)
    share = p.nchunksperloop // p.ngpus
    mode = _modes(p)[0]
    amode = verify_jit._alias_mode(p.coll)
    timed("races", k.races_clean, order, ptr, preds, tx_tb, tx_first, tx_last, tx_hasdep,
          tx_w0, tx_w1, w_rel, tb_tx, a.tb_rank, a.tb_local, a.width, a.typ, a.srcbuf,
          a.srcoff, a.dstbuf, a.dstoff, a.cnt, mode, amode, share, a.bsize, a.base, a.stride,
          a.nslots)
    timed("FIFO", k.fifo_completes, tb_tx, sconn, rconn, csend, crecv, tx_first, tx_post,
          tx_hasdep, tx_w0, tx_w1, w_tb, w_deps, a.typ, a.cnt, 1)
    timed("symbolic", k.symbolic_clean, order, tx_tb, tx_first, tx_last, match, a.tb_rank,
          a.typ, a.srcbuf, a.srcoff, a.dstbuf, a.dstoff, a.cnt, p.ngpus, p.nchunksperloop,
          verify_jit.COLL_CODES[p.coll], mode, amode, share, a.bsize, a.base, a.stride,
          a.nslots)
    total = sum(t for _, t in out)
    print(f"columns path of {path} ({int(lens.sum())} steps):")
    for name, t in out:
        print(f"  {name:48s} {t:6.2f} s")
    print(f"  {'total':48s} {total:6.2f} s")
    del outcome, tb_runs, cols, a, fo
    program = timed("parse into a Program (Step objects)", parse_xml_collect, text, source=path,
                    strict=True).program
    report = timed("verify_program (structure + compiled checks)", verify_program, program)
    print("in-memory path:")
    for name, t in out[-2:]:
        print(f"  {name:48s} {t:6.2f} s")
    print(f"  ok: {report.ok}")


def python_passes(path: str) -> None:
    """Per-pass CPU of the Python passes (also runs from another checkout:
    ``cd TREE && python PATH/TO/bench_msccl_verify.py --python-passes FILE``)."""
    from tacos.msccl.verify_connections import check_connections
    from tacos.msccl.verify_deps import build_hb, check_dependencies
    from tacos.msccl.verify_fifo import run_fifo
    from tacos.msccl.verify_model import build_model
    from tacos.msccl.verify_races import check_races
    from tacos.msccl.verify_structure import check_structure
    from tacos.msccl.verify_symbolic import check_symbolic
    from tacos.msccl.xml_reader import load_xml_collect

    gc.disable()
    out: list[tuple[str, float]] = []
    timed = _stage_timer(out)

    program = timed("parse", load_xml_collect, path, strict=True).program
    timed("structure", check_structure, program)
    model = timed("model", build_model, program)
    timed("connections + dependencies",
          lambda: (check_connections(model), check_dependencies(model)))
    hb = timed("happens-before", build_hb, model)
    aliased = program.inplace == 1
    timed("races", check_races, model, hb, aliased=aliased)
    run = timed("FIFO", run_fifo, model)
    timed("symbolic", check_symbolic, model, run, aliased=aliased)
    print(f"Python passes on {path}:")
    for name, t in out:
        print(f"  {name:28s} {t:6.2f} s")
    print(f"  {'total':28s} {sum(t for _, t in out):6.2f} s")


def main(argv: list[str] | None = None) -> None:
    """Command line: compare trees on files, or time the stages on one file."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--before", help="reference tree, run with plain python from there")
    ap.add_argument("--stages", help="time each stage on this file instead")
    ap.add_argument("--python-passes", help="time the Python passes on this file instead")
    args = ap.parse_args(argv)
    if args.stages:
        stages(args.stages)
    elif args.python_passes:
        python_passes(args.python_passes)
    else:
        compare(args.files, args.runs, args.before)


if __name__ == "__main__":
    main()
