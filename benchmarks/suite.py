"""Benchmark machinery: run solvers on a problem, measure, and write tables.

A *case* (``benchmarks/cases_*.py``) builds :class:`Table` objects by calling :func:`measure`
for each problem (a topology and a collective) with the solvers it wants.  Every row carries
the collective time, algorithm bandwidth (size / time), the lower bound of
:func:`tacos.check.bounds.lower_bound`, the gap (time / bound), the speedup over ring and direct on
the same problem, the synthesis time, and whether the schedule passed the verifier.  A solver that
is not available in this build (or a case a solver cannot serve) becomes a row with a note, so
the suite runs as pieces land.

Baselines are built with :func:`tacos.solvers.baselines.baseline_schedule` on the original
topology (switches as shared ports); synthesizers go through :func:`tacos.synthesize.solve`
(switches unwound per the topology's policy).
"""

from __future__ import annotations

import csv
import io
import math
import multiprocessing as mp
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tacos.check.bounds import lower_bound
from tacos.check.verify import verify_schedule
from tacos.errors import TacosError
from tacos.model.collective import Collective
from tacos.model.schedule import Schedule
from tacos.model.topology import Topology
from tacos.solvers.baselines.solver import ALGORITHMS, baseline_schedule

COLUMNS = ("problem", "npus", "collective", "size", "solver", "time_us", "algbw_GBps",
           "bound_us", "gap", "vs_ring", "vs_direct", "norm", "synthesis_s", "verified",
           "status", "note")
HEADERS = ("problem", "NPUs", "collective", "size", "solver", "time (µs)", "algbw (GB/s)",
           "bound (µs)", "gap", "vs ring", "vs direct", "norm.", "synthesis (s)", "verified",
           "status", "note")


@dataclass
class Context:
    """Settings of one suite run."""

    quick: bool = False
    out_dir: Path = Path("benchmarks/out")
    ilp_limit: float = 120.0
    seed: int = 0
    trials: int = 16
    log: Callable[[str], None] = print
    verify: bool = True
    timeout: float | None = None  # wall-clock limit per synthesizer run (child process)


@dataclass
class Run:
    """One solver on one problem."""

    solver: str
    time: float | None = None
    synthesis: float | None = None
    status: str = "skipped"
    verified: bool | None = None
    note: str = ""
    schedule: Schedule | None = field(default=None, repr=False)


@dataclass
class Table:
    """A case's result: rows (dicts keyed by :data:`COLUMNS`), notes and plot file names."""

    key: str
    title: str
    setup: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    plots: list[str] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0


def _solver_available(name: str) -> str | None:
    """None when ``name`` can run, else the reason it cannot."""
    from tacos.solvers.registry import get_solver

    try:
        get_solver(name)
    except TacosError as exc:
        return exc.message
    return None


def run_solver(ctx: Context, name: str, topology: Topology, collective: Collective,
               *, keep: bool = False, **options: Any) -> Run:
    """Run solver ``name`` (a baseline or a registered synthesizer) and verify the result.

    Synthesizers run in a child process limited to ``ctx.timeout`` seconds unless the schedule
    is wanted (``keep``); a run that does not finish becomes a ``timeout`` row.
    """
    label = options.pop("label", name)
    if name not in ALGORITHMS:
        reason = _solver_available(name)
        if reason:
            return Run(label, note=f"not available: {reason}")
        if ctx.timeout and not keep and "fork" in mp.get_all_start_methods():
            return _run_isolated(ctx, name, label, topology, collective, options)
    return _run(ctx, name, label, topology, collective, options)


def _run(ctx: Context, name: str, label: str, topology: Topology, collective: Collective,
         options: dict[str, Any]) -> Run:
    t0 = time.perf_counter()
    try:
        if name in ALGORITHMS:
            sched = baseline_schedule(name, topology, collective, **options)
            status = "feasible"
        else:
            from tacos.synthesize import solve

            opts = {"seed": ctx.seed, "bound": False, **options}
            res = solve(topology, collective, solver=name, **opts)
            sched, status = res.schedule, res.status
            if sched is None:
                return Run(label, synthesis=time.perf_counter() - t0, status=status,
                           note=str(res.stats.get("reason", "no schedule")))
    except TacosError as exc:
        return Run(label, synthesis=time.perf_counter() - t0, status="unsupported",
                   note=exc.message)
    synth = time.perf_counter() - t0
    verified = None
    if ctx.verify:
        report = verify_schedule(sched)
        verified = report.ok
    return Run(label, sched.makespan, synth, status, verified,
               "" if verified in (None, True) else "FAILED VERIFICATION", sched)


