"""Runtime-shaped MSCCL plans on multi-node systems against NCCL, in the runtime model.

For each system (``examples/dgx_a100_2node.tdl`` by default) and size, the all-reduce plan
and shape ``tacosc TOPO -c allreduce -o plans/`` writes for that size's window
(:func:`tacos.sweep_shaped.choose_windows`, each program verified), NCCL's modelled best
without in-switch reduction (ring or tree), the CPU seconds of the sweep and of the shaping,
and the independent stream replay of the emitted program (:mod:`benchmarks.replay_streams`).

``python -m benchmarks.bench_multinode_plans [--systems a,b] [--sizes 64MiB,256MiB,1GiB]``
prints a markdown table.
"""

from __future__ import annotations

import argparse
import datetime as dt
import time
from pathlib import Path

from benchmarks.__main__ import machine
from benchmarks.replay_streams import replay
from tacos import load
from tacos.model.units import format_size
from tacos.msccl.lower import MscclOptions
from tacos.runtime import estimate_nccl
from tacos.sweep import sweep
from tacos.sweep_shaped import choose_windows

ROOT = Path(__file__).resolve().parent.parent


def run(systems: list[str], sizes: str, kind: str) -> list[str]:
    lines = ["| system | size | tacos µs | plan | proto | inst | chan | tbs | NCCL ring/tree µs "
             "| vs NCCL | replay µs | model/replay | sweep CPU s | shaping CPU s |",
             "|" + "---|" * 14]
    for name in systems:
        topo = load(ROOT / "examples" / f"{name}.tdl").topology
        t0 = time.process_time()
        res = sweep(topo, kind, sizes, workers=1, trials=1)
        t1 = time.process_time()
        choices = choose_windows(res, base=MscclOptions(inplace=True))
        t2 = time.process_time()
        for row, ch in zip(sorted(res.rows, key=lambda r: r.size), choices, strict=True):
            ch.xml()  # verified
            nccl = min(estimate_nccl(topo, kind, row.size, group=list(topo.live_npus),
                                     algorithm=a).time for a in ("ring", "tree"))
            f = ch.facts()
            r = replay(ch.program, topo, row.size)
            lines.append(f"| {name} | {format_size(row.size)} | {ch.time * 1e6:.1f} | {ch.plan} "
                         f"| {ch.shape.proto} | {ch.shape.instances} | {f['nchannels']} | "
                         f"{f['tbs_per_gpu']} | {nccl * 1e6:.1f} | {nccl / ch.time:.2f}x | "
                         f"{r * 1e6:.1f} | {ch.time / r:.2f} | {t1 - t0:.1f} | {t2 - t1:.1f} |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--systems", default="dgx_a100_2node")
    ap.add_argument("--sizes", default="64MiB,256MiB,1GiB")
    ap.add_argument("--collective", default="allreduce")
    args = ap.parse_args()
    print(f"<!-- {dt.date.today().isoformat()}, {machine()} -->")
    print("\n".join(run(args.systems.split(","), args.sizes, args.collective)))


if __name__ == "__main__":
    main()
