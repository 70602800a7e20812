"""Template schedules that reduce and multicast in the switches (SHARP, NVLS).

Each is an ordinary :class:`~tacos.model.schedule.Schedule` on a group's template topology whose
transfers form in-switch groups (``Transfer.group``, :mod:`tacos.check.in_switch`): a **fan-in**
(members send the same chunks with ``op='reduce'`` to one destination; their routes form a tree
into it that meets only in switches declaring ``reduce``) or a **fan-out** (one source copies
the same chunks to every other member through switches declaring ``multicast``).  A group holds
each link it uses once, so every member's NIC carries the chunks once whatever the group's size.

* :func:`rail_reduce` / :func:`rail_broadcast`: the whole held range of a rail into member 0
  (one fan-in) and out of it (one fan-out): a SHARP all-reduce is the two, one transfer up and
  one down per NIC.  The routes are the shortest-path trees to and from member 0 (breadth-first,
  links in id order), so the fan-in uses only links pointing toward member 0 and the fan-out only
  links pointing away from it: the two use **disjoint** links and a part's fan-out may run while
  the next part's fan-in does.
* :func:`nvls_reducescatter`, :func:`nvls_allgather`, :func:`nvls_mixed`: a node's
  reduce-scatter as one fan-in per member (chunk j into member j), its all-gather as one
  fan-out per member (chunk j out of member j), one member after another (a fan-in holds every
  other member's up-link); the mixed template runs member j's all-gather fan-out of one part
  together with its reduce-scatter fan-in of another (they use j's up-link and the others'
  down-links, and the others' up-links and j's down-link: disjoint), so a GPU's NVLink carries
  the buffer once each way over an all-reduce instead of 7/4 of it.

Every template starts at 0; a group's members start and end together (at the slowest member's
α + bytes / bandwidth).
"""

from __future__ import annotations

from collections import deque

from tacos.model.collective import Collective
from tacos.model.patterns import build
from tacos.model.schedule import Schedule
from tacos.model.symmetric_plan import mixed_collective
from tacos.model.topology import Topology
from tacos.model.transfer import Transfer


def tree_routes(topology: Topology, root: int, inward: bool) -> dict[int, tuple[int, ...]]:
    """Routes between ``root`` and every other NPU along one breadth-first tree through
    switches: into ``root`` (``inward``) or out of it.  NPUs are leaves of the tree (never
    passed through)."""
    links = topology.links
    adj = topology.in_links if inward else topology.out_links
    parent: dict[int, int] = {root: -1}
    todo = deque([root])
    while todo:
        v = todo.popleft()
        if v != root and not topology.is_switch(v):
            continue
        for li in adj[v]:
            w = links[li].src if inward else links[li].dst
            if w not in parent:
                parent[w] = li
                todo.append(w)
    out = {}
    for m in range(topology.n_npus):
        if m == root or m not in parent:
            continue
        route, v = [], m
        while v != root:
            li = parent[v]
            route.append(li)
            v = links[li].dst if inward else links[li].src
        out[m] = tuple(route) if inward else tuple(reversed(route))
    return out


def _fan(topology: Topology, hub: int, inward: bool, chunks: tuple[int, ...], nbytes: float,
         start: float, group: int, routes: dict[int, tuple[int, ...]]) -> tuple[list, float]:
    """One fan-in into (fan-out of) ``hub``: its transfers and its end time."""
    links = topology.links
    need = max(sum(links[li].alpha for li in r) + nbytes / min(links[li].bandwidth for li in r)
               for r in routes.values())
    end = start + need
    out = []
    for m in sorted(routes):
        src, dst = (m, hub) if inward else (hub, m)
        out.append(Transfer(start, end, src, dst, routes[m], chunks,
                            "reduce" if inward else "copy", group))
    return out, end


def _schedule(topology: Topology, coll: Collective, transfers: list, what: str) -> Schedule:
    return Schedule(topology, coll, tuple(sorted(transfers)), {"solver": what})


def rail_reduce(topology: Topology, size: int) -> Schedule:
    """The reduce of ``size`` bytes into member 0 as one fan-in (SHARP's aggregation)."""
    coll = build("reduce", range(topology.n_npus), size=size, root=0)
    routes = tree_routes(topology, 0, inward=True)
    ts, _ = _fan(topology, 0, True, (0,), size, 0.0, 0, routes)
    return _schedule(topology, coll, ts, "sharp-reduce")


