"""Schedule IR: timed chunk transfers over a topology's links.

Times are seconds, sizes bytes.  A :class:`Transfer` moves one or more chunks together over one
link (``link`` indexes ``Schedule.topology.links``), paying the link's α once: its duration is
``alpha + Σ chunk sizes / bandwidth`` (MSCCL's ``cnt``).  ``op='copy'`` overwrites the
destination's copy of each chunk with the source's; ``op='reduce'`` combines the source's partial
value into the destination's.  When the topology had switches, ``Schedule.topology`` is the
unwound one and a transfer over a virtual link passes through ``link.via``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tacos.collective import Collective
from tacos.topology import Link, Topology

if TYPE_CHECKING:
    from tacos.verify import VerifyReport

OPS = ("copy", "reduce")


@dataclass(frozen=True, order=True)
class Transfer:
    """Chunks ``chunks`` travel ``src -> dst`` on link ``link`` during ``[start, end]``."""

    start: float
    end: float
    src: int
    dst: int
    link: int
    chunks: tuple[int, ...]
    op: str = "copy"

    @property
    def duration(self) -> float:
        """``end - start`` in seconds."""
        return self.end - self.start


@dataclass(frozen=True)
class Schedule:
    """A synthesized algorithm: the transfers plus the problem they solve.

    ``meta`` holds solver facts (name, seed, trials, status, bounds); it does not take part in
    equality.
    """

    topology: Topology
    collective: Collective
    transfers: tuple[Transfer, ...]
    meta: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def makespan(self) -> float:
        """Time at which the last transfer ends (0 for an empty schedule)."""
        return max((t.end for t in self.transfers), default=0.0)

    def link_of(self, t: Transfer) -> Link:
        """The link a transfer uses."""
        return self.topology.links[t.link]

    def transfer_bytes(self, t: Transfer) -> int:
        """Bytes a transfer carries."""
        return sum(self.collective.chunks[c].size for c in t.chunks)

    def by_link(self) -> dict[int, list[Transfer]]:
        """Transfers grouped by link index, each list sorted by start time."""
        out: dict[int, list[Transfer]] = defaultdict(list)
        for t in sorted(self.transfers):
            out[t.link].append(t)
        return dict(out)

    def by_npu(self) -> dict[int, dict[str, list[Transfer]]]:
        """For every NPU, its ``'send'`` and ``'recv'`` transfers sorted by start time."""
        out: dict[int, dict[str, list[Transfer]]] = defaultdict(lambda: {"send": [], "recv": []})
        for t in sorted(self.transfers):
            out[t.src]["send"].append(t)
            out[t.dst]["recv"].append(t)
        return dict(out)

    def verify(self) -> VerifyReport:
        """Check the schedule with :func:`tacos.verify.verify_schedule`.

        Returns the :class:`~tacos.verify.VerifyReport`; raises
        :class:`~tacos.errors.VerificationError` listing the first violations when it fails.
        """
        from tacos.verify import verify_schedule

        return verify_schedule(self).raise_if_failed()

    def to_json(self) -> str:
        """The schedule as deterministic JSON (schema ``tacos.schedule/1``)."""
        from tacos.backends.json_schedule import dumps

        return dumps(self)
