"""Jobs: process groups with their collectives, sharing one topology.

A :class:`Job` is what a scheduler places on a cluster: a name, the NPUs it owns (its process
group), the collectives it runs each iteration (all-reduce of its gradients, ...) and a
priority.  Jobs own disjoint NPUs but share the fabric between them (leaf uplinks, spines).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from tacos.errors import Span, TacosError
from tacos.model.collective import Collective, combine


@dataclass(frozen=True)
class Job:
    """A job: its process group, its collectives (each over NPUs of the group) and a
    priority (larger is more important; 0 by default)."""

    name: str
    group: tuple[int, ...]
    collectives: tuple[Collective, ...]
    priority: int = 0
    span: Span | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not self.collectives:
            raise TacosError(f"job {self.name!r} runs no collective",
                             hint="give it one, e.g.  collective allreduce size 64MiB")
        members = set(self.group)
        for c in self.collectives:
            outside = sorted(c.npus - members)
            if outside:
                raise TacosError(f"job {self.name!r}: collective {c.name or c.kind} uses NPU "
                                 f"{outside[0]}, which is not in the job's group",
                                 hint="a job's collectives run on its own NPUs")

    @property
    def collective(self) -> Collective:
        """The job's collectives as one (multi-tenant when several)."""
        return combine(self.collectives)

    @property
    def nbytes(self) -> int:
        """Total size of the job's collectives (their ``size``)."""
        return sum(c.size for c in self.collectives)


def check_jobs(jobs: Sequence[Job]) -> None:
    """Jobs must have distinct names and disjoint groups."""
    owner: dict[int, str] = {}
    names: set[str] = set()
    for job in jobs:
        if job.name in names:
            raise TacosError(f"two jobs are named {job.name!r}", hint="give each job its own name")
        names.add(job.name)
        for v in job.group:
            if v in owner:
                raise TacosError(f"NPU {v} belongs to jobs {owner[v]!r} and {job.name!r}",
                                 hint="jobs own disjoint NPUs; they share only the fabric")
            owner[v] = job.name


__all__ = ["Job", "check_jobs"]
