"""The forest solver: optimal rate, achieved algbw, synthesis time and MSCCL XML, per system.

For every system of issue 11's targets (2x/4x DGX-A100, 2x/4x DGX-H100, DGX-1, 1x/2x MI250,
2x NDv2, 8x8 torus, 4x4 mesh, 4x4x4 torus) and each collective and size asked:

* ``optimal`` -- the min-cut optimum (ForestColl's rate: size / (x* · data), no α);
* ``algbw`` -- size / the simulator's time of the forest schedule (α included), and its fraction
  of the optimum; every schedule goes through :func:`tacos.check.verify.verify_schedule`;
* the XML: lowered (one pipeline round), then checked by the same code as
  ``tacosc verify plan.xml --topology T`` (:func:`tacos.msccl.verify.verify_xml_file`);
* for all-gather at 1 GiB also tacos's greedy (``--trials``) and the NCCL-style ring and
  bidirectional ring baselines on the same physical model.

``--scale`` times synthesis alone at 64 and 512 NPUs.  Synthesis times are medians of
``--repeat`` runs.

Usage::

    python -m benchmarks.bench_forest                     # every system, AG + AR, 1 GiB + 64 MiB
    python -m benchmarks.bench_forest --only DGX-1 --sizes 1GiB --kinds allgather
    python -m benchmarks.bench_forest --scale
    python -m benchmarks.bench_forest --csv docs/benchmarks/forest.csv
"""

from __future__ import annotations

import argparse
import csv
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from benchmarks import topologies as T
from tacos.check.simulate import simulate
from tacos.check.verify import verify_schedule
from tacos.model.units import parse_quantity
from tacos.msccl.verify import verify_xml_file
from tacos.msccl.xml_writer import schedule_to_xml
from tacos.synthesize import solve

SYSTEMS = {
    "2x DGX-A100": lambda: T.preset("dgx_a100", nodes=2),
    "4x DGX-A100": lambda: T.preset("dgx_a100", nodes=4),
    "2x DGX-H100": lambda: T.preset("dgx_h100", nodes=2),
    "4x DGX-H100": lambda: T.preset("dgx_h100", nodes=4),
    "DGX-1": lambda: T.preset("dgx1"),
    "1x MI250": lambda: T.preset("mi250"),
    "2x MI250": lambda: T.preset("mi250", nodes=2),
    "2x NDv2": lambda: T.preset("ndv2", nodes=2),
    "8x8 torus": lambda: T.torus(8, 8),
    "4x4 mesh": lambda: T.mesh(4, 4, bw="50GiB/s"),
    "4x4x4 torus": lambda: T.torus(4, 4, 4),
}
EXTRA = {
    "3x DGX-A100": lambda: T.preset("dgx_a100", nodes=3),
    "5x DGX-A100": lambda: T.preset("dgx_a100", nodes=5),
    "3x DGX-H100": lambda: T.preset("dgx_h100", nodes=3),
}
"""Rail-joined NVSwitch systems outside issue 11's list, run only when named in ``--only``
(the NIC-merged trees, docs/benchmarks/forest-nic.md)."""
SCALE = {
    "8x8 torus (64)": lambda: T.torus(8, 8),
    "8x DGX-A100 (64)": lambda: T.preset("dgx_a100", nodes=8),
    "8x8x8 torus (512)": lambda: T.torus(8, 8, 8),
}
# ForestColl's optimum on its own graphs of the same systems (reference.md §2.6, A2), GB/s
FORESTCOLL = {"2x DGX-A100": 346.67, "4x DGX-A100": 266.67, "1x MI250": 342.86,
              "2x MI250": 354.13}
COLUMNS = ["system", "collective", "size", "optimal_GBps", "forestcoll_GBps", "algbw_GBps",
           "fraction", "greedy_GBps", "ring_GBps", "biring_GBps", "trees", "k", "slices",
           "synthesis_s", "verified", "xml_verified", "xml_channels", "xml_tbs",
           "gap_rate", "gap_alpha", "gap_idle"]