def _child(conn, ctx: Context, name: str, label: str, topology: Topology,
           collective: Collective, options: dict[str, Any]) -> None:
    os.setpgrp()  # own process group, so a timeout also stops the solver's workers
    try:
        r = _run(ctx, name, label, topology, collective, options)
        r.schedule = None
        conn.send(r)
    except Exception as exc:  # noqa: BLE001 - reported as a row, the suite goes on
        conn.send(Run(label, status="error", note=f"{type(exc).__name__}: {exc}"[:200]))
    finally:
        conn.close()


def _run_isolated(ctx: Context, name: str, label: str, topology: Topology,
                  collective: Collective, options: dict[str, Any]) -> Run:
    fork = mp.get_context("fork")
    recv, send = fork.Pipe(duplex=False)
    proc = fork.Process(target=_child, args=(send, ctx, name, label, topology, collective,
                                              options))
    t0 = time.perf_counter()
    proc.start()
    send.close()
    result = None
    if recv.poll(ctx.timeout):
        try:
            result = recv.recv()
        except EOFError:
            result = None
        proc.join(10)
    if proc.is_alive() or result is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.join()
    recv.close()
    if result is None:
        waited = time.perf_counter() - t0
        return Run(label, synthesis=waited, status="timeout",
                   note=f"no result within {ctx.timeout:g} s")
    return result


def measure(ctx: Context, problem: str, topology: Topology, collective: Collective,
            solvers: Sequence[str | tuple[str, str, dict[str, Any]]],
            *, reference: str = "greedy", compare: Sequence[str] = ("ring", "direct"),
            keep: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Run every solver on one problem and return its table rows.

    ``solvers`` items are names or ``(label, solver, options)``.  The baselines in ``compare``
    are run even when not listed (for the speedup columns) but only listed solvers get rows.
    Schedules of the labels in ``keep`` stay in ``rows[i]['schedule']`` (not written out).
    """
    runs: dict[str, Run] = {}
    for item in solvers:
        label, name, opts = (item, item, {}) if isinstance(item, str) else item
        ctx.log(f"  {problem}: {label} ...")
        runs[label] = run_solver(ctx, name, topology, collective, label=label,
                                 keep=label in keep, **opts)
        r = runs[label]
        ctx.log(f"  {problem}: {label} -> {_fmt_us(r.time)} us, {r.status} {r.note}".rstrip())
    base_times: dict[str, float | None] = {"ring": None, "direct": None}
    for base in compare:
        r = runs.get(base) or run_solver(ctx, base, topology, collective)
        base_times[base] = r.time
    bound = lower_bound(topology, collective).value
    ref = runs.get(reference)
    ref_time = ref.time if ref is not None else None
    rows = []
    for r in runs.values():
        row = _row(problem, topology, collective, r, bound, base_times["ring"],
                   base_times["direct"], ref_time)
        if r.solver in keep:
            row["schedule"] = r.schedule
        rows.append(row)
    return rows


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b <= 0:
        return None
    return a / b


def _row(problem: str, topology: Topology, coll: Collective, r: Run, bound: float,
         ring: float | None, direct: float | None, ref: float | None) -> dict[str, Any]:
    t = r.time
    return {
        "problem": problem,
        "npus": len(topology.live_npus),
        "collective": coll.label(),
        "size": coll.size,
        "solver": r.solver,
        "time_us": None if t is None else t * 1e6,
        "algbw_GBps": None if not t else coll.size / t / 1e9,
        "bound_us": bound * 1e6,
        "gap": _ratio(t, bound),
        "vs_ring": _ratio(ring, t),
        "vs_direct": _ratio(direct, t),
        "norm": _ratio(t, ref),
        "synthesis_s": r.synthesis,
        "verified": r.verified,
        "status": r.status,
        "note": r.note,
    }


# -- output ----------------------------------------------------------------------------------
def _fmt_us(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e6:.1f}"


def fmt(value: Any, col: str) -> str:
    """Format one cell for markdown."""
    if value is None or value == "":
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "**no**"
    if col == "size":
        return _size(value)
    if isinstance(value, float):
        if col in ("gap", "vs_ring", "vs_direct", "norm"):
            return f"{value:.2f}"
        if col == "synthesis_s":
            return f"{value:.3g}"
        return f"{value:.4g}" if abs(value) < 1e4 else f"{value:.0f}"
    return str(value).replace("|", "\\|")


def _size(nbytes: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale and nbytes % (scale // 1024 or 1) == 0:
            return f"{nbytes / scale:.4g} {unit}"
    return f"{nbytes:.0f} B"


def markdown_table(rows: Sequence[dict[str, Any]], columns: Sequence[str] = COLUMNS) -> str:
    """Rows as a GitHub markdown table (columns in :data:`COLUMNS` order)."""
    head = [HEADERS[COLUMNS.index(c)] for c in columns]
    out = io.StringIO()
    out.write("| " + " | ".join(head) + " |\n")
    out.write("|" + "|".join("---" for _ in head) + "|\n")
    for row in rows:
        out.write("| " + " | ".join(fmt(row.get(c), c) for c in columns) + " |\n")
    return out.getvalue()


def write_csv(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    """Write rows with every :data:`COLUMNS` entry (raw numbers, µs and seconds)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(COLUMNS), extrasaction="ignore")
        w.writeheader()
        for row in rows:
            w.writerow({k: ("" if row.get(k) is None else _csv(row.get(k))) for k in COLUMNS})


