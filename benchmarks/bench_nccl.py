"""tacos against NCCL's own algorithms where users run: size sweeps on real systems.

For every system (2x/4x DGX-A100, 2x/4x DGX-H100, DGX-1, NDv2 x2, MI250 x1/x2) and collective
(all-gather, all-reduce, all-to-all) a sweep 1 KiB .. 4 GiB (x4, 12 sizes) with the ``auto``
portfolio (:func:`tacos.sweep.sweep`; the greedy chooses its chunks per NPU at every size): per
size tacos's plan, every NCCL model NCCL would run there, the best of them, the speedup, and the
*ceiling*: the best NCCL model's time over the lower bound (the largest speedup any plan could
reach on the model).  The DGX-H100 preset's NVSwitch declares NVLS
(multicast + reduce); the H100 systems here also declare SHARP on the rail switches
(``sharp=1``), as H100 SuperPODs have; the other systems declare nothing.  Also:

* the H100 all-reduce against the in-switch optimum (buffer / port bandwidth): NCCL's NVLS and
  tacos's plan (``auto``; the forest's in-switch star, :mod:`tacos.solvers.forest.in_switch`);
* the wall time of a 12-size sweep on 16 GPUs (2x DGX-A100, all-reduce);
* 512-NPU all-to-all synthesis (solver ``a2a``, 64x DGX-H100 and an 8x8x8 torus): wall time of
  ``tacos.synthesize``, median of ``--repeat`` runs, and the gap to the fabric cut bound.

Writes ``nccl.csv``, ``a2a512.csv``, the speedup plots and ``nccl.md`` into ``--out``
(default ``docs/benchmarks``).  Run with ``nice``: ``nice python -m benchmarks.bench_nccl``.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import math
import statistics
import time
from pathlib import Path

from benchmarks import topologies as T
from benchmarks.__main__ import machine
from tacos.check.bounds import lower_bound
from tacos.check.verify import verify_schedule
from tacos.model.patterns import build
from tacos.model.topology import Topology
from tacos.sweep import Sweep, sweep
from tacos.synthesize import synthesize

SIZES = "1KiB:4GiB:x4"
MiB, GiB = 1 << 20, 1 << 30


def systems(quick: bool) -> list[tuple[str, Topology, bool]]:
    """(name, topology, multi-node) of the benchmark systems."""
    out = [("2x DGX-A100", T.preset("dgx_a100", nodes=2), True),
           ("2x DGX-H100", T.preset("dgx_h100", nodes=2, sharp=1), True),
           ("DGX-1", T.preset("dgx1"), False),
           ("NDv2 x2", T.preset("ndv2", nodes=2), True),
           ("MI250 x1", T.preset("mi250"), False)]
    if not quick:
        out += [("4x DGX-A100", T.preset("dgx_a100", nodes=4), True),
                ("4x DGX-H100", T.preset("dgx_h100", nodes=4, sharp=1), True),
                ("MI250 x2", T.preset("mi250", nodes=2), True)]
    return out


def run_sweeps(args, rows: list[dict], sweeps: dict[tuple[str, str], Sweep]) -> None:
    for name, topo, multi in systems(args.quick):
        for kind in args.collectives:
            t0 = time.perf_counter()
            res = sweep(topo, kind, args.sizes, trials=args.trials, workers=1)
            sweeps[(name, kind)] = res
            for r in res.rows:
                # the bound of the collective the plan serves (NCCL's plans refine the chunks,
                # which the latency term -- whole chunks along the fastest path -- sees)
                bound = lower_bound(topo, r.schedule.collective).value
                best = r.nccl.get(r.nccl_best) if r.nccl_best else None
                rows.append({
                    "system": name, "multi_node": multi, "collective": kind, "size": r.size,
                    "plan": r.plan, "time_us": r.time * 1e6, "algbw_GBps": r.algbw() / 1e9,
                    "busbw_GBps": r.busbw() / 1e9, "nccl_best": r.nccl_best,
                    "nccl_best_us": best * 1e6 if best else None,
                    "speedup": r.speedup, "bound_us": bound * 1e6,
                    "ceiling": best / bound if best and bound > 0 else None,
                    "gap": r.time / bound if bound > 0 else None, "xml_plan": r.xml_plan,
                    "verified": verify_schedule(r.schedule).ok,
                    **{f"{m}_us": t * 1e6 for m, t in r.nccl.items()}})
            print(f"{name} {kind}: {time.perf_counter() - t0:.1f} s, geomean "
                  f"{res.geomean_speedup() or float('nan'):.2f}x", flush=True)


def write_csv(path: Path, rows: list[dict]) -> None:
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)


def geomean(vals: list[float]) -> float | None:
    vals = [v for v in vals if v]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


def nvls_optimum(args) -> list[dict]:
    """All-reduce on one DGX-H100 (NVLS NVSwitch) against buffer / port bandwidth: NCCL's NVLS
    and tacos's plan (``auto``)."""
    from tacos.solvers.nccl.solver import nccl_schedule

    topo = T.preset("dgx_h100")
    out = []
    for size in (64 * MiB, 256 * MiB, GiB, 4 * GiB):
        coll = build("allreduce", topo.live_npus, size=size)
        s = nccl_schedule("nvls", topo, coll)
        bound = lower_bound(topo, coll)
        t0 = time.perf_counter()
        ours = synthesize(topo, coll, solver="auto", trials=args.trials, workers=1)
        wall = time.perf_counter() - t0
        assert verify_schedule(ours).ok and verify_schedule(s).ok
        out.append({"size": size, "nvls_us": s.makespan * 1e6, "optimum_us": bound.value * 1e6,
                    "ratio": s.makespan / bound.value, "algbw_GBps": size / s.makespan / 1e9,
                    "slices": s.meta.get("tuned", {}).get("slices"),
                    "tacos_us": ours.makespan * 1e6, "tacos_ratio": ours.makespan / bound.value,
                    "tacos_plan": ours.meta["auto"]["winner"],
                    "tacos_slices": ours.meta.get("in_switch_tree", {}).get("slices"),
                    "tacos_s": wall})
    return out


