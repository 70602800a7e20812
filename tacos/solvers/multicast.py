"""Multicast tree packing: a solver for copy collectives with several sources and destinations.

Made for cross-mesh resharding (seed 001), where every chunk is held by a set of replicas and
needed by a set of receivers, but it serves any non-combining collective (all-gather, broadcast,
scatter, all-to-all, custom patterns); reductions go through :func:`tacos.synthesize`'s
inversion.  It works on the physical topology (``native_switches``):

1. **Trees.** Chunks with the same holders and receivers form a class; each class is served
   by up to ``trees`` distribution trees, each carrying a contiguous share of its chunks.  A
   tree grows from *all* holders at once (any replica may send), adding the receiver that is
   cheapest to reach next together with its path (Takahashi-Matsuyama's Steiner heuristic);
   the NPUs on that path hold the data from then on and may forward it.  A hop's cost is the
   growth of Σ load² over the physical links of its route, where a link's load is the time
   its lanes are already held: the cheapest hop avoids busy links, so senders spread over
   replicas and hosts, and a host's interface is crossed once per tree.  Relays are the NPUs
   of the chunk's own tenant (a job's data never passes through another job's NPUs); option
   ``relays='all'`` allows every live NPU.
2. **Timing.** The chunks then flow down their trees.  List scheduling: whenever lanes free
   up, every ready transfer whose route's links all have a free lane starts, those crossing
   the link with the most work left first (``tenant_priority`` first of all), earlier chunks
   before later ones, so that a relay forwards one chunk while it receives the next
   (pipelining).  One trial places them first fit in round-robin order instead
   (:class:`~tacos.reshard.timeline.Timeline`).
3. **Trials.** Trial 0 builds the trees largest class first and list-schedules them, trial 1
   places them first fit, further trials shuffle the order of classes of similar size
   (``seed``); this for 4 and for 16 trees per class (many trees spread a class over many
   parallel paths, such as the eight NIC rails of a DGX node); the best makespan wins.
"""

from __future__ import annotations

import heapq
import math
import random
import time
from collections import defaultdict
from dataclasses import dataclass

from tacos.errors import InfeasibleError, UsageError
from tacos.model.collective import RELAY_MODES, Collective
from tacos.model.routes import Route
from tacos.model.schedule import Schedule, Transfer
from tacos.model.topology import Topology
from tacos.reshard.timeline import Timeline
from tacos.solvers.options import Option
from tacos.solvers.registry import Capabilities, Problem, SolverBase, SolveResult

DEFAULT_TREES = 4
TREE_CHOICES = (4, 16)
DEFAULT_TRIALS = 3


@dataclass
class _Share:
    """Some chunks of one class and the tree that carries them."""

    pre: frozenset[int]
    post: frozenset[int]
    chunks: list[int]
    nbytes: int
    edges: list[tuple[int, int, Route]]


