"""NCCL's own algorithms in the runtime model: ring, tree, NVLS, NVLS-tree, CollNet, PAT.

Two halves, kept apart on purpose:

* **NCCL's choice** (:func:`nccl_choice`) reproduces NCCL's tuner (``src/graph/tuning.cc``,
  v2.18): its per-algorithm/protocol latency ``baseLat + steps x hwLat`` and bandwidth
  ``channels x bw`` with its refinements (LL /4, LL128 x 0.92, tree x 0.92, NVLS ratio 5/6), the
  minimum time kept.  NCCL's own view of a GPU's bandwidth is 20 GB/s per 25 GB/s NVLink
  (``topo.h``), i.e. 0.8 of the line rate.
* **The time** (:func:`estimate_nccl`) is the runtime model's: the chosen protocol's latency
  (the same tables), bytes over the bus rate the hardware gives -- the smaller of the channels'
  per-CTA rates and the ports' effective payload rates (``hardware.toml``) -- plus a pipeline
  fill of a few FIFO steps (NVLS: chunks) at the per-channel rate, whose step/chunk sizes follow
  NCCL's own chunk-size rules (``enqueue.cc``).  The channels NCCL launches shrink for small
  messages exactly as ``enqueue.cc`` does (thread thresholds).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tacos.errors import TacosError
from tacos.runtime.estimate import RuntimeEstimate, bus_factor
from tacos.runtime.hardware import PROTOCOLS, US, Hardware, resolve
from tacos.topology import Topology

ALGORITHMS: tuple[str, ...] = ("ring", "tree", "nvls", "nvls_tree", "collnet", "pat")
#: Collectives NCCL runs only as rings (tuning.cc skips the other algorithms for them).
_RING_ONLY = ("allgather", "reducescatter", "broadcast", "reduce")
#: NCCL's tree correction per protocol, powers of two 64 B .. 256 MiB (tuning.cc).
_TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0,
     1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9,
     1.0, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9,
     .9),
)
#: NCCL's view of NVLink: 20 GB/s per 25 GB/s link (topo.h SM80/SM90_NVLINK_BW).
NCCL_VIEW = 0.8
#: Threads per CTA and per-thread work thresholds per protocol (enqueue.cc, devcomm.h).
_THREADS = {"LL": 512, "LL128": 640, "Simple": 512}
_THRESHOLD = {"LL": 8, "LL128": 8, "Simple": 64}


@dataclass(frozen=True)
class NcclSystem:
    """What NCCL's model needs of a process group: ranks, nodes, per-GPU rates."""

    n: int
    nodes: int
    intra_line: float      # per-GPU intra-node line rate (B/s), NVLink/NVSwitch/xGMI
    intra_rate: float      # the same, effective payload rate
    nic_line: float        # per-node NIC line rate (B/s), 0 on one node
    nic_rate: float        # the same, effective
    intra_class: str
    nvls: bool
    nvls_tree: bool
    collnet: bool
    pat: bool

    @property
    def ppn(self) -> float:
        """Ranks per node."""
        return self.n / max(1, self.nodes)


