"""Plans the shape search refuses before lowering any of their shapes: a thread block has one
send peer and one receive peer, and every thread block of a rank must be resident at once, so
a rank that talks to more peers than its GPU has SMs cannot load in any shape.

This is what keeps the all-pairs plans from being lowered at hundreds of ranks (a program of
``n (n - 1)`` sends per instance that the runtime would refuse anyway).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from tacos.model.schedule import Schedule
from tacos.msccl.shape import RuntimeLimits


def peer_counts(plan: Schedule | Any) -> tuple[int, int, int] | None:
    """``(rank, send peers, receive peers)`` of the rank with the most of either, for a
    schedule (its transfers' ends) or an all-pairs program family; None when unknown."""
    if isinstance(plan, Schedule):
        sends: dict[int, set[int]] = defaultdict(set)
        recvs: dict[int, set[int]] = defaultdict(set)
        for t in plan.transfers:
            sends[t.src].add(t.dst)
            recvs[t.dst].add(t.src)
        ranks = set(sends) | set(recvs)
        if not ranks:
            return None
        r = max(ranks, key=lambda x: (max(len(sends[x]), len(recvs[x])), -x))
        return r, len(sends[r]), len(recvs[r])
    from tacos.msccl.allpairs_program import AllPairsAllReduce

    if isinstance(plan, AllPairsAllReduce):
        n = len(plan.collective.group)
        return plan.collective.group[0], n - 1, n - 1
    return None


def refusal(plan: Schedule | Any, limits: RuntimeLimits) -> str:
    """Why no shape of ``plan`` can load (or ''): more peers on one rank than SMs (a thread
    block per peer at least), or more parsed nodes than the runtime's parser holds (a thread
    block and a step per peer at least)."""
    got = peer_counts(plan)
    if got is None:
        return ""
    rank, out, into = got
    tbs = max(out, into)
    if tbs > limits.sms:
        return (f"refused before lowering: NPU {rank} has {out} send and {into} receive peers, "
                f"so at least {tbs} thread blocks > {limits.sms} SMs in every shape")
    ngpus = len(plan.collective.group)
    nodes = 1 + ngpus + 2 * tbs
    if nodes > limits.max_nodes:
        return (f"refused before lowering: NPU {rank} needs at least {nodes} parsed nodes "
                f"(1 + {ngpus} gpus + a thread block and a step per peer) > "
                f"{limits.max_nodes} in every shape")
    return ""
