"""Peak memory of ``tacosc info`` at 1k, 4k and 16k NPUs: linear in the number of links.

Each measurement runs ``tacosc info FILE`` in a fresh process and reads its peak resident set
(``ru_maxrss`` from ``wait4``).  The reference is the same command on an 8-NPU ring, run in the
same session: its peak is the interpreter plus imports, so ``peak - reference`` is what the
topology costs.  Each point is the median of ``--repeat`` runs.  Families (every TDL file is
written to a temporary folder):

* ``torus``: a 3D torus, 6 links per NPU;
* ``dgx_h100``: the DGX-H100 preset (NVSwitch per node, eight rail switches), N/8 nodes;
* ``fattree``: a two-tier fat-tree of 32-host leaves and 16 spines.

Usage::

    python -m benchmarks.bench_info_memory            # prints a markdown table
    python -m benchmarks.bench_info_memory --docs     # also writes docs/benchmarks/info-memory.md
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

SIZES = (1024, 4096, 16384)
TORUS = {1024: (16, 8, 8), 4096: (16, 16, 16), 16384: (32, 32, 16)}


def tdl(family: str, n: int) -> str:
    """The TDL text of ``family`` at ``n`` NPUs."""
    if family == "torus":
        x, y, z = TORUS[n]
        return f"torus t[{x},{y},{z}] 50GB/s 0.5us\n"
    if family == "dgx_h100":
        return f"use dgx_h100(nodes={n // 8})\n"
    if family == "fattree":
        return f"fattree f[{n}] leaves={n // 32} spines=16 down 50GB/s 1us up 100GB/s 1us\n"
    raise ValueError(family)


def tacosc() -> str:
    """The ``tacosc`` next to this interpreter (the venv's), else the one on PATH."""
    here = Path(sys.executable).with_name("tacosc")
    return str(here) if here.exists() else (shutil.which("tacosc") or "tacosc")


def measure(path: Path) -> tuple[float, float, dict]:
    """Peak RSS (MiB) and wall time of one ``tacosc info --json`` run, and its JSON."""
    import json

    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # child: run tacosc with its output in a file
        with open(path.with_suffix(".json"), "w") as out, open(os.devnull, "w") as err:
            os.dup2(out.fileno(), 1)
            os.dup2(err.fileno(), 2)
            os.execv(tacosc(), [tacosc(), "info", "--json", str(path)])
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"tacosc info {path} failed")
    doc = json.loads(path.with_suffix(".json").read_text())
    return usage.ru_maxrss / 1024, wall, doc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs per point (median)")
    ap.add_argument("--families", default="torus,dgx_h100,fattree")
    ap.add_argument("--sizes", default=",".join(str(n) for n in SIZES),
                    help="NPU counts, from " + ", ".join(str(n) for n in SIZES))
    ap.add_argument("--docs", action="store_true", help="write docs/benchmarks/info-memory.md")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        ref_path = Path(tmp) / "ref.tdl"
        ref_path.write_text("ring r[8] 50GB/s 1us\n")
        for family in args.families.split(","):
            for n in (int(x) for x in args.sizes.split(",")):
                path = Path(tmp) / f"{family}{n}.tdl"
                path.write_text(tdl(family, n))
                peaks, refs, walls, doc = [], [], [], {}
                for _ in range(args.repeat):
                    refs.append(measure(ref_path)[0])
                    peak, wall, doc = measure(path)
                    peaks.append(peak)
                    walls.append(wall)
                ref = statistics.median(refs)
                peak = statistics.median(peaks)
                links = doc["links"]
                rows.append({
                    "family": family, "npus": doc["npus"], "switches": len(doc["switches"]),
                    "links": links, "peak_MiB": peak, "reference_MiB": ref,
                    "topology_MiB": peak - ref,
                    "KiB_per_link": (peak - ref) * 1024 / links,
                    "wall_s": statistics.median(walls),
                    "diameter": doc["diameter"] if doc["diameter"] is not None
                    else "..".join(str(b) for b in doc["diameter_bounds"]),
                })
                print(rows[-1], flush=True)
    table = _markdown(rows)
    print(table)
    if args.docs:
        _write_docs(table, args)


def _markdown(rows: list[dict]) -> str:
    head = ("| family | NPUs | switches | links | peak (MiB) | reference (MiB) | topology (MiB) "
            "| KiB per link | wall (s) | diameter |")
    lines = [head, "|" + " --- |" * 10]
    for r in rows:
        lines.append(f"| {r['family']} | {r['npus']} | {r['switches']} | {r['links']} | "
                     f"{r['peak_MiB']:.0f} | {r['reference_MiB']:.0f} | "
                     f"{r['topology_MiB']:.0f} | {r['KiB_per_link']:.2f} | "
                     f"{r['wall_s']:.1f} | {r['diameter']} |")
    return "\n".join(lines)


def _write_docs(table: str, args: argparse.Namespace) -> None:
    from benchmarks.__main__ import machine

    root = Path(__file__).resolve().parent.parent
    text = f"""# `tacosc info` peak memory

Peak resident memory of `tacosc info --json` on three topology families at 1k, 4k and 16k
NPUs, each the median of {args.repeat} fresh processes; "reference" is the same command on an
8-NPU ring (interpreter and imports), "topology" the difference.  The hop diameter is computed
by bit-parallel breadth-first search in batches of bounded size (`tacos/model/hops.py`), so no
all-pairs table is built; memory grows with the number of links.  When the exact diameter would
take too long (long rings and meshes), bounds are shown instead.

Command: `python -m benchmarks.bench_info_memory --repeat {args.repeat} --docs`

Machine: {machine()}; shared with other jobs while measuring.
Date: {dt.date.today().isoformat()}

{table}
"""
    out = root / "docs" / "benchmarks" / "info-memory.md"
    out.write_text(text)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
