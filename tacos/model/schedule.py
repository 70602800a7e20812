"""Schedule IR: timed chunk transfers over routes of a topology's physical links.

Times are seconds, sizes bytes.  A :class:`Transfer` moves one or more chunks together from NPU
``src`` to NPU ``dst`` over a *route* (:mod:`tacos.routes`): a tuple of indices into
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

if TYPE_CHECKING:
    from tacos.check.verify import VerifyReport
    from tacos.model.columns import TransferColumns

OPS = ("copy", "reduce")


@dataclass(frozen=True, order=True)
class Transfer:
    """Chunks ``chunks`` travel ``src -> dst`` over the links ``route`` during ``[start, end]``.

    ``group`` (optional) joins the transfer to an in-switch multicast or reduce operation (see
    the module docstring); ``None`` for an ordinary transfer.
    """

    start: float
    end: float
    src: int
    dst: int
    route: tuple[int, ...]
    chunks: tuple[int, ...]
    op: str = "copy"
    group: int | None = None

    @property
    def duration(self) -> float:
        """``end - start`` in seconds."""
        return self.end - self.start

    @property
    def link(self) -> int:
        """The link of a one-link route (direct links, switch-free views).

        Raises ``ValueError`` for a route through switches: code that handles those must
        look at ``route``.
        """
        if len(self.route) != 1:
            raise ValueError(f"transfer {self.src}->{self.dst} crosses {len(self.route)} links; "
                             "use .route")
        return self.route[0]


def transfers_from_columns(start: list[float], end: list[float], src: list[int],
                           dst: list[int], route: list[tuple[int, ...]],
                           chunks: list[tuple[int, ...]], op: str | list[str] = "copy",
                           group: list[int | None] | None = None) -> tuple[Transfer, ...]:
    """Transfers from parallel columns, in bulk: the same objects as
    ``Transfer(start[i], end[i], ...)`` (equal, same hash), built without the per-field
    ``object.__setattr__`` of a frozen dataclass's ``__init__`` (3x faster, which matters
    when a solver returns millions of transfers).  ``op`` is one op for all or one per
    transfer; ``group`` one group id (or None) per transfer, None: all ungrouped."""
    n = len(start)
    ops = [op] * n if isinstance(op, str) else op
    groups = [None] * n if group is None else group
    new = object.__new__
    out = []
    append = out.append
    for s, e, a, b, r, c, o, g in zip(start, end, src, dst, route, chunks, ops, groups,
                                      strict=True):
        t = new(Transfer)
        d = t.__dict__
        d["start"] = s
        d["end"] = e
        d["src"] = a
        d["dst"] = b
        d["route"] = r
        d["chunks"] = c
        d["op"] = o
        d["group"] = g
        append(t)
    return tuple(out)


@dataclass(frozen=True)
class Schedule:
    """A synthesized algorithm: the transfers plus the problem they solve.

    ``transfers`` is a sequence of :class:`Transfer`: a tuple, or a
    :class:`~tacos.schedule_columns.TransferColumns` (numpy columns that build ``Transfer``
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
        """The transfers as :class:`~tacos.schedule_columns.TransferColumns`: ``transfers``
        itself when it is columnar, else built once from it and kept.  Raises
        ``TypeError``/``ValueError`` for transfers columns cannot hold (see
        :meth:`~tacos.schedule_columns.TransferColumns.from_transfers`)."""
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
        """The :class:`~tacos.routes.Route` a transfer takes (raises
        :class:`~tacos.routes.RouteError` when its links are not a valid route)."""
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

    def verify(self) -> VerifyReport:
        """Check the schedule with :func:`tacos.verify.verify_schedule`.

        Returns the :class:`~tacos.verify.VerifyReport`; raises
        :class:`~tacos.errors.VerificationError` listing the first violations when it fails.
        """
        from tacos.check.verify import verify_schedule

        return verify_schedule(self).raise_if_failed()

    def to_json(self) -> str:
        """The schedule as deterministic JSON (schema ``tacos.schedule/2``)."""
        from tacos.backends.json_schedule import dumps

        return dumps(self)

    def to_xml(self, **options: Any) -> str:
        """MSCCL XML for msccl-executor-nccl, lowered and verified (never unverified text).

        ``options`` are :class:`tacos.msccl.lower.MscclOptions` fields: ``name``, ``proto``
        (Simple, LL, LL128), ``inplace``, ``min_bytes``/``max_bytes`` (bytes or ``"1MiB"``),
        ``instances`` (channel instances: each chunk split over that many channels),
        ``max_steps_per_tb``, ``max_channels``, ``redop``.  See ``docs/msccl.md``.
        """
        from tacos.msccl.lower import msccl_options
        from tacos.msccl.xml_writer import schedule_to_xml

        return schedule_to_xml(self, msccl_options(**options))

    def to_mscclpp(self, **options: Any) -> str:
        """MSCCL++ JSON execution plan (lowered and verified); takes the options of
        :meth:`to_xml` (``proto`` must be Simple)."""
        from tacos.msccl.lower import msccl_options
        from tacos.msccl.mscclpp_writer import emit_mscclpp_json

        return emit_mscclpp_json(self, options=msccl_options(**options),
                                 name=options.get("name") or None)
