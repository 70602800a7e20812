"""``python -m benchmarks run [--quick] [--only a,b] [--docs]``: run the benchmark suite.

Writes one CSV per case, the plots and ``results.md`` to ``--out`` (default
``benchmarks/out``).  With ``--docs`` the CSVs and plots go to ``docs/benchmarks/`` and the
sections of the cases run replace theirs in the generated part of ``docs/benchmarks.md``
(between the ``BEGIN/END GENERATED`` markers; other cases' sections are kept).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.suite import (
    Context,
    Table,
    gap_plot,
    markdown_table,
    read_csv_rows,
    write_csv,
)

CASES = {
    "a": ("benchmarks.cases_seed", "case_a"),
    "b": ("benchmarks.cases_seed", "case_b"),
    "c": ("benchmarks.cases_seed", "case_c"),
    "d": ("benchmarks.cases_irregular", "case_d"),
    "e": ("benchmarks.cases_irregular", "case_e"),
    "f": ("benchmarks.cases_scale", "case_f"),
    "g": ("benchmarks.cases_scale", "case_g"),
    "h": ("benchmarks.cases_systems", "case_h"),
}
SHOWN = ("problem", "npus", "solver", "time_us", "algbw_GBps", "bound_us", "gap", "vs_ring",
         "vs_direct", "norm", "synthesis_s", "verified", "status", "note")
BEGIN, END = "<!-- BEGIN GENERATED -->", "<!-- END GENERATED -->"


def machine() -> str:
    """CPU model, core count, memory, OS and Python."""
    cpu = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f", {kb / 2**20:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    return (f"{cpu}, {os.cpu_count()} cores{mem}, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}")


def _commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10, check=False)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _backends() -> str:
    try:
        from tacos.solvers.ilp.backends import available_backends

        return ", ".join(available_backends()) or "none"
    except ImportError:
        return "ILP solver not in this build"


COLUMN_NOTE = (
    "Columns: time = collective time; algbw = size / time; bound = "
    "`tacos.check.bounds.lower_bound`; gap = time / bound; vs ring / vs direct = ring (direct) "
    "time / this time on the same problem; norm. = time / the case's reference; verified = "
    "`tacos.check.verify.verify_schedule`.")
CASE_MARK = "<!-- case {} -->"


def render_case(t: Table, ctx: Context, command: str, prefix: str) -> str:
    """One case's markdown section, starting with its ``<!-- case X -->`` marker."""
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [CASE_MARK.format(t.key), f"### ({t.key}) {t.title}", "", t.setup, "",
             markdown_table(t.rows, SHOWN)]
    lines += [f"- {n}" for n in t.notes]
    lines += [f"- measured {now}, commit {_commit()}, `{command}` (ILP limit "
              f"{ctx.ilp_limit:g} s, greedy {ctx.trials} trials, seed {ctx.seed}); the case "
              f"took {t.seconds:.0f} s; raw data [{t.key}.csv]({prefix}{t.key}.csv)", ""]
    lines += [f"![{p}]({prefix}{p})" for p in t.plots]
    return "\n".join(lines) + "\n"


def render(sections: dict[str, str], prefix: str, gap: bool) -> str:
    """The generated block: machine, column legend, the gap overview and the case sections."""
    lines = ["## Results", "", f"Machine: {machine()}.  ILP back ends: {_backends()}.", "",
             COLUMN_NOTE, ""]
    if gap:
        lines += ["### Gap to the lower bound, all cases", "", f"![gap.png]({prefix}gap.png)",
                  ""]
    return "\n".join(lines) + "\n" + "\n".join(sections[k] for k in sorted(sections))


def _split_sections(block: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for key in CASES:
        mark = CASE_MARK.format(key)
        if mark in block:
            rest = block.split(mark, 1)[1]
            nxt = [rest.index(CASE_MARK.format(k)) for k in CASES
                   if CASE_MARK.format(k) in rest]
            out[key] = mark + (rest[: min(nxt)] if nxt else rest).rstrip() + "\n"
    return out


def update_docs(page: Path, sections: dict[str, str], gap: bool) -> None:
    """Put ``sections`` into the generated block of ``page``, keeping the sections of cases
    that were not run (and everything outside the markers)."""
    text = page.read_text() if page.exists() else "# Benchmarks\n\n"
    old: dict[str, str] = {}
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        old_block, tail = rest.split(END, 1)
        old = _split_sections(old_block)
    else:
        head, tail = text.rstrip() + "\n\n", "\n"
    merged = {**old, **sections}
    text = head + f"{BEGIN}\n{render(merged, 'benchmarks/', gap)}{END}" + tail
    page.write_text(text)


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks")
    sub = ap.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="run the suite")
    run.add_argument("--quick", action="store_true", help="small sizes (< 10 min on 2 cores)")
    run.add_argument("--only", default="", help="comma-separated case letters (a-h)")
    run.add_argument("--out", type=Path, default=None, help="output folder")
    run.add_argument("--docs", action="store_true",
                     help="write to docs/benchmarks/ and update docs/benchmarks.md")
    run.add_argument("--ilp-limit", type=float, default=None, help="ILP time limit (s)")
    run.add_argument("--trials", type=int, default=16, help="greedy trials")
    run.add_argument("--timeout", type=float, default=None,
                     help="wall-clock limit per synthesizer run (s)")
    run.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    keys = [k.strip() for k in args.only.split(",") if k.strip()] or list(CASES)
    unknown = [k for k in keys if k not in CASES]
    if unknown:
        ap.error(f"unknown case(s) {', '.join(unknown)}; choose from {', '.join(CASES)}")
    out = args.out or (Path("docs/benchmarks") if args.docs else Path("benchmarks/out"))
    out.mkdir(parents=True, exist_ok=True)
    limit = args.ilp_limit if args.ilp_limit is not None else (10.0 if args.quick else 60.0)
    timeout = args.timeout if args.timeout is not None else (300.0 if args.quick else 1800.0)
    ctx = Context(quick=args.quick, out_dir=out, ilp_limit=limit, seed=args.seed,
                  trials=args.trials, timeout=timeout,
                  log=lambda m: print(m, file=sys.stderr, flush=True))
    command = "python -m benchmarks " + " ".join(argv if argv is not None else sys.argv[1:])
    t0 = time.perf_counter()
    tables = []
    import importlib

    for k in keys:
        module, func = CASES[k]
        ctx.log(f"case {k} ...")
        c0 = time.perf_counter()
        table = getattr(importlib.import_module(module), func)(ctx)
        table.seconds = time.perf_counter() - c0
        write_csv(out / f"{k}.csv", table.rows)
        tables.append(table)
        ctx.log(f"case {k} done in {table.seconds:.0f} s")
    total = time.perf_counter() - t0
    gap = gap_plot({k: read_csv_rows(out / f"{k}.csv") for k in "abcdeh"
                    if (out / f"{k}.csv").exists()}, out / "gap.png")
    if not args.docs:
        (out / "results.md").write_text(render(
            {t.key: render_case(t, ctx, command, "") for t in tables}, "", gap))
    else:
        update_docs(Path("docs/benchmarks.md"),
                    {t.key: render_case(t, ctx, command, "benchmarks/") for t in tables}, gap)
    print(f"wrote {out} in {total / 60:.1f} min")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
