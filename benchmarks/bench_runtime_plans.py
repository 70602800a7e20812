"""Runtime-shaped MSCCL plans against NCCL and Microsoft's production plans, in the runtime model.

For ``dgx_a100_node`` and ``dgx_h100_node``, all-reduce and all-gather, every power-of-4 size
from 1 KiB to 4 GiB: the plan and shape tacos writes for that size's window
(:func:`tacos.sweep_shaped.choose_windows`, each program verified), NCCL's modelled best
without in-switch reduction (ring or tree, the tuner's protocol: what MSCCL XML competes with),
NCCL's own pick (NVLS included on H100), and Microsoft's plan for the machine
(``executor_ndv4_*`` on A100, ``executor_ndv5_*`` on H100) wherever one covers the size.  All
times are :mod:`tacos.runtime` estimates.

Every emitted program is also replayed by :mod:`benchmarks.replay_streams` (one stream per
thread block, every iteration, ports re-shared at each event): ``model/replay`` is the runtime
model's time over the replay's.

``python -m benchmarks.bench_runtime_plans [--quick] [--out docs/benchmarks]`` writes
``runtime-plans.csv`` and prints the markdown table.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import time
from pathlib import Path

from benchmarks.__main__ import machine
from benchmarks.replay_streams import replay
from tacos import load
from tacos.errors import TacosError
from tacos.model.units import format_size
from tacos.msccl.lower import MscclOptions
from tacos.msccl.sweep_xml import windows
from tacos.msccl.xml_reader import load_xml
from tacos.runtime import estimate_nccl, estimate_program
from tacos.sweep import sweep
from tacos.sweep_shaped import choose_windows, named

ROOT = Path(__file__).resolve().parent.parent
PRESETS = ROOT / "tacos" / "presets"
FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "msccl"
SYSTEMS = {"dgx_a100_node": "executor_ndv4_*.xml", "dgx_h100_node": "executor_ndv5_*.xml"}
SIZES = "1KiB:4GiB:x4"


def microsoft(pattern: str, kind: str, fixtures: Path) -> list:
    """Microsoft's production programs for ``kind`` on 8 GPUs."""
    out = []
    for path in sorted(fixtures.glob(pattern)):
        prog = load_xml(path)
        if prog.coll == kind and prog.ngpus == 8:
            out.append((path.name, prog))
    return out


def nccl_times(topo, kind: str, size: int) -> tuple[float | None, float | None, str]:
    """(best of ring/tree, NCCL's own pick, the pick's label)."""
    plain = []
    for algo in ("ring", "tree"):
        try:
            plain.append(estimate_nccl(topo, kind, size, algorithm=algo).time)
        except TacosError:
            pass
    own = estimate_nccl(topo, kind, size)
    label = str(own.detail.get("algorithm", "")) + "/" + str(own.detail.get("protocol", ""))
    return (min(plain) if plain else None), own.time, label.strip("/")


def run(quick: bool, fixtures: Path) -> list[dict]:
    rows = []
    for preset, pattern in SYSTEMS.items():
        topo = load(PRESETS / f"{preset}.tdl").topology
        for kind in ("allreduce", "allgather"):
            t0 = time.perf_counter()
            res = sweep(topo, kind, "1KiB:1MiB:x4" if quick else SIZES, workers=1, trials=1)
            choices = choose_windows(res, base=MscclOptions(inplace=True))
            seconds = time.perf_counter() - t0
            ms = microsoft(pattern, kind, fixtures)
            ms_programs = dict(ms)
            ordered = sorted(res.rows, key=lambda r: r.size)
            spans = windows([r.size for r in ordered])
            for row, ch, (lo, hi) in zip(ordered, choices, spans, strict=True):
                named(ch, "tacos", lo, hi).xml()  # verified in its window, as -o DIR writes it
                best, own, label = nccl_times(topo, kind, row.size)
                theirs = [(name, estimate_program(p, topo, row.size).time) for name, p in ms
                          if (p.minBytes or 0) <= row.size <= (p.maxBytes or 1 << 62)]
                f = ch.facts()
                rows.append({
                    "system": preset, "collective": kind, "size": row.size,
                    "tacos_us": ch.time * 1e6, "plan": ch.plan, "proto": ch.shape.proto,
                    "instances": ch.shape.instances, "channels": f["nchannels"],
                    "tbs_per_gpu": f["tbs_per_gpu"], "port_order": ch.shape.port_order,
                    "balance": round(float(f["balance"]), 3),
                    "nccl_plain_us": best * 1e6 if best else None,
                    "nccl_own_us": own * 1e6, "nccl_own": label,
                    "vs_nccl_plain": best / ch.time if best else None,
                    "microsoft": theirs[0][0] if theirs else "",
                    "microsoft_us": theirs[0][1] * 1e6 if theirs else None,
                    "vs_microsoft": theirs[0][1] / ch.time if theirs else None,
                    "replay_us": replay(ch.program, topo, row.size) * 1e6,
                    "microsoft_replay_us": (replay(ms_programs[theirs[0][0]], topo, row.size)
                                            * 1e6 if theirs else None),
                    "choose_s": seconds})
                rows[-1]["model_vs_replay"] = rows[-1]["tacos_us"] / rows[-1]["replay_us"]
                mr = rows[-1]["microsoft_replay_us"]
                rows[-1]["vs_microsoft_replay"] = mr / rows[-1]["replay_us"] if mr else None
    return rows


def markdown(rows: list[dict]) -> str:
    head = ("| system | coll | size | tacos µs | plan | proto | inst | chan | tbs "
            "| NCCL ring/tree µs | vs NCCL | NCCL pick µs | Microsoft µs | vs MS "
            "| replay µs | model/replay | Microsoft replay µs | vs MS (replay) |")
    lines = [head, "|" + "---|" * 18]

    def f(x, fmt="{:.2f}"):
        return "-" if x is None else fmt.format(x)

    for r in rows:
        lines.append(
            f"| {r['system']} | {r['collective']} | {format_size(r['size'])} | "
            f"{r['tacos_us']:.2f} | {r['plan']} | {r['proto']} | {r['instances']} | "
            f"{r['channels']} | {r['tbs_per_gpu']} | {f(r['nccl_plain_us'])} | "
            f"{f(r['vs_nccl_plain'], '{:.2f}x')} | {r['nccl_own_us']:.2f} ({r['nccl_own']}) | "
            f"{f(r['microsoft_us'])} | {f(r['vs_microsoft'], '{:.2f}x')} | "
            f"{r['replay_us']:.2f} | {r['model_vs_replay']:.3f} | "
            f"{f(r['microsoft_replay_us'])} | {f(r['vs_microsoft_replay'], '{:.2f}x')} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1 KiB - 1 MiB only")
    ap.add_argument("--out", default=str(ROOT / "docs" / "benchmarks"))
    ap.add_argument("--fixtures", default=str(FIXTURES))
    args = ap.parse_args()
    rows = run(args.quick, Path(args.fixtures))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "runtime-plans.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"<!-- {dt.date.today().isoformat()}, {machine()} -->")
    print(markdown(rows))


if __name__ == "__main__":
    main()
