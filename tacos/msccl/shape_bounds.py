"""Lower bounds on the runtime-model time of a lowered MSCCL program, cheap enough to prune the
shape search (:mod:`tacos.msccl.shape_choose`) before the event model runs.

The runtime model (:func:`tacos.runtime.estimate_program`) charges every program its
protocol's base latency, then runs its transfers no faster than

* every port: the bytes the program routes through it over the port's effective payload rate
  (line rate x link-class efficiency x protocol payload x lanes), and
* every thread block: the bytes it copies, sends or receives over one CTA's rate in the
  protocol (a reduction's rate is no higher).

* every thread block: one per-hop synchronization latency (NCCL's ``hwLat`` of the fastest
  link class on the topology) per sending step, paid in order,

so ``base + max(port bound, CTA bound, sync bound)`` never exceeds its time.  The port and sync
bounds do not depend on the instance count (instances split the same bytes over more channels
and thread blocks, each with the same steps), which lets the search skip a protocol whose bound
is already slower than the best shape found.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tacos.errors import TacosError
from tacos.model.topology import Topology
from tacos.msccl.program import Program


@dataclass(frozen=True)
class ProgramBounds:
    """``base`` latency, ``link``, ``cta`` and ``sync`` bounds (s) of one program under one
    protocol."""

    base: float
    link: float
    cta: float
    sync: float = 0.0

    @property
    def time(self) -> float:
        """The lower bound on the runtime-model time."""
        return self.base + max(self.link, self.cta, self.sync)


def link_bytes(program: Program, topology: Topology, nbytes: int,
               ranks: Sequence[int] | None = None) -> dict[int, float]:
    """Bytes the program sends through every topology link (index) for an ``nbytes``
    message; raises :class:`~tacos.errors.TacosError` when two connected ranks have no
    route."""
    from tacos.msccl.ranks import resolve_ranks

    npus, _ = resolve_ranks(topology, program.ngpus, explicit=list(ranks) if ranks else None)
    chunk = nbytes / max(1, program.nchunksperloop)
    per_peer: dict[tuple[int, int], int] = {}
    for g in program.gpus:
        for tb in g.tbs:
            if tb.send < 0:
                continue
            cnt = sum(st.cnt for st in tb.steps if st.sends)
            if cnt:
                key = (g.id, tb.send)
                per_peer[key] = per_peer.get(key, 0) + cnt
    out: dict[int, float] = {}
    for (a, b), cnt in per_peer.items():
        route = topology.routing.best(npus[a], npus[b], chunk)
        if route is None:
            raise TacosError(f"the topology has no route from {topology.node_name(npus[a])} "
                             f"to {topology.node_name(npus[b])}, but the program connects them")
        for i in route.links:
            out[i] = out.get(i, 0.0) + cnt * chunk
    return out


def program_bounds(program: Program, topology: Topology, nbytes: int, proto: str, *,
                   ranks: Sequence[int] | None = None,
                   loads: dict[int, float] | None = None) -> ProgramBounds:
    """The bounds of ``program`` run in ``proto`` on an ``nbytes`` message (``loads``: its
    :func:`link_bytes`, when already known)."""
    from tacos.runtime.hardware import hardware_for

    hw = hardware_for(topology)
    loads = link_bytes(program, topology, nbytes, ranks) if loads is None else loads
    pay = hw.payload(proto)
    link = 0.0
    for i, load in loads.items():
        lk = topology.links[i]
        link = max(link, load / (hw.link_rate(lk) * pay * lk.multiplicity))
    chunk = nbytes / max(1, program.nchunksperloop)
    most = max((sum(st.cnt for st in tb.steps if st.type != "nop" and st.type != "re")
                for g in program.gpus for tb in g.tbs), default=0)
    cta = most * chunk / hw.cta_rate[proto]
    sends = max((sum(1 for st in tb.steps if st.cnt > 0 and st.sends)
                 for g in program.gpus for tb in g.tbs), default=0)
    sync = sends * min_hop_latency(topology, proto)
    return ProgramBounds(hw.base_latency(proto), link, cta, sync)


def port_bound(loads: dict[int, float], topology: Topology, proto: str) -> float:
    """``base + link`` of :func:`program_bounds` from a program's :func:`link_bytes` alone:
    the same for every shape of a plan (instances, pairing and port order move the same
    bytes between the same ranks)."""
    from tacos.runtime.hardware import hardware_for

    hw = hardware_for(topology)
    pay = hw.payload(proto)
    link = 0.0
    for i, load in loads.items():
        lk = topology.links[i]
        link = max(link, load / (hw.link_rate(lk) * pay * lk.multiplicity))
    return hw.base_latency(proto) + link


def min_hop_latency(topology: Topology, proto: str) -> float:
    """The smallest per-hop synchronization latency (s) a connection on ``topology`` pays per
    primitive call in ``proto``: NCCL's ``hwLat`` of the fastest link class it has."""
    from tacos.runtime.hardware import hardware_for

    hw = hardware_for(topology)
    classes = {hw.classify(lk) for lk in topology.links}
    kinds = {"nic" if c == "nic" else "pcie" if c == "pcie" else hw.link_class for c in classes}
    return min((hw.hop_latency(proto, k) for k in kinds), default=0.0)