def shares(collective: Collective, trees: int) -> list[_Share]:
    """Chunks grouped by (holders, receivers), each group cut into up to ``trees`` shares."""
    classes: dict[tuple[frozenset[int], frozenset[int]], list[int]] = defaultdict(list)
    for c in collective.chunks:
        if c.reduce:
            raise InfeasibleError("the multicast solver moves copies only",
                                  hint="use tacos.synthesize, which reduces by inversion")
        if c.post - c.pre:
            classes[(c.pre, c.post)].append(c.id)
    out: list[_Share] = []
    for (pre, post), ids in classes.items():
        g = max(1, min(trees, len(ids)))
        for k in range(g):
            part = ids[k * len(ids) // g:(k + 1) * len(ids) // g]
            nbytes = sum(collective.chunks[c].size for c in part)
            out.append(_Share(pre, post, part, nbytes, []))
    return out


class _Trees:
    """Grows distribution trees on the physical routes, tracking link loads."""

    def __init__(self, topology: Topology, allowed: frozenset[int]) -> None:
        self.topology = topology
        self.routing = topology.routing
        self.allowed = allowed
        self.load = [0.0] * len(topology.links)
        self.lanes = topology.link_arrays.multiplicity.tolist()

    def cost(self, route: Route, nbytes: int) -> float:
        held = route.time(nbytes)
        total = 0.0
        for li in route.links:
            old = self.load[li]
            new = old + held / self.lanes[li]
            total += new * new - old * old
        return total

    def add(self, route: Route, nbytes: int) -> None:
        held = route.time(nbytes)
        for li in route.links:
            self.load[li] += held / self.lanes[li]

    def grow(self, share: _Share, name) -> None:
        holders = set(share.pre)
        targets = set(share.post - share.pre)
        while targets:
            dist: dict[int, float] = {v: 0.0 for v in holders}
            back: dict[int, tuple[int, Route]] = {}
            heap = [(0.0, v) for v in sorted(holders)]
            heapq.heapify(heap)
            done: set[int] = set()
            reached = None
            while heap:
                d, u = heapq.heappop(heap)
                if u in done:
                    continue
                done.add(u)
                if u in targets:
                    reached = u
                    break
                for v, routes in self.routing.from_npu(u).items():
                    if v in holders or v not in self.allowed or v in done:
                        continue
                    step, r = min(((self.cost(r, share.nbytes), r) for r in routes),
                                  key=lambda x: (x[0], x[1].links))
                    nd = d + step
                    if nd < dist.get(v, math.inf):
                        dist[v] = nd
                        back[v] = (u, r)
                        heapq.heappush(heap, (nd, v))
            if reached is None:
                v = min(targets)
                raise InfeasibleError(
                    f"chunk {share.chunks[0]} cannot reach NPU {name(v)} from its holders "
                    f"{', '.join(name(u) for u in sorted(share.pre))}",
                    hint="the NPUs that may relay it do not connect them")
            path: list[tuple[int, int, Route]] = []
            v = reached
            while v not in holders:
                u, r = back[v]
                path.append((u, v, r))
                v = u
            for u, v, r in reversed(path):
                share.edges.append((u, v, r))
                self.add(r, share.nbytes)
                holders.add(v)
                targets.discard(v)


def plan(topology: Topology, collective: Collective, *, trees: int = DEFAULT_TREES,
         order: list[int] | None = None, relays: str = "members", timing: str = "list",
         priority: dict[int, float] | None = None) -> Schedule:
    """One multicast plan: trees for every share (in ``order``), then list or first-fit
    timing."""
    if relays not in RELAY_MODES:
        raise UsageError(f"unknown relays option {relays!r}",
                         hint="relays='members' (default) or relays='all'")
    members: dict[int, set[int]] = defaultdict(set)  # tenant -> its NPUs
    for c in collective.chunks:
        members[c.tenant] |= c.pre | c.post
    parts = shares(collective, trees)
    seq = order if order is not None else _largest_first(parts)
    grower = _Trees(topology, frozenset(topology.live_npus))
    for i in seq:
        if relays == "members":  # a tenant's data only passes through the tenant's NPUs
            tenant = collective.chunks[parts[i].chunks[0]].tenant
            grower.allowed = frozenset(members[tenant])
        grower.grow(parts[i], topology.node_name)
    meta = {"trees": trees, "shares": len(parts), "relays": relays}
    if timing == "list":
        return list_schedule(topology, collective, [parts[i] for i in seq], meta, priority)
    timeline = Timeline(topology, collective)
    rounds = max((len(p.chunks) for p in parts), default=0)
    for j in range(rounds):
        for i in seq:
            p = parts[i]
            if j < len(p.chunks):
                for u, v, r in p.edges:
                    timeline.hop(u, v, (p.chunks[j],), route=r)
    return timeline.schedule(dict(meta, timing="first-fit"))


def list_schedule(topology: Topology, collective: Collective, parts: list[_Share],
                  meta: dict, priority: dict[int, float] | None = None) -> Schedule:
    """Event-driven list scheduling of the trees' transfers: whenever lanes free up, start
    the ready transfers whose every link has a free lane: those of the tenants with the
    highest ``priority`` first (tenant → number, larger first; default all equal), then those
    whose route crosses the link with the most work left, then earlier pieces."""
    prio = priority or {}
    sizes = collective.chunks
    lanes = topology.link_arrays.multiplicity.tolist()
    dur: list[float] = []
    info: list[tuple[int, int, int, Route, int]] = []  # src, dst, chunk, route, piece rank
    children: list[list[int]] = []
    roots: list[int] = []
    for p in parts:
        for j, c in enumerate(p.chunks):
            first = len(info)
            by_src: dict[int, list[int]] = defaultdict(list)
            for k, (u, v, r) in enumerate(p.edges):
                info.append((u, v, c, r, j))
                dur.append(r.time(sizes[c].size))
                children.append([])
                by_src[u].append(first + k)
            for k, (u, v, _r) in enumerate(p.edges):
                children[first + k] = by_src.get(v, [])
                if u in p.pre:
                    roots.append(first + k)
    left = [0.0] * len(lanes)
    for x, (_, _, _, r, _) in enumerate(info):
        for li in r.links:
            left[li] += dur[x] / lanes[li]
    busy = [0] * len(lanes)
    # ready transfers queued per route (earlier pieces first): one priority per route
    queues: dict[tuple[tuple[int, ...], int], list[tuple[int, int]]] = defaultdict(list)

    def enqueue(x: int) -> None:
        tenant = sizes[info[x][2]].tenant
        heapq.heappush(queues[(info[x][3].links, tenant)], (info[x][4], x))

    for x in roots:
        enqueue(x)
    events: list[tuple[float, int]] = []
    start = [0.0] * len(info)
    now = 0.0
    done = 0
    while done < len(info):
        waiting = [key for key, q in queues.items() if q]
        waiting.sort(key=lambda key: (-prio.get(key[1], 0.0),
                                      -max(left[li] for li in key[0]), key))
        for key in waiting:
            links, q = key[0], queues[key]
            while q and all(busy[li] < lanes[li] for li in links):
                _, x = heapq.heappop(q)
                start[x] = now
                for li in links:
                    busy[li] += 1
                    left[li] -= dur[x] / lanes[li]
                heapq.heappush(events, (now + dur[x], x))
        if not events:
            raise InfeasibleError("the multicast trees left a transfer that can never start",
                                  hint="this is a bug; please report it")
        now = events[0][0]
        while events and events[0][0] <= now:
            _, x = heapq.heappop(events)
            done += 1
            for li in info[x][3].links:
                busy[li] -= 1
            for y in children[x]:
                enqueue(y)
    transfers = tuple(sorted(
        Transfer(start[x], start[x] + dur[x], u, v, r.links, (c,), "copy")
        for x, (u, v, c, r, _) in enumerate(info)))
    return Schedule(topology, collective, transfers, dict(meta, timing="list"))


def _largest_first(parts: list[_Share]) -> list[int]:
    return sorted(range(len(parts)), key=lambda i: (-parts[i].nbytes, i))


def _shuffled(parts: list[_Share], rng: random.Random) -> list[int]:
    """Largest first, with classes within 10 % of each other's size in random order."""
    return sorted(range(len(parts)),
                  key=lambda i: (-round(_log_bucket(parts[i].nbytes)), rng.random()))


def _log_bucket(nbytes: int) -> float:
    return math.log(max(1, nbytes), 1.1)


class MulticastSolver(SolverBase):
    """Multicast tree packing on the physical topology (see the module docstring)."""

    name = "multicast"
    capabilities = Capabilities(native_switches=True)
    options = {
        "trees": Option("distribution trees per class of chunks (default: the better of 4 "
                        "and 16)", int, range=(1, 1024)),
        "tenant_priority": Option("tenant -> number: when tenants compete for a link, larger "
                                  "ones go first (API only)"),
    }

    def solve(self, problem: Problem) -> SolveResult:
        """Options: ``seed`` (0), ``trials`` (3 per tree count), ``trees`` per chunk class
        (default: the better of 4 and 16; more trees use more parallel paths), ``relays``
        (``'members'``/``'all'``), ``tenant_priority`` (tenant → number: larger tenants'
        transfers go first when they compete for a link)."""
        t0 = time.perf_counter()
        opts = problem.options
        seed = int(opts.get("seed", 0) or 0)
        trials = max(1, int(opts.get("trials") or DEFAULT_TRIALS))
        trees = max(1, int(opts["trees"])) if opts.get("trees") else None
        relays = str(opts.get("relays", "members"))
        priority = opts.get("tenant_priority")
        rng = random.Random(seed)
        best: Schedule | None = None
        best_trial = 0
        choices = (trees,) if trees else TREE_CHOICES
        total = trials * len(choices)
        done = 0
        for k in choices:
            parts = shares(problem.collective, k)
            for trial in range(trials):
                order = _largest_first(parts) if trial < 2 else _shuffled(parts, rng)
                timing = "first-fit" if trial == 1 and not priority else "list"
                sched = plan(problem.topology, problem.collective, trees=k, order=order,
                             relays=relays, timing=timing, priority=priority)
                if best is None or sched.makespan < best.makespan * (1 - 1e-12):
                    best, best_trial = sched, done
                done += 1
                progress = opts.get("progress")
                if progress is not None:
                    progress(done, total)
        assert best is not None
        best.meta.update(solver=self.name, seed=seed, trials=trials, best_trial=best_trial,
                         algorithm="multicast tree packing")
        stats = {"synthesis_time": time.perf_counter() - t0, "transfers": len(best.transfers)}
        return SolveResult("feasible", best, None, stats)


__all__ = ["MulticastSolver", "plan", "shares"]
