"""Solver interface and registry.

A solver turns a :class:`Problem` into a :class:`SolveResult`.  Solvers are registered by name
as ``"module:attr"`` strings and imported lazily, so a missing optional dependency only matters
when that solver is asked for.

Contract: unless a solver class sets ``supports_combining = True``, it is only given
non-combining collectives (no chunk with ``reduce``) on switch-free topologies;
:func:`tacos.synthesize` unwinds switches and derives reductions by inversion.  A solver
that models switch ports itself sets ``native_switches = True`` and is given the original
topology instead of the unwound one.  A solver that sets ``refines_chunks = True`` may return a
schedule of a refinement of the collective (each chunk split into equal pieces, same layout).

Options: a solver class declares the options it reads in ``options`` (name ->
:class:`tacos.solvers.options.Option`); :func:`tacos.synthesize` rejects any other option
(besides the common ``seed``, ``trials``, ``workers``, ``time_limit``, ``progress``) with a
"did you mean".
"""

from __future__ import annotations

import difflib
import importlib
from dataclasses import dataclass, field
from typing import Any, Protocol

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


class Solver(Protocol):
    """Anything with a ``name`` and a ``solve`` method."""

    name: str
    supports_combining: bool

    def solve(self, problem: Problem) -> SolveResult:
        """Synthesize a schedule for ``problem``."""
        ...


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
