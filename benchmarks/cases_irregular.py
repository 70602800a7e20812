"""Cases d–e: failures (Table III), non-all-reduce collectives (Table IV), multi-tenant
(Table V)."""

from __future__ import annotations

from benchmarks import topologies as T
from benchmarks.cases_seed import BASELINES, NPU_RING, _x, synthesizers
from benchmarks.suite import Context, Table, mean, measure, pick
from tacos.model.collective import combine
from tacos.model.patterns import build

MiB = 2**20


def case_d(ctx: Context) -> Table:
    """Seed Table III: all-reduce on a 4x4 mesh with NPUs 7 and 9 failed."""
    topo = T.mesh(4, 4, fail=(7, 9))
    coll = T.everyone("allreduce", topo, 56 * MiB)
    table = Table("d", "Table III: 4x4 mesh with NPUs 7 and 9 failed, all-reduce",
                  "14 live NPUs, 100 GB/s, α = 0.5 µs, all-reduce of 56 MiB (4 MiB per NPU), "
                  f"1 chunk per NPU; ILP limit {ctx.ilp_limit:g} s per phase.  "
                  "`norm.` = time / greedy.")
    table.rows += measure(ctx, "Mesh 4x4 - {7, 9}", topo, coll, synthesizers(ctx) + BASELINES
                          + [NPU_RING], keep=("greedy",))
    sched = next((r.pop("schedule", None) for r in table.rows if r["solver"] == "greedy"), None)
    for r in table.rows:
        r.pop("schedule", None)
    for solver in ("greedy", "ilp"):
        table.summary[f"{solver}_vs_baselines"] = mean(
            pick(table.rows, solver, "vs_ring") + pick(table.rows, solver, "vs_direct"))
    table.notes.append(
        "Seed: the synthesized all-reduce is on average 3.01x faster than Ring and Direct. "
        f"Here: greedy {_x(table.summary['greedy_vs_baselines'])}, ILP "
        f"{_x(table.summary['ilp_vs_baselines'])}.")
    if sched is not None:
        from tacos.backends.plot import plot_schedule

        plot_schedule(sched, ctx.out_dir / "timeline_failures.png",
                      title="greedy all-reduce, 4x4 mesh with NPUs 7 and 9 failed")
        table.plots.append("timeline_failures.png")
    return table


def case_e(ctx: Context) -> Table:
    """Seed Tables IV and V: broadcast, gather and a multi-tenant mix on a 6x6 mesh."""
    topo = T.mesh(6, 6)
    group = topo.live_npus
    table = Table("e", "Tables IV–V: broadcast, gather and multi-tenant on a 6x6 mesh",
                  "36 NPUs, 100 GB/s, α = 0.5 µs, 1 chunk per NPU.  Broadcast of 36 MiB from "
                  "NPU 0; gather of 36 MiB (1 MiB per NPU) to NPU 0; multi-tenant = broadcast "
                  "16 MiB from NPU 2 + reduce 16 MiB to NPU 17 + all-gather 36 MiB, all over "
                  "the 36 NPUs at once.  (Reduce and scatter are the inverses of broadcast and "
                  f"gather.)  ILP limit {ctx.ilp_limit:g} s per phase.  `norm.` = time / ILP.")
    bcast = build("broadcast", group, size=36 * MiB, root=0)
    gather = build("gather", group, size=36 * MiB, root=0)
    multi = combine([build("broadcast", group, size=16 * MiB, root=2, name="bcast"),
                     build("reduce", group, size=16 * MiB, root=17, name="reduce"),
                     build("allgather", group, size=36 * MiB, name="allgather")])
    for name, coll, bases in (("broadcast", bcast, ["direct", "ring", "dbtree", "rhd"]),
                              ("gather", gather, ["direct"]),
                              ("multi-tenant", multi, ["direct", "ring"])):
        compare = ("ring", "direct") if "ring" in bases else ("direct",)
        table.rows += measure(ctx, name, topo, coll, synthesizers(ctx) + bases,
                              reference="ilp", compare=compare)
    table.summary["greedy_vs_direct"] = mean(pick(table.rows, "greedy", "vs_direct"))
    table.notes.append(
        "Seed: ILP 1.00 / TACCL-like 1.00 / Direct 3.90 (broadcast), 1.00 / 1.11 / 1.67 "
        "(gather), multi-tenant ILP 1.00, greedy 1.25, TACCL-like 1.50, Direct 3.63.  "
        f"Here greedy vs direct averages {_x(table.summary['greedy_vs_direct'])}.")
    return table
