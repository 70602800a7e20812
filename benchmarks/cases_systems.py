"""Case h: real systems (DGX-1, DGX-A100, DGX-H100, MI250) against the min-cut optimum."""

from __future__ import annotations

from benchmarks import topologies as T
from benchmarks.cases_seed import _x
from benchmarks.suite import Context, Table, color, mean, measure, pick, pyplot
from tacos.check.bounds import cut_bound

GiB = 2**30

# ForestColl's optimal all-gather algbw on its own graphs (reference.md §2.6 and A2), GB/s.
FORESTCOLL = {"2x DGX-A100": 346.67, "1x MI250": 342.86, "2x MI250": 354.13}


def case_h(ctx: Context) -> Table:
    """All-gather algbw of greedy and baselines against the min-cut (ForestColl) optimum."""
    systems = [("DGX-1", T.preset("dgx1")), ("2x DGX-A100", T.preset("dgx_a100", nodes=2)),
               ("4x DGX-H100", T.preset("dgx_h100", nodes=4)),
               ("1x MI250", T.preset("mi250")), ("2x MI250", T.preset("mi250", nodes=2))]
    chunk_counts = [1] if ctx.quick else [1, 8]
    table = Table("h", "Real systems: all-gather algbw against the min-cut optimum",
                  "All-gather of 1 GiB (algbw = size / time, the nccl-tests convention) on the "
                  "shipped presets; `bound` is max(latency, ingress, min-cut) and `optimum "
                  "algbw` = size / min-cut bound (ForestColl's throughput optimum, no "
                  "latency).  `greedy` uses 1 chunk per NPU"
                  + ("" if ctx.quick else ", `greedy k=8` 8 chunks per NPU") + ".")
    for name, topo in systems:
        for k in chunk_counts:
            coll = T.everyone("allgather", topo, GiB, chunks=k)
            label = "greedy" if k == 1 else f"greedy k={k}"
            solvers: list = [(label, "greedy", {"trials": ctx.trials})]
            if k == 1:
                solvers += ["ring", "biring", "direct", "dbtree", "rhd"]
            rows = measure(ctx, name, topo, coll, solvers, reference=label)
            cut = cut_bound(topo, coll)
            opt = GiB / cut / 1e9 if cut else None
            for r in rows:
                r["note"] = (f"optimum algbw {opt:.2f} GB/s" if opt else "") + (
                    f"; ForestColl {FORESTCOLL[name]} GB/s" if name in FORESTCOLL else "")
                r["optimum_GBps"] = opt
                r["fraction_of_optimum"] = (r["algbw_GBps"] / opt
                                            if opt and r["algbw_GBps"] else None)
            table.rows += rows
    best = {}
    for name, _ in systems:
        fr = [r["fraction_of_optimum"] for r in table.rows if r["problem"] == name
              and r["solver"].startswith("greedy") and r["fraction_of_optimum"]]
        best[name] = max(fr) if fr else None
    table.summary["greedy_fraction_of_optimum"] = best
    table.summary["greedy_vs_ring"] = mean(pick(table.rows, "greedy", "vs_ring"))
    table.notes.append(
        "Greedy's best algbw as a fraction of the min-cut optimum: "
        + ", ".join(f"{n} {v:.0%}" if v else f"{n} n/a" for n, v in best.items())
        + f".  Greedy (k=1) vs ring: {_x(table.summary['greedy_vs_ring'])} on average.")
    table.plots.append(_plot(ctx, table, [n for n, _ in systems]))
    return table


def _plot(ctx: Context, table: Table, names: list[str]) -> str:
    plt = pyplot()
    solvers = sorted({r["solver"] for r in table.rows})
    fig, ax = plt.subplots(figsize=(9, 3.6))
    width = 0.8 / (len(solvers) + 1)
    for j, solver in enumerate(solvers):
        vals = []
        for n in names:
            v = pick(table.rows, solver, "algbw_GBps", n)
            vals.append(v[0] if v and v[0] else 0.0)
        xs = [i + (j - len(solvers) / 2) * width for i in range(len(names))]
        ax.bar(xs, vals, width, label=solver,
               color="gold" if solver.startswith("greedy k") else color(solver))
    opts = []
    for n in names:
        v = [r.get("optimum_GBps") for r in table.rows if r["problem"] == n]
        opts.append(v[0] if v and v[0] else 0.0)
    ax.bar([i + len(solvers) / 2 * width for i in range(len(names))], opts, width,
           color="black", label="min-cut optimum")
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("all-gather algbw (GB/s)")
    ax.legend(fontsize=7, ncol=4)
    ax.set_title("All-gather 1 GiB on real systems", fontsize=10)
    fig.savefig(ctx.out_dir / "systems.png", dpi=120, bbox_inches="tight")
    plt.close(fig)
    return "systems.png"
