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
