"""Seed 001's load balancing and ordering of unit tasks at host level (§3.2).

Every unit task is one broadcast: a sender host (one of the hosts holding a replica) sends the
tile to all its receiver hosts, which are busy for the task's whole duration.  Tasks that share
a host do not overlap (Eq. 3); a task starts as soon as all its hosts are free, and the goal is
the earliest end of the last task (Eq. 1).  The seed's algorithms:

* :func:`naive` -- the first replica's host sends, tasks in their given order;
* :func:`load_balance_only` -- longest task first, each to the least loaded sender host (the
  classical greedy for Eq. 4), executed in that order;
* :func:`randomized_greedy` -- rounds of host-disjoint tasks, each round the largest of
  ``tries`` random greedy packings (the seed's "greedy search with randomization");
* :func:`dfs` -- depth-first search over orders and senders with pruning, within a budget;
* :func:`seed_schedule` -- the better of the last two (the seed's ensemble).
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class HostTask:
    """A unit task seen at host level: candidate sender hosts, receiver hosts, duration (s)."""

    index: int
    senders: tuple[str, ...]
    receivers: frozenset[str]
    duration: float


@dataclass(frozen=True)
class HostPlan:
    """Sender host per task, the order tasks are issued in, and the Eq. 1 makespan."""

    sender: dict[int, str]
    order: tuple[int, ...]
    makespan: float
    algorithm: str


def _hosts(task: HostTask, sender: str) -> set[str]:
    return {sender} | set(task.receivers)


def evaluate(tasks: Sequence[HostTask], sender: dict[int, str], order: Sequence[int]) -> float:
    """Eq. 1: each task starts when all its hosts are free; the end of the last one."""
    free: dict[str, float] = defaultdict(float)
    end = 0.0
    for i in order:
        hs = _hosts(tasks[i], sender[i])
        start = max(free[h] for h in hs)
        for h in hs:
            free[h] = start + tasks[i].duration
        end = max(end, start + tasks[i].duration)
    return end


def naive(tasks: Sequence[HostTask]) -> HostPlan:
    """The first replica's host sends; tasks in index order."""
    sender = {t.index: t.senders[0] for t in tasks}
    order = tuple(t.index for t in tasks)
    return HostPlan(sender, order, evaluate(tasks, sender, order), "naive")


def load_balance_only(tasks: Sequence[HostTask]) -> HostPlan:
    """Longest first to the least loaded candidate sender host (ties: first candidate)."""
    load: dict[str, float] = defaultdict(float)
    sender: dict[int, str] = {}
    order = tuple(sorted((t.index for t in tasks), key=lambda i: (-tasks[i].duration, i)))
    for i in order:
        best = min(tasks[i].senders, key=lambda h: (load[h], tasks[i].senders.index(h)))
        sender[i] = best
        load[best] += tasks[i].duration
    return HostPlan(sender, order, evaluate(tasks, sender, order), "load balance only")


def randomized_greedy(tasks: Sequence[HostTask], rng: random.Random, tries: int = 32
                      ) -> HostPlan:
    """Rounds of host-disjoint tasks; each round keeps the packing (of ``tries`` random
    greedy ones) that involves the most hosts."""
    remaining = [t.index for t in tasks]
    sender: dict[int, str] = {}
    order: list[int] = []
    load: dict[str, float] = defaultdict(float)
    while remaining:
        best: tuple[int, list[tuple[int, str]]] | None = None
        for attempt in range(tries):
            perm = list(remaining)
            if attempt:
                rng.shuffle(perm)
            used: set[str] = set()
            chosen: list[tuple[int, str]] = []
            for i in perm:
                t = tasks[i]
                if used & t.receivers:
                    continue
                cands = sorted(t.senders, key=lambda h: (load[h], rng.random() if attempt else 0))
                for h in cands:
                    if h not in used and h not in t.receivers:
                        chosen.append((i, h))
                        used |= _hosts(t, h)
                        break
            if not chosen:  # a task whose only sender is also its receiver host
                i = perm[0]
                chosen = [(i, tasks[i].senders[0])]
                used = _hosts(tasks[i], tasks[i].senders[0])
            if best is None or len(used) > best[0]:
                best = (len(used), chosen)
        assert best is not None
        for i, h in sorted(best[1], key=lambda x: (-tasks[x[0]].duration, x[0])):
            sender[i] = h
            load[h] += tasks[i].duration
            order.append(i)
            remaining.remove(i)
    return HostPlan(sender, tuple(order), evaluate(tasks, sender, order), "randomized greedy")


def dfs(tasks: Sequence[HostTask], budget: int = 20_000,
        incumbent: HostPlan | None = None) -> HostPlan | None:
    """Depth-first search over (next task, sender) with the seed's pruning: a branch is cut
    when its hosts' committed time plus the work they must still receive reaches the best
    makespan.  Stops after ``budget`` nodes; None when it found nothing better."""
    n = len(tasks)
    must: dict[str, float] = defaultdict(float)
    for t in tasks:
        for h in t.receivers:
            must[h] += t.duration
    best_val = incumbent.makespan if incumbent is not None else float("inf")
    best: tuple[dict[int, str], list[int]] | None = None
    nodes = 0
    free: dict[str, float] = defaultdict(float)
    sender: dict[int, str] = {}
    order: list[int] = []
    done = [False] * n

    def lower() -> float:
        return max((free[h] + must[h] for h in set(free) | set(must)), default=0.0)

    def visit(span: float) -> None:
        nonlocal nodes, best_val, best
        nodes += 1
        if nodes > budget:
            return
        if len(order) == n:
            if span < best_val:
                best_val, best = span, (dict(sender), list(order))
            return
        options = []
        for i in range(n):
            if done[i]:
                continue
            for h in tasks[i].senders:
                hs = _hosts(tasks[i], h)
                start = max(free[x] for x in hs)
                options.append((start, -tasks[i].duration, i, h))
        options.sort()
        for start, _, i, h in options:
            if nodes > budget:
                return
            t = tasks[i]
            hs = _hosts(t, h)
            saved = {x: free[x] for x in hs}
            end = start + t.duration
            for x in hs:
                free[x] = end
            for x in t.receivers:
                must[x] -= t.duration
            done[i] = True
            sender[i] = h
            order.append(i)
            if max(span, end) < best_val and lower() < best_val:
                visit(max(span, end))
            order.pop()
            del sender[i]
            done[i] = False
            for x in t.receivers:
                must[x] += t.duration
            for x, v in saved.items():
                free[x] = v

    visit(0.0)
    if best is None:
        return None
    return HostPlan(best[0], tuple(best[1]), best_val, "dfs")


def seed_schedule(tasks: Sequence[HostTask], *, seed: int = 0, tries: int = 32,
                  budget: int = 20_000) -> HostPlan:
    """The seed's ensemble: randomized greedy and budgeted DFS, whichever is better."""
    greedy = randomized_greedy(tasks, random.Random(seed), tries)
    found = dfs(tasks, budget, greedy)
    return found if found is not None and found.makespan < greedy.makespan else greedy


__all__ = ["HostPlan", "HostTask", "dfs", "evaluate", "load_balance_only", "naive",
           "randomized_greedy", "seed_schedule"]
