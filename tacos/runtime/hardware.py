"""Hardware parameters of the runtime model, per GPU generation (``hardware.toml``).

One data file holds every figure the runtime model uses, each with its source: effective
payload rate per link class, per-CTA throughput per protocol, NCCL's base and per-hop latencies
per protocol, SM counts, NCCL's channel counts and NVLS rates, and the few calibrated values.
:func:`hardware_for` picks the generation of a topology: the ``hardware "h100"`` statement of
its TDL file (presets declare it), else its name (``DGX-H100 node`` -> h100), else ``generic``.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from functools import cache
from importlib.resources import files
from typing import Any

from tacos.errors import TacosError
from tacos.model.topology import Link, Topology

#: Protocol names in the order of the data file's ``[LL, LL128, Simple]`` lists.
PROTOCOLS: tuple[str, ...] = ("LL", "LL128", "Simple")
GB = 1e9
US = 1e-6

#: Name patterns that say a topology's generation when it declares none (first match wins).
_NAME_RULES: tuple[tuple[str, str], ...] = (
    (r"h100|h200|ndv5|gh200", "h100"),
    (r"a100|ndv4", "a100"),
    (r"v100|dgx-?1\b|ndv2|p3[._]", "v100"),
    (r"mi2\d0|mi300", "mi250"),
)


@cache
def _data() -> dict[str, Any]:
    with files("tacos.runtime").joinpath("hardware.toml").open("rb") as fh:
        return tomllib.load(fh)


def generations() -> tuple[str, ...]:
    """Names of the GPU generations in the data file (``a100``, ``h100`` ...)."""
    return tuple(_data()["gpu"])


@dataclass(frozen=True)
class Hardware:
    """One GPU generation's parameters (rates in B/s, latencies in s).  See ``hardware.toml``."""

    name: str
    title: str
    compcap: int
    sms: int
    link_class: str
    cta_rate: dict[str, float]
    ring_channels: int
    nvls: bool
    nvls_algbw: float
    ll_max_bus: float
    per_channel_ll128: float
    per_channel_tree: float
    sweep_host: float
    link_efficiency: dict[str, float]
    nic_rates: dict[str, float]
    common: dict[str, float]
    latency: dict[str, Any]
    sources: dict[str, str] = field(default_factory=dict)
    #: LL128 may cross NIC links (NCCL enables it over the network only on GPU-near NICs)
    ll128_net: bool = True

    # -- protocols -------------------------------------------------------------------------
    def proto_index(self, protocol: str) -> int:
        """Index of ``protocol`` in the ``[LL, LL128, Simple]`` lists."""
        try:
            return PROTOCOLS.index(protocol)
        except ValueError:
            raise TacosError(f"unknown protocol {protocol!r}",
                             hint=f"protocols: {', '.join(PROTOCOLS)}") from None

    def cta_reduce_rate(self, protocol: str) -> float:
        """Per-CTA payload rate (B/s) of a reduction (two inputs combined) in ``protocol``."""
        return self.cta_rate[protocol] * self.common["cta_reduce_factor"]

    def payload(self, protocol: str) -> float:
        """Fraction of the bytes on the wire that is payload (LL 1/2, LL128 120/128)."""
        return {"LL": self.common["ll_payload"], "LL128": self.common["ll128_payload"],
                "Simple": 1.0}[protocol]

    def step_payload(self, protocol: str) -> float:
        """Payload bytes of one FIFO step (slot) of a connection."""
        if protocol == "LL":
            return self.common["ll_step_payload"]
        if protocol == "LL128":
            return self.common["ll128_step_payload"]
        return self.common["simple_buffsize"] / self.common["nccl_steps"]

    def chunk_payload(self, protocol: str) -> float:
        """Bytes one primitive call moves per MSCCL chunk per loop iteration: Simple takes
        ``MSCCL_CHUNKSTEPS`` (4) slots, LL and LL128 one."""
        steps = self.common["simple_chunk_steps"] if protocol == "Simple" else 1
        return self.step_payload(protocol) * steps

    def slots_per_call(self, protocol: str) -> int:
        """FIFO slots one primitive call occupies (Simple 4 of 8, LL/LL128 1)."""
        return int(self.common["simple_chunk_steps"]) if protocol == "Simple" else 1

    def hop_latency(self, protocol: str, link_class: str) -> float:
        """NCCL's per-hop latency of a ring step (``hwLat``) for a link class, in seconds."""
        table = "net_ring" if link_class == "nic" else \
            "pci_ring" if link_class == "pcie" else "nvlink_ring"
        return self.latency[table][self.proto_index(protocol)] * US

    def base_latency(self, protocol: str) -> float:
        """NCCL's base latency of a kernel in ``protocol`` (ring ``baseLat``), in seconds."""
        return self.latency["base_ring"][self.proto_index(protocol)] * US

    # -- links -----------------------------------------------------------------------------
    def classify(self, link: Link) -> str:
        """Link class of a topology link: ``nic`` (tags nic/ib/net/eth), ``xgmi``, ``pcie``,
        else the generation's GPU interconnect (``nvlink3`` ...)."""
        tag = (link.tag or "").lower()
        if tag.startswith(("nic", "ib", "net", "eth", "roce")):
            return "nic"
        if tag.startswith("xgmi"):
            return "xgmi"
        if tag.startswith("pci"):
            return "pcie"
        return self.link_class

    def link_rate(self, link: Link) -> float:
        """Effective payload rate of one lane of ``link`` (B/s): line rate x class efficiency."""
        return link.bandwidth * self.link_efficiency[self.classify(link)]

    def to_json(self) -> dict[str, Any]:
        """The parameters as plain JSON values."""
        return {"name": self.name, "title": self.title, "sms": self.sms,
                "link_class": self.link_class,
                "cta_rate": {p: r for p, r in self.cta_rate.items()},
                "ring_channels": self.ring_channels, "nvls": self.nvls,
                "nvls_algbw": self.nvls_algbw}