def nccl_system(topology: Topology, group: Sequence[int] | None, hw: Hardware) -> NcclSystem:
    """The :class:`NcclSystem` of ``group`` (default: every live NPU) on ``topology``."""
    from tacos.solvers.nccl import nccl_algorithms
    from tacos.solvers.nccl_system import system

    members = tuple(group) if group is not None else topology.live_npus
    if len(members) < 2:
        raise TacosError("an NCCL collective needs at least two ranks")
    sys_ = system(topology, members)
    node_of = sys_.node_of
    links = topology.links
    intra_line, intra_rate, cls = [], [], hw.link_class
    for v in members:
        line = rate = 0.0
        for li in topology.out_links[v]:
            lk = links[li]
            if hw.classify(lk) == "nic":
                continue
            dst = lk.dst
            if topology.is_switch(dst) or node_of.get(dst) == node_of[v]:
                line += lk.bandwidth * lk.multiplicity
                rate += hw.link_rate(lk) * lk.multiplicity
                cls = hw.classify(lk)
        intra_line.append(line)
        intra_rate.append(rate)
    nic_line = nic_rate = 0.0
    if sys_.multi_node:
        per_node = []
        for node, nics in zip(sys_.nodes, sys_.nics, strict=True):
            here = set(node)
            line = rate = 0.0
            for v in nics:
                for li in topology.out_links[v]:
                    lk = links[li]
                    if lk.dst not in here and (topology.is_switch(lk.dst)
                                               or lk.dst in node_of):
                        if hw.classify(lk) == "nic" or lk.bandwidth <= sys_.slow:
                            line += lk.bandwidth * lk.multiplicity
                            rate += lk.bandwidth * lk.multiplicity * hw.link_efficiency["nic"]
            per_node.append((line, rate))
        nic_line = min(p[0] for p in per_node)
        nic_rate = min(p[1] for p in per_node)

    class _Coll:  # the few attributes nccl_algorithms reads
        def __init__(self, kind: str) -> None:
            self.kind = kind

    algos_ar = nccl_algorithms(sys_, _Coll("allreduce"))
    algos_ag = nccl_algorithms(sys_, _Coll("allgather"))
    nvls = "nvls" in algos_ar and hw.nvls
    return NcclSystem(
        n=len(members), nodes=len(sys_.nodes), intra_line=min(intra_line),
        intra_rate=min(intra_rate), nic_line=nic_line, nic_rate=nic_rate, intra_class=cls,
        nvls=nvls and not sys_.multi_node, nvls_tree=nvls and sys_.multi_node,
        collnet="collnet" in algos_ar, pat="pat" in algos_ag)


# ------------------------------------------------------------------------------------------
# NCCL's tuner
# ------------------------------------------------------------------------------------------

def _steps(kind: str, n: int, nodes: int) -> tuple[int, int]:
    if kind == "allreduce":
        return 2 * (n - 1), (2 * nodes if nodes > 1 else 0)
    if kind in ("allgather", "reducescatter"):
        return n - 1, nodes - 1
    return n, nodes


def nccl_latency(hw: Hardware, s: NcclSystem, kind: str, algo: str, proto: str) -> float:
    """NCCL's latency (s) of ``algo``/``proto`` for ``kind`` (tuning.cc, one call)."""
    p = hw.proto_index(proto)
    lat = hw.latency
    hwkey = "pci" if s.intra_class == "pcie" else "nvlink"
    nsteps, ninter = _steps(kind, s.n, s.nodes)
    if algo == "ring":
        intra = lat[f"{hwkey}_ring"][p]
        inter = lat["net_ring"][p]
        if s.nodes > 1:
            intra = max(intra, 3.0 if proto == "Simple" else 1.0)  # net overhead (Intel CPU)
        us = lat["base_ring"][p] + (nsteps - ninter) * intra + ninter * inter
    elif algo == "tree":
        us = lat["base_tree"][p] + 2 * ((s.ppn - 1) * lat[f"{hwkey}_tree"][p]
                                        + math.log2(max(1, s.nodes)) * lat["net_tree"][p])
    elif algo == "nvls":
        us = lat["base_nvls"][p]
    elif algo == "nvls_tree":
        us = lat["base_nvls"][p] + 2 * (s.nodes - 1) * lat["nvls_tree_net"]
    elif algo == "collnet":
        us = lat["base_collnet"][p] + 2 * (min(1, s.ppn - 1) * lat["collnet_direct_nvlink"]
                                           + (s.ppn - 1) * 0.5) + lat["collnet_direct_net"]
    else:  # pat: log2(n) network steps
        us = lat["base_ring"][p] + math.ceil(math.log2(s.n)) * lat["net_ring"][p]
    return us * US


