"""The order a schedule gives transfers on a shared port, enforced in the lowered program.

A link-level schedule may send one rank's transfers to different peers *in turn* through one
port (an NVSwitch uplink, a NIC, an ECMP spine taken in turn): their routes share a link and
their time intervals do not overlap.  The runtime runs each peer's transfers on its own thread
block, so without more the transfers would run concurrently and share the port, not in the
order (and at the times) the schedule assumed.

:func:`port_slots` finds those orders: per sending rank and link of its transfers' routes, the
transfers are coloured first-fit into the link's ``multiplicity`` lanes by time (like
:func:`tacos.msccl.lower_order.lanes`), and consecutive transfers of one lane that go to
*different* peers (a connection's own FIFO already orders the same peer's) are serialized.
Each such lane becomes a pseudo chunk slot (a negative integer) that every send of the lane
"writes": :func:`tacos.msccl.lower_steps.build_steps` then makes each send wait for the
previous send of its lane in another thread block, the way it orders two writes of one slot.
Pieces of a chunk (``instances``) are separate lanes, so instances still run side by side.

Only orders between transfers of the *same* sending rank can become dependencies (MSCCL
dependencies never cross GPUs); :class:`PortOrder` counts the others as ``unenforced``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from tacos.model.schedule import Schedule


@dataclass
class PortOrder:
    """Per transfer, the port lanes it is serialized on (``lanes[i]``: lane ids, dense from 0),
    how many consecutive pairs the lowering orders (``ordered``) and how many serialized
    pairs of different senders no dependency can order (``unenforced``)."""

    lanes: dict[int, tuple[int, ...]] = field(default_factory=dict)
    ordered: int = 0
    unenforced: int = 0
    nlanes: int = 0

    def slots(self, transfer: int, piece: int, pieces: int) -> tuple[int, ...]:
        """The pseudo slots (negative integers) of a transfer's piece."""
        return tuple(-1 - (lane * pieces + piece) for lane in self.lanes.get(transfer, ()))


def port_order(schedule: Schedule, tol: float | None = None) -> PortOrder:
    """The serialized port orders of ``schedule`` (see the module docstring)."""
    ts = schedule.transfers
    if tol is None:
        tol = 1e-12 * max((abs(t.end) for t in ts), default=0.0)
    links = schedule.topology.links
    by_link: dict[int, list[int]] = defaultdict(list)
    for i, t in enumerate(ts):
        for link in set(t.route):
            by_link[link].append(i)
    out = PortOrder()
    lanes: dict[int, list[int]] = defaultdict(list)
    for link in sorted(by_link):
        idxs = by_link[link]
        if len({ts[i].dst for i in idxs}) < 2:
            continue  # one peer only: its connection's FIFO already keeps the order
        idxs.sort(key=lambda i: (ts[i].start, ts[i].end, i))
        mult = max(1, links[link].multiplicity)
        last: list[int] = []
        chains: list[list[int]] = []
        for i in idxs:
            for ln, j in enumerate(last):
                if ts[j].end <= ts[i].start + tol:
                    last[ln] = i
                    chains[ln].append(i)
                    break
            else:
                if len(last) < mult:
                    last.append(i)
                    chains.append([i])
                # more concurrent transfers than lanes: the schedule shares the link, nothing
                # to order for this one
        for chain in chains:
            pairs = [(a, b) for a, b in zip(chain, chain[1:], strict=False)
                     if ts[a].dst != ts[b].dst or ts[a].src != ts[b].src]
            if not pairs:
                continue
            same = [(a, b) for a, b in pairs if ts[a].src == ts[b].src]
            out.unenforced += len(pairs) - len(same)
            if not same:
                continue
            lane = out.nlanes
            out.nlanes += 1
            out.ordered += len(same)
            for a, b in same:
                for x in (a, b):
                    if lane not in lanes[x]:
                        lanes[x].append(lane)
    out.lanes = {i: tuple(v) for i, v in lanes.items()}
    return out
