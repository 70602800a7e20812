"""Same seed, same bytes: every example and every registered solver, each run twice per seed.

For each example file of ``examples/`` (its declared collective, else an all-reduce of the
default size) and each solver of :data:`tacos.solvers.registry.SOLVERS`, the schedule is
synthesized twice with each of two seeds (``workers=1``) and written as a JSON schedule; the two
runs of one seed must give identical bytes.  A solver that refuses the problem must refuse it
with the same message both times.  The ILP is time-bounded by nature (a search cut off by the
clock is not reproducible), so it and ``taccl`` run only on groups of up to ``--ilp-npus``
NPUs, where they finish long before their time limit.

Usage::

    nice python -m benchmarks.check_determinism [--seeds 0 1] [--only ring8,mesh4x4]
        [--solvers greedy,forest] [--jsonl results.jsonl] [--out docs/benchmarks/determinism.md]
    python -m benchmarks.check_determinism --merge a.jsonl b.jsonl --out determinism.md

Examples run smallest first (by NPU count).  ``--jsonl`` appends each case as it finishes, so
several processes (disjoint ``--only`` sets) can share the work and ``--merge`` joins them.
Exit 1 when any pair differs.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TIME_BOUNDED = ("ilp", "taccl")


@dataclass
class Outcome:
    """One (example, solver, seed): the digest of each run's bytes, or its error message."""

    example: str
    solver: str
    seed: int
    first: str
    second: str
    seconds: float

    @property
    def same(self) -> bool:
        """Both runs gave the same bytes (or the same refusal)."""
        return self.first == self.second


def problem(path: Path):
    """(topology, collective) of an example: its declared collective, else an all-reduce."""
    import tacos
    from tacos.model.patterns import build

    spec = tacos.load(str(path))
    if spec.collective is not None:
        return spec.topology, spec.collective
    return spec.topology, build("allreduce", spec.topology.live_npus, size=1 << 20)


def run_once(topology, collective, solver: str, seed: int) -> str:
    """The JSON schedule's SHA-256, or ``'refused: <message>'``."""
    from tacos.backends.json_schedule import dumps

    from tacos.check.verify import verify_schedule
    from tacos.errors import TacosError
    from tacos.synthesize import synthesize

    try:
        schedule = synthesize(topology, collective, solver=solver, seed=seed, workers=1)
        verify_schedule(schedule).raise_if_failed()
        return hashlib.sha256(dumps(schedule).encode()).hexdigest()
    except TacosError as exc:
        return f"refused: {exc.message}"


def check(topology, collective, solver: str, seed: int, example: str = "") -> Outcome:
    """Synthesize twice with ``seed`` and compare."""
    t0 = time.perf_counter()
    first = run_once(topology, collective, solver, seed)
    second = run_once(topology, collective, solver, seed)
    return Outcome(example, solver, seed, first, second, time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    """Run the check over the examples and solvers asked for; print (and write) a table."""
    from tacos.solvers.registry import SOLVERS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs=2, default=(0, 1))
    ap.add_argument("--only", help="example names (comma separated, without .tdl)")
    ap.add_argument("--solvers", help="solver names (comma separated)")
    ap.add_argument("--ilp-npus", type=int, default=8)
    ap.add_argument("--out", help="also write the results as Markdown here")
    ap.add_argument("--jsonl", help="append each case here as it finishes")
    ap.add_argument("--merge", nargs="+", help="only write --out from these --jsonl files")
    ap.add_argument("--command", action="append", default=[],
                    help="with --merge: a command that produced the files (for the page)")
    args = ap.parse_args(argv)
    _COMMANDS[:] = args.command
    if args.merge:
        rows = [Outcome(**json.loads(line)) for f in args.merge
                for line in Path(f).read_text().splitlines() if line.strip()]
        if args.out:
            _write(Path(args.out), rows, args, argv)
        return 1 if any(not r.same for r in rows) else 0
    names = args.only.split(",") if args.only else None
    solvers = args.solvers.split(",") if args.solvers else list(SOLVERS)
    rows: list[Outcome] = []
    loaded = []
    for path in sorted(EXAMPLES.glob("*.tdl")):
        if names and path.stem not in names:
            continue
        try:
            loaded.append((path, *problem(path)))
        except Exception as exc:  # noqa: BLE001 - reported, not fatal
            print(f"{path.stem}: not loaded ({exc})", file=sys.stderr)
    loaded.sort(key=lambda item: (item[1].n_npus, item[0].stem))
    for path, topology, collective in loaded:
        for solver in solvers:
            if solver in TIME_BOUNDED and len(collective.group) > args.ilp_npus:
                continue
            for seed in args.seeds:
                out = check(topology, collective, solver, seed, path.stem)
                rows.append(out)
                if args.jsonl:
                    with open(args.jsonl, "a", encoding="utf-8") as fh:
                        fh.write(json.dumps(asdict(out)) + "\n")
                state = "same" if out.same else "DIFFERENT"
                print(f"{path.stem:22} {solver:13} seed {seed}: {state} "
                      f"({'refused' if out.first.startswith('refused') else 'plan'}, "
                      f"{out.seconds:.1f} s)", flush=True)
    bad = [r for r in rows if not r.same]
    plans = sum(1 for r in rows if not r.first.startswith("refused"))
    print(f"{len(rows)} (example, solver, seed) pairs: {plans} plans, "
          f"{len(rows) - plans} refusals, {len(bad)} different")
    if args.out:
        _write(Path(args.out), rows, args, argv)
    return 1 if bad else 0