def _nccl_bus(hw: Hardware, s: NcclSystem, kind: str, algo: str, proto: str,
              bw: float, channels: int) -> float:
    """NCCL's tuner bus bandwidth (B/s) given its per-GPU view ``bw``."""
    c = hw.common
    bus = bw
    if algo == "ring" and proto == "LL":
        frac = c["ring_ll_bus_fraction"] if (s.nodes > 1 or kind in ("allreduce", "reduce")) \
            else 1 / 3
        bus = min(hw.ll_max_bus, bus * frac)
    if algo == "ring" and proto == "LL128":
        bus = min(bus * (0.7 if s.ppn < 2 else c["ll128_bus_fraction"]),
                  channels / 2 * hw.per_channel_ll128)
    if algo == "tree":
        bus = min(bus * c["tree_bus_fraction"], channels / 2 * hw.per_channel_tree)
        if proto == "LL":
            bus = min(bus / 3.8, hw.ll_max_bus)
        if proto == "LL128":
            bus = min(bus * (7 / 9 if s.nodes == 1 else 120 / 128),
                      channels / 2 * hw.per_channel_ll128)
    return bus


def _algbw_ratio(kind: str, algo: str, s: NcclSystem) -> float:
    if algo == "ring":
        nsteps, _ = _steps(kind, s.n, s.nodes)
        return s.n / nsteps
    if algo == "nvls":
        return 5 / 6
    if algo == "nvls_tree":
        return 0.70 * s.nodes / (2 * (s.nodes - 1))
    if algo == "pat":
        return s.n / (s.n - 1)
    return 0.5


def candidates(s: NcclSystem, kind: str) -> list[tuple[str, str]]:
    """The (algorithm, protocol) pairs NCCL's tuner considers for ``kind``."""
    algos = ["ring"]
    if kind == "allreduce" and s.n > 2:
        algos.append("tree")
    if kind == "allreduce" and s.nvls:
        algos.append("nvls")
    if kind == "allreduce" and s.nvls_tree:
        algos.append("nvls_tree")
    if kind == "allreduce" and s.collnet:
        algos.append("collnet")
    if kind in ("allgather", "reducescatter") and s.pat:
        algos.append("pat")
    out = []
    for a in algos:
        for p in PROTOCOLS:
            if a in ("nvls", "nvls_tree", "collnet", "pat") and p != "Simple":
                continue
            if p == "LL128" and s.intra_class not in ("nvlink2", "nvlink3", "nvlink4"):
                continue
            out.append((a, p))
    return out


def _view(s: NcclSystem) -> float:
    """NCCL's per-GPU bandwidth (B/s): NVLink at 0.8 of line, NICs per GPU on many nodes."""
    intra = s.intra_line * NCCL_VIEW
    if s.nodes > 1:
        return min(intra, s.nic_line * NCCL_VIEW / 1.0)
    return intra


def nccl_tuner_time(hw: Hardware, s: NcclSystem, kind: str, algo: str, proto: str,
                    nbytes: int) -> float:
    """NCCL's own predicted time (s) of ``algo``/``proto`` (ncclTopoGetAlgoTime)."""
    channels = hw.ring_channels
    if algo == "nvls":  # search.cc: 8 NVLS channels at 40 of 360 GB/s on H100 -> 8/9 of the view
        algbw = _view(s) * 8 / 9 * _algbw_ratio(kind, algo, s)
    elif algo == "nvls_tree":
        algbw = s.nic_line * NCCL_VIEW * _algbw_ratio(kind, algo, s)
    elif algo in ("collnet", "pat"):
        algbw = s.nic_line * NCCL_VIEW * _algbw_ratio(kind, algo, s)
    else:
        bus = _nccl_bus(hw, s, kind, algo, proto, _view(s), channels)
        algbw = bus * _algbw_ratio(kind, algo, s)
        if algo == "tree":
            log = int(math.log2(max(1, nbytes >> 6))) if nbytes >= 64 else 0
            if log < 23:
                algbw *= _TREE_CORRECTION[hw.proto_index(proto)][log]
    if algbw <= 0:
        return math.inf
    return nccl_latency(hw, s, kind, algo, proto) + nbytes / algbw


