"""Cases f–g: large messages (Fig. 21) and synthesis-time scaling."""

from __future__ import annotations

import math

from benchmarks import topologies as T
from benchmarks.cases_seed import _s, _x
from benchmarks.growth import exponent
from benchmarks.suite import Context, Table, color, mean, measure, pick, pyplot

KiB, MiB = 2**10, 2**20

# TACOS C++ greedy, reference.md Appendix A1b: all-gather 64 MiB, 50 GiB/s, 0.5 us, 1 chunk.
TACOS_A1B = {
    "Mesh 8x8": (641.0, 6.7e-3), "Mesh 16x16": (689.0, 0.5351), "Mesh 32x32": (881.0, 55.47),
    "Torus 4x4x4": (220.3, 3.6e-3), "Torus 8x8x8": (253.0, 3.06),
}


def case_f(ctx: Context) -> Table:
    """Seed Fig. 21: all-reduce on a 10x10 mesh with 1..64 chunks of 128 KiB per NPU."""
    chunks = [1, 4] if ctx.quick else [1, 2, 4, 8, 16, 32, 64]
    topo = T.mesh(10, 10)
    table = Table("f", "Fig. 21: large messages, 10x10 mesh all-reduce",
                  "100 NPUs, 100 GB/s, α = 0.5 µs; k chunks of 128 KiB per NPU (all-reduce of "
                  "k x 12.5 MiB).  Greedy runs min(trials, max(2, 64/k)) trials (fewer for "
                  "many chunks, to bound the run time).  `norm.` = time / greedy.")
    for k in chunks:
        coll = T.everyone("allreduce", topo, 100 * k * 128 * KiB, chunks=k)
        trials = min(ctx.trials, max(2, 64 // k))
        table.rows += measure(ctx, f"{k} chunks", topo, coll,
                              [("greedy", "greedy", {"trials": trials}), "ring", "direct"])
    table.summary["greedy_vs_ring"] = mean(pick(table.rows, "greedy", "vs_ring"))
    table.summary["greedy_vs_direct"] = mean(pick(table.rows, "greedy", "vs_direct"))
    synth = pick(table.rows, "greedy", "synthesis_s")
    table.summary["greedy_synthesis_largest_s"] = synth[-1] if synth else None
    table.notes.append(
        "Seed: greedy is 4.51x faster than Ring and 11.00x faster than Direct on average and "
        "synthesizes 64 chunks in 57.87 s.  Here: "
        f"{_x(table.summary['greedy_vs_ring'])} vs ring, "
        f"{_x(table.summary['greedy_vs_direct'])} vs direct, "
        f"{_s(table.summary['greedy_synthesis_largest_s'])} for {chunks[-1]} chunks.  "
        "(The seed's 25–1600 MB totals imply 256 KB per NPU and chunk; we use the stated "
        "128 KiB.)")
    table.plots.append(_fig21(ctx, table, chunks))
    return table


def case_g(ctx: Context) -> Table:
    """Synthesis time of greedy all-gather against NPU count, with the fitted exponent."""
    tori = [4, 6] if ctx.quick else [4, 5, 6, 7, 8]
    meshes = [8, 16] if ctx.quick else [8, 16, 24, 32]
    table = Table("g", "Scale: greedy all-gather synthesis time vs NPU count",
                  "All-gather of 64 MiB, 1 chunk per NPU, 50 GiB/s and α = 0.5 µs per link "
                  "(the Appendix A1b setting), greedy with one trial on one process "
                  "(TACOS C++ also runs one trial).  No baselines at this scale.")
    series: dict[str, list[tuple[int, float]]] = {"3D torus": [], "2D mesh": []}
    runs = [("3D torus", f"Torus {k}x{k}x{k}", T.torus(k, k, k, bw="50GiB/s")) for k in tori]
    runs += [("2D mesh", f"Mesh {k}x{k}", T.mesh(k, k, bw="50GiB/s")) for k in meshes]
    for family, name, topo in runs:
        coll = T.everyone("allgather", topo, 64 * MiB)
        rows = measure(ctx, name, topo, coll,
                       [("greedy", "greedy", {"trials": 1, "workers": 1})], compare=())
        ref = TACOS_A1B.get(name)
        for r in rows:
            if ref:
                r["note"] = (f"TACOS C++: {ref[0]:.1f} µs, synthesis {ref[1]:.3g} s "
                             + r["note"]).strip()
            if r["synthesis_s"] and r["time_us"]:
                series[family].append((r["npus"], r["synthesis_s"]))
        table.rows += rows
    for family, pts in series.items():
        table.summary[f"exponent_{family}"] = exponent([p[0] for p in pts],
                                                         [max(p[1], 1e-6) for p in pts])
    table.notes.append(
        "Fitted growth of synthesis time t ~ N^e (least squares on log-log): "
        + ", ".join(f"{f}: e = {_e(table.summary[f'exponent_{f}'])}" for f in series)
        + ".  TACOS C++ grows roughly like N^3 (reference.md A1b).")
    table.plots.append(_scale_plot(ctx, series, table))
    return table


def _e(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}"


def _fig21(ctx: Context, table: Table, chunks: list[int]) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.4))
    for solver in ("greedy", "ring", "direct"):
        vals = [(k, v[0]) for k in chunks
                if (v := pick(table.rows, solver, "norm", f"{k} chunks")) and v[0]]
        ax.plot([k for k, _ in vals], [v for _, v in vals], marker="o", label=solver,
                color=color(solver))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("chunks of 128 KiB per NPU")
    ax.set_ylabel("all-reduce time / greedy")
    ax.grid(linestyle=":", linewidth=0.5)
    ax.legend(fontsize=8)
    ax.set_title("Fig. 21 reproduction: 10x10 mesh", fontsize=10)
    fig.savefig(ctx.out_dir / "large_messages.png", dpi=120, bbox_inches="tight")
    plt.close(fig)
    return "large_messages.png"


def _scale_plot(ctx: Context, series: dict[str, list[tuple[int, float]]], table: Table) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for family, pts in series.items():
        if not pts:
            continue
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", linestyle="",
                label=family)
        e = table.summary.get(f"exponent_{family}")
        if e is not None and len(pts) >= 2:
            n0, t0 = pts[0]
            xs = [pts[0][0], pts[-1][0]]
            ax.plot(xs, [t0 * (x / n0) ** e for x in xs], linestyle="--", linewidth=0.8,
                    label=f"{family} fit N^{e:.2f}")
    for name, (_, secs) in TACOS_A1B.items():
        n = math.prod(int(x) for x in name.split()[1].split("x"))
        ax.plot([n], [secs], marker="x", color="grey", linestyle="")
    ax.plot([], [], marker="x", color="grey", linestyle="", label="TACOS C++ (App. A1b)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("NPUs")
    ax.set_ylabel("synthesis time (s)")
    ax.grid(linestyle=":", linewidth=0.5)
    ax.legend(fontsize=8)
    ax.set_title("Greedy all-gather synthesis time (one trial)", fontsize=10)
    fig.savefig(ctx.out_dir / "scale.png", dpi=120, bbox_inches="tight")
    plt.close(fig)
    return "scale.png"
