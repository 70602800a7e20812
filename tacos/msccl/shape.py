"""The resource shape of a lowered MSCCL program, and the runtime limits it must fit.

A *shape* is what the lowering decides besides the schedule's routes and order:

* ``instances``: every chunk is cut into that many pieces, each on its own channels and thread
  blocks (so channels and thread blocks per GPU grow with it, and bytes are split evenly
  between the instances of a connection);
* ``nchunksperloop`` follows: ``instances ×`` the schedule's chunks;
* ``proto``: ``LL`` (8-byte flag+data lines, low latency, half the payload rate), ``LL128``
  or ``Simple`` (full rate, a higher base latency and a synchronization per slice);
* ``port_order``: keep the schedule's serialized sends through a shared port
  (:mod:`tacos.msccl.lower_ports`) or let the runtime run them as concurrent streams;
* ``paired``: pair every send peer with a receive peer in one thread block (fewer thread
  blocks, each carrying the same bytes on a symmetric plan) or give single peers their own.

:func:`shape_problems` checks a lowered program against the runtime's limits (channels, thread
blocks per channel and per GPU, steps per thread block, ``cnt``); :func:`tb_bytes` and
:func:`balance` measure how evenly the thread blocks carry the bytes.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

from tacos.msccl.lower import MscclOptions
from tacos.msccl.program import (
    DEFAULT_MAX_STEPS,
    DEFAULT_SMS,
    MAX_CHANNELS,
    MAX_COUNT,
    MAX_NODES,
    MAX_TBS_PER_CHANNEL,
    Program,
)

PROTOCOLS = ("LL", "LL128", "Simple")
INSTANCES = (1, 2, 4, 8, 16, 32)


@dataclass(frozen=True)
class Shape:
    """How a schedule is lowered: instances per chunk, protocol and port order."""

    instances: int = 1
    proto: str = "Simple"
    port_order: bool = False
    paired: bool = True

    def options(self, base: MscclOptions | None = None) -> MscclOptions:
        """``base`` (default :class:`MscclOptions`) with this shape's fields."""
        return replace(base or MscclOptions(), instances=self.instances, proto=self.proto,
                       port_order=self.port_order, pair_peers=self.paired)

    def label(self) -> str:
        """``'4 instances, LL, port order kept, paired peers'``."""
        order = "port order kept" if self.port_order else "concurrent streams"
        tbs = "paired peers" if self.paired else "single peers"
        return (f"{self.instances} instance{'s' * (self.instances > 1)}, {self.proto}, "
                f"{order}, {tbs}")


@dataclass(frozen=True)
class RuntimeLimits:
    """The MSCCL executor's limits a program must fit (``docs/msccl-xml.md`` §1.4-§1.8) and
    the GPU's SM count (every thread block of a GPU must be resident at once)."""

    sms: int = DEFAULT_SMS
    max_channels: int = MAX_CHANNELS
    max_tbs_per_channel: int = MAX_TBS_PER_CHANNEL
    max_steps: int = DEFAULT_MAX_STEPS
    max_count: int = MAX_COUNT
    max_nodes: int = MAX_NODES  #: parsed nodes per rank: 1 algo + ngpus + tbs + steps


def parsed_nodes(program: Program) -> dict[int, int]:
    """The nodes the runtime's XML parser holds per rank: the algo element, one per gpu
    element, then the rank's thread blocks and steps."""
    head = 1 + len(program.gpus)
    return {g.id: head + len(g.tbs) + sum(len(tb.steps) for tb in g.tbs)
            for g in program.gpus}


def shapes(*, protos: tuple[str, ...] = PROTOCOLS, instances: tuple[int, ...] = INSTANCES,
           port_orders: tuple[bool, ...] = (False, True),
           paired: tuple[bool, ...] = (True, False)) -> list[Shape]:
    """Every combination of the given protocols, instance counts, port orders and pairings."""
    return [Shape(i, p, o, q) for i in instances for p in protos for o in port_orders
            for q in paired]


def shape_problems(program: Program, limits: RuntimeLimits | None = None) -> list[str]:
    """Why ``program`` does not fit ``limits`` (empty when it fits)."""
    lim = limits or RuntimeLimits()
    out = []
    if program.nchannels > lim.max_channels:
        out.append(f"{program.nchannels} channels > {lim.max_channels}")
    nodes = parsed_nodes(program)
    for g in program.gpus:
        if nodes[g.id] > lim.max_nodes:
            out.append(f"rank {g.id}: {nodes[g.id]} parsed nodes > {lim.max_nodes}")
        if len(g.tbs) > lim.sms:
            out.append(f"rank {g.id}: {len(g.tbs)} thread blocks > {lim.sms} SMs")
        sends = Counter(tb.chan for tb in g.tbs if tb.send >= 0)
        recvs = Counter(tb.chan for tb in g.tbs if tb.recv >= 0)
        for chan, n in (sends + recvs).items():
            if max(sends[chan], recvs[chan]) > lim.max_tbs_per_channel:
                out.append(f"rank {g.id}: {n} thread blocks on channel {chan}")
        for tb in g.tbs:
            if len(tb.steps) > lim.max_steps:
                out.append(f"rank {g.id} tb {tb.id}: {len(tb.steps)} steps > {lim.max_steps}")
            big = [st.cnt for st in tb.steps if st.cnt > lim.max_count]
            if big:
                out.append(f"rank {g.id} tb {tb.id}: cnt {big[0]} > {lim.max_count}")
    return out


def tb_bytes(program: Program, nbytes: int) -> dict[tuple[int, int], float]:
    """Bytes each communicating thread block ``(rank, tb id)`` moves for an ``nbytes``
    message: what it sends plus what it receives (one chunk is ``nbytes /
    nchunksperloop``)."""
    chunk = nbytes / max(1, program.nchunksperloop)
    out: dict[tuple[int, int], float] = {}
    for g in program.gpus:
        for tb in g.tbs:
            if tb.send < 0 and tb.recv < 0:
                continue
            moved = sum(st.cnt * (st.sends + st.receives) for st in tb.steps)
            out[(g.id, tb.id)] = moved * chunk
    return out


def balance(program: Program, nbytes: int = 1 << 20) -> float:
    """Largest over mean bytes per communicating thread block (1.0: perfectly balanced)."""
    loads = [b for b in tb_bytes(program, nbytes).values() if b > 0]
    if not loads:
        return 1.0
    return max(loads) / (sum(loads) / len(loads))


def describe(program: Program, nbytes: int) -> dict[str, object]:
    """The shape facts of a lowered program: channels, thread blocks per GPU, chunks per loop,
    protocol, the busiest thread block's bytes and the balance."""
    loads = tb_bytes(program, nbytes)
    return {"proto": program.proto, "nchannels": program.nchannels,
            "nchunksperloop": program.nchunksperloop,
            "tbs_per_gpu": max((len(g.tbs) for g in program.gpus), default=0),
            "max_tb_bytes": max(loads.values(), default=0.0),
            "balance": balance(program, nbytes)}
