"""NCCL's own algorithms in the runtime model: ring, tree, NVLS, NVLS-tree, CollNet, PAT.

Two halves, kept apart on purpose:

* **NCCL's choice** (:func:`tacos.runtime.nccl_tuner.nccl_choice`) reproduces NCCL's tuner
  (``src/graph/tuning.cc``, v2.18), the minimum of its own predicted times kept.
* **The time** (:func:`estimate_nccl`) is the runtime model's: the chosen protocol's latency
  (the same tables), bytes over the bus rate the hardware gives -- the smaller of the channels'
  per-CTA rates and the ports' effective payload rates (``hardware.toml``) -- plus a pipeline
  fill of a few FIFO steps (NVLS: chunks) at the per-channel rate, whose step/chunk sizes follow
  NCCL's own chunk-size rules (``enqueue.cc``).  The channels NCCL launches shrink for small
  messages exactly as ``enqueue.cc`` does (thread thresholds).
"""

from __future__ import annotations

from collections.abc import Sequence

from tacos.errors import TacosError
from tacos.model.topology import Topology
from tacos.runtime.estimate import RuntimeEstimate, bus_factor
from tacos.runtime.hardware import Hardware, resolve
from tacos.runtime.nccl_tuner import (
    NcclSystem,
    algbw_ratio,
    launched_channels,
    nccl_choice,
    nccl_latency,
    nccl_system,
)

__all__ = ["estimate_nccl", "nccl_system", "NcclSystem"]


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
    if s.intra_rate <= 0 or (s.nodes > 1 and s.nic_rate <= 0):
        raise TacosError("the NCCL runtime model finds no link rate for this group "
                         "(no intra-node links or no NIC between its nodes)")
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
            net = s.nic_rate * algbw_ratio(kind, algo, s) / 0.70
            if net < rate:
                rate, bound = net, "link"
        chunk = _nvls_chunk(hw, channels, max(1, round(s.ppn)), nbytes)
        fill = c["fill_chunks_nvls"] * chunk / (rate / channels)
        wire = nbytes / rate
    elif algo in ("collnet", "pat"):
        rate = s.nic_rate
        bound = "link"
        wire = nbytes / (rate * algbw_ratio(kind, algo, s))
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