def nccl_choice(hw: Hardware, s: NcclSystem, kind: str, nbytes: int, *,
                algorithm: str | None = None, protocol: str | None = None
                ) -> tuple[str, str]:
    """NCCL's (algorithm, protocol) for ``kind`` of ``nbytes``: the tuner's fastest, within
    the given algorithm/protocol when set (``NCCL_ALGO``/``NCCL_PROTO``)."""
    pool = candidates(s, kind)
    if algorithm is not None:
        pool = [c for c in pool if c[0] == algorithm]
        if not pool:
            have = sorted({a for a, _ in candidates(s, kind)})
            raise TacosError(f"NCCL has no {algorithm!r} algorithm for {kind} here",
                             hint=f"available: {', '.join(have)}")
    if protocol is not None:
        pool = [c for c in pool if c[1] == protocol]
        if not pool:
            raise TacosError(f"NCCL cannot run {algorithm or kind} in protocol {protocol!r}")
    return min(pool, key=lambda c: nccl_tuner_time(hw, s, kind, c[0], c[1], nbytes))


def launched_channels(hw: Hardware, s: NcclSystem, algo: str, proto: str, nbytes: int) -> int:
    """CTAs per GPU NCCL launches: NVLS its 16; ring/tree fewer for small messages
    (``while nBytes < nc * nthreads * threshold: nc--``, enqueue.cc)."""
    if algo in ("nvls", "nvls_tree"):
        return int(hw.common["nvls_channels"])
    nc = hw.ring_channels
    thr = _THRESHOLD[proto] * (s.n if (algo == "ring" and proto == "LL") else 1)
    while nc > 1 and nbytes < nc * _THREADS[proto] * thr:
        nc -= 1
    return nc


# ------------------------------------------------------------------------------------------
# The runtime model's time
# ------------------------------------------------------------------------------------------

def _nvls_chunk(hw: Hardware, channels: int, heads: int, nbytes: int) -> float:
    """NCCL's NVLS chunk size for ``nbytes`` (enqueue.cc: 128 KiB, shrunk for small sizes)."""
    c = hw.common["nvls_max_chunk"]
    ops = channels * heads
    for mult, size in ((64, 65536), (8, 32768), (2, 16384)):
        if nbytes < mult * ops * c and c > size:
            c = size
    return min(c, nbytes / ops)


def _ring_rate(hw: Hardware, s: NcclSystem, algo: str, proto: str, channels: int
               ) -> tuple[float, str]:
    """Bus rate (B/s) the hardware gives a ring/tree of ``channels`` CTAs, and its bound."""
    c = hw.common
    cta = channels * hw.cta_rate[proto]
    port = s.intra_rate if s.nodes == 1 else min(s.intra_rate, s.nic_rate)
    if proto == "LL":
        port *= c["ring_ll_bus_fraction"] if algo == "ring" else 1 / 3.8
        port = min(port, hw.ll_max_bus)
    elif proto == "LL128":
        port *= c["ll128_bus_fraction"]
    if algo == "tree":
        port *= c["tree_bus_fraction"]
    if cta < port:
        return cta, "cta"
    return port, "link"


