"""Cross-mesh resharding problems and their unit communication tasks (seed 001, §2.2).

A :class:`Reshard` sends a tensor laid out on a source mesh with one sharding spec to a
destination mesh with another.  The regions where both layouts are constant are the tensor's
*unit tasks*: the common refinement of the source tiles and the destination tiles.  Each unit
task is a rectangle of the tensor, held by the source devices whose tile contains it (its
*replicas*, any of which may send it) and needed by the destination devices whose tile contains
it (its *receivers*).  A device that is in both meshes and already holds a region does not
receive it again.

:meth:`Reshard.collective` turns the tasks into a custom collective: each task split into
``pieces`` chunks (tile splitting, so that forwarding one piece overlaps receiving the next),
each chunk with the replicas as its precondition and the receivers as its postcondition.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import product
from math import prod

from tacos.errors import Span
from tacos.model.collective import Chunk, Collective, combine
from tacos.reshard.sharding import DeviceMesh, Interval, ShardingError, ShardingSpec, tiles

DTYPES: dict[str, int] = {
    "f64": 8, "f32": 4, "f16": 2, "bf16": 2, "f8": 1,
    "i64": 8, "i32": 4, "i16": 2, "i8": 1, "u8": 1, "bool": 1,
}
"""Element sizes (bytes) of the dtype names TDL and the API accept."""


@dataclass(frozen=True)
class UnitTask:
    """One region of the tensor: who may send it and who must receive it."""

    index: int
    region: tuple[Interval, ...]
    senders: tuple[int, ...]
    receivers: tuple[int, ...]
    nbytes: int

    @property
    def shape(self) -> tuple[int, ...]:
        """Extent of the region along each tensor dimension."""
        return tuple(hi - lo for lo, hi in self.region)


@dataclass(frozen=True)
class Reshard:
    """Send a tensor of ``shape`` from ``src`` (spec ``src_spec``) to ``dst`` (``dst_spec``).

    ``element_bytes`` is the size of one element (4 for float32); ``pieces`` an optional
    pieces-per-tile choice (TDL's ``pieces``; planners choose when it is None) and ``relays``
    which NPUs may forward its data (``'members'``: the meshes' own, ``'all'``).  Raises
    :class:`~tacos.reshard.sharding.ShardingError` when a spec does not fit its mesh or the
    tensor.
    """

    shape: tuple[int, ...]
    src: DeviceMesh
    src_spec: ShardingSpec
    dst: DeviceMesh
    dst_spec: ShardingSpec
    element_bytes: int = 4
    name: str = ""
    span: Span | None = field(default=None, compare=False)
    pieces: int | None = field(default=None, compare=False)
    relays: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not self.shape or any(int(n) < 1 for n in self.shape):
            raise ShardingError(f"tensor shape {list(self.shape)} must be positive lengths",
                                hint="e.g. tensor [1024, 1024, 512]")
        if self.element_bytes < 1:
            raise ShardingError("an element takes at least one byte")
        self.src_spec.check(self.src, self.shape, "source")
        self.dst_spec.check(self.dst, self.shape, "destination")

    @classmethod
    def of(cls, shape: Sequence[int], src: DeviceMesh, src_spec: str | ShardingSpec,
           dst: DeviceMesh, dst_spec: str | ShardingSpec, *, dtype: str | int = "f32",
           name: str = "") -> Reshard:
        """Build a reshard from spec strings and a dtype name (``f32``, ``bf16``, ...) or an
        element size in bytes."""
        if isinstance(dtype, str):
            if dtype not in DTYPES:
                raise ShardingError(f"unknown dtype {dtype!r}",
                                    hint=f"use one of {', '.join(DTYPES)} or a byte count")
            size = DTYPES[dtype]
        else:
            size = int(dtype)

        def spec(s: str | ShardingSpec) -> ShardingSpec:
            return s if isinstance(s, ShardingSpec) else ShardingSpec.parse(s)

        return cls(tuple(int(n) for n in shape), src, spec(src_spec), dst, spec(dst_spec),
                   size, name)

    @property
    def label(self) -> str:
        """``name`` or ``'S0RR->RS0R'``."""
        return self.name or f"{self.src_spec}->{self.dst_spec}"

    @property
    def nbytes(self) -> int:
        """Size of the whole tensor in bytes."""
        return prod(self.shape) * self.element_bytes

    @cached_property
    def tasks(self) -> tuple[UnitTask, ...]:
        """The unit tasks, in row-major order of their regions (tasks with no receiver left
        out)."""
        src_tiles = tiles(self.src, self.src_spec, self.shape)
        dst_tiles = tiles(self.dst, self.dst_spec, self.shape)
        ndim = len(self.shape)
        cuts: list[list[Interval]] = []
        for d in range(ndim):
            points = {0, self.shape[d]}
            for t in (*src_tiles.values(), *dst_tiles.values()):
                points.update(t[d])
            pts = sorted(points)
            cuts.append(list(zip(pts, pts[1:], strict=False)))

        def holders(tile_map: dict[int, tuple[Interval, ...]], region) -> list[int]:
            return [dev for dev, t in tile_map.items()
                    if all(t[d][0] <= region[d][0] and region[d][1] <= t[d][1]
                           for d in range(ndim))]

        out: list[UnitTask] = []
        for region in product(*cuts):
            senders = holders(src_tiles, region)
            receivers = [v for v in holders(dst_tiles, region) if v not in senders]
            if not receivers:
                continue
            nbytes = prod(hi - lo for lo, hi in region) * self.element_bytes
            out.append(UnitTask(len(out), tuple(region), tuple(senders), tuple(receivers),
                                nbytes))
        return tuple(out)

    def collective(self, pieces: int = 1) -> Collective:
        """The tasks as a custom collective, each split into ``pieces`` chunks (fewer when a
        task has fewer bytes); chunk ``index`` numbers the pieces in task order."""
        if pieces < 1:
            raise ShardingError("pieces per tile must be at least 1")
        chunks: list[Chunk] = []
        for task in self.tasks:
            for size in piece_sizes(task.nbytes, pieces):
                chunks.append(Chunk(len(chunks), size, frozenset(task.senders),
                                    frozenset(task.receivers), index=len(chunks)))
        group: list[int] = []
        for dev in (*self.src.devices, *self.dst.devices):
            if dev not in group:
                group.append(dev)
        return Collective("custom", tuple(chunks), tuple(group), self.nbytes, pieces,
                          name=self.label, span=self.span)

    def chunk_tasks(self, pieces: int = 1) -> list[int]:
        """For each chunk of :meth:`collective`, the index of its unit task."""
        return [t.index for t in self.tasks for _ in piece_sizes(t.nbytes, pieces)]


def piece_sizes(nbytes: int, pieces: int) -> list[int]:
    """``nbytes`` split into ``min(pieces, nbytes)`` near-equal whole-byte parts."""
    k = max(1, min(int(pieces), int(nbytes)))
    base, extra = divmod(int(nbytes), k)
    return [base + (1 if i < extra else 0) for i in range(k)]


def reshard_collective(reshards: Sequence[Reshard], pieces: int = 1) -> Collective:
    """One collective for several reshards planned together (a tenant each)."""
    if not reshards:
        raise ShardingError("no reshard to plan")
    return combine(r.collective(pieces) for r in reshards)


def task_chunks(reshards: Sequence[Reshard], pieces: int = 1
                ) -> list[tuple[UnitTask, tuple[int, ...]]]:
    """Every unit task of ``reshards`` with the ids of its chunks in
    :func:`reshard_collective` (same ``pieces``)."""
    out: list[tuple[UnitTask, tuple[int, ...]]] = []
    offset = 0
    for r in reshards:
        for task in r.tasks:
            k = len(piece_sizes(task.nbytes, pieces))
            out.append((task, tuple(range(offset, offset + k))))
            offset += k
    return out


__all__ = ["DTYPES", "Reshard", "UnitTask", "piece_sizes", "reshard_collective", "task_chunks"]
