"""Bruck's all-gather (and its reversal, a reduce-scatter) on a switched group template.

On a group whose members reach each other only through switches (a rail's leaf, a pod's
tier-2 switch), every transfer of a member holds its NIC for one route α.  Exchanging with the
other r - 1 members one by one costs r - 1 α; Bruck's all-gather (Bruck et al., "Efficient
algorithms for all-to-all communications in multiport message-passing systems", IEEE TPDS
1997) takes ceil(log2 r) rounds for any r and still sends each block once per member: in round
k member j sends the blocks it holds (2^k, the last round what is left) to member j - 2^k mod
r.  A radix-5 digit of a 5,000-node Clos then costs 3 α instead of 4, with the same bytes.
The reduce-scatter is the same schedule run backwards with the directions turned and
``reduce`` for ``copy`` (the dissemination trees reversed: every contribution reaches its
owner once).  :class:`tacos.scale.synthesize.TemplateSolver` keeps it when it is the fastest
verified template.
"""

from __future__ import annotations

from collections import deque

from tacos.model.patterns import build
from tacos.model.schedule import Schedule
from tacos.model.topology import Topology
from tacos.model.transfer import Transfer


def switch_route(topology: Topology, src: int, dst: int) -> tuple[int, ...] | None:
    """The shortest route (link ids) from NPU ``src`` to NPU ``dst`` through switches only,
    or None."""
    out = topology.out_links
    back: dict[int, int] = {src: -1}
    todo = deque([src])
    while todo:
        v = todo.popleft()
        for li in out[v]:
            w = topology.links[li].dst
            if w in back or (w != dst and not topology.is_switch(w)):
                continue
            back[w] = li
            if w == dst:
                route = []
                while w != src:
                    route.append(back[w])
                    w = topology.links[back[w]].src
                return tuple(reversed(route))
            todo.append(w)
    return None


def bruck(topology: Topology, kind: str, size: int) -> Schedule | None:
    """Bruck's ``kind`` (``allgather`` or ``reducescatter``) of ``size`` bytes among NPUs
    ``0..r-1`` of ``topology``; None when some pair has no route through switches alone or
    the kind is another."""
    r = topology.n_npus
    if kind not in ("allgather", "reducescatter") or r < 2:
        return None
    coll = build(kind, range(r), size=size)
    block = coll.chunks[0].size
    routes: dict[tuple[int, int], tuple[int, ...]] = {}
    rounds: list[list[tuple[int, int, tuple[int, ...]]]] = []   # (src, dst, chunks)
    have = [[j] for j in range(r)]
    step = 1
    while step < r:
        count = min(step, r - step)
        moves = []
        for j in range(r):
            to = (j - step) % r
            moves.append((j, to, tuple(have[j][:count])))
        for _, to, blocks in moves:
            have[to] = have[to] + list(blocks)
        rounds.append(moves)
        step *= 2
    for moves in rounds:
        for j, to, _ in moves:
            if (j, to) not in routes:
                route = switch_route(topology, j, to)
                if route is None:
                    return None
                routes[j, to] = route
    links = topology.links

    def length(moves: list[tuple[int, int, tuple[int, ...]]]) -> float:
        return max(sum(links[li].alpha for li in routes[j, to])
                   + len(c) * block / min(links[li].bandwidth for li in routes[j, to])
                   for j, to, c in moves)

    durations = [length(m) for m in rounds]
    transfers = []
    if kind == "allgather":
        t = 0.0
        for moves, d in zip(rounds, durations, strict=True):
            transfers += [Transfer(t, t + d, j, to, routes[j, to], tuple(sorted(c)), "copy")
                          for j, to, c in moves]
            t += d
    else:  # run backwards: the last round first, every transfer turned round, reducing
        t = 0.0
        for moves, d in zip(reversed(rounds), reversed(durations), strict=True):
            for j, to, c in moves:
                transfers.append(Transfer(t, t + d, to, j, _reverse(topology, routes[j, to]),
                                          tuple(sorted(c)), "reduce"))
            t += d
    return Schedule(topology, coll, tuple(sorted(transfers)), {"solver": "bruck"})


def _reverse(topology: Topology, route: tuple[int, ...]) -> tuple[int, ...]:
    """The same path walked the other way (each link's partner in the other direction)."""
    out = []
    for li in reversed(route):
        a, b = topology.links[li].src, topology.links[li].dst
        back = next(k for k in topology.out_links[b] if topology.links[k].dst == a)
        out.append(back)
    return tuple(out)
