"""Start times of the phases of a symmetric plan: parts pipelined over shared link classes.

Each part runs its phases in order; phases whose axes share a link class (their
``system.resource``) run one at a time.  :func:`schedule_parts` is a list scheduler: it
repeatedly starts the phase that can start earliest (ties: the lower part, or on the
resources named ``feed_first`` reduce-scatters before all-gathers, as they feed the slower
class), which pipelines the parts of an all-reduce
through the NVSwitch and the rails and runs the rotated parts of a torus all-gather on different
axes at once.
"""

from __future__ import annotations

from collections.abc import Sequence

KIND_ORDER = {"reducescatter": 0, "allreduce": 0, "allgather": 1}


def schedule_parts(steps: Sequence[Sequence[tuple[str, str, float]]],
                   feed_first: Sequence[str] = ()) -> list[list[float]]:
    """Start times for ``steps[q]``, part q's phases as ``(resource, kind, duration)``.

    Among phases that can start at the same time the lower part goes first, except on the
    resources named in ``feed_first``, where reduce-scatters go before all-gathers.

    >>> schedule_parts([[("a", "allgather", 1.0), ("b", "allgather", 1.0)],
    ...                 [("b", "allgather", 1.0), ("a", "allgather", 1.0)]])
    [[0.0, 1.0], [0.0, 1.0]]
    """
    free: dict[str, float] = {}
    ready = [0.0] * len(steps)
    nxt = [0] * len(steps)
    out: list[list[float]] = [[] for _ in steps]
    left = sum(len(s) for s in steps)
    while left:
        best = None
        for q, seq in enumerate(steps):
            if nxt[q] == len(seq):
                continue
            res, kind, _ = seq[nxt[q]]
            start = max(ready[q], free.get(res, 0.0))
            rank = KIND_ORDER.get(kind, 2) if res in feed_first else 0
            key = (start, rank, q)
            if best is None or key < best:
                best = key
        assert best is not None
        start, _, q = best
        res, _, dur = steps[q][nxt[q]]
        out[q].append(start)
        ready[q] = free[res] = start + dur
        nxt[q] += 1
        left -= 1
    return out


def schedule_tasks(resources: Sequence[str], durations: Sequence[float],
                   preds: Sequence[Sequence[int]], ranks: Sequence[int]) -> list[float]:
    """Start times of tasks with precedences (a list scheduler, as :func:`schedule_parts`):
    task i runs on ``resources[i]`` for ``durations[i]`` after every task in ``preds[i]``;
    of the tasks whose predecessors are placed, the one that can start earliest goes next
    (ties: the lower ``ranks[i]``, then the lower index).  Used by plans whose phases move
    several parts (:mod:`tacos.scale.shared`), which are not sequences of one part each.

    >>> schedule_tasks(["a", "a", "b"], [1.0, 1.0, 2.0], [[], [], [0]], [1, 0, 0])
    [1.0, 0.0, 2.0]
    """
    n = len(durations)
    succ: list[list[int]] = [[] for _ in range(n)]
    waiting = [len(p) for p in preds]
    for i, ps in enumerate(preds):
        for p in ps:
            succ[p].append(i)
    ready_at = [0.0] * n
    free: dict[str, float] = {}
    start = [0.0] * n
    open_ = {i for i in range(n) if waiting[i] == 0}
    while open_:
        i = min(open_, key=lambda k: (max(ready_at[k], free.get(resources[k], 0.0)),
                                      ranks[k], k))
        open_.discard(i)
        start[i] = max(ready_at[i], free.get(resources[i], 0.0))
        end = free[resources[i]] = start[i] + durations[i]
        for s in succ[i]:
            ready_at[s] = max(ready_at[s], end)
            waiting[s] -= 1
            if waiting[s] == 0:
                open_.add(s)
    return start
