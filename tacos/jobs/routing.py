"""Routing the jobs' flows through a Clos fabric: ECMP hashing and seed 002's greedy.

A *flow* (the seed's commodity) is a pair of NPUs of one job that exchange data over a route
through switches.  Between two hosts on different leaves of a leaf-spine fabric there is one
candidate route per spine (:meth:`tacos.model.routes.Routing.routes`); routing picks one per flow:

* :func:`ecmp` -- what switches do today: a hash of the flow (seeded, like a switch's hash
  seed) picks the route, blind to every other flow, so two elephant flows can land on one
  uplink while another stays idle;
* :func:`seed_greedy` -- seed 002's Algorithm 1: flows in a fixed order, each starts on its
  first route (lowest spine) and moves to the route whose busiest link carries the fewest flows
  so far; a 2-approximation of 2-layer max-min fairness on 2-layer Clos networks.  Links that
  every route of a flow crosses (its host's own ports) are left out of the comparison, as the
  seed leaves out host-to-ToR links.

Both return ``{flow: Route}``; :func:`flows` lists a schedule's flows.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable, Sequence

from tacos.model.routes import Route
from tacos.model.schedule import Schedule
from tacos.model.topology import Topology

Flow = tuple[int, int, int]
"""``(job index, source NPU, destination NPU)``."""


def flows(job: int, schedule: Schedule) -> list[Flow]:
    """The flows of ``job``'s schedule that have a choice of routes (first use order)."""
    routing = schedule.topology.routing
    out: list[Flow] = []
    seen: set[tuple[int, int]] = set()
    for t in schedule.transfers:
        pair = (t.src, t.dst)
        if pair in seen:
            continue
        seen.add(pair)
        if len(routing.routes(t.src, t.dst)) > 1:
            out.append((job, t.src, t.dst))
    return out


def ecmp(topology: Topology, all_flows: Iterable[Flow], seed: int = 0) -> dict[Flow, Route]:
    """Each flow on the route its hash picks (a stable hash of seed, source and destination)."""
    out: dict[Flow, Route] = {}
    for f in all_flows:
        _, u, v = f
        cands = topology.routing.routes(u, v)
        digest = hashlib.blake2b(f"{seed}:{u}:{v}".encode(), digest_size=8).digest()
        out[f] = cands[int.from_bytes(digest, "big") % len(cands)]
    return out


def seed_greedy(topology: Topology, all_flows: Sequence[Flow]) -> dict[Flow, Route]:
    """Seed 002's greedy path assignment (Algorithm 1), flows in the given order."""
    count: dict[int, int] = defaultdict(int)
    out: dict[Flow, Route] = {}
    for f in all_flows:
        _, u, v = f
        cands = topology.routing.routes(u, v)
        common = set(cands[0].links).intersection(*(r.links for r in cands[1:]))

        def busiest(r: Route, common=common) -> int:
            return max((count[li] for li in r.links if li not in common), default=0)

        best = cands[0]
        level = busiest(best)
        for r in cands[1:]:
            here = busiest(r)
            if here < level:
                best, level = r, here
        for li in best.links:
            count[li] += 1
        out[f] = best
    return out


def congestion(assignment: dict[Flow, Route]) -> int:
    """Most flows on one link (switch-fabric and port links alike)."""
    count: dict[int, int] = defaultdict(int)
    for r in assignment.values():
        for li in r.links:
            count[li] += 1
    return max(count.values(), default=0)


__all__ = ["Flow", "congestion", "ecmp", "flows", "seed_greedy"]
