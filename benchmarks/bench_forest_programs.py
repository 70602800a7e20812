"""The integer programs one ``forest`` solve runs: size, status and cost of every CP-SAT call.

For one system, collective and size, every ``CpSolver.solve`` call made during
:func:`tacos.synthesize.solve` (``solver='forest'``) is reported in order: the model's variables
and constraints, the status, the objective and bound (programs that minimize), CP-SAT's
deterministic time and the CPU seconds of the call; then the solve's total CPU seconds and the
plan's fraction of the min-cut optimum.  A satisfaction program's status ``OPTIMAL`` means a
packing was found; its time is the time to the first packing, which is also its proof.

Usage::

    python -m benchmarks.bench_forest_programs                                # 2x MI250
    python -m benchmarks.bench_forest_programs --system "use mi250(nodes=2)" \\
        --kind allreduce --size 64MiB
"""

from __future__ import annotations

import argparse
import time

import tacos
from tacos.check.simulate import simulate
from tacos.model.patterns import build
from tacos.model.units import parse_quantity
from tacos.synthesize import solve


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--system", default="use mi250(nodes=2)", help="TDL body")
    ap.add_argument("--kind", default="allgather")
    ap.add_argument("--size", default="64MiB")
    args = ap.parse_args()
    from ortools.sat.python import cp_model

    calls: list[dict] = []
    plain = cp_model.CpSolver.solve

    def timed(self, model, *rest, **kw):
        c0 = time.process_time()
        status = plain(self, model, *rest, **kw)
        proto = model.Proto()
        has_obj = proto.has_objective() and status in (cp_model.OPTIMAL, cp_model.FEASIBLE)
        calls.append({"vars": len(proto.variables), "cons": len(proto.constraints),
                      "status": self.status_name(status),
                      "objective": self.objective_value if has_obj else None,
                      "bound": self.best_objective_bound if has_obj else None,
                      "limit": self.parameters.max_deterministic_time,
                      "dtime": self.deterministic_time, "cpu": time.process_time() - c0})
        return status

    cp_model.CpSolver.solve = timed
    topo = tacos.parse('topology "bench"\n' + args.system + "\n", source="bench").topology
    size = int(parse_quantity(args.size, "size", default_unit="B"))
    coll = build(args.kind, topo.live_npus, size=size)
    c0 = time.process_time()
    res = solve(topo, coll, solver="forest", bound=False)
    cpu = time.process_time() - c0
    cp_model.CpSolver.solve = plain
    s = res.schedule
    print("| # | variables | constraints | status | objective / bound | det. limit | det. time "
          "| CPU (s) |")
    print("|---|---|---|---|---|---|---|---|")
    for i, c in enumerate(calls, 1):
        obj = "—" if c["objective"] is None else f"{c['objective']:g} / {c['bound']:g}"
        print(f"| {i} | {c['vars']} | {c['cons']} | {c['status']} | {obj} | {c['limit']:g} | "
              f"{c['dtime']:.2f} | {c['cpu']:.2f} |")
    fraction = simulate(s).algbw / s.meta["forest"]["optimal_algbw"]
    print(f"\nsolve CPU {cpu:.2f} s, of which CP-SAT {sum(c['cpu'] for c in calls):.2f} s; "
          f"fraction of the optimum {fraction:.2%}")


if __name__ == "__main__":
    main()
