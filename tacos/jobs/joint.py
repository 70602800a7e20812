"""tacos's joint plan for several jobs: candidates, each verified, the best by the objective.

* **synthesis** -- one multi-tenant synthesis of all jobs by each of tacos's synthesizers
  (:data:`SOLVERS`; each job's reduce and copy phases are its own), for a few chunk counts per
  NPU and, for the multicast solver, which models ports and uplinks and orders tenants, the job
  orderings the objective suggests (fairness: shortest job first; priority: priority classes;
  makespan: longest first, or all alike);
* **routes** -- the jobs' usual algorithms with routes found by local search on the joint
  timing, from seed 002's greedy assignment (:meth:`RoutedJobs.search`), links serving the
  jobs in the same orderings (strict priority) or all alike.

Every candidate keeps the jobs' collectives (re-chunked for the synthesis candidates), so the
plan of each job can be cut out of the joint schedule.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tacos.check.verify import verify_schedule
from tacos.jobs.fairness import Outcome, key
from tacos.jobs.model import Job
from tacos.jobs.routed import RoutedJobs, completion, flatten
from tacos.model.collective import Collective
from tacos.model.patterns import build
from tacos.model.schedule import Schedule

CHUNK_FACTORS = (1, 2, 4)
SOLVERS = ("multicast", "greedy")
"""tacos's synthesizers tried for a joint plan: multicast tree packing (native on ports and
uplinks, orders jobs) and the TACOS greedy."""


@dataclass
class Candidate:
    """A joint schedule, the jobs as it serves them, and per-job completion times."""

    name: str
    schedule: Schedule
    jobs: tuple[Job, ...]
    times: tuple[float, ...]
    meta: dict[str, Any] = field(default_factory=dict)


def rechunked(job: Job, factor: int) -> Job:
    """``job`` with ``factor`` times as many chunks per NPU in each standard collective."""
    if factor == 1:
        return job

    def more(c: Collective) -> Collective:
        if c.kind == "custom":
            return c
        return replace(build(c.kind, c.group, size=c.size,
                             chunks_per_npu=c.chunks_per_npu * factor, root=c.root,
                             name=c.name), span=c.span)

    return replace(job, collectives=tuple(more(c) for c in job.collectives))


def orders(objective: str, jobs: Sequence[Job], alone: Sequence[float]
           ) -> dict[str, list[float] | None]:
    """Job priorities to try (larger goes first) for ``objective``, by name."""
    short = [-a for a in alone]
    top = max(alone, default=1.0) * 4 + 1
    if objective == "fairness":
        return {"shortest first": short, "alike": None}
    if objective == "priority":
        return {"priority classes, shortest first": [j.priority * top + s
                                                     for j, s in zip(jobs, short, strict=True)],
                "priority classes, longest first": [j.priority * top + a
                                                    for j, a in zip(jobs, alone, strict=True)]}
    return {"alike": None, "longest first": list(alone)}


def _ranks(priority: Sequence[float]) -> list[int]:
    """Rank of each job (0 = served first) from priorities (larger first, ties share)."""
    levels = sorted(set(priority), reverse=True)
    return [levels.index(p) for p in priority]


def synthesized(topology, jobs: Sequence[Job], priority: list[float] | None, *,
                solver: str, seed: int, factor: int, **options: Any) -> Candidate:
    """All jobs synthesized together by ``solver`` with ``factor`` times the chunks."""
    from tacos.synthesize import synthesize

    served = tuple(rechunked(j, factor) for j in jobs)
    combined, owner = flatten(served)
    opts = dict(options)
    if priority is not None:
        opts["tenant_priority"] = {t: priority[j] for t, j in enumerate(owner)}
    sched = synthesize(topology, combined, solver=solver, seed=seed, bound=False, **opts)
    verify_schedule(sched).raise_if_failed()
    return Candidate(f"{solver}, {factor}x chunks", sched, served,
                     completion(sched, owner, len(jobs)))


def alone(topology, job: Job, *, solvers: Sequence[str], seed: int, **options: Any) -> float:
    """The fastest of the ``solvers``' plans for ``job`` alone over :data:`CHUNK_FACTORS`."""
    return min(synthesized(topology, [job], None, solver=s, seed=seed, factor=f,
                           **_for(s, options)).times[0]
               for s in solvers for f in CHUNK_FACTORS)


def _for(solver: str, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` without the multicast solver's own when another solver runs."""
    if solver == "multicast":
        return options
    return {k: v for k, v in options.items() if k not in ("trees", "tenant_priority")}


def best_joint(topology, jobs: Sequence[Job], objective: str, reference: Sequence[float], *,
               routed: RoutedJobs | None = None, solvers: Sequence[str] = SOLVERS,
               seed: int = 0, **options: Any) -> Candidate:
    """The candidate the objective prefers (see the module docstring)."""
    prios = [j.priority for j in jobs]

    def score(times: tuple[float, ...]) -> tuple:
        return key(Outcome(times, tuple(reference)), objective, prios)

    cands: list[Candidate] = []
    for solver in solvers:
        for name, prio in orders(objective, jobs, reference).items():
            if prio is not None and solver != "multicast":
                continue  # only the multicast solver orders tenants
            for f in CHUNK_FACTORS:
                c = synthesized(topology, jobs, prio, solver=solver, seed=seed, factor=f,
                                **_for(solver, options))
                if prio is not None:
                    c.meta["order"] = name
                cands.append(c)
    if routed is not None:
        start = routed.assign("greedy")
        for name, prio in orders(objective, jobs, reference).items():
            ranks = None if prio is None else _ranks(prio)
            _, sched = routed.search(start, score, ranks=ranks)
            cands.append(Candidate("usual algorithms, routes by local search", sched,
                                   routed.jobs, routed.times(sched), {"order": name}))
    tried = {c.name + (f" ({c.meta['order']})" if "order" in c.meta else ""): max(c.times)
             for c in cands}
    best = min(cands, key=lambda c: score(c.times))
    best.meta["candidates"] = tried
    return best


__all__ = ["CHUNK_FACTORS", "Candidate", "alone", "best_joint", "orders", "rechunked",
           "synthesized"]
