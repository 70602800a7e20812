"""The runtime model: how GPU runtimes execute collectives (docs/runtime-model.md).

Below the link-level α-β model the solvers optimize, this package models what a runtime does
with a plan: CTAs (threadblocks) running steps on channels through FIFO slots, protocols
(LL, LL128, Simple) with their payload efficiency and latencies, per-CTA throughput, ports
shared by the CTAs that use them at their effective (not line) rate, and NCCL's own algorithms
with its tuner's choices.  Every figure comes from ``hardware.toml`` with its source.

Public API::

    estimate_program(program, topology, nbytes, *, ranks=None, hardware=None) -> RuntimeEstimate
    estimate_mscclpp(plan, topology, nbytes, *, ranks=None, hardware=None) -> RuntimeEstimate
    estimate_nccl(topology, collective_kind, nbytes, *, group=None, algorithm=None,
                  protocol=None, hardware=None) -> RuntimeEstimate
    hardware_for(topology) -> Hardware
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tacos.runtime.estimate import RuntimeEstimate, bus_factor
from tacos.runtime.hardware import Hardware, generations, hardware, hardware_for

if TYPE_CHECKING:  # pragma: no cover
    from tacos.runtime.msccl_exec import estimate_program
    from tacos.runtime.mscclpp_exec import estimate_mscclpp
    from tacos.runtime.nccl_model import estimate_nccl

_LAZY = {
    "estimate_program": "tacos.runtime.msccl_exec",
    "estimate_mscclpp": "tacos.runtime.mscclpp_exec",
    "estimate_nccl": "tacos.runtime.nccl_model",
}


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(name)
    import importlib

    return getattr(importlib.import_module(mod), name)


__all__ = ["RuntimeEstimate", "Hardware", "bus_factor", "estimate_program", "estimate_mscclpp",
           "estimate_nccl", "generations", "hardware", "hardware_for"]
