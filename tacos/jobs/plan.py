"""Plan several jobs on one fabric and compare how they share it.

:func:`plan_jobs` times every job under three ways of sharing the same physical model:

* ``ecmp`` -- each job runs its usual algorithm (NCCL's ring, or direct sends for patterns a
  ring does not serve) and every flow takes the route a seeded ECMP hash picks;
* ``greedy`` -- the same algorithms, flows routed by seed 002's greedy (:mod:`.routing`);
* ``tacos`` -- tacos's joint plan (:mod:`.joint`): the best, by the objective, of a joint
  multi-tenant synthesis (no barrier across jobs) and of the usual algorithms on routes found
  by local search on the joint timing.

A job's *alone* time (the reference of every slowdown) is the fastest plan any method finds
for it with the fabric to itself.  Every plan -- joint and per job -- is verified.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tacos.check.verify import verify_schedule
from tacos.errors import TacosError
from tacos.jobs import joint as joint_mod
from tacos.jobs.fairness import OBJECTIVES, Outcome
from tacos.jobs.model import Job, check_jobs
from tacos.jobs.routed import RoutedJobs, flatten
from tacos.jobs.routing import congestion
from tacos.model.schedule import Schedule, Transfer
from tacos.model.topology import Topology
from tacos.model.units import format_time

METHODS = {
    "ecmp": "usual algorithms (ring/direct), ECMP-hashed routes",
    "greedy": "usual algorithms (ring/direct), seed 002 greedy routes",
    "tacos": "tacos joint plan",
}


@dataclass
class MethodResult:
    """One way of sharing: the joint schedule, the jobs as it serves them (chunking), per-job
    completion times and per-job alone times."""

    name: str
    label: str
    schedule: Schedule
    jobs: tuple[Job, ...]
    times: tuple[float, ...]
    alone: tuple[float, ...]
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class JobsResult:
    """Every method's outcome; :attr:`chosen` is the plan to emit."""

    topology: Topology
    jobs: tuple[Job, ...]
    objective: str
    methods: dict[str, MethodResult]
    reference: tuple[float, ...]
    synthesis_time: float = 0.0

    def outcome(self, name: str) -> Outcome:
        """Method ``name``'s completion times against the jobs' alone times."""
        return Outcome(self.methods[name].times, self.reference)

    @property
    def chosen(self) -> MethodResult:
        """tacos's plan when it ran, else the first method's."""
        return self.methods.get("tacos") or next(iter(self.methods.values()))

    def plans(self, name: str | None = None) -> dict[str, Schedule]:
        """One verified schedule per job (job name → schedule of its collective), cut out of
        method ``name``'s joint schedule (default: the chosen one)."""
        m = self.methods[name] if name else self.chosen
        return {job.name: job_plan(m.schedule, m.jobs, j) for j, job in enumerate(m.jobs)}

    def report(self) -> dict[str, Any]:
        """Facts as a JSON-safe dict."""
        from tacos.report import json_safe

        methods = {}
        for name, m in self.methods.items():
            o = self.outcome(name)
            methods[name] = {
                "label": m.label, "makespan": o.makespan, "worst_slowdown": o.worst,
                "jain": o.fairness, **m.meta,
                "jobs": {job.name: {"time": t, "slowdown": s, "alone_with_method": a}
                         for job, t, s, a in zip(self.jobs, o.times, o.slowdowns, m.alone,
                                                 strict=True)},
            }
        return json_safe({
            "objective": self.objective,
            "jobs": [{"name": j.name, "npus": len(j.group), "priority": j.priority,
                      "collectives": [c.label() for c in j.collectives], "alone": a}
                     for j, a in zip(self.jobs, self.reference, strict=True)],
            "methods": methods, "synthesis_time": self.synthesis_time})

    def text(self) -> str:
        """One row per method: per job its time and slowdown, then makespan, worst slowdown
        and Jain's index; then what each method did."""
        lines = [f"objective: {self.objective}",
                 "jobs: " + "; ".join(f"{j.name} ({len(j.group)} NPUs, priority {j.priority}, "
                                      f"alone {format_time(a)})"
                                      for j, a in zip(self.jobs, self.reference, strict=True))]
        rows = [["method"] + [j.name for j in self.jobs]
                + ["makespan", "worst slowdown", "Jain"]]
        for name in self.methods:
            o = self.outcome(name)
            rows.append([name] + [f"{format_time(t)} ({s:.2f}x)"
                                  for t, s in zip(o.times, o.slowdowns, strict=True)]
                        + [format_time(o.makespan), f"{o.worst:.2f}x", f"{o.fairness:.3f}"])
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        for r in rows:
            lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
        for name, m in self.methods.items():
            extra = ", ".join(f"{k} {v}" for k, v in m.meta.items() if k != "candidates")
            lines.append(f"{name}: {m.label}" + (f"; {extra}" if extra else ""))
        return "\n".join(lines)


