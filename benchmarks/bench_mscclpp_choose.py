"""How long choosing an MSCCL++ plan's thread blocks takes, before and after skipping counts.

``tacosc ... --format mscclpp -o plan.json`` lowers, writes and times the plan for several
thread-block counts (:func:`tacos.msccl.mscclpp_choose.choose_mscclpp`).  For each case the
schedule is synthesized once, then chosen with ``search='climb'`` (every count climbed to is
lowered: the behaviour before counts were skipped) and ``search='pruned'`` (the default: counts
that cannot load are skipped unlowered), interleaved ``--repeat`` times in the same process; the
table gives the median CPU seconds of each and checks that both chose the same plan.

``nice python -m benchmarks.bench_mscclpp_choose [--repeat 3] [--case NAME]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

from tacos.importers import load_any
from tacos.model import patterns
from tacos.msccl.lower import MscclOptions
from tacos.msccl.mscclpp_choose import choose_mscclpp
from tacos.synthesize import synthesize

ROOT = Path(__file__).resolve().parent.parent
SIZE = 64 * 2**20

#: (label, file, collective kind or None for the file's own, solver)
CASES = (
    ("presets/mi250_node.tdl allreduce 64MiB, auto", "tacos/presets/mi250_node.tdl",
     "allreduce", "auto"),
    ("presets/tpu_v4.tdl allreduce 64MiB, greedy", "tacos/presets/tpu_v4.tdl", "allreduce",
     "greedy"),
    ("examples/torus3d.tdl, greedy", "examples/torus3d.tdl", None, "greedy"),
    ("presets/dgx1.tdl allreduce 64MiB, greedy", "tacos/presets/dgx1.tdl", "allreduce",
     "greedy"),
)


def schedule_of(path: str, kind: str | None, solver: str) -> Any:
    """The case's schedule, synthesized as ``tacosc`` does for ``--format mscclpp``."""
    spec = load_any(str(ROOT / path))
    coll = spec.collective if kind is None else \
        patterns.build(kind, spec.topology.live_npus, size=SIZE)
    extra = {"in_switch": False, "emit": "xml"} if solver == "auto" else {}
    return synthesize(spec.topology, coll, solver=solver, **extra)


def timed(schedule: Any, search: str) -> tuple[float, str]:
    """CPU seconds of one choice, and what was chosen (or the error)."""
    opts = MscclOptions(inplace=True)
    t0 = time.process_time()
    try:
        got = choose_mscclpp(schedule, opts, search=search)
        what = f"instances {got.value}, {got.time * 1e6:.1f} us"
    except Exception as exc:  # noqa: BLE001 - the same refusal is a same choice
        what = f"refused: {getattr(exc, 'message', str(exc))[:50]}"
    return time.process_time() - t0, what


def main() -> None:
    """Run the cases and print the markdown table."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--case", default=None, help="only cases whose label contains this")
    args = ap.parse_args()
    print("| case | chosen | climb (s) | pruned (s) | speed-up |\n|---|---|---|---|---|")
    for label, path, kind, solver in CASES:
        if args.case and args.case not in label:
            continue
        sched = schedule_of(path, kind, solver)
        runs: dict[str, list[float]] = {"climb": [], "pruned": []}
        chosen: dict[str, set[str]] = {"climb": set(), "pruned": set()}
        for _ in range(args.repeat):
            for search in runs:
                sec, what = timed(sched, search)
                runs[search].append(sec)
                chosen[search].add(what)
        same = chosen["climb"] == chosen["pruned"]
        a, b = statistics.median(runs["climb"]), statistics.median(runs["pruned"])
        print(f"| {label} | {'; '.join(sorted(chosen['pruned']))}"
              f"{'' if same else ' DIFFERS: ' + '; '.join(sorted(chosen['climb']))} "
              f"| {a:.1f} | {b:.1f} | {a / b if b else float('inf'):.1f}x |", flush=True)


if __name__ == "__main__":
    main()
