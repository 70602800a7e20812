"""CPU and peak memory of the MSCCL lowering (``tacos.msccl.lower.lower``), per plan and shape,
for one or more source trees in one run.

``python -m benchmarks.bench_lowering [--src before=/tmp/before] [--src after=.] [--repeat 3]
[--big] [--plans NAME,...] [--cache DIR]`` prints a markdown table.

The plans are synthesized once by this tree's greedy (seed 0, one trial) and pickled in
``--cache``: an all-reduce of 64 MiB on the 4x4 mesh of ``examples/mesh4x4.tdl``, on a 4x4x4
torus (64 NPUs) and, with ``--big``, on an 8x8x8 torus (512 NPUs; issue 31's MSCCL XML case).
Every measurement runs in its own process with ``PYTHONPATH`` set to the tree's root, so the
peak RSS (``ru_maxrss``) is that of one lowering (the unpickled schedule included; its RSS
before the lowering is given too).  A row is either one lowering with the given options, or
"search": the shapes a runtime shape search lowers one plan into (1, 2, 4 and 8 instances,
paired peers and not, with and without port order, in the search's order) in one process,
where a tree may share work between shapes.  The SHA-256 of every program's XML is compared
between the trees (``same`` column).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: one lowering: MscclOptions fields
SINGLE = {"default": {}, "i8-paired": {"instances": 8, "fit_fifo": False, "pair_peers": True}}
#: the shapes a search lowers one plan into, in its order (paired first, then the rest)
SEARCH = [{"instances": n, "fit_fifo": False, "pair_peers": pair, "port_order": ports}
          for ports in (False, True) for pair in (True, False) for n in (1, 2, 4, 8)]

CHILD = r"""
import hashlib, json, pickle, resource, sys, time
from tacos.msccl.lower import MscclOptions, lower
from tacos.msccl.xml_writer import iter_xml
with open(sys.argv[1], "rb") as fh:
    schedule = pickle.load(fh)
sets = json.loads(sys.argv[2])
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
cpu, steps, digest = 0.0, 0, hashlib.sha256()
for opts in sets:
    t = time.process_time()
    program = lower(schedule, options=MscclOptions(**opts))
    cpu += time.process_time() - t
    steps += program.num_steps
    for piece in iter_xml(program):
        digest.update(piece.encode())
    del program
print(json.dumps({"cpu": cpu, "steps": steps, "sha256": digest.hexdigest(), "rss0": rss0,
                  "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def plans(cache: Path, big: bool) -> dict[str, Path]:
    """Pickled schedules, synthesized on first use."""
    import tacos
    from tacos import builders

    cache.mkdir(parents=True, exist_ok=True)
    out = {}
    wanted = [("mesh4x4", 16), ("torus4x4x4", 64)] + ([("torus8x8x8", 512)] if big else [])
    for name, n in wanted:
        path = cache / f"{name}.pkl"
        if not path.exists():
            if name == "mesh4x4":
                spec = tacos.load(ROOT / "examples" / "mesh4x4.tdl")
                topo = spec.topology
            else:
                k = round(n ** (1 / 3))
                topo = builders.torus(k, k, k, bandwidth="50GiB/s", latency="0.5us")
            coll = tacos.collective("allreduce", list(range(n)), size="64MiB")
            schedule = tacos.synthesize(topo, coll, solver="greedy", seed=0, trials=1,
                                        workers=1)
            with open(path, "wb") as fh:
                pickle.dump(schedule, fh, protocol=pickle.HIGHEST_PROTOCOL)
        out[name] = path
    return out


def measure(src: str, plan: Path, sets: list[dict]) -> dict:
    """One child process lowering ``plan`` under every option set of ``sets`` in turn."""
    env = dict(os.environ, PYTHONPATH=src, PYTHONDONTWRITEBYTECODE="1")
    out = subprocess.run([sys.executable, "-P", "-c", CHILD, str(plan), json.dumps(sets)],
                         env=env, check=True, capture_output=True, text=True, cwd="/")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", action="append", default=[],
                    help="LABEL=DIR: lower with the tacos package under DIR (default: this tree)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--big", action="store_true", help="also the 512-NPU torus (default shape)")
    ap.add_argument("--plans", default="", help="only these plans (comma-separated names)")
    ap.add_argument("--cache", default="/tmp/tacos-bench-lowering")
    args = ap.parse_args()
    trees = [tuple(s.split("=", 1)) for s in args.src] or [("this tree", str(ROOT))]
    rows = []
    only = {p for p in args.plans.split(",") if p}
    for name, path in plans(Path(args.cache), args.big).items():
        if only and name not in only:
            continue
        cases = [("default", [SINGLE["default"]])]
        if name != "torus8x8x8":
            cases += [("i8-paired", [SINGLE["i8-paired"]]), ("search (16 shapes)", SEARCH)]
        for label, sets in cases:
            for tree, src in trees:
                got = [measure(src, path, sets)
                       for _ in range(1 if name == "torus8x8x8" else args.repeat)]
                rows.append((name, label, tree, got))
    print("| plan | lowering | tree | steps | CPU s (median) | runs | peak RSS MiB "
          "| RSS before MiB | same XML |")
    print("|---|---|---|---|---|---|---|---|---|")
    first: dict[tuple[str, str], str] = {}
    for name, label, tree, got in rows:
        digest = got[0]["sha256"]
        assert all(g["sha256"] == digest for g in got), "a tree's output changed between runs"
        same = first.setdefault((name, label), digest) == digest
        cpus = ", ".join(f"{g['cpu']:.2f}" for g in got)
        print(f"| {name} | {label} | {tree} | {got[0]['steps']} | "
              f"{statistics.median(g['cpu'] for g in got):.2f} | {cpus} | "
              f"{max(g['peak'] for g in got) / 1024:.0f} | {got[0]['rss0'] / 1024:.0f} | "
              f"{'yes' if same else 'NO'} |")


if __name__ == "__main__":
    main()