def job_plan(joint: Schedule, jobs: Sequence[Job], j: int) -> Schedule:
    """Job ``j``'s transfers of ``joint`` as a schedule of the job's own collective (chunk
    ids renumbered), verified."""
    _, owner = flatten(jobs)
    chunks = joint.collective.chunks
    offset = sum(len(c.chunks) for job in jobs[:j] for c in job.collectives)
    mine = [t for t in joint.transfers if owner[chunks[t.chunks[0]].tenant] == j]
    transfers = tuple(Transfer(t.start, t.end, t.src, t.dst, t.route,
                               tuple(c - offset for c in t.chunks), t.op) for t in mine)
    plan = Schedule(joint.topology, jobs[j].collective, transfers,
                    dict(joint.meta, job=jobs[j].name))
    verify_schedule(plan).raise_if_failed()
    return plan


def plan_jobs(topology: Topology, jobs: Sequence[Job], *, objective: str = "makespan",
              seed: int = 0, solver: str | Sequence[str] | None = None,
              methods: Sequence[str] = ("ecmp", "greedy", "tacos"), **options: Any
              ) -> JobsResult:
    """Time ``jobs`` together under each of ``methods`` (see the module docstring).

    ``objective``: ``makespan``, ``fairness`` or ``priority`` (:mod:`.fairness`); ``seed``
    seeds ECMP's hash and the synthesis; ``solver`` is tacos's synthesizer or synthesizers
    (default :data:`tacos.jobs.joint.SOLVERS`); ``options`` go to them.
    """
    if objective not in OBJECTIVES:
        raise TacosError(f"unknown objective {objective!r}",
                         hint=f"use one of {', '.join(OBJECTIVES)}")
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise TacosError(f"unknown method {unknown[0]!r}", hint=f"use {', '.join(METHODS)}")
    jobs = tuple(jobs)
    if not jobs:
        raise TacosError("no job to plan", hint='declare jobs with  job "NAME" group ... { }')
    check_jobs(jobs)
    solvers = joint_mod.SOLVERS if solver is None else (
        (solver,) if isinstance(solver, str) else tuple(solver))
    t0 = time.perf_counter()
    usual = RoutedJobs(topology, jobs)
    results: dict[str, MethodResult] = {}
    for how in ("ecmp", "greedy"):
        if how not in methods:
            continue
        assignment = usual.assign(how, seed)
        sched = usual.together(assignment)
        alone = tuple(usual.alone(j, usual.assign(how, seed, usual.flows[j]))
                      for j in range(len(jobs)))
        meta: dict[str, Any] = {"flows": len(assignment),
                                "congestion": congestion(assignment)}
        if how == "ecmp":
            meta["seed"] = seed
        results[how] = MethodResult(how, METHODS[how], sched, jobs, usual.times(sched), alone,
                                    meta)
    synth_alone: list[float] = []
    if "tacos" in methods:
        synth_alone = [joint_mod.alone(topology, job, solvers=solvers, seed=seed, **options)
                       for job in jobs]
    reference = tuple(min([r.alone[j] for r in results.values()]
                          + ([synth_alone[j]] if synth_alone else []))
                      for j in range(len(jobs)))
    if "tacos" in methods:
        best = joint_mod.best_joint(topology, jobs, objective, reference, routed=usual,
                                    solvers=solvers, seed=seed, **options)
        alone = tuple(min(a, r) for a, r in zip(synth_alone, reference, strict=True))
        meta = {"plan": best.name, **best.meta}
        results["tacos"] = MethodResult("tacos", METHODS["tacos"], best.schedule, best.jobs,
                                        best.times, alone, meta)
    ordered = {m: results[m] for m in methods}
    return JobsResult(topology, jobs, objective, ordered, reference, time.perf_counter() - t0)


__all__ = ["METHODS", "JobsResult", "MethodResult", "job_plan", "plan_jobs"]
