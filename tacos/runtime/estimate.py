"""The result of the runtime model: time, algbw and busbw (nccl-tests conventions), and what
bounds the time."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: The kinds of bound :attr:`RuntimeEstimate.bound` names.
BOUNDS: tuple[str, ...] = (
    "link",          # a port's effective payload rate (shared by the CTAs that use it)
    "cta",           # the per-CTA copy/reduce rate of the protocol (too few CTAs per port)
    "latency",       # protocol base and per-hop latencies (small messages)
    "slices",        # per-slice synchronization and pipeline fill (many small slices)
    "nvls",          # the NVLink SHARP (multimem) rate
    "host",          # the host-side time per call of a one-process-many-GPU benchmark
)


def bus_factor(kind: str, n: int) -> float:
    """nccl-tests' busbw / algbw factor for a collective on ``n`` ranks."""
    if n <= 1:
        return 1.0
    if kind == "allreduce":
        return 2.0 * (n - 1) / n
    if kind in ("allgather", "reducescatter", "alltoall", "reduce_scatter", "all_gather"):
        return (n - 1) / n
    return 1.0


@dataclass(frozen=True)
class RuntimeEstimate:
    """Modelled run time of a collective as a GPU runtime executes it.

    ``time`` in seconds; ``algbw`` = message bytes / time and ``busbw`` = algbw x nccl-tests'
    bus factor, in bytes/s; ``model`` names the executor and generation
    (``"msccl-executor/h100"``); ``bound`` says what bounds the time (one of :data:`BOUNDS`,
    possibly with a detail after a colon, e.g. ``"link: gpu[0]->nvswitch"``).  ``detail`` holds
    model-specific figures (algorithm, protocol, channels, the bound's share of the time).
    """

    time: float
    algbw: float
    busbw: float
    model: str
    bound: str
    nbytes: int = 0
    detail: dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def of(cls, time: float, nbytes: int, kind: str, n: int, model: str, bound: str,
           **detail: Any) -> RuntimeEstimate:
        """Build an estimate from a time and the message it moved."""
        algbw = nbytes / time if time > 0 else 0.0
        return cls(time, algbw, algbw * bus_factor(kind, n), model, bound, int(nbytes),
                   dict(detail))

    def to_json(self) -> dict[str, Any]:
        """``{"time", "algbw", "busbw", "model", "bound"}`` (seconds and bytes/s)."""
        return {"time": self.time, "algbw": self.algbw, "busbw": self.busbw,
                "model": self.model, "bound": self.bound}

    def describe(self) -> str:
        """One line for reports: time, busbw, model and bound."""
        return (f"{self.time * 1e6:.1f} us, algbw {self.algbw / 1e9:.1f} GB/s, busbw "
                f"{self.busbw / 1e9:.1f} GB/s ({self.model}; bound: {self.bound})")