def _write(path: Path, rows: list[Outcome], args: argparse.Namespace,
           argv: list[str] | None) -> None:
    """The results as Markdown: totals, then one row per example and one per solver."""
    from benchmarks.__main__ import machine

    def refused(r: Outcome) -> bool:
        return r.first.startswith("refused")

    bad = [r for r in rows if not r.same]
    plans = sum(1 for r in rows if not refused(r))
    examples = sorted({r.example for r in rows}, key=lambda e: [r.example for r in rows].index(e))
    solvers = sorted({r.solver for r in rows}, key=lambda s: [r.solver for r in rows].index(s))
    lines = [
        "# Same seed, same bytes",
        "",
        f"Every example of `examples/` ({len(examples)}: its declared collective, else an "
        f"all-reduce of 1 MiB) and every registered solver ({len(solvers)}), synthesized twice "
        "per seed at seeds "
        + " and ".join(str(s) for s in sorted({r.seed for r in rows}))
        + " with `workers=1`; the JSON schedules of the two runs of one seed are compared byte "
        "for byte (SHA-256), and a refusal must give the same message twice. The ILP and "
        "`taccl` (searches bounded by the clock) run on groups of up to "
        f"{args.ilp_npus} NPUs only.",
        "",
        "Command (two processes sharing the examples, then the merge that wrote this page):",
        "",
        "```",
        *(_COMMANDS or ["nice python -m benchmarks.check_determinism "
                        + " ".join(argv or sys.argv[1:])]),
        "```",
        "",
        f"Machine: {machine()} (2-core shared VM, other jobs running). "
        f"Date: {dt.date.today().isoformat()}.",
        "",
        f"Result: {len(rows)} (example, solver, seed) cases, {plans} plans and "
        f"{len(rows) - plans} refusals (the solver does not serve that collective or "
        f"topology); **{len(bad)} differ** between two runs with one seed."
        + _unserved(rows, solvers),
        "",
        "| example | cases | plans | refusals | differing | seconds (all runs) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for e in examples:
        mine = [r for r in rows if r.example == e]
        lines.append(f"| {e} | {len(mine)} | {sum(not refused(r) for r in mine)} | "
                     f"{sum(refused(r) for r in mine)} | {sum(not r.same for r in mine)} | "
                     f"{sum(r.seconds for r in mine):.1f} |")
    lines += ["", "| solver | cases | plans | differing | median seconds per pair of runs |",
              "| --- | --- | --- | --- | --- |"]
    for s in solvers:
        mine = [r for r in rows if r.solver == s]
        secs = sorted(r.seconds for r in mine)
        lines.append(f"| {s} | {len(mine)} | {sum(not refused(r) for r in mine)} | "
                     f"{sum(not r.same for r in mine)} | {secs[len(secs) // 2]:.2f} |")
    if bad:
        lines += ["", "Differing cases:", ""]
        lines += [f"- {r.example}, {r.solver}, seed {r.seed}" for r in bad]
    path.write_text("\n".join(lines) + "\n")


def _unserved(rows: list[Outcome], solvers: list[str]) -> str:
    """A sentence naming the solvers that gave no plan on any example, if any."""
    none = [s for s in solvers
            if all(r.first.startswith("refused") for r in rows if r.solver == s)]
    if not none:
        return ""
    return (f" {', '.join(none)} serve none of these problems (an all-to-all; switches with "
            "in-network multicast/reduce for an all-reduce): `tests/test_determinism.py` runs "
            "every solver twice on a problem it serves.")


_COMMANDS: list[str] = []
"""The commands that produced merged results (set by ``--command`` for the page)."""


if __name__ == "__main__":
    sys.exit(main())