@cache
def hardware(name: str) -> Hardware:
    """The :class:`Hardware` of generation ``name`` (``a100``, ``h100``, ``v100``, ``mi250``,
    ``generic``); a ``TacosError`` names the known ones otherwise."""
    data = _data()
    key = name.lower()
    if key not in data["gpu"]:
        raise TacosError(f"unknown hardware generation {name!r}",
                         hint=f"known generations: {', '.join(generations())}")
    g = data["gpu"][key]
    return Hardware(
        name=key, title=g["title"], compcap=int(g["compcap"]), sms=int(g["sms"]),
        link_class=g["link_class"],
        cta_rate={p: float(r) * GB for p, r in zip(PROTOCOLS, g["cta_gbps"], strict=True)},
        ring_channels=int(g["ring_channels"]), nvls=bool(g["nvls"]),
        nvls_algbw=float(g["nvls_algbw_gbps"]) * GB, ll_max_bus=float(g["ll_max_bus_gbps"]) * GB,
        per_channel_ll128=float(g["per_channel_ll128_gbps"]) * GB,
        per_channel_tree=float(g["per_channel_tree_gbps"]) * GB,
        sweep_host=float(g["sweep_host_us"]) * US,
        link_efficiency={k: float(v["efficiency"]) for k, v in data["link_class"].items()},
        nic_rates={k: float(v) * GB for k, v in data["nic"].items()},
        common={k: float(v) for k, v in data["common"].items()},
        latency=dict(data["latency"]),
        sources=dict(g.get("src", {})),
        ll128_net=bool(g.get("ll128_net", True)),
    )


def generation_of(topology: Topology) -> str:
    """The generation a topology names: its declared ``hardware``, else a name rule, else
    ``generic``."""
    declared = getattr(topology, "hardware", "") or ""
    if declared:
        return declared.lower()
    name = (topology.name or "").lower()
    for pattern, gen in _NAME_RULES:
        if re.search(pattern, name):
            return gen
    return "generic"


def hardware_for(topology: Topology) -> Hardware:
    """The :class:`Hardware` of ``topology`` (see :func:`generation_of`)."""
    return hardware(generation_of(topology))


def resolve(topology: Topology, given: Hardware | str | None) -> Hardware:
    """``given`` as a :class:`Hardware` (a name is looked up), or the topology's own."""
    if given is None:
        return hardware_for(topology)
    if isinstance(given, str):
        return hardware(given)
    return given
