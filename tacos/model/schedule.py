"""Schedule IR: timed chunk transfers over routes of a topology's physical links.

Times are seconds, sizes bytes.  A :class:`Transfer` moves one or more chunks together from NPU
``src`` to NPU ``dst`` over a *route* (:mod:`tacos.model.routes`): a tuple of indices into
``Schedule.topology.links`` -- one direct link, or the up-port, fabric links and down-port of a
path through switches.  It is cut-through and pays the route's α once: its duration is at least
``Σ α + Σ chunk sizes / narrowest bandwidth`` (MSCCL's ``cnt``), and it holds one lane of every
link of its route for that whole time.  ``op='copy'`` overwrites the destination's copy of each
chunk with the source's; ``op='reduce'`` combines the source's partial value into the
destination's.

Transfers that share a ``group`` id are **one in-switch operation** (``docs/machine-model.md``,
"In-switch collectives"): a *fan-out* (multicast) group has one source and sends the same
chunks to several destinations, its routes sharing their common prefix up to a switch that
declares ``multicast``; a *fan-in* (reduce) group has one destination and ``op='reduce'``, its
routes merging in switches that declare ``reduce``.  The members start and end together and a
link shared by several members is held once.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from tacos.model.collective import Collective
from tacos.model.routes import Route
from tacos.model.topology import Topology
from tacos.model.transfer import Transfer

if TYPE_CHECKING:
    from tacos.model.columns import TransferColumns

@dataclass(frozen=True)
class Schedule:
    """A synthesized algorithm: the transfers plus the problem they solve.

    ``transfers`` is a sequence of :class:`Transfer`: a tuple, or a
    :class:`~tacos.model.columns.TransferColumns` (numpy columns that build ``Transfer``
    objects on demand, what the greedy returns); either way the schedule means, compares and
    serializes the same.  ``meta`` holds solver facts (name, seed, trials, status, bounds); it
    does not take part in equality.
    """

    topology: Topology
    collective: Collective
    transfers: Sequence[Transfer]
    meta: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def columns(self) -> TransferColumns:
        """The transfers as :class:`~tacos.model.columns.TransferColumns`: ``transfers``
        itself when it is columnar, else built once from it and kept.  Raises
        ``TypeError``/``ValueError`` for transfers columns cannot hold (see
        :meth:`~tacos.model.columns.TransferColumns.from_transfers`)."""
        from tacos.model.columns import TransferColumns

        ts = self.transfers
        if isinstance(ts, TransferColumns):
            return ts
        cached = self.__dict__.get("_columns")
        if cached is None or cached[0] is not ts or len(cached[1]) != len(ts):
            cached = (ts, TransferColumns.from_transfers(ts))
            self.__dict__["_columns"] = cached
        return cached[1]

    @property
    def columnar(self) -> bool:
        """True when ``transfers`` is stored as columns."""
        from tacos.model.columns import TransferColumns

        return isinstance(self.transfers, TransferColumns)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_columns", None)  # a cache: rebuilt on demand, not shipped
        return state

    @cached_property
    def makespan(self) -> float:
        """Time at which the last transfer ends (0 for an empty schedule; computed once: the
        transfers are immutable)."""
        if self.columnar:
            end = self.transfers.end  # type: ignore[attr-defined]
            return float(end.max()) if len(end) else 0.0
        return max((t.end for t in self.transfers), default=0.0)

    def route_of(self, t: Transfer) -> Route:
        """The :class:`~tacos.model.routes.Route` a transfer takes (raises
        :class:`~tacos.model.routes.RouteError` when its links are not a valid route)."""
        return self.topology.routing.make(t.route)

    def transfer_bytes(self, t: Transfer) -> int:
        """Bytes a transfer carries."""
        return sum(self.collective.chunks[c].size for c in t.chunks)

    def by_link(self) -> dict[int, list[Transfer]]:
        """Transfers grouped by physical link index (a transfer is listed under every link
        of its route), each list sorted by start time."""
        out: dict[int, list[Transfer]] = defaultdict(list)
        for t in sorted(self.transfers):
            for li in t.route:
                out[li].append(t)
        return dict(out)

    def groups(self) -> dict[int, list[int]]:
        """In-switch operations: group id -> indices (into ``transfers``) of its members."""
        out: dict[int, list[int]] = defaultdict(list)
        if self.columnar:  # from the group column
            import numpy as np

            cols = self.columns
            if cols.has_groups:
                member = np.flatnonzero(cols.group >= 0)
                for i, g in zip(member.tolist(), cols.group[member].tolist(), strict=True):
                    out[g].append(i)
            return dict(out)
        for i, t in enumerate(self.transfers):
            if t.group is not None:
                out[t.group].append(i)
        return dict(out)

    def by_npu(self) -> dict[int, dict[str, list[Transfer]]]:
        """For every NPU, its ``'send'`` and ``'recv'`` transfers sorted by start time."""
        out: dict[int, dict[str, list[Transfer]]] = defaultdict(lambda: {"send": [], "recv": []})
        for t in sorted(self.transfers):
            out[t.src]["send"].append(t)
            out[t.dst]["recv"].append(t)
        return dict(out)