def _csv(v: Any) -> Any:
    if isinstance(v, float):
        return f"{v:.6g}"
    return v


def mean(values: Sequence[float | None]) -> float | None:
    """Arithmetic mean of the values that are not None (None if there are none)."""
    vals = [v for v in values if v is not None and math.isfinite(v)]
    return sum(vals) / len(vals) if vals else None


def pick(rows: Sequence[dict[str, Any]], solver: str, key: str,
         problem: str | None = None) -> list[Any]:
    """Values of ``key`` in rows of ``solver`` (and ``problem``)."""
    return [r[key] for r in rows if r["solver"] == solver
            and (problem is None or r["problem"] == problem)]


def pyplot():
    """matplotlib.pyplot on the Agg backend."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


SOLVER_COLORS = {
    "greedy": "tab:orange", "ilp": "tab:blue", "taccl": "tab:green", "ring": "tab:red",
    "direct": "tab:purple", "biring": "tab:brown", "rhd": "tab:pink", "dbtree": "tab:gray",
    "hierarchical": "tab:olive", "ring (NPU order)": "tab:cyan",
    "early termination": "tab:blue", "time clustering": "tab:cyan",
}


def color(solver: str) -> str | None:
    """The colour a solver has in every plot (None: matplotlib's next colour)."""
    return SOLVER_COLORS.get(solver, SOLVER_COLORS.get(solver.split()[0]))


def read_csv_rows(path: Path) -> list[dict[str, Any]]:
    """Rows of a case CSV with numbers parsed back (empty cells -> None)."""
    out = []
    with path.open() as fh:
        for row in csv.DictReader(fh):
            parsed: dict[str, Any] = {}
            for k, v in row.items():
                if v == "":
                    parsed[k] = None
                elif k in ("problem", "collective", "solver", "status", "note", "verified"):
                    parsed[k] = v
                else:
                    try:
                        parsed[k] = float(v)
                    except ValueError:
                        parsed[k] = v
            out.append(parsed)
    return out


def gap_plot(cases: dict[str, Sequence[dict[str, Any]]], path: Path,
             solvers: Sequence[str] = ("ilp", "greedy", "taccl", "ring", "direct")) -> bool:
    """Gap to the lower bound (time / bound) of the main solvers on every problem of
    ``cases`` (case key -> rows); returns False when there is nothing to draw."""
    problems: list[tuple[str, str]] = []
    for key, rows in sorted(cases.items()):
        for r in rows:
            if (key, r["problem"]) not in problems and r["solver"] in solvers and r["gap"]:
                problems.append((key, r["problem"]))
    if not problems:
        return False
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(8.0, 0.55 * len(problems)), 4.0))
    width = 0.8 / len(solvers)
    for j, solver in enumerate(solvers):
        vals = []
        for key, prob in problems:
            v = [r["gap"] for r in cases[key] if r["problem"] == prob and r["solver"] == solver]
            vals.append(v[0] if v and v[0] else float("nan"))
        xs = [i + (j - (len(solvers) - 1) / 2) * width for i in range(len(problems))]
        ax.bar(xs, vals, width, label=solver, color=color(solver))
    ax.set_xticks(range(len(problems)), [f"({k}) {p}" for k, p in problems], rotation=60,
                  ha="right", fontsize=7)
    ax.set_yscale("log")
    ax.axhline(1.0, color="black", linewidth=0.6)
    ax.set_ylabel("time / lower bound")
    ax.legend(fontsize=8, ncol=len(solvers))
    ax.set_title("Gap to the lower bound (1 = optimal; missing bar = not run)", fontsize=10)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return True
