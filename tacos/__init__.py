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

# Bound after the submodules of the same names are imported, so that the package attributes
# ``tacos.synthesize`` and ``tacos.verify`` are the functions, not the modules.
from tacos.synthesize import solve, synthesize  # noqa: E402  isort: skip
from tacos.verify import verify_schedule as verify  # noqa: E402  isort: skip

__version__ = "0.1.0"


def load(path: str | Path, params: dict[str, Any] | None = None) -> Spec:
    """Load a TDL file (``params`` override its ``param`` defaults)."""
    from tacos.frontends.tdl import load_tdl

    return load_tdl(path, params)


def parse(text: str, source: str = "<string>", params: dict[str, Any] | None = None) -> Spec:
    """Parse TDL text."""
    from tacos.frontends.tdl import parse_tdl

    return parse_tdl(text, source, params)


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
    "solve",
    "synthesize",
    "verify",
]
