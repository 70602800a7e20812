"""The frontend's result: a topology plus the collectives declared with it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tacos.model.collective import Collective, combine
from tacos.model.topology import Topology

if TYPE_CHECKING:
    from tacos.jobs.model import Job
    from tacos.reshard.tasks import Reshard


@dataclass(frozen=True)
class Spec:
    """A parsed TDL file: its topology, declared collectives and parameter values, and the
    tensors to reshard (``reshard`` statements) and jobs sharing the fabric (``job``)."""

    topology: Topology
    collectives: tuple[Collective, ...] = ()
    source: str = "<string>"
    params: dict[str, object] = field(default_factory=dict, compare=False)
    reshards: tuple[Reshard, ...] = ()
    jobs: tuple[Job, ...] = ()

    @property
    def collective(self) -> Collective | None:
        """The declared collectives as one (multi-tenant when several), or None."""
        if not self.collectives:
            return None
        return combine(self.collectives)
