"""Mixed templates: one part's all-gather and another part's reduce-scatter in one exchange.

In a pipelined all-reduce the digit a part all-gathers and the digit the next part
reduce-scatters go through the same NIC to the same partners.  Sent apart, each pays the
route's α; sent together, each transfer to a partner carries both payloads -- the all-gather's
block, copied into the partner's output, and the reduce-scatter's block, added to the
partner's value -- and pays α once.  In the machine model that is a **joint** group
(``docs/machine-model.md``, "In-switch collectives"; :mod:`tacos.check.in_switch`): two
members on one route, one ``copy`` and one ``reduce``, lasting α plus both payloads' bytes.
On MSCCL++ port channels it is two ``put`` s to the peer (one into its output buffer, one into
its scratch buffer) and one ``signal``: the peer waits once, then adds the scratch block.

:func:`mixed_template` is the direct exchange: in round m member j sends to member j + m, so
each member sends and receives one transfer at a time (one NIC lane), r - 1 rounds of α.  It
replaces a pair of Bruck templates (ceil(log2 r) α each way) when that is shorter: always for
r = 2 (one α instead of two), and for r = 5 (4 α instead of 6).
"""

from __future__ import annotations

from tacos.model.schedule import Schedule
from tacos.model.symmetric_plan import mixed_collective
from tacos.model.topology import Topology
from tacos.model.transfer import Transfer
from tacos.scale.bruck import switch_route


def mixed_template(topology: Topology, gather: int, scatter: int) -> Schedule | None:
    """The all-gather of ``gather`` bytes and the reduce-scatter of ``scatter`` bytes among
    NPUs ``0..r-1`` of ``topology`` (:func:`~tacos.model.symmetric_plan.mixed_collective`) as
    r - 1 rounds of joint transfers j -> j + m; None when some pair has no route through
    switches alone or a size does not split over the members."""
    r = topology.n_npus
    if r < 2 or gather % r or scatter % r or gather <= 0 or scatter <= 0:
        return None
    coll = mixed_collective(r, gather, scatter)
    links = topology.links
    nbytes = (gather + scatter) // r
    transfers: list[Transfer] = []
    t = 0.0
    group = 0
    for m in range(1, r):
        moves = []
        for j in range(r):
            to = (j + m) % r
            route = switch_route(topology, j, to)
            if route is None:
                return None
            d = (sum(links[li].alpha for li in route)
                 + nbytes / min(links[li].bandwidth for li in route))
            moves.append((j, to, route, d))
        length = max(d for *_, d in moves)
        for j, to, route, _ in moves:
            transfers.append(Transfer(t, t + length, j, to, route, (j,), "copy", group))
            transfers.append(Transfer(t, t + length, j, to, route, (r + to,), "reduce", group))
            group += 1
        t += length
    return Schedule(topology, coll, tuple(sorted(transfers)), {"solver": "mixed"})