def gap_parts(schedule, optimal_time: float) -> dict[str, float]:
    """Where the time above the optimum goes, on the busiest link (the one whose transfers hold
    it longest): ``rate`` = its bytes/bandwidth beyond the optimal time (the trees' rate is
    below the optimum, or this link carries more than its share), ``alpha`` = the α of its
    transfers, ``idle`` = the makespan it is not busy (pipeline fill and drain, waiting on
    other links).  All three are fractions of the optimal time and add up to
    makespan / optimal - 1."""
    links = schedule.topology.links
    busy: dict[int, float] = defaultdict(float)
    alpha: dict[int, float] = defaultdict(float)
    for t in schedule.transfers:
        a = sum(links[li].alpha for li in t.route)
        for li in t.route:
            busy[li] += (t.end - t.start) / links[li].multiplicity
            alpha[li] += a / links[li].multiplicity
    top = max(busy, key=lambda li: (busy[li], -li))
    span = schedule.makespan
    return {"gap_rate": round((busy[top] - alpha[top]) / optimal_time - 1, 4),
            "gap_alpha": round(alpha[top] / optimal_time, 4),
            "gap_idle": round((span - busy[top]) / optimal_time, 4)}


def _median_solve(topo, coll, repeat: int, cpu: bool = False, **opts):
    """The result and the median wall-clock (or, with ``cpu``, (wall, CPU)) seconds."""
    times, cpus, res = [], [], None
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        res = solve(topo, coll, bound=False, **opts)
        times.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    if cpu:
        return res, (statistics.median(times), statistics.median(cpus))
    return res, statistics.median(times)


def _algbw(topo, coll, solver: str, **opts) -> float | None:
    try:
        res = solve(topo, coll, solver=solver, bound=False, **opts)
    except Exception:  # a baseline that does not support the topology
        return None
    if res.schedule is None:
        return None
    return simulate(res.schedule).algbw / 1e9


def _xml(schedule, topo) -> tuple[bool, int, int]:
    text = schedule_to_xml(schedule)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "plan.xml"
        path.write_text(text, encoding="utf-8")
        rep = verify_xml_file(path, topology=topo)
    import re

    chans = int(re.search(r'nchannels="(\d+)"', text).group(1))
    return rep.ok, chans, text.count("<tb ")


def run_row(name: str, topo, kind: str, size: int, args) -> dict:
    """One (system, collective, size) row."""
    from tacos.model.patterns import build

    root = topo.live_npus[0] if kind in ("broadcast", "reduce") else None
    coll = build(kind, topo.live_npus, size=size, root=root)
    res, synth = _median_solve(topo, coll, args.repeat, solver="forest")
    s = res.schedule
    sim = simulate(s)
    f = s.meta["forest"]
    opt = f["optimal_algbw"] / 1e9
    row = {"system": name, "collective": kind, "size": args.size_names[size],
           "optimal_GBps": round(opt, 2), "forestcoll_GBps": FORESTCOLL.get(name)
           if kind == "allgather" else None,
           "algbw_GBps": round(sim.algbw / 1e9, 2), "fraction": round(sim.algbw / 1e9 / opt, 4),
           "trees": f["trees"], "k": "/".join(str(p["k"]) for p in f["phases"]),
           "slices": s.meta["pipeline"]["slices"], "synthesis_s": round(synth, 2),
           "verified": verify_schedule(s).ok}
    ok, chans, tbs = _xml(s, topo)
    row.update(xml_verified=ok, xml_channels=chans, xml_tbs=tbs, **gap_parts(s, f["optimal_time"]))
    if kind == "allgather" and size == max(args.sizes) and not args.no_baselines:
        row["greedy_GBps"] = _algbw(topo, coll, "greedy", trials=args.trials, workers=1)
        for b in ("ring", "biring"):
            row[f"{b}_GBps"] = _algbw(topo, coll, b)
    for key in ("greedy_GBps", "ring_GBps", "biring_GBps"):
        if row.get(key) is not None:
            row[key] = round(row[key], 2)
    return row


