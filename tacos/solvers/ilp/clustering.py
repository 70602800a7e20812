"""Time clustering (seed §V-C): a sequence of short-horizon TEN ILPs.

Each window solves the TEN ILP over ``cluster_steps`` steps starting from the holdings the
previous windows left, rewarding early deliveries (``Σ_t h`` over postcondition pairs) plus a
small credit for parking chunks closer to destinations they still miss, and only allowing moves
that get a chunk strictly closer to one of its missing destinations.  Windows are concatenated
(the next one starts when the last transfer of the previous one has arrived) until the
postcondition holds.  Each window is warm-started with the shortest-path deliveries that fit in
it, which also stand in when the solver finds nothing within the window's share of the time
(``window_time_limit`` caps that share).  A window that makes no progress doubles the window
length; when time runs out, the remainder is completed by shortest-path recovery.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from tacos.solvers.ilp import backends as ilp_backends
from tacos.solvers.ilp.model import (
    BuildTimeout,
    Send,
    build_ten_model,
    causal_sends,
    holdings_after,
    schedule_steps,
    transfers_to_sends,
)
from tacos.solvers.ilp.recovery import complete_schedule

if TYPE_CHECKING:
    from tacos.solvers.ilp.problem import TenProblem

MAX_STALLS = 3


def default_cluster_steps(steps: tuple[int, ...]) -> int:
    """Two hops on the slowest link (so every link can be used twice in a window)."""
    return 2 * max(steps, default=1)


def _shortest_path_window(tp: TenProblem, held: list[frozenset[int]], window: int
                          ) -> list[Send]:
    """Shortest-path deliveries from the current holdings that arrive within ``window`` steps
    (the warm start of a window, and its fallback when the solver finds nothing in time)."""
    chunks = tuple(replace(ch, pre=held[ch.id]) for ch in tp.collective.chunks)
    state = replace(tp.collective, chunks=chunks)
    transfers = complete_schedule(tp.topology, state, [])
    sends = transfers_to_sends(transfers, tp.steps, held, tp.topology)
    return [s for s in sends if s[2] + tp.steps[s[1]] <= window]


def solve_clustered(tp: TenProblem, opt: dict[str, Any], deadline: float
                    ) -> tuple[list[Send], bool, dict[str, Any]]:
    """Run the windows; returns (sends in global steps, postcondition met?, stats)."""
    window = int(opt.get("cluster_steps") or default_cluster_steps(tp.steps))
    held = list(tp.pre)
    offset = 0
    out: list[Send] = []
    windows: list[dict[str, Any]] = []
    stalls = 0
    timed_out = False
    while True:
        missing = sum(len(tp.post[c] - held[c]) for c in range(len(held)))
        if missing == 0:
            break
        left = deadline - time.perf_counter()
        if left <= 0 or stalls >= MAX_STALLS:
            timed_out = left <= 0
            break
        try:
            model = build_ten_model(tp.topology, tp.steps, held, tp.post, window,
                                    objective="early", prune_late=False, forward_only=True,
                                    deadline=deadline)
        except BuildTimeout:
            timed_out = True
            break
        # share the remaining time among the windows still expected
        rate = max(1.0, sum(w["delivered"] for w in windows) / max(1, len(windows)))
        expected = max(1, math.ceil(missing / rate)) if windows else 4
        budget = max(left / expected, min(left, 0.5))
        if opt.get("window_time_limit"):
            budget = min(budget, float(opt["window_time_limit"]))
        start = _shortest_path_window(tp, held, window)
        hint = model.hint_from(start, held, tp.steps, tp.topology)
        res = ilp_backends.solve_model(model, opt["backend"], time_limit=budget,
                                       seed=opt["seed"], threads=opt["threads"], hint=hint)
        if res.values is not None:
            sends = causal_sends(model.sends_of(res.values), held, tp.steps, tp.topology)
        else:  # no incumbent in time: fall back to the shortest-path moves of the hint
            sends = causal_sends(model.sends_of(hint), held, tp.steps, tp.topology)
        new_held = holdings_after(sends, held, tp.topology)
        delivered = sum(len((tp.post[c] & new_held[c]) - held[c]) for c in range(len(held)))
        progress = sum(len(new_held[c]) - len(held[c]) for c in range(len(held)))
        windows.append({"offset": offset, "window": window, "status": res.status,
                        "delivered": delivered, "vars": model.n_vars, "rows": model.n_rows,
                        "seconds": round(res.seconds, 4)})
        if progress == 0:
            stalls += 1
            window *= 2
            continue
        stalls = 0
        out.extend((c, li, t + offset) for c, li, t in sends)
        offset += schedule_steps(sends, tp.steps)
        held = new_held
    complete = all(tp.post[c] <= held[c] for c in range(len(held)))
    stats = {"windows": windows, "n_windows": len(windows), "timed_out": timed_out,
             "cluster_steps": int(opt.get("cluster_steps") or default_cluster_steps(tp.steps)),
             "variables": max((w["vars"] for w in windows), default=0),
             "constraints": max((w["rows"] for w in windows), default=0),
             "solve_seconds": sum(w["seconds"] for w in windows)}
    return out, complete, stats
