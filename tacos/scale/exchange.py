"""A fused digit: the all-reduce of a binary group as one exchange.

In an all-reduce plan the innermost rail digit is a reduce-scatter then, right after it, the
all-gather back: on a group of two members that is two transfers each way (half the held range
reduced into the partner, then the partner's reduced half copied back), each holding the
member's NIC for one route α.  Exchanging the whole held range once (each member adds the
partner's range to its own, ``op='reduce'``) moves the same bytes with one α instead of two.
Fusing the last k digits this way is recursive doubling over them: k α instead of 2k, for
``k - 2 + 2^(1-k)`` times the held range in extra bytes, which is cheap where the held range is
small (the late digits of a part).  :func:`tacos.scale.synthesize.synthesize_symmetric` picks the
number of fused digits per part by the part's rail time.

Why only pairs: on a switched group every transfer holds its member's one NIC lane for the whole
transfer (``docs/machine-model.md``), so an exchange with r - 1 partners is r - 1 transfers one
after another, (r - 1) α and (r - 1) times the held range in bytes -- never shorter than the
reduce-scatter and all-gather it would replace when r > 2.
"""

from __future__ import annotations

from tacos.model.patterns import build
from tacos.model.schedule import Schedule
from tacos.model.topology import Topology
from tacos.model.transfer import Transfer
from tacos.scale.bruck import switch_route


def exchange_allreduce(topology: Topology, size: int) -> Schedule | None:
    """The all-reduce of ``size`` bytes between NPUs 0 and 1 of ``topology`` as one transfer
    each way through switches, both at time 0; None unless the template has two NPUs joined
    through switches."""
    if topology.n_npus != 2:
        return None
    coll = build("allreduce", range(2), size=size)
    chunks = tuple(c.id for c in coll.chunks)
    links = topology.links
    transfers = []
    for src, dst in ((0, 1), (1, 0)):
        route = switch_route(topology, src, dst)
        if route is None:
            return None
        duration = (sum(links[li].alpha for li in route)
                    + size / min(links[li].bandwidth for li in route))
        transfers.append(Transfer(0.0, duration, src, dst, route, chunks, "reduce"))
    return Schedule(topology, coll, tuple(sorted(transfers)), {"solver": "exchange"})