def markdown(rows: list[dict]) -> str:
    """The rows as a markdown table."""
    head = ["system", "coll.", "size", "optimal", "ForestColl", "forest algbw", "fraction",
            "greedy", "ring", "biring", "trees", "k", "slices", "synth (s)", "verified", "XML",
            "gap: rate / α / idle"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        def g(k, r=r):
            v = r.get(k)
            return "" if v is None else str(v)
        frac = f"{r['fraction']:.1%}"
        xml = (f"ok ({r['xml_channels']} ch, {r['xml_tbs']} tbs)" if r["xml_verified"]
               else "FAIL")
        out.append("| " + " | ".join([
            r["system"], r["collective"], r["size"], g("optimal_GBps"), g("forestcoll_GBps"),
            g("algbw_GBps"), frac, g("greedy_GBps"), g("ring_GBps"), g("biring_GBps"),
            g("trees"), g("k"), g("slices"), g("synthesis_s"),
            "yes" if r["verified"] else "NO", xml,
            f"{r['gap_rate']:.1%} / {r['gap_alpha']:.1%} / {r['gap_idle']:.1%}"]) + " |")
    return "\n".join(out)


def scale(args) -> None:
    """Synthesis time of all-gather at 64 and 512 NPUs (no XML)."""
    from tacos.model.patterns import build

    print("| system | NPUs | trees | k | synthesis wall (s) | synthesis CPU (s) "
          "| fraction of optimum |")
    print("|---|---|---|---|---|---|---|")
    only = set(args.only.split(",")) if args.only else None
    for name, make in SCALE.items():
        if only and name not in only:
            continue
        topo = make()
        coll = build("allgather", topo.live_npus, size=1 << 30)
        res, (wall, cpu) = _median_solve(topo, coll, args.repeat, cpu=True, solver="forest")
        s = res.schedule
        f = s.meta["forest"]
        frac = simulate(s).algbw / f["optimal_algbw"]
        print(f"| {name} | {len(topo.live_npus)} | {f['trees']} | {f['phases'][0]['k']} | "
              f"{wall:.1f} | {cpu:.1f} | {frac:.1%} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated system names")
    ap.add_argument("--kinds", default="allgather,allreduce")
    ap.add_argument("--sizes", default="1GiB,64MiB")
    ap.add_argument("--repeat", type=int, default=1, help="synthesis runs per row (median)")
    ap.add_argument("--trials", type=int, default=4, help="greedy trials for the comparison")
    ap.add_argument("--no-baselines", action="store_true")
    ap.add_argument("--scale", action="store_true", help="only the synthesis-time rows")
    ap.add_argument("--csv", help="write the rows to this CSV file")
    args = ap.parse_args()
    if args.scale:
        scale(args)
        return
    names = args.sizes.split(",")
    args.size_names = {int(parse_quantity(n, "size", default_unit="B")): n for n in names}
    args.sizes = list(args.size_names)
    only = set(args.only.split(",")) if args.only else None
    rows = []
    for name, make in (SYSTEMS | EXTRA).items():
        if (only and name not in only) or (not only and name in EXTRA):
            continue
        topo = make()
        for kind in args.kinds.split(","):
            for size in args.sizes:
                row = run_row(name, topo, kind, size, args)
                rows.append(row)
                print(markdown([row]).splitlines()[-1], flush=True)
    print()
    print(markdown(rows))
    if args.csv:
        with open(args.csv, "w", newline="", encoding="utf-8") as fh:
            w = csv.DictWriter(fh, fieldnames=COLUMNS)
            w.writeheader()
            for r in rows:
                w.writerow({k: r.get(k) for k in COLUMNS})


if __name__ == "__main__":
    main()
