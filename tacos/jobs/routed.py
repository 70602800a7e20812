"""Jobs running their usual algorithms on a shared fabric, with the flows' routes chosen.

:class:`RoutedJobs` builds each job's usual plan (NCCL's ring, or direct sends for patterns a
ring does not serve) alone, lists its flows, and times any route assignment for all jobs
together on the physical links (:func:`tacos.check.simulate.simulate`: every transfer holds every
link of its route; transfers that meet on a link go one after the other, in the order the jobs
reach it).  :meth:`RoutedJobs.search` improves an assignment by local search on that timing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tacos.check.simulate import simulate
from tacos.check.verify import verify_schedule
from tacos.jobs import routing
from tacos.jobs.model import Job
from tacos.model.collective import Collective, combine
from tacos.model.routes import Route
from tacos.model.schedule import Schedule, Transfer
from tacos.model.topology import Topology
from tacos.solvers.baselines.solver import ALGORITHMS, baseline_schedule

Assignment = dict[routing.Flow, Route]


def flatten(jobs: Sequence[Job]) -> tuple[Collective, list[int]]:
    """All the jobs' collectives as one (a tenant each) and the job of every tenant."""
    colls = [c for job in jobs for c in job.collectives]
    owner = [j for j, job in enumerate(jobs) for _ in job.collectives]
    return combine(colls), owner


def completion(schedule: Schedule, owner: Sequence[int], n_jobs: int) -> tuple[float, ...]:
    """Per job, the end of its last transfer (0 for a job that moves nothing)."""
    chunks = schedule.collective.chunks
    out = [0.0] * n_jobs
    for t in schedule.transfers:
        for c in t.chunks:
            j = owner[chunks[c].tenant]
            if t.end > out[j]:
                out[j] = t.end
    return tuple(out)


def algorithm_for(job: Job) -> str:
    """The algorithm the job runs without tacos: NCCL's ring where a ring serves every
    collective of the job, else direct sends."""
    ring = ALGORITHMS["ring"][1]
    return "ring" if all(c.kind in ring for c in job.collectives) else "direct"


class RoutedJobs:
    """The jobs' usual plans and their flows on ``topology``."""

    def __init__(self, topology: Topology, jobs: Sequence[Job]) -> None:
        self.topology = topology
        self.jobs = tuple(jobs)
        self.combined, self.owner = flatten(self.jobs)
        self.bases = [baseline_schedule(algorithm_for(job), topology, job.collective)
                      for job in self.jobs]
        self.flows = [routing.flows(j, b) for j, b in enumerate(self.bases)]
        self.offsets = [0]
        for job in self.jobs:
            self.offsets.append(self.offsets[-1] + job.collective.n_chunks)

    @property
    def all_flows(self) -> list[routing.Flow]:
        """Every job's flows, job by job."""
        return [f for fl in self.flows for f in fl]

    def assign(self, how: str, seed: int = 0, flows: list[routing.Flow] | None = None
               ) -> Assignment:
        """Routes for ``flows`` (default all) by ``how``: ``ecmp`` or ``greedy``."""
        fl = self.all_flows if flows is None else flows
        if how == "ecmp":
            return routing.ecmp(self.topology, fl, seed)
        return routing.seed_greedy(self.topology, fl)

    def _rerouted(self, j: int, offset: int, assignment: Assignment) -> list[Transfer]:
        out = []
        for t in self.bases[j].transfers:
            r = assignment.get((j, t.src, t.dst))
            out.append(Transfer(t.start, t.end, t.src, t.dst,
                                r.links if r is not None else t.route,
                                tuple(c + offset for c in t.chunks), t.op))
        return out

    def together(self, assignment: Assignment, *, ranks: Sequence[int] | None = None,
                 verify: bool = True) -> Schedule:
        """Every job on its routes, timed together.  With ``ranks`` (per job, 0 first) a link
        serves the jobs of a lower rank before those of a higher one (strict priority);
        without, in the order the jobs reach it."""
        horizon = sum(b.makespan for b in self.bases) + 1.0
        transfers = []
        for j in range(len(self.jobs)):
            shift = horizon * ranks[j] if ranks is not None else 0.0
            for t in self._rerouted(j, self.offsets[j], assignment):
                transfers.append(Transfer(t.start + shift, t.end + shift, t.src, t.dst, t.route,
                                          t.chunks, t.op) if shift else t)
        out = simulate(Schedule(self.topology, self.combined, tuple(sorted(transfers)))).schedule
        if verify:
            verify_schedule(out).raise_if_failed()
        return out

    def alone(self, j: int, assignment: Assignment) -> float:
        """Job ``j`` alone on its routes: its time."""
        sched = Schedule(self.topology, self.jobs[j].collective,
                         tuple(sorted(self._rerouted(j, 0, assignment))))
        out = simulate(sched).schedule
        verify_schedule(out).raise_if_failed()
        return out.makespan

    def times(self, schedule: Schedule) -> tuple[float, ...]:
        """Per-job completion times of a joint schedule."""
        return completion(schedule, self.owner, len(self.jobs))

    def search(self, assignment: Assignment, score: Callable[[tuple[float, ...]], tuple],
               budget: int = 200, ranks: Sequence[int] | None = None
               ) -> tuple[Assignment, Schedule]:
        """Local search: move one flow to another of its routes while the score of the
        jobs' completion times improves (at most ``budget`` timings; ``ranks`` as in
        :meth:`together`)."""
        best = dict(assignment)
        sched = self.together(best, ranks=ranks, verify=False)
        best_key = score(self.times(sched))
        used = 1
        improved = True
        while improved and used < budget:
            improved = False
            for f in self.all_flows:
                for r in self.topology.routing.routes(f[1], f[2]):
                    now = best.get(f)
                    if (now is not None and r.links == now.links) or used >= budget:
                        continue
                    trial = dict(best)
                    trial[f] = r
                    cand = self.together(trial, ranks=ranks, verify=False)
                    used += 1
                    k = score(self.times(cand))
                    if k < best_key:
                        best, sched, best_key, improved = trial, cand, k, True
                        break
        verify_schedule(sched).raise_if_failed()
        return best, sched


__all__ = ["Assignment", "RoutedJobs", "algorithm_for", "completion", "flatten"]
