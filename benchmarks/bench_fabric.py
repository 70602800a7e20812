"""The machine model's benchmark (issue 10): predicted times against an independent simulation,
and the baselines on the physical model.

Three tables, printed as markdown:

1. ``fabric``: the leaf-spine examples (``examples/leafspine*.tdl``, 16 hosts, 4 leaves, 2
   spines; full and 4:1 oversubscribed), all-gather 1 GiB.  For every solver: tacos's predicted
   time (the physical model, :mod:`tacos.check.simulate`), the times an independent flow-level
   simulation gives for the same plan (:mod:`benchmarks.flowsim`: max-min fair fluid flows on
   the physical links, each transfer started when its data is there and its connection is
   free -- ``as planned``: not before its planned start, ``asap``: as early as that allows),
   the ratios, the cut bound and the gap to it.
2. ``systems``: all-gather 1 GiB on the multi-node presets, every baseline: algbw as a fraction
   of the min-cut optimum (bound / time).
3. ``groups``: process groups -- a 4-GPU group of a DGX-A100 node (all-reduce 64 MiB) and an
   8-host job on the 16-host 4:1 fat-tree against the same job on an 8-host fat-tree with the
   same links (all-reduce 64 MiB).

Every schedule is verified.  Usage::

    python benchmarks/bench_fabric.py                  # all three tables
    python benchmarks/bench_fabric.py --only fabric --solvers greedy,ring
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import tacos  # noqa: E402
from benchmarks.flowsim import simulate_flows  # noqa: E402
from tacos.check.bounds import lower_bound  # noqa: E402
from tacos.check.verify import verify_schedule  # noqa: E402
from tacos.errors import TacosError  # noqa: E402
from tacos.model.patterns import build  # noqa: E402

GiB, MiB = 1 << 30, 1 << 20
SOLVERS = ("greedy", "ilp", "taccl", "ring", "biring", "direct", "rhd", "dbtree", "hierarchical")
BASELINES = ("ring", "biring", "direct", "rhd", "dbtree", "hierarchical")
SYSTEMS = (("dgx_a100", 2), ("dgx_a100", 4), ("dgx_h100", 2), ("dgx_h100", 4), ("ndv2", 2),
           ("mi250", 1), ("mi250", 2))


def _solve(topo, coll, solver: str, trials: int):
    t0 = time.perf_counter()
    try:
        sched = tacos.synthesize(topo, coll, solver=solver, trials=trials, workers=1, seed=0)
    except TacosError as exc:
        return None, f"n/a ({exc.message.splitlines()[0][:60]})", 0.0
    rep = verify_schedule(sched)
    if not rep.ok:
        raise SystemExit(f"{solver}: schedule fails verification:\n{rep.text(5)}")
    return sched, "", time.perf_counter() - t0


def table_fabric(solvers, trials: int) -> list[str]:
    rows = ["| fabric | solver | predicted ms | flow sim, as planned ms | predicted / planned | "
            "flow sim, asap ms | predicted / asap | bound ms | gap (predicted / bound) | "
            "transfers | synthesis s |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name in ("leafspine", "leafspine_4to1"):
        spec = tacos.load(ROOT / "examples" / f"{name}.tdl")
        topo, coll = spec.topology, spec.collective
        bound = lower_bound(topo, coll).value
        for solver in solvers:
            sched, note, synth = _solve(topo, coll, solver, trials)
            if sched is None:
                rows.append(f"| {name} | {solver} | {note} | | | | | {bound * 1e3:.2f} | | | |")
                continue
            plan = simulate_flows(sched, release="planned").time
            asap = simulate_flows(sched).time
            rows.append(f"| {name} | {solver} | {sched.makespan * 1e3:.2f} | {plan * 1e3:.2f} | "
                        f"{sched.makespan / plan:.4f} | {asap * 1e3:.2f} | "
                        f"{sched.makespan / asap:.3f} | {bound * 1e3:.2f} | "
                        f"{sched.makespan / bound:.2f}x | {len(sched.transfers)} | {synth:.1f} |")
            print(rows[-1], file=sys.stderr)
    return rows


def table_systems(baselines, trials: int) -> list[str]:
    rows = ["| system | NPUs | bound ms | " + " | ".join(baselines) + " |",
            "|---|---:|---:|" + "---:|" * len(baselines)]
    for preset, nodes in SYSTEMS:
        spec = tacos.parse(f"use {preset}(nodes={nodes})")
        topo = spec.topology
        coll = build("allgather", topo.live_npus, size=GiB)
        bound = lower_bound(topo, coll).value
        cells = []
        for solver in baselines:
            sched, note, _ = _solve(topo, coll, solver, trials)
            cells.append("n/a" if sched is None else f"{bound / sched.makespan:.0%}")
        rows.append(f"| {nodes}x {preset} | {topo.n_npus} | {bound * 1e3:.2f} | "
                    + " | ".join(cells) + " |")
        print(rows[-1], file=sys.stderr)
    return rows


def table_groups(solvers, trials: int) -> list[str]:
    rows = ["| case | solver | time us | bound us | gap | reference | ratio |",
            "|---|---|---:|---:|---:|---|---:|"]
    a100 = tacos.load(ROOT / "examples" / "dgx_a100_group4.tdl")
    host = "62.91456GB/s"
    ft8 = tacos.parse(f'fattree host[8] leaves=2 spines=2 down {host} 1us '
                      'up 31.45728GB/s 1us').topology
    ft16 = tacos.load(ROOT / "examples" / "leafspine_4to1.tdl").topology
    # the job: hosts 0-1, 4-5 of leaves 0 and 1 on the 16-host tree (4 hosts per leaf on 2
    # leaves, the same shape as the whole 8-host tree), or all 8 hosts of the small tree
    job16 = build("allreduce", (0, 1, 2, 3, 4, 5, 6, 7), size=64 * MiB)
    job8 = build("allreduce", tuple(range(8)), size=64 * MiB)
    for solver in solvers:
        ring = tacos.synthesize(a100.topology, a100.collective, solver="ring")
        sched, note, _ = _solve(a100.topology, a100.collective, solver, trials)
        bound = lower_bound(a100.topology, a100.collective).value
        if sched is not None:
            rows.append(f"| 4-GPU group, DGX-A100, all-reduce 64 MiB | {solver} | "
                        f"{sched.makespan * 1e6:.1f} | {bound * 1e6:.1f} | "
                        f"{sched.makespan / bound:.2f}x | ring {ring.makespan * 1e6:.1f} us | "
                        f"{sched.makespan / ring.makespan:.2f} |")
        big, _, _ = _solve(ft16, job16, solver, trials)
        small, _, _ = _solve(ft8, job8, solver, trials)
        if big is not None and small is not None:
            b16 = lower_bound(ft16, job16).value
            rows.append(f"| 8-host job on 16-host 4:1 fat-tree, all-reduce 64 MiB | {solver} | "
                        f"{big.makespan * 1e6:.1f} | {b16 * 1e6:.1f} | "
                        f"{big.makespan / b16:.2f}x | 8-host tree {small.makespan * 1e6:.1f} us "
                        f"| {big.makespan / small.makespan:.2f} |")
        print("\n".join(rows[-2:]), file=sys.stderr)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="fabric,systems,groups")
    p.add_argument("--solvers", default=",".join(SOLVERS))
    p.add_argument("--trials", type=int, default=4, help="greedy trials (default 4)")
    args = p.parse_args(argv)
    solvers = tuple(s for s in args.solvers.split(",") if s)
    only = set(args.only.split(","))
    out = []
    if "fabric" in only:
        out += ["### Predicted time vs an independent flow-level simulation, all-gather 1 GiB",
                "", *table_fabric(solvers, args.trials), ""]
    if "systems" in only:
        out += ["### Baselines on the physical model: all-gather 1 GiB, algbw / min-cut "
                "optimum", "", *table_systems([s for s in solvers if s in BASELINES],
                                               args.trials), ""]
    if "groups" in only:
        out += ["### Process groups", "", *table_groups(solvers, args.trials), ""]
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
