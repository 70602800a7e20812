"""NCCL's algorithms in the ``auto`` portfolio, timed before they are built.

When ``auto`` ranks by the runtime model with NCCL's algorithms run as NCCL runs them (the
default: no MSCCL XML written, no plans kept), an algorithm's time is
:func:`tacos.runtime.plans.nccl_runtime` of the collective -- NCCL's own model, which reads the
topology, the collective's kind, size and group, and never the link-level schedule that
:func:`tacos.solvers.nccl.solver.nccl_schedule` builds (channel counts and pipeline depths
tried one by one: seconds on 64 NPUs).  :func:`timed_nccl` gives those times; the portfolio
builds and verifies the schedule of the algorithm that wins only.

The answer is the one of building every schedule first:

* the winner is built and verified as before; if it cannot be built or does not verify, the
  portfolio ranks again with every schedule built (a plan that does not verify never ranks);
* a schedule that is not built cannot take part otherwise: with NCCL's times known, the
  runtime model ranks, the link-model time of an NCCL schedule orders nothing, and the floor
  that prunes synthesized plans is compared with times, not schedules;
* building fails for the whole of NCCL when one algorithm cannot be built (the portfolio then
  skips ``nccl``); the failures not tied to a setting are checked here first: the group's
  standard layout, the list of algorithms, the group size, and the rings NCCL's ring searches
  for (the search is kept for the ring's build).  What is left -- a route missing inside a
  builder, an internal error of the baseline lowering -- fails the winner's build, which
  then falls back to building them all.  Only such a failure of an algorithm that does not
  win goes unseen (building them all would have skipped every NCCL algorithm).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tacos.errors import TacosError
from tacos.model.collective import Collective
from tacos.model.schedule import Schedule
from tacos.model.topology import Topology
from tacos.runtime.estimate import RuntimeEstimate


@dataclass
class TimedNccl:
    """NCCL's algorithms for one collective (``names``, in NCCL's order) with their
    runtime-model ``(estimate, note)`` as :func:`tacos.runtime.plans.runtime_of` gives them."""

    topology: Topology
    collective: Collective
    system: Any
    names: list[str]
    timed: dict[str, tuple[RuntimeEstimate, str]]

    def labels(self) -> list[str]:
        """The portfolio's labels (``nccl-ring`` ...), in NCCL's order."""
        return [f"nccl-{name}" for name in self.names]

    def by_label(self) -> dict[str, tuple[RuntimeEstimate, str]]:
        """``(estimate, note)`` per label, in NCCL's order."""
        return {f"nccl-{name}": self.timed[name] for name in self.names}

    def build(self, label: str) -> Schedule:
        """The link-level schedule of candidate ``label`` (as ``nccl_best`` builds it)."""
        from tacos.solvers.nccl.solver import nccl_schedule

        return nccl_schedule(label.removeprefix("nccl-"), self.topology, self.collective,
                             sys_=self.system)


def timed_nccl(topology: Topology, collective: Collective, sys_: Any = None
               ) -> TimedNccl | None:
    """NCCL's algorithms timed by NCCL's runtime model, or None when one has no runtime time
    (the portfolio then builds them all).  Raises the :class:`TacosError` that building them
    all would raise before any setting is tried (see module doc)."""
    from tacos.runtime.plans import nccl_runtime
    from tacos.solvers.nccl.lower import check_standard
    from tacos.solvers.nccl.rings import max_channels
    from tacos.solvers.nccl.solver import nccl_algorithms
    from tacos.solvers.nccl.system import system

    check_standard(collective, "NCCL")
    sys_ = sys_ or system(topology, collective.group)
    names = nccl_algorithms(sys_, collective)
    if not names:
        raise TacosError(f"NCCL has no algorithm for {collective.label()}")
    if len(sys_.group) < 2:
        raise TacosError("an NCCL collective needs at least two ranks")
    timed: dict[str, tuple[RuntimeEstimate, str]] = {}
    for name in names:
        try:
            est = nccl_runtime(topology, collective.kind, collective.size, collective.group,
                               name)
        except TacosError:
            return None
        if est is None:
            return None
        timed[name] = (est, f"NCCL running its {name}")
    if "ring" in names:
        max_channels(sys_)  # the ring search: raises where the ring cannot be built
    return TimedNccl(topology, collective, sys_, names, timed)
