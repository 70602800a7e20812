"""Ring all-reduce written directly as an MSCCL program: several channels per ring, several
rings per channel.

NCCL's ring lowered from its schedule gives every ring one thread block per GPU that runs all
``2N - 1`` steps of the ring, one after the other.  Microsoft's ``allreduce_ring_
4channelsperring`` plans (``executor_ndv4_r48ll*``) spread the steps of one ring over ``k``
channels instead: a block keeps the channel it started on for its whole journey round the ring,
so each thread block runs only the steps of the blocks of its channel (about ``(2N - 1) / k``)
and the blocks' chains run side by side.  This module writes that program, and more than one
ring on the same channels (rings of different strides: ``r -> r + d`` with ``gcd(d, N) = 1``,
e.g. both directions of the ring, ``d = 1`` and ``d = N - 1``), which halves the bytes every
thread block receives without forwarding them.

For ``N`` ranks, strides ``D``, ``I`` instances and ``k`` channels per ring there are
``R = |D|·I`` ring units, ``nchunksperloop = N·R`` (unit u's block b is chunk ``b·R + u``),
``I·k`` channels (the rings of different strides share a channel: their peers differ) and
``|D|·I·k`` thread blocks per GPU, each carrying the same bytes when ``k`` divides ``N``.

The steps, at ring position q of a unit at step t (block ``b = (q - t - 1) mod N``): ``s`` at
t = 0, ``rrs`` up to ``N - 2``, ``rrcs`` at ``N - 1`` (the block is reduced here), ``rcs`` up to
``2N - 3``, ``r`` at ``2N - 2``: NCCL's ring, with every step on the channel of its block.
No dependencies across thread blocks are needed: a block's steps on one GPU are in one thread
block, in order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tacos.errors import TacosError
from tacos.model.collective import Collective
from tacos.model.topology import Topology
from tacos.msccl.lower import MscclOptions
from tacos.msccl.program import Gpu, Program, Step, Threadblock
from tacos.msccl.shape import Shape


@dataclass(frozen=True)
class RingAllReduce:
    """The ring all-reduce over ``collective.group`` with ``channels_per_ring`` channels per
    ring and one ring per stride of ``strides`` on every channel (any shape's instances; the
    port order and pairing do not apply)."""

    collective: Collective
    strides: tuple[int, ...] = (1,)
    channels_per_ring: int = 1

    @property
    def label(self) -> str:
        """What the program is, for reports."""
        rings = "ring" if len(self.strides) == 1 else f"{len(self.strides)} rings"
        return f"{rings} all-reduce, {self.channels_per_ring} channels per ring"

    def lower(self, shape: Shape, base: MscclOptions | None = None) -> Program:
        """The program for ``shape`` with ``base``'s header fields."""
        opts = shape.options(base)
        opts.validate()
        if self.collective.kind != "allreduce":
            raise TacosError("the ring program is an all-reduce")
        return ring_allreduce(len(self.collective.group), shape.instances, opts,
                              strides=self.strides, channels_per_ring=self.channels_per_ring)


def ring_allreduce(n: int, instances: int, options: MscclOptions, *,
                   strides: tuple[int, ...] = (1,), channels_per_ring: int = 1) -> Program:
    """The program (module docstring) for ``n`` ranks, ``instances`` and the given rings."""
    if n < 2:
        raise TacosError("a ring all-reduce needs at least 2 ranks")
    k = int(channels_per_ring)
    if not 1 <= k <= n:
        raise TacosError(f"channels per ring must be between 1 and {n}, not {k}")
    ds = tuple(d % n for d in strides)
    if not ds or len(set(ds)) != len(ds) or any(math.gcd(d, n) != 1 for d in ds):
        raise TacosError(f"ring strides {strides} must be distinct and coprime with {n}")
    inst = int(instances)
    units = len(ds) * inst
    nchunks = n * units
    inplace = bool(options.inplace)
    steps_total = 2 * n - 1

    def kind(t: int) -> str:
        if t == 0:
            return "s"
        if t < n - 1:
            return "rrs"
        if t == n - 1:
            return "rrcs"
        return "rcs" if t < steps_total - 1 else "r"

    def bufs(t: int) -> tuple[str, str]:
        if inplace or t < n - 1:
            return "i", "i"
        return ("i", "o") if t == n - 1 else ("o", "o")

    gpus = []
    for r in range(n):
        blocks: list[Threadblock] = []
        for si, d in enumerate(ds):
            q = (r * pow(d, -1, n)) % n  # r's position on the stride-d ring
            for p in range(inst):
                u = si * inst + p
                per_chan: list[list[Step]] = [[] for _ in range(k)]
                for t in range(steps_total):
                    b = (q - t - 1) % n
                    steps = per_chan[b % k]
                    src, dst = bufs(t)
                    chunk = b * units + u
                    steps.append(Step(len(steps), kind(t), src, chunk, dst, chunk, 1))
                for c, steps in enumerate(per_chan):
                    if steps:
                        blocks.append(Threadblock(len(blocks), (r + d) % n, (r - d) % n,
                                                  p * k + c, tuple(steps)))
        gpus.append(Gpu(r, nchunks, 0 if inplace else nchunks, 0, tuple(blocks)))
    return Program(options.name or f"tacos_ring_allreduce_{n}gpus", options.proto, inst * k,
                   nchunks, n, "allreduce", int(inplace), int(options.out_of_place),
                   options.min_bytes, options.max_bytes, tuple(gpus), options.redop)


#: Channels per ring the shape search tries (those dividing ``N``, so every thread block of a
#: ring carries about the same bytes): Microsoft's ``r48ll*`` plans use 4 on 8 GPUs.
CHANNELS_PER_RING = (2, 4)


def ring_families(topology: Topology, collective: Collective) -> dict[str, RingAllReduce]:
    """The ring programs a shape search adds for an all-reduce: on a topology where every
    pair of the group is the same number of hops apart (an NVSwitch node), the two directions
    of the ring on every channel (``rings-2``), every stride coprime with ``N``
    (``rings-all``, when that is more than two), and the two directions spread over ``k``
    channels per ring (``rings-2-kch``, ``k`` of :data:`CHANNELS_PER_RING` dividing ``N``:
    Microsoft's shape, whose chains of forwards run side by side); none otherwise (a ring of
    strides would cross the fabric several times) or for other collectives.

    One ring per channel is NCCL's ring, already a candidate from the schedules."""
    group = list(collective.group)
    n = len(group)
    if collective.kind != "allreduce" or n < 3 or not _uniform(topology, group):
        return {}
    out = {"rings-2": RingAllReduce(collective, (1, n - 1))}
    coprime = tuple(d for d in range(1, n) if math.gcd(d, n) == 1)
    if len(coprime) > 2:
        out["rings-all"] = RingAllReduce(collective, coprime)
    for k in CHANNELS_PER_RING:
        if n % k == 0 and k < n:
            out[f"rings-2-{k}ch"] = RingAllReduce(collective, (1, n - 1), k)
    return out


def _uniform(topology: Topology, group: list[int]) -> bool:
    """True when every ordered pair of ``group`` has a route of the same number of links."""
    hops = set()
    for a in group:
        for b in group:
            if a == b:
                continue
            route = topology.routing.best(a, b)
            if route is None:
                return False
            hops.add(len(route.links))
            if len(hops) > 1:
                return False
    return True
