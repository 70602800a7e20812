"""The runtime model (issue 26): calibration, Microsoft's plans, tacos's plans, speedups.

Four tables, written to ``--out`` (default ``docs/benchmarks``) as ``runtime.md`` and
``runtime.csv``:

1. **Calibration**: NCCL's all-reduce in the runtime model against the published nccl-tests
   sweeps (``tacos/runtime/nccl_allreduce_8gpu.csv``; one process drives 8 GPUs), per size.
2. **Microsoft's production MSCCL XML** (``tests/fixtures/msccl/executor_ndv{4,5}_*.xml``):
   every power-of-2 size of each file's window, ndv4 on ``dgx_a100_node``, ndv5 on
   ``dgx_h100_node``, beside NCCL's own choice (one process per GPU) and the link model.
3. **tacos's fixed-shape plans** (``--shape fixed``; the default before runtime-shaped plans,
   whose figures are in ``runtime-plans.md``): the MSCCL XML ``tacosc ... -o plan.xml``
   writes (auto, ranked by the runtime time of each candidate's XML) and the XML of the plan
   tacos synthesizes (the fastest of greedy/forest/hierarchical in the link model).
4. **Speedups over NCCL redone**: for the systems of ``docs/benchmarks/nccl.md``, the
   synthesized plan the link model ranked first, its link-model speedup over the best NCCL
   model (what nccl.md reported) and its runtime-model speedup over the fastest NCCL algorithm
   as NCCL runs it (its MSCCL XML timed; in-switch plans have no executable form).

Run: ``nice python -m benchmarks.bench_runtime`` (``--quick``: fewer sizes and systems).
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import math
import time
from pathlib import Path

from benchmarks import topologies as T
from benchmarks.__main__ import machine
from tacos.model.patterns import build
from tacos.msccl.timing import alpha_beta_time
from tacos.msccl.xml_reader import load_xml_collect
from tacos.runtime import estimate_nccl, estimate_program
from tacos.runtime.calibration import calibration_errors
from tacos.runtime.plans import runtime_of
from tacos.solvers.auto import run_portfolio

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "msccl"
KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


def _size(n: int) -> str:
    for unit, div in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    return f"{n} B"


def calibration() -> list[dict]:
    """Table 1."""
    return [{"table": "calibration", "machine": p.machine, "size": p.size,
             "algorithm": f"{p.algorithm}/{p.protocol}", "measured_busbw": p.measured,
             "model_busbw": round(p.modelled, 2), "error_pct": round(100 * p.error, 1),
             "target_pct": None if p.target is None else round(100 * p.target)}
            for p in calibration_errors()]


def microsoft(topos: dict) -> list[dict]:
    """Table 2."""
    rows = []
    for path in sorted(FIXTURES.glob("executor_ndv*.xml")):
        prog = load_xml_collect(path).program
        topo = topos["h100" if "ndv5" in path.name else "a100"]
        lo = max(prog.minBytes or 1, KiB)
        hi = prog.maxBytes or GiB
        size = 1 << (lo - 1).bit_length()
        while size <= hi:
            if size % prog.nchunksperloop == 0:
                est = estimate_program(prog, topo, size)
                nccl = estimate_nccl(topo, prog.coll, size)
                link = alpha_beta_time(prog, topo, nbytes=size).time
                rows.append({"table": "microsoft", "file": path.name, "proto": prog.proto,
                             "ctas": est.detail["ctas"], "channels": prog.nchannels,
                             "size": size, "coll": prog.coll, "model_us": est.time * 1e6,
                             "busbw": est.busbw / 1e9, "bound": est.bound,
                             "nccl_us": nccl.time * 1e6,
                             "nccl": f"{nccl.detail['algorithm']}/{nccl.detail['protocol']}",
                             "vs_nccl": nccl.time / est.time, "link_us": link * 1e6})
            size *= 2
    return rows


def defaults(topos: dict, sizes: list[int], trials: int) -> list[dict]:
    """Table 3."""
    rows = []
    for gen, topo in topos.items():
        for kind in ("allreduce", "allgather"):
            for size in sizes:
                coll = build(kind, topo.live_npus, size=size)
                t0 = time.perf_counter()
                _w, _s, facts = run_portfolio(topo, coll, trials=trials, workers=1,
                                              keep_plans=True, in_switch=False, emit="xml",
                                              greedy_chunks=True)
                plans = facts.pop("plans")
                synth = [k for k in facts["link_times"] if not k.startswith("nccl-")]
                own = min(synth, key=facts["link_times"].__getitem__) if synth else None
                own_est = runtime_of(plans[own], topo, as_xml=True)[0] if own else None
                nccl = estimate_nccl(topo, kind, size)
                rows.append({
                    "table": "defaults", "system": f"dgx_{gen}_node", "coll": kind,
                    "size": size, "written": facts["winner"],
                    "written_us": facts["times"][facts["winner"]] * 1e6,
                    "synthesized": own,
                    "synth_us": own_est.time * 1e6 if own_est else None,
                    "synth_bound": own_est.bound if own_est else None,
                    "synth_link_us": facts["link_times"][own] * 1e6 if own else None,
                    "nccl_us": nccl.time * 1e6,
                    "nccl": f"{nccl.detail['algorithm']}/{nccl.detail['protocol']}",
                    "seconds": time.perf_counter() - t0})
    return rows


def systems(quick: bool) -> list[tuple[str, object]]:
    out = [("2x DGX-A100", T.preset("dgx_a100", nodes=2)),
           ("2x DGX-H100", T.preset("dgx_h100", nodes=2, sharp=1)),
           ("DGX-1", T.preset("dgx1"))]
    if not quick:
        out += [("NDv2 x2", T.preset("ndv2", nodes=2)), ("MI250 x1", T.preset("mi250"))]
    return out


def speedups(quick: bool, sizes: list[int], trials: int) -> list[dict]:
    """Table 4."""
    rows = []
    for name, topo in systems(quick):
        for kind in ("allgather", "allreduce", "alltoall"):
            for size in sizes:
                coll = build(kind, topo.live_npus, size=size)
                _w, _s, facts = run_portfolio(topo, coll, trials=trials, workers=1,
                                              keep_plans=True, greedy_chunks=kind != "alltoall")
                plans = facts.pop("plans")
                link = facts["link_times"]
                synth = [k for k in link if not k.startswith("nccl-")]
                nccl_link = [v for k, v in link.items() if k.startswith("nccl-")]
                if not synth or not nccl_link:
                    continue
                own = min(synth, key=link.__getitem__)
                est, note = runtime_of(plans[own], topo, as_xml=True)
                ref = facts.get("nccl_time")
                rows.append({
                    "table": "speedups", "system": name, "coll": kind, "size": size,
                    "plan": own, "link_speedup": min(nccl_link) / link[own],
                    "runtime_us": est.time * 1e6 if est else None,
                    "nccl_best": facts.get("nccl_best"),
                    "nccl_us": ref * 1e6 if ref else None,
                    "runtime_speedup": ref / est.time if est and ref else None,
                    "note": "" if est else note})
    return rows


def _geo(vals: list[float]) -> float | None:
    vals = [v for v in vals if v]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


def write(out: Path, rows: list[dict], cmd: str, seconds: float) -> None:
    with open(out / "runtime.csv", "w", newline="") as fh:
        keys = sorted({k for r in rows for k in r})
        w = csv.DictWriter(fh, keys)
        w.writeheader()
        w.writerows(rows)
    md = [f"Command: `{cmd}`  ",
          f"Machine: {machine()} (2-core VM shared with other jobs)  ",
          f"Date: {dt.date.today().isoformat()}; wall time {seconds / 60:.1f} min.", "",
          "All times are the runtime model's (`docs/runtime-model.md`), not measurements.", ""]
    md += ["### 1. Calibration: NCCL all-reduce, 8 GPUs, nccl-tests busbw (GB/s)", "",
           "| machine | size | NCCL runs | measured | model | error | target |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["table"] == "calibration":
            tgt = f"±{r['target_pct']}%" if r["target_pct"] else "-"
            md.append(f"| {r['machine']} | {_size(r['size'])} | {r['algorithm']} | "
                      f"{r['measured_busbw']:.2f} | {r['model_busbw']:.2f} | "
                      f"{r['error_pct']:+.1f}% | {tgt} |")
    md += ["", "### 2. Microsoft's production MSCCL XML (msccl-executor-nccl) vs NCCL", "",
           "| file | proto | CTAs/GPU | size | model us | busbw GB/s | NCCL us (its choice) | "
           "NCCL / plan | link model us | bounded by |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["table"] == "microsoft":
            md.append(f"| {r['file']} | {r['proto']} | {r['ctas']} | {_size(r['size'])} | "
                      f"{r['model_us']:.1f} | {r['busbw']:.1f} | {r['nccl_us']:.1f} "
                      f"({r['nccl']}) | {r['vs_nccl']:.2f}x | {r['link_us']:.1f} | "
                      f"{r['bound']} |")
    md += ["", "### 3. tacos's fixed-shape plans (MSCCL XML, `--shape fixed`: the default "
           "before runtime-shaped plans) on one DGX node", "",
           "| system | collective | size | XML written (auto) | its us | synthesized plan | "
           "its XML us | its link-model us | NCCL us (its choice) | synthesized / NCCL | "
           "bounded by |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["table"] == "defaults":
            ratio = r["synth_us"] / r["nccl_us"] if r["synth_us"] else None
            md.append(f"| {r['system']} | {r['coll']} | {_size(r['size'])} | {r['written']} | "
                      f"{r['written_us']:.1f} | {r['synthesized']} | "
                      f"{r['synth_us']:.1f} | {r['synth_link_us']:.1f} | {r['nccl_us']:.1f} "
                      f"({r['nccl']}) | {ratio:.1f}x slower | {r['synth_bound']} |")
    md += ["", "### 4. Speedup over NCCL: link model (as nccl.md reported) vs runtime model", "",
           "| system | collective | size | synthesized plan | link-model speedup | "
           "runtime us (its XML) | fastest NCCL (runtime) | NCCL us | runtime-model speedup |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["table"] == "speedups":
            rt = f"{r['runtime_us']:.1f}" if r["runtime_us"] else f"none: {r['note'][:40]}"
            sp = f"{r['runtime_speedup']:.2f}x" if r["runtime_speedup"] else "-"
            nu = f"{r['nccl_us']:.1f}" if r["nccl_us"] else "-"
            md.append(f"| {r['system']} | {r['coll']} | {_size(r['size'])} | {r['plan']} | "
                      f"{r['link_speedup']:.2f}x | {rt} | {r['nccl_best']} | {nu} | {sp} |")
    md += ["", "Geometric means of table 4 per system and collective:", "",
           "| system | collective | link-model speedup | runtime-model speedup |",
           "|---|---|---|---|"]
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        if r["table"] == "speedups":
            groups.setdefault((r["system"], r["coll"]), []).append(r)
    for (sysname, kind), rs in groups.items():
        a = _geo([r["link_speedup"] for r in rs])
        b = _geo([r["runtime_speedup"] for r in rs])
        md.append(f"| {sysname} | {kind} | {a:.2f}x | " + (f"{b:.2f}x |" if b else "- |"))
    (out / "runtime.md").write_text("\n".join(md) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="docs/benchmarks")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--trials", type=int, default=2)
    args = ap.parse_args()
    t0 = time.perf_counter()
    topos = {"a100": T.preset("dgx_a100_node"), "h100": T.preset("dgx_h100_node")}
    sizes = [KiB, 64 * KiB, 4 * MiB, 256 * MiB] if args.quick else \
        [KiB << (2 * i) for i in range(11)]  # 1 KiB .. 1 GiB, x4
    big = [KiB, 64 * KiB, 4 * MiB, 256 * MiB]
    rows = calibration() + microsoft(topos)
    print("calibration + fixtures", f"{time.perf_counter() - t0:.1f} s", flush=True)
    rows += defaults(topos, sizes, args.trials)
    print("defaults", f"{time.perf_counter() - t0:.1f} s", flush=True)
    rows += speedups(args.quick, big if args.quick else big + [GiB], args.trials)
    print("speedups", f"{time.perf_counter() - t0:.1f} s", flush=True)
    cmd = "nice python -m benchmarks.bench_runtime" + (" --quick" if args.quick else "")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write(out, rows, cmd, time.perf_counter() - t0)


if __name__ == "__main__":
    main()
