"""Solver interface and registry.

A solver turns a :class:`Problem` into a :class:`SolveResult`.  Solvers are registered by name
as ``"module:attr"`` strings and imported lazily, so a missing optional dependency only matters
when that solver is asked for.

Contract: a solver declares its :class:`Capabilities`.  Unless it has ``combining``, it is only
given non-combining collectives (no chunk with ``reduce``): :func:`tacos.synthesize` derives
reductions by inversion.  Unless it has ``native_switches`` (it models switch ports itself), it
is given a switch-free view of the topology (switch unwinding) and its schedule is mapped back.
With ``refines_chunks`` it may return a schedule of a refinement of the collective (each chunk
split into equal pieces, same layout).  ``requires`` names the packages it needs, checked
without importing them.  :meth:`SolverBase.accepts` says, before any work, why a solver cannot
take a problem (``None`` when it can); the driver asks it first, and so may ``auto`` or the
command line.

Options: a solver class declares the options it reads in ``options`` (name ->
:class:`tacos.solvers.options.Option`); :func:`tacos.synthesize` rejects any other option
(besides the common ``seed``, ``trials``, ``workers``, ``time_limit``, ``progress``) with a
"did you mean".
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from tacos.errors import UsageError
from tacos.model.collective import Collective
from tacos.model.schedule import Schedule
from tacos.model.topology import Topology

STATUSES = ("optimal", "feasible", "time_limit", "infeasible")


@dataclass(frozen=True)
class Problem:
    """What a solver is asked: a topology, a collective and options.

    ``options`` carries the common settings (``seed``, ``trials``, ``workers``,
    ``time_limit``, ``progress``) and the ones the solver declares; they are checked by
    :func:`tacos.solvers.options.check_options` before the solver sees them.
    """

    topology: Topology
    collective: Collective
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SolveResult:
    """A solver's answer.  ``schedule`` is None only when ``status == 'infeasible'``."""

    status: str
    schedule: Schedule | None
    lower_bound: float | None = None
    stats: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Capabilities:
    """What a solver can be given (see the module docstring)."""

    combining: bool = False
    """It solves combining collectives (reductions) itself; else the driver inverts them."""
    native_switches: bool = False
    """It models switch ports itself; else it works on the switch-unwound view."""
    refines_chunks: bool = False
    """Its schedule may serve a refinement of the collective (chunks cut into equal pieces)."""
    requires: tuple[str, ...] = ()
    """Top-level packages it needs (checked with :func:`importlib.util.find_spec`)."""


class Solver(Protocol):
    """A solver: a ``name``, its :class:`Capabilities`, ``accepts`` and ``solve``."""

    name: str
    capabilities: Capabilities

    def accepts(self, problem: Problem) -> str | None:
        """Why this solver cannot take ``problem`` (None when it can), without solving."""
        ...

    def solve(self, problem: Problem) -> SolveResult:
        """Synthesize a schedule for ``problem``."""
        ...


class SolverBase:
    """What registered solvers share: no capabilities unless declared, and an ``accepts`` that
    checks the required packages (subclasses add their own gates)."""

    name: ClassVar[str] = ""
    capabilities: ClassVar[Capabilities] = Capabilities()

    def accepts(self, problem: Problem) -> str | None:
        """Why this solver cannot take ``problem`` (None when it can)."""
        missing = [m for m in self.capabilities.requires if importlib.util.find_spec(m) is None]
        if missing:
            return f"solver {self.name!r} needs {', '.join(missing)}, which is not installed"
        return None


SOLVERS: dict[str, str] = {
    "auto": "tacos.solvers.auto:AutoSolver",
    "greedy": "tacos.solvers.greedy.solver:GreedySolver",
    "ilp": "tacos.solvers.ilp.solver:IlpSolver",
    "taccl": "tacos.solvers.taccl_like:TacclLikeSolver",
    "ring": "tacos.solvers.baselines.solver:RingSolver",
    "biring": "tacos.solvers.baselines.solver:BiRingSolver",
    "direct": "tacos.solvers.baselines.solver:DirectSolver",
    "rhd": "tacos.solvers.baselines.solver:HalvingDoublingSolver",
    "dbtree": "tacos.solvers.baselines.solver:DoubleBinaryTreeSolver",
    "hierarchical": "tacos.solvers.baselines.solver:HierarchicalSolver",
    "multicast": "tacos.solvers.multicast:MulticastSolver",
    "forest": "tacos.solvers.forest.solver:ForestSolver",
    "a2a": "tacos.solvers.alltoall:AllToAllSolver",
    "nccl": "tacos.solvers.nccl.solver:NcclSolver",
    "nccl-ring": "tacos.solvers.nccl.solver:NcclRingSolver",
    "nccl-tree": "tacos.solvers.nccl.solver:NcclTreeSolver",
    "nvls": "tacos.solvers.nccl.solver:NvlsSolver",
    "collnet": "tacos.solvers.nccl.solver:CollNetSolver",
    "pat": "tacos.solvers.nccl.solver:PatSolver",
    "nccl-p2p": "tacos.solvers.nccl.solver:NcclP2pSolver",
}


def get_solver(name: str) -> Solver:
    """Instantiate the solver registered as ``name`` (with a "did you mean" on typos)."""
    return solver_class(name)()


def solver_class(name: str) -> type:
    """The class registered as ``name`` (imported on first use)."""
    if not isinstance(name, str) or name not in SOLVERS:
        close = difflib.get_close_matches(str(name), SOLVERS, n=1)
        hint = f"did you mean '{close[0]}'?" if close else f"choose one of {', '.join(SOLVERS)}"
        raise UsageError(f"unknown solver {name!r}", hint=hint)
    module, attr = SOLVERS[name].split(":")
    try:
        cls = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"solver {name!r} is not available in this build ({exc})") from exc
    return cls