def rail_broadcast(topology: Topology, size: int) -> Schedule:
    """The broadcast of ``size`` bytes from member 0 as one fan-out (SHARP's multicast)."""
    coll = build("broadcast", range(topology.n_npus), size=size, root=0)
    routes = tree_routes(topology, 0, inward=False)
    ts, _ = _fan(topology, 0, False, (0,), size, 0.0, 0, routes)
    return _schedule(topology, coll, ts, "sharp-broadcast")


def _slots(topology: Topology, coll: Collective, gather: int, scatter: int,
           what: str) -> Schedule:
    """Member j's fan-out of chunk j (``gather`` bytes in all) and fan-in of chunk r + j
    (``scatter`` bytes; chunk j when there is no all-gather), member after member."""
    r = topology.n_npus
    t, transfers, group = 0.0, [], 0
    for j in range(r):
        end = t
        if gather:
            routes = tree_routes(topology, j, inward=False)
            ts, e = _fan(topology, j, False, (j,), gather / r, t, group, routes)
            transfers += ts
            group, end = group + 1, max(end, e)
        if scatter:
            routes = tree_routes(topology, j, inward=True)
            c = j + r if gather else j
            ts, e = _fan(topology, j, True, (c,), scatter / r, t, group, routes)
            transfers += ts
            group, end = group + 1, max(end, e)
        t = end
    return _schedule(topology, coll, transfers, what)


def direct(topology: Topology, kind: str, size: int) -> Schedule:
    """The reduce-scatter (all-gather) of ``size`` bytes without in-switch operations: in round
    k = 1..r-1 member i sends chunk i + k (its own chunk i) to member i + k, every member's
    up-link and down-link busy once a round: ``(r-1)`` α and ``(r-1)/r`` of the buffer, less
    than a fan-in per member takes alone (``r`` α, the whole buffer), for the parts whose
    reduce-scatter or all-gather has no partner to mix with."""
    r = topology.n_npus
    coll = build(kind, range(r), size=size)
    links = topology.links
    t, transfers = 0.0, []
    for k in range(1, r):
        end = t
        for i in range(r):
            d = (i + k) % r
            route = tree_routes(topology, d, inward=True)[i]
            need = sum(links[li].alpha for li in route) + \
                (size / r) / min(links[li].bandwidth for li in route)
            chunk, op = (d, "reduce") if kind == "reducescatter" else (i, "copy")
            transfers.append(Transfer(t, t + need, i, d, route, (chunk,), op))
            end = max(end, t + need)
        t = end
    return _schedule(topology, coll, transfers, f"direct-{kind}")


def node_alone(topology: Topology, kind: str, size: int) -> Schedule:
    """A reduce-scatter or all-gather that has no partner to mix with: the faster of the
    in-switch one (:func:`nvls_reducescatter`, :func:`nvls_allgather`) and :func:`direct`."""
    nvls = nvls_reducescatter if kind == "reducescatter" else nvls_allgather
    return min(nvls(topology, size), direct(topology, kind, size), key=lambda s: s.makespan)


def nvls_reducescatter(topology: Topology, size: int) -> Schedule:
    """The reduce-scatter of ``size`` bytes as one fan-in per member."""
    coll = build("reducescatter", range(topology.n_npus), size=size)
    return _slots(topology, coll, 0, size, "nvls-reducescatter")


def nvls_allgather(topology: Topology, size: int) -> Schedule:
    """The all-gather of ``size`` bytes (nccl-tests convention: the gathered buffer) as one
    fan-out per member."""
    coll = build("allgather", range(topology.n_npus), size=size)
    return _slots(topology, coll, size, 0, "nvls-allgather")


def nvls_mixed(topology: Topology, gather: int, scatter: int) -> Schedule:
    """The mixed template (:func:`~tacos.model.symmetric_plan.mixed_collective`): the
    all-gather of ``gather`` bytes and the reduce-scatter of ``scatter`` bytes, member j's
    fan-out and fan-in together."""
    coll = mixed_collective(topology.n_npus, gather, scatter)
    return _slots(topology, coll, gather, scatter, "nvls-mixed")
