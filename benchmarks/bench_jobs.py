"""Several jobs on one Clos fabric (seed 002): ECMP, the seed's greedy routing and tacos.

Two experiments, every plan verified:

* ``fig2`` -- the seed's Figure 2: 8 hosts on 4 ToRs, 2 spines, every link alike; two jobs,
  each a 3-host ring all-reduce (s1->s2->s3, s4->s5->s6).  ECMP over ``--ecmp-seeds`` hash
  seeds (how often it collides, and what it costs), against the seed's greedy and tacos;
* ``fattree`` -- a 4:1 oversubscribed two-tier fat-tree (16 hosts of 50 GB/s on 4 leaves,
  two 25 GB/s uplinks per leaf), 2, 3 and 4 jobs placed at random (random-fit, seeded), each
  an all-reduce of 64, 128 or 256 MiB; per instance the slowest job's slowdown (against the
  job alone with the fabric to itself) and Jain's index under ECMP, greedy, and tacos with the
  fairness and the makespan objectives.

Usage::

    python benchmarks/bench_jobs.py                  # both, markdown to stdout
    python benchmarks/bench_jobs.py --only fattree --instances 2
    python benchmarks/bench_jobs.py --docs           # also docs/benchmarks/jobs-tables.md
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import random
import statistics
import time
from pathlib import Path

import tacos
from tacos.jobs.model import Job
from tacos.jobs.plan import plan_jobs
from tacos.jobs.routed import RoutedJobs
from tacos.jobs.routing import congestion
from tacos.model.patterns import build

FIG2 = "fattree s[8] leaves=4 spines=2 down 12.5GB/s 1us up 12.5GB/s 1us\n"
FAT = "fattree h[16] leaves=4 spines=2 down 50GB/s 1us up 25GB/s 1us\n"
MiB = 1 << 20


def ring_job(name: str, hosts, size: int) -> Job:
    hosts = tuple(sorted(hosts))
    return Job(name, hosts, (build("allreduce", hosts, size=size),))


def fig2(ecmp_seeds: int) -> str:
    topo = tacos.parse(FIG2).topology
    jobs = [ring_job("j1", (0, 1, 2), 96 * MiB), ring_job("j2", (3, 4, 5), 96 * MiB)]
    usual = RoutedJobs(topo, jobs)
    worst = []
    collided = 0
    for s in range(ecmp_seeds):
        a = usual.assign("ecmp", s)
        times = usual.times(usual.together(a))
        worst.append(max(times))
        collided += congestion(a) > 1
    res = plan_jobs(topo, jobs, objective="fairness", seed=0)
    alone = max(res.reference)
    lines = ["| routing | worst job time | worst slowdown |", "| --- | --- | --- |"]
    q = statistics.quantiles(worst, n=4)
    lines.append(f"| ECMP, {ecmp_seeds} hash seeds: {collided} collide | median "
                 f"{statistics.median(worst) * 1e3:.2f} ms, quartiles {q[0] * 1e3:.2f}/"
                 f"{q[2] * 1e3:.2f} ms, worst {max(worst) * 1e3:.2f} ms | "
                 f"median {statistics.median(worst) / alone:.2f}x, worst "
                 f"{max(worst) / alone:.2f}x |")
    for name in ("greedy", "tacos"):
        o = res.outcome(name)
        lines.append(f"| {name} | {o.makespan * 1e3:.2f} ms | {o.worst:.2f}x |")
    lines.append(f"| (each job alone) | {alone * 1e3:.2f} ms | 1.00x |")
    return "\n".join(lines)


def placements(n_jobs: int, instance: int) -> list[Job]:
    rng = random.Random(1000 * n_jobs + instance)
    hosts = list(range(16))
    rng.shuffle(hosts)
    cuts = sorted(rng.sample(range(2, 15), n_jobs - 1))
    while any(b - a < 2 for a, b in zip([0, *cuts], [*cuts, 16], strict=True)):
        cuts = sorted(rng.sample(range(2, 15), n_jobs - 1))
    bounds = [0, *cuts, 16]
    return [ring_job(f"j{i}", hosts[bounds[i]:bounds[i + 1]],
                     rng.choice((64, 128, 256)) * MiB) for i in range(n_jobs)]


def fattree(instances: int) -> tuple[str, int, int]:
    topo = tacos.parse(FAT).topology
    head = ("| jobs | instance | job sizes (hosts x MiB) | ECMP worst (Jain) | greedy worst (Jain) "
            "| tacos fairness worst (Jain) | tacos makespan: makespan vs ECMP | plan |")
    lines = [head, "|" + " --- |" * (head.count("|") - 1)]
    met = total = 0
    for n in (2, 3, 4):
        for i in range(instances):
            jobs = placements(n, i)
            t0 = time.perf_counter()
            fair = plan_jobs(topo, jobs, objective="fairness", seed=i)
            fast = plan_jobs(topo, jobs, objective="makespan", seed=i, methods=("tacos",))
            wall = time.perf_counter() - t0
            e, g, t = fair.outcome("ecmp"), fair.outcome("greedy"), fair.outcome("tacos")
            total += 1
            met += t.worst <= e.worst + 1e-12
            sizes = ", ".join(f"{len(j.group)}x{j.collectives[0].size // MiB}" for j in jobs)
            mk = fast.outcome("tacos").makespan
            lines.append(
                f"| {n} | {i} | {sizes} | {e.worst:.2f}x ({e.fairness:.3f}) | {g.worst:.2f}x "
                f"({g.fairness:.3f}) | {t.worst:.2f}x ({t.fairness:.3f}) | {mk * 1e3:.2f} ms vs "
                f"{e.makespan * 1e3:.2f} ms | {fair.methods['tacos'].meta['plan']}; "
                f"{wall:.1f} s |")
    return "\n".join(lines), met, total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=("fig2", "fattree"))
    ap.add_argument("--ecmp-seeds", type=int, default=100)
    ap.add_argument("--instances", type=int, default=4)
    ap.add_argument("--docs", action="store_true", help="write docs/benchmarks/jobs-tables.md")
    args = ap.parse_args()
    stamp = (f"{dt.date.today().isoformat()}, {platform.machine()} {platform.system()}, "
             f"Python {platform.python_version()}")
    parts = []
    if args.only in (None, "fig2"):
        parts.append(f"### Seed 002, Figure 2\n\n{fig2(args.ecmp_seeds)}\n")
        print(parts[-1], flush=True)
    if args.only in (None, "fattree"):
        table, met, total = fattree(args.instances)
        parts.append(f"### 4:1 oversubscribed fat-tree, 2-4 jobs\n\n{table}\n\n"
                     f"tacos (fairness) slowest-job slowdown <= ECMP's in {met} of {total} "
                     "instances.\n")
        print(parts[-1], flush=True)
    if args.docs:
        out = Path(__file__).parent.parent / "docs" / "benchmarks" / "jobs-tables.md"
        cmd = "python benchmarks/bench_jobs.py --docs"
        out.write_text(f"<!-- generated by `{cmd}` ({stamp}) -->\n\n" + "\n".join(parts))


if __name__ == "__main__":
    main()
