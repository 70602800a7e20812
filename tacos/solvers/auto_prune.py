"""Candidates of the ``auto`` portfolio that cannot win, known before they run.

Every synthesized plan is ranked by the runtime model's time of its execution, whose links
move payload at most at their line rate (``tacos.runtime.hardware``: line rate x an
efficiency <= 1).  So no synthesized plan runs faster than the bandwidth part of the
physical lower bound (:func:`tacos.check.bounds.lower_bound`: min-cut and ingress/egress at
line rate).  NCCL's own choice, as NCCL runs it, is always among the plans ``auto`` compares
with; when its runtime-model time is already at or under that bound, no synthesizer can win
and running one (the forest's tree packing takes tens of seconds on some 16-NPU systems) only
costs time.  :func:`unbeatable_reference` says so, with the figures, or returns None.
"""

from __future__ import annotations

from dataclasses import dataclass

from tacos.errors import TacosError
from tacos.model.collective import Collective
from tacos.model.topology import Topology


@dataclass(frozen=True)
class Reference:
    """NCCL's modelled best (``label``, ``time`` s) and the synthesizers' bound (s)."""

    label: str
    time: float
    bound: float

    def reason(self) -> str:
        """Why a synthesizer is not run (the ``skipped`` entry)."""
        from tacos.model.units import format_time

        return (f"cannot win: {self.label} takes {format_time(self.time)} in the runtime "
                f"model, at or under the physical bound {format_time(self.bound)} no "
                "synthesized plan can beat (name it with --solver to run it anyway)")


def unbeatable_reference(topology: Topology, collective: Collective) -> Reference | None:
    """NCCL's modelled time when it is at or under every synthesized plan's bound, else None
    (also when the runtime model has no NCCL time for this collective)."""
    from tacos.check.bounds import lower_bound
    from tacos.runtime.plans import nccl_runtime

    try:
        est = nccl_runtime(topology, collective.kind, collective.size, collective.group, None)
    except (TacosError, KeyError, ValueError):
        return None
    if est is None or not est.time > 0:
        return None
    bound = lower_bound(topology, collective).bandwidth
    if not bound >= est.time:
        return None
    algo = str((est.detail or {}).get("algorithm", "") or "")
    label = "nccl-" + {"nvls_tree": "nvls"}.get(algo, algo) if algo else "NCCL"
    return Reference(label, est.time, bound)