def estimate_nccl(topology: Topology, collective_kind: str, nbytes: int, *,
                  group: Sequence[int] | None = None, algorithm: str | None = None,
                  protocol: str | None = None, hardware: Hardware | str | None = None,
                  sweep: bool = False) -> RuntimeEstimate:
    """Runtime-model time of NCCL running ``collective_kind`` on ``nbytes`` bytes.

    NCCL's tuner picks the algorithm and protocol (or ``algorithm``/``protocol`` force them,
    like ``NCCL_ALGO``/``NCCL_PROTO``); the time is the runtime model's (module doc).
    ``sweep=True`` models nccl-tests run as one process driving every GPU (``-g 8``): the
    measured time per call is then at least the host's time per call (``sweep_host_us``).
    """
    hw = resolve(topology, hardware)
    kind = collective_kind.replace("_", "").lower()
    if kind not in ("allreduce", "allgather", "reducescatter", "broadcast", "reduce",
                    "alltoall"):
        raise TacosError(f"the NCCL runtime model has no {collective_kind!r}")
    if nbytes <= 0:
        raise TacosError("the message size must be positive")
    s = nccl_system(topology, group, hw)
    if kind == "alltoall":
        return _alltoall(hw, s, nbytes, sweep)
    algo, proto = nccl_choice(hw, s, kind, nbytes, algorithm=algorithm, protocol=protocol)
    channels = launched_channels(hw, s, algo, proto, nbytes)
    lat = nccl_latency(hw, s, kind, algo, proto)
    c = hw.common
    if algo in ("nvls", "nvls_tree"):
        rate = hw.nvls_algbw
        bound = "nvls"
        if algo == "nvls_tree":
            net = s.nic_rate * _algbw_ratio(kind, algo, s) / 0.70
            if net < rate:
                rate, bound = net, "link"
        chunk = _nvls_chunk(hw, channels, max(1, round(s.ppn)), nbytes)
        fill = c["fill_chunks_nvls"] * chunk / (rate / channels)
        wire = nbytes / rate
    elif algo in ("collnet", "pat"):
        rate = s.nic_rate
        bound = "link"
        wire = nbytes / (rate * _algbw_ratio(kind, algo, s))
        fill = 0.0
    else:
        rate, bound = _ring_rate(hw, s, algo, proto, channels)
        if algo == "ring":
            wire = nbytes * bus_factor(kind, s.n) / rate
            pieces = channels * s.n
        else:
            wire = nbytes / (rate * 0.5)
            pieces = channels
        step = hw.step_payload(proto)
        fill_steps = c["fill_steps_simple"] if proto == "Simple" else \
            c["fill_steps_ll128"] if proto == "LL128" else 0.0
        fill = fill_steps * min(step, nbytes / pieces) / (rate / channels)
    gpu_time = lat + wire + fill
    parts = {"latency": lat, bound: wire, "slices": fill}
    time = gpu_time
    if sweep and hw.sweep_host > gpu_time:
        time = hw.sweep_host
        parts["host"] = hw.sweep_host
    top = max(parts, key=parts.__getitem__)
    label = top if top not in ("link", "cta", "nvls") else bound
    detail = f"{label}: {algo}/{proto}, {channels} CTAs per GPU"
    return RuntimeEstimate.of(time, nbytes, kind, s.n, f"nccl-{algo}/{hw.name}", detail,
                              algorithm=algo, protocol=proto, channels=channels,
                              parts={k: v for k, v in parts.items()})


def _alltoall(hw: Hardware, s: NcclSystem, nbytes: int, sweep: bool) -> RuntimeEstimate:
    """All-to-all as NCCL runs it: grouped send/recv to every peer (Simple, p2p channels)."""
    n = s.n
    out = nbytes * (n - 1) / n
    rate = s.intra_rate if s.nodes == 1 else min(s.intra_rate,
                                                 s.nic_rate / max(1.0, s.ppn) * s.ppn)
    if s.nodes > 1:
        inter_share = (n - s.ppn) / max(1, n - 1)
        rate = min(s.intra_rate, s.nic_rate / s.ppn / max(inter_share, 1e-9))
    cta = hw.ring_channels * hw.cta_rate["Simple"]
    bound = "link" if rate <= cta else "cta"
    rate = min(rate, cta)
    lat = hw.base_latency("Simple") + hw.hop_latency("Simple", "nic" if s.nodes > 1
                                                     else hw.link_class)
    time = lat + out / rate
    if sweep:
        time = max(time, hw.sweep_host)
    return RuntimeEstimate.of(time, nbytes, "alltoall", n, f"nccl-p2p/{hw.name}",
                              f"{bound}: p2p/Simple", algorithm="p2p", protocol="Simple",
                              channels=hw.ring_channels)
