"""tacos: topology-aware collective algorithm synthesis.

Typical use::

    import tacos
    spec = tacos.load("examples/mesh4x4.tdl")
    schedule = tacos.synthesize(spec.topology, spec.collective, solver="greedy", seed=0)
    schedule.verify()
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tacos.collective import Chunk, Collective, combine
from tacos.errors import InfeasibleError, Span, TacosError, VerificationError
from tacos.patterns import build as collective
from tacos.patterns import custom as custom_collective
from tacos.schedule import Schedule, Transfer
from tacos.spec import Spec
from tacos.topology import Link, Npu, Switch, Topology

__version__ = "0.1.0"


def load(path: str | Path, params: dict[str, Any] | None = None) -> Spec:
    """Load a TDL file (``params`` override its ``param`` defaults)."""
    from tacos.frontends.tdl import load_tdl

    return load_tdl(path, params)


def parse(text: str, source: str = "<string>", params: dict[str, Any] | None = None) -> Spec:
    """Parse TDL text."""
    from tacos.frontends.tdl import parse_tdl

    return parse_tdl(text, source, params)


def synthesize(topology: Topology, collective: Collective, **options: Any) -> Schedule:
    """Synthesize a schedule (see :func:`tacos.synthesize.synthesize`)."""
    from tacos.synthesize import synthesize as _synthesize

    return _synthesize(topology, collective, **options)


def verify(schedule: Schedule) -> Any:
    """Check a schedule independently of the solver that made it; returns the report."""
    from tacos.verify import verify_schedule

    return verify_schedule(schedule)


__all__ = [
    "Chunk",
    "Collective",
    "InfeasibleError",
    "Link",
    "Npu",
    "Schedule",
    "Span",
    "Spec",
    "Switch",
    "TacosError",
    "Topology",
    "Transfer",
    "VerificationError",
    "collective",
    "combine",
    "custom_collective",
    "load",
    "parse",
    "synthesize",
    "verify",
]