def a2a512(args) -> list[dict]:
    """512-NPU all-to-all synthesis time (median of ``--repeat``) and gap."""
    out = []
    for name, topo in (("64x DGX-H100", T.preset("dgx_h100", nodes=64)),
                       ("torus 8x8x8", T.torus(8, 8, 8))):
        coll = build("alltoall", topo.live_npus, size=GiB)
        walls, sched = [], None
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            sched = synthesize(topo, coll, solver="a2a")
            walls.append(time.perf_counter() - t0)
        out.append({"system": name, "npus": topo.n_npus, "transfers": len(sched.transfers),
                    "synthesis_s": statistics.median(walls), "runs": len(walls),
                    "gap": sched.meta.get("gap"), "verified": verify_schedule(sched).ok,
                    "algorithm": sched.meta.get("algorithm")})
        print(f"a2a {name}: {statistics.median(walls):.1f} s", flush=True)
    return out


def speedup_plot(out: Path, sweeps: dict, kind: str) -> str:
    from tacos.backends.plot import _pyplot

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    for (name, k), res in sorted(sweeps.items()):
        if k != kind:
            continue
        pts = [(r.size, r.speedup) for r in res.rows if r.speedup]
        ax.plot(*zip(*pts, strict=True), marker=".", label=name)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("size (bytes)")
    ax.set_ylabel("speedup over the best NCCL model")
    ax.set_title(f"{kind}: tacos (auto) vs NCCL's algorithms, per size", fontsize=10)
    ax.legend(fontsize=7)
    name = f"nccl_speedup_{kind}.png"
    fig.savefig(out / name, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return name


def markdown(args, rows, nvls, a2a, sweeps, plots, seconds) -> str:
    lines = [f"Command: `{' '.join(['nice python -m benchmarks.bench_nccl', *args.argv])}`  ",
             f"Machine: {machine()}  ",
             f"Date: {dt.date.today().isoformat()}; wall time {seconds / 60:.1f} min "
             "(machine shared with other jobs).", ""]
    lines += ["### Geometric-mean speedup over the best NCCL model", "",
              "| system | collective | all sizes | 64 MiB - 1 GiB | ceiling 64 MiB - 1 GiB "
              "| sizes where NCCL's best model wins | sweep time |",
              "|---|---|---|---|---|---|---|"]
    for (name, kind), res in sorted(sweeps.items()):
        mid = res.geomean_speedup(64 * MiB, GiB)
        ceil = geomean([r["ceiling"] for r in rows if r["system"] == name
                        and r["collective"] == kind and 64 * MiB <= r["size"] <= GiB])
        ties = sum(1 for r in res.rows if r.plan.startswith("nccl-"))
        lines.append(f"| {name} | {kind} | {res.geomean_speedup() or 0:.2f}x | "
                     f"{mid or 0:.2f}x | {ceil or 0:.2f}x | {ties}/{len(res.rows)} | "
                     f"{res.seconds:.0f} s |")
    lines += ["", "Ceiling: geometric mean of the best NCCL model's time over the lower bound "
              "(min-cut, in-network where switches reduce): no plan can beat NCCL's best model "
              "by more on this model."]
    lines += ["", "### Per size", "",
              "| system | collective | size | plan | algbw GB/s | busbw GB/s | best NCCL model "
              "| NCCL us | tacos us | speedup | gap to bound | ceiling |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['system']} | {r['collective']} | {_size(r['size'])} | "
                     f"{r['plan']} | {r['algbw_GBps']:.2f} | {r['busbw_GBps']:.2f} | "
                     f"{r['nccl_best']} | {r['nccl_best_us'] or 0:.1f} | {r['time_us']:.1f} | "
                     f"{r['speedup'] or 0:.2f}x | {r['gap'] or 0:.2f} | "
                     f"{r['ceiling'] or 0:.2f}x |")
    if nvls:
        lines += ["", "### All-reduce on one DGX-H100 (NVLS) against the in-switch optimum", "",
                  "| size | optimum us | NCCL NVLS us | ratio | slices | tacos us | ratio | "
                  "tacos plan | slices | synthesis s |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for r in nvls:
            lines.append(f"| {_size(r['size'])} | {r['optimum_us']:.1f} | {r['nvls_us']:.1f} | "
                         f"{r['ratio']:.3f} | {r['slices']} | {r['tacos_us']:.1f} | "
                         f"{r['tacos_ratio']:.3f} | {r['tacos_plan']} | {r['tacos_slices']} | "
                         f"{r['tacos_s']:.1f} |")
    if a2a:
        lines += ["", "### 512-NPU all-to-all synthesis (solver a2a, 1 GiB per rank)", "",
                  "| system | NPUs | transfers | synthesis s (median) | runs | gap to bound | "
                  "verified |", "|---|---|---|---|---|---|---|"]
        for r in a2a:
            lines.append(f"| {r['system']} | {r['npus']} | {r['transfers']} | "
                         f"{r['synthesis_s']:.1f} | {r['runs']} | {r['gap'] or 0:.2f} | "
                         f"{r['verified']} |")
    lines += [""] + [f"![{p}]({p})" for p in plots]
    return "\n".join(lines) + "\n"


def _size(n: int) -> str:
    for unit, k in (("GiB", GiB), ("MiB", MiB), ("KiB", 1024)):
        if n >= k:
            return f"{n / k:g} {unit}"
    return f"{n} B"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="docs/benchmarks")
    p.add_argument("--sizes", default=SIZES)
    p.add_argument("--collectives", default="allgather,allreduce,alltoall")
    p.add_argument("--trials", type=int, default=8)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="the 5 smaller systems only")
    p.add_argument("--skip", default="", help="comma list of: sweeps, nvls, a2a")
    args = p.parse_args(argv)
    args.argv = argv if argv is not None else __import__("sys").argv[1:]
    args.collectives = [c for c in args.collectives.split(",") if c]
    skip = set(args.skip.split(","))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    rows: list[dict] = []
    sweeps: dict = {}
    if "sweeps" not in skip:
        run_sweeps(args, rows, sweeps)
        write_csv(out / "nccl.csv", rows)
    nvls = nvls_optimum(args) if "nvls" not in skip else []
    a2a = a2a512(args) if "a2a" not in skip else []
    if a2a:
        write_csv(out / "a2a512.csv", a2a)
    plots = [speedup_plot(out, sweeps, k) for k in args.collectives if sweeps]
    text = markdown(args, rows, nvls, a2a, sweeps, plots, time.perf_counter() - t0)
    (out / "nccl.md").write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
