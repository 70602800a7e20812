"""Transfers: chunks moving from one NPU to another over a route, during a time interval.

A :class:`Transfer` is cut-through: it pays its route's α once and holds one lane of every link
of its route for its whole interval (see :mod:`tacos.model.schedule` for the rules a schedule of
them follows).  ``op`` is one of :data:`OPS`; :func:`transfers_from_columns` builds many at
once (the column conversion :class:`~tacos.model.columns.TransferColumns` uses).
"""

from __future__ import annotations

from dataclasses import dataclass

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
