"""How well several jobs share a fabric: slowdowns, Jain's index and the objectives.

A job's *slowdown* is its completion time with the others divided by its *alone* time (the
fastest plan tacos knows for it with the fabric to itself); its *normalized throughput* is the
inverse.  The objectives compare outcomes, smaller keys being better:

* ``makespan`` -- the last job's completion, then the slowdowns from the worst;
* ``fairness`` -- seed 002's 2-layer max-min fairness on job speeds: maximize the slowest job's
  normalized throughput, then the next slowest, ... (leximin; the seed's max min over flows
  when every job moves the same volume); i.e. the sorted slowdowns, worst first;
* ``priority`` -- jobs of higher ``priority`` first: the worst slowdown of the highest class,
  then of the next class, ..., then the makespan.

:func:`jain` is Jain's fairness index of the normalized throughputs (1 = perfectly even).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

OBJECTIVES = ("makespan", "fairness", "priority")


def jain(values: Sequence[float]) -> float:
    """Jain's index ``(Σx)² / (n·Σx²)`` (1 when all equal, 1/n when one takes everything)."""
    xs = [float(x) for x in values]
    if not xs:
        return 1.0
    sq = sum(x * x for x in xs)
    return sum(xs) ** 2 / (len(xs) * sq) if sq > 0 else 1.0


@dataclass(frozen=True)
class Outcome:
    """Per-job completion times against per-job alone times."""

    times: tuple[float, ...]
    alone: tuple[float, ...]

    @property
    def slowdowns(self) -> tuple[float, ...]:
        """Completion / alone, per job."""
        return tuple(t / a if a > 0 else 1.0 for t, a in zip(self.times, self.alone,
                                                             strict=True))

    @property
    def makespan(self) -> float:
        """When the last job finishes."""
        return max(self.times, default=0.0)

    @property
    def worst(self) -> float:
        """The largest slowdown."""
        return max(self.slowdowns, default=1.0)

    @property
    def fairness(self) -> float:
        """Jain's index of the normalized throughputs."""
        return jain([1.0 / s for s in self.slowdowns])


def key(outcome: Outcome, objective: str, priorities: Sequence[int] = ()) -> tuple:
    """Sort key of ``outcome`` under ``objective`` (smaller is better)."""
    worst_first = tuple(sorted(outcome.slowdowns, reverse=True))
    if objective == "makespan":
        return (outcome.makespan, *worst_first)
    if objective == "fairness":
        return worst_first
    if objective == "priority":
        prio = list(priorities) or [0] * len(outcome.times)
        classes = sorted(set(prio), reverse=True)
        per_class = tuple(max(s for s, p in zip(outcome.slowdowns, prio, strict=True) if p == c)
                          for c in classes)
        return (*per_class, outcome.makespan)
    raise ValueError(f"unknown objective {objective!r}")


__all__ = ["OBJECTIVES", "Outcome", "jain", "key"]
