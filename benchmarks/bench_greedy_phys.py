"""The greedy on the physical machine model (issue 10, part 3): targets and before/after.

Tables, printed as markdown (each schedule verified on the physical topology):

1. ``systems``: all-gather 1 GiB on the multi-node presets: the greedy with chunks per NPU
   chosen by synthesis (:mod:`tacos.solvers.greedy.chunks`) as a fraction of the min-cut
   optimum (algbw / optimum = cut bound / time), next to the greedy with one chunk per NPU, the
   seed paper's model (``model='unwound'``, same chunks), the island-blind matching
   (``islands=False``, same chunks), and the ``ring``/``biring`` baselines (best of one chunk
   per NPU and the greedy's count).
2. ``fabric``: ``examples/leafspine_4to1.tdl`` (16 hosts, 4 leaves, 2 spines, uplinks 4:1
   oversubscribed, cut bound 16 ms at 1 GiB), all-gather 1 GiB: time / cut bound, the bytes
   that cross into the leaves over their uplinks against the minimum (every remote shard once
   per leaf), and the same plan in the independent flow-level simulation
   (:mod:`benchmarks.flowsim`).
3. ``groups``: a 4-GPU group of a DGX-A100 node, all-reduce 64 MiB, against the ``ring``
   baseline; an 8-host job on a 16-host fat-tree against the same job on an 8-host fat-tree
   with the same links (hosts 0-7 on ``examples/fattree.tdl``'s links, and two hosts per leaf
   on the 4:1 tree of ``leafspine_4to1.tdl``).
4. ``nccl``: all-gather 1 GiB, the greedy alone (chunks chosen by synthesis) against NCCL's
   multi-ring model (``nccl-ring``, :mod:`tacos.solvers.nccl.rings`) and NCCL's best all-gather
   model on the same physical model, on the systems of table 1 and DGX-1.
5. ``time``: synthesis time on switch-free topologies (3D torus 8x8x8, 2D mesh 32x32,
   all-gather 64 MiB, one chunk per NPU), median CPU seconds of ``--repeats`` runs of this
   tree and, with ``--compare PYTHON`` (an interpreter with another tacos installed, e.g. the
   main branch), of that one, alternating, with the ratio and whether the schedules are
   byte-identical.

Usage::

    python benchmarks/bench_greedy_phys.py                      # every table
    python benchmarks/bench_greedy_phys.py --only nccl                  # greedy vs NCCL rings
    python benchmarks/bench_greedy_phys.py --only time --compare /path/to/main/venv/bin/python
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import tacos  # noqa: E402
from benchmarks.flowsim import simulate_flows  # noqa: E402
from tacos.check.bounds import lower_bound  # noqa: E402
from tacos.check.verify import verify_schedule  # noqa: E402
from tacos.model.patterns import build  # noqa: E402
from tacos.solvers.greedy.chunks import rechunk, synthesize_chunked  # noqa: E402

GiB, MiB = 1 << 30, 1 << 20
SYSTEMS = (("dgx_a100", 2), ("dgx_a100", 4), ("dgx_h100", 2), ("dgx_h100", 4), ("ndv2", 2),
           ("mi250", 1), ("mi250", 2))


def _row(rows: list[str], *cells) -> None:
    """Append a markdown table row and show it on stderr as it is measured."""
    rows.append("| " + " | ".join(str(c) for c in cells) + " |")
    print(rows[-1], file=sys.stderr)


def _checked(sched):
    rep = verify_schedule(sched)
    if not rep.ok:
        raise SystemExit(f"schedule fails verification:\n{rep.text(5)}")
    return sched


def _run(topo, coll, solver="greedy", **opts):
    t0 = time.perf_counter()
    sched = _checked(tacos.synthesize(topo, coll, solver=solver, seed=0, bound=False, **opts))
    return sched, time.perf_counter() - t0


def _auto(topo, coll, **opts):
    t0 = time.perf_counter()
    sched = _checked(synthesize_chunked(topo, coll, seed=0, **opts))
    return sched, time.perf_counter() - t0


def table_systems(workers: int) -> list[str]:
    rows = ["| system | NPUs | cut bound ms | greedy (auto chunks) | chunks | synthesis s | "
            "greedy, 1 chunk | unwound model | islands off | ring | biring |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for preset, nodes in SYSTEMS:
        topo = tacos.parse(f"use {preset}(nodes={nodes})").topology
        coll = build("allgather", topo.live_npus, size=GiB)
        cut = lower_bound(topo, coll).parts["cut"]
        best, synth = _auto(topo, coll, workers=workers)
        k = best.collective.chunks_per_npu
        same_k = rechunk(coll, k)
        one, _ = _run(topo, coll, workers=workers)
        unwound, _ = _run(topo, same_k, workers=workers, model="unwound")
        blind, _ = _run(topo, same_k, workers=workers, islands=False)
        cells = [f"{cut / s.makespan:.1%}" for s in (best,)]
        cells += [f"{k}", f"{synth:.0f}"]
        cells += [f"{cut / s.makespan:.1%}" for s in (one, unwound, blind)]
        for solver in ("ring", "biring"):
            times = [_run(topo, c, solver)[0].makespan for c in (coll, same_k)]
            cells.append(f"{cut / min(times):.1%}")
        _row(rows, f"{nodes}x {preset}", topo.n_npus, f"{cut * 1e3:.3f}", *cells)
    return rows


NCCL_SYSTEMS = SYSTEMS + (("dgx1", 1),)
OFF_LADDER = (6, 12, 24, 48, 96)
"""Chunk counts tried where the greedy is below NCCL's rings (multiples of DGX-1's six lanes)."""


def table_nccl(workers: int) -> list[str]:
    """Greedy alone (chunks chosen by synthesis) against NCCL's multi-ring (``nccl-ring``: as
    many channels as NCCL's search finds, its best channel count and pipeline depth) and NCCL's
    best all-gather model, all-gather 1 GiB, on the same physical model."""
    from tacos.solvers.nccl.solver import nccl_best

    rows = ["| system | NPUs | cut bound ms | greedy ms | chunks | greedy / optimum | nccl-ring "
            "ms | channels | nccl-ring / optimum | greedy speedup over nccl-ring | best NCCL "
            "model | speedup over it |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|"]
    below = []
    for preset, nodes in NCCL_SYSTEMS:
        text = f"use {preset}" if preset == "dgx1" else f"use {preset}(nodes={nodes})"
        topo = tacos.parse(text).topology
        coll = build("allgather", topo.live_npus, size=GiB)
        cut = lower_bound(topo, coll).parts["cut"]
        greedy, _ = _auto(topo, coll, workers=workers)
        name, best, every = nccl_best(topo, coll)
        ring = _checked(every["ring"])
        _checked(best)
        tuned = ring.meta.get("tuned", {})
        _row(rows, f"{nodes}x {preset}", topo.n_npus, f"{cut * 1e3:.3f}",
             f"{greedy.makespan * 1e3:.3f}", greedy.collective.chunks_per_npu,
             f"{cut / greedy.makespan:.1%}", f"{ring.makespan * 1e3:.3f}",
             tuned.get("channels", "-"), f"{cut / ring.makespan:.1%}",
             f"**{ring.makespan / greedy.makespan:.2f}x**", f"nccl-{name}",
             f"{best.makespan / greedy.makespan:.2f}x")
        if greedy.makespan > ring.makespan:
            below.append((f"{nodes}x {preset}", topo, coll, cut, ring.makespan))
    for label, topo, coll, cut, ring_time in below:
        rows += ["", f"Below 1.0x on {label}: the greedy at chunk counts outside the "
                 "power-of-two search (greedy / optimum, speedup over nccl-ring):", "",
                 "| chunks per NPU | " + " | ".join(str(k) for k in OFF_LADDER) + " |",
                 "|---|" + "---:|" * len(OFF_LADDER)]
        cells = []
        for k in OFF_LADDER:
            sched, _ = _run(topo, rechunk(coll, k), workers=workers)
            cells.append(f"{cut / sched.makespan:.1%}, {ring_time / sched.makespan:.3f}x")
        _row(rows, "greedy", *cells)
    return rows


def _uplink_bytes(sched) -> int:
    topo = sched.topology
    total = 0
    for t in sched.transfers:
        if any(topo.is_switch(topo.links[li].src) and topo.is_switch(topo.links[li].dst)
               and "spine" in topo.node_name(topo.links[li].src) for li in t.route):
            total += sched.transfer_bytes(t)
    return total


def table_fabric(workers: int) -> list[str]:
    rows = ["| plan | chunks | time ms | cut bound ms | time / bound | bytes into leaves / "
            "minimum | flow sim, as planned ms | flow sim, asap ms | synthesis s |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    spec = tacos.load(ROOT / "examples" / "leafspine_4to1.tdl")
    topo, coll = spec.topology, spec.collective
    bound = lower_bound(topo, coll).value
    leaves = 4
    minimum = coll.size * (leaves - 1) // leaves * leaves  # every remote shard once per leaf
    best, synth = _auto(topo, coll, workers=workers)
    k = best.collective.chunks_per_npu
    plans = [("greedy, auto chunks", best, synth)]
    for label, c, opts in (("greedy, 1 chunk", coll, {}),
                           ("greedy, islands off", rechunk(coll, k), {"islands": False}),
                           ("greedy, unwound model", rechunk(coll, k), {"model": "unwound"})):
        s, dt = _run(topo, c, workers=workers, **opts)
        plans.append((label, s, dt))
    for label, s, dt in plans:
        plan = simulate_flows(s, release="planned").time
        asap = simulate_flows(s).time
        _row(rows, label, s.collective.chunks_per_npu, f"{s.makespan * 1e3:.2f}",
             f"{bound * 1e3:.2f}", f"{s.makespan / bound:.3f}",
             f"{_uplink_bytes(s) / minimum:.2f}", f"{plan * 1e3:.2f}", f"{asap * 1e3:.2f}",
             f"{dt:.1f}")
    return rows


def table_groups(workers: int) -> list[str]:
    rows = ["| case | greedy us | chunks | reference | reference us | greedy / reference | "
            "bound us |", "|---|---:|---:|---|---:|---:|---:|"]
    spec = tacos.load(ROOT / "examples" / "dgx_a100_group4.tdl")
    topo, coll = spec.topology, spec.collective
    bound = lower_bound(topo, coll).value
    auto, _ = _auto(topo, coll, workers=workers)
    plans = [auto]
    if auto.collective.chunks_per_npu != 1:
        plans.append(_run(topo, coll, workers=workers)[0])
    for s in plans:
        for solver in ("ring", "direct"):
            ref, _ = _run(topo, coll, solver)
            _row(rows, "4-GPU group of a DGX-A100, all-reduce 64 MiB", f"{s.makespan * 1e6:.1f}",
                 s.collective.chunks_per_npu, solver, f"{ref.makespan * 1e6:.1f}",
                 f"{s.makespan / ref.makespan:.3f}", f"{bound * 1e6:.1f}")
    links = {"fattree.tdl": "down 50GB/s 1us up 100GB/s 1us",
             "leafspine_4to1.tdl": "down 62.91456GB/s 1us up 31.45728GB/s 1us"}
    for name, ln in links.items():
        big = tacos.load(ROOT / "examples" / name).topology
        if name == "fattree.tdl":
            small = tacos.parse(f"fattree host[8] leaves=2 spines=2 {ln}").topology
            hosts = tuple(range(8))  # leaves 0 and 1, four hosts each
        else:
            small = tacos.parse(f"fattree host[8] leaves=4 spines=2 {ln}").topology
            hosts = (0, 1, 4, 5, 8, 9, 12, 13)  # two hosts on every leaf
        for kind in ("allreduce", "allgather"):
            job = build(kind, hosts, size=64 * MiB)
            alone = build(kind, tuple(range(8)), size=64 * MiB)
            a, _ = _auto(big, job, workers=workers)
            b, _ = _auto(small, alone, workers=workers)
            _row(rows, f"8-host job ({kind} 64 MiB) on 16-host {name}",
                 f"{a.makespan * 1e6:.1f}", a.collective.chunks_per_npu,
                 "8-host tree, same links", f"{b.makespan * 1e6:.1f}",
                 f"{a.makespan / b.makespan:.3f}", f"{lower_bound(big, job).value * 1e6:.1f}")
    return rows


TIME_CASES = (("torus", (8, 8, 8)), ("mesh", (32, 32)))


def time_once(case: int, trials: int) -> dict:
    """One timed synthesis of ``TIME_CASES[case]`` in this process (CPU s, schedule hash)."""
    from tacos.builders import mesh, torus
    from tacos.solvers.greedy.solver import GreedySolver
    from tacos.solvers.registry import Problem

    kind, dims = TIME_CASES[case]
    topo = (torus if kind == "torus" else mesh)(*dims, bandwidth=50 * GiB, latency=0.5e-6)
    n = topo.n_npus
    coll = build("allgather", range(n), size=64 * MiB // n * n)
    t0 = time.process_time()
    res = GreedySolver().solve(Problem(topo, coll, {"workers": 1, "trials": trials, "seed": 0}))
    cpu = time.process_time() - t0
    key = hashlib.sha256(repr([(t.start, t.end, t.src, t.dst, t.route, t.chunks)
                               for t in res.schedule.transfers]).encode()).hexdigest()[:16]
    return {"cpu": cpu, "hash": key, "makespan": res.schedule.makespan}


def _time_in(python: str, case: int, trials: int) -> dict:
    out = subprocess.run([python, str(Path(__file__).resolve()), "--time-once", str(case),
                          "--trials", str(trials)], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def table_time(compare: str | None, repeats: int, trials: int) -> list[str]:
    rows = ["| topology | NPUs | this tree CPU s (median) | reference CPU s (median) | "
            "ratio | identical schedules |", "|---|---:|---:|---:|---:|---|"]
    for case, (kind, dims) in enumerate(TIME_CASES):
        mine, ref = [], []
        for _ in range(repeats):
            mine.append(_time_in(sys.executable, case, trials))
            if compare:
                ref.append(_time_in(compare, case, trials))
        m = statistics.median(r["cpu"] for r in mine)
        cells = [f"{m:.2f}"]
        if ref:
            r = statistics.median(x["cpu"] for x in ref)
            same = {x["hash"] for x in mine} == {x["hash"] for x in ref}
            cells += [f"{r:.2f}", f"{m / r:.3f}", "yes" if same else "no"]
        else:
            cells += ["", "", ""]
        npus = 1
        for d in dims:
            npus *= d
        _row(rows, f"{kind} {'x'.join(map(str, dims))}", npus, *cells)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="systems,nccl,fabric,groups,time")
    p.add_argument("--workers", type=int, default=2, help="greedy worker processes")
    p.add_argument("--compare", metavar="PYTHON", help="interpreter with the reference tacos")
    p.add_argument("--repeats", type=int, default=3, help="timed runs per tree (median)")
    p.add_argument("--trials", type=int, default=2, help="greedy trials in the time table")
    p.add_argument("--time-once", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.time_once is not None:
        print(json.dumps(time_once(args.time_once, args.trials)))
        return 0
    only = set(args.only.split(","))
    out = []
    if "systems" in only:
        out += ["### All-gather 1 GiB on multi-node systems: algbw / min-cut optimum", "",
                *table_systems(args.workers), ""]
    if "nccl" in only:
        out += ["### All-gather 1 GiB: greedy alone against NCCL's multi-ring", "",
                *table_nccl(args.workers), ""]
    if "fabric" in only:
        out += ["### 4:1 leaf-spine, all-gather 1 GiB", "", *table_fabric(args.workers), ""]
    if "groups" in only:
        out += ["### Process groups and jobs", "", *table_groups(args.workers), ""]
    if "time" in only:
        out += ["### Synthesis time, switch-free topologies", "",
                *table_time(args.compare, args.repeats, args.trials), ""]
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
