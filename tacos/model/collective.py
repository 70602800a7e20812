"""Collective IR: chunks with pre/postconditions.

A chunk is the unit the synthesizers move.  ``pre`` is the set of NPUs that hold it (or, for a
combining chunk, hold one contribution to it) at the start; ``post`` is the set of NPUs that must
hold it (the full combination of every ``pre`` contribution, each exactly once, when ``reduce``)
at the end.  ``index`` is the chunk's position in its collective's buffer layout and ``tenant``
the position of its collective in a multi-tenant spec.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from tacos.errors import Span

STANDARD_COLLECTIVES = (
    "allgather",
    "reducescatter",
    "allreduce",
    "alltoall",
    "broadcast",
    "reduce",
    "scatter",
    "gather",
)
ROOTED_COLLECTIVES = ("broadcast", "reduce", "scatter", "gather")
COMBINING_COLLECTIVES = ("reducescatter", "allreduce", "reduce")
RELAY_MODES = ("members", "all")
"""Where a schedule may relay data (store-and-forward at an NPU): at group members only (the
default), or at any NPU of the topology."""


@dataclass(frozen=True)
class Chunk:
    """One unit of data with its pre- and postcondition NPU sets."""

    id: int
    size: int
    pre: frozenset[int]
    post: frozenset[int]
    reduce: bool = False
    index: int = 0
    tenant: int = 0


@dataclass(frozen=True)
class Collective:
    """A collective: its chunks plus how it was declared.

    ``size`` is the buffer size in bytes in the nccl-tests convention (see ``docs/tdl.md``);
    ``group`` the NPUs taking part (a process group); ``root`` for rooted collectives.
    """

    kind: str
    chunks: tuple[Chunk, ...]
    group: tuple[int, ...]
    size: int
    chunks_per_npu: int = 1
    root: int | None = None
    name: str = ""
    tenants: tuple[Collective, ...] = ()
    span: Span | None = field(default=None, compare=False)

    @property
    def combining(self) -> bool:
        """True when any chunk is a reduction."""
        return any(c.reduce for c in self.chunks)

    @property
    def n_chunks(self) -> int:
        """Number of chunks."""
        return len(self.chunks)

    def chunk(self, cid: int) -> Chunk:
        """The chunk with id ``cid`` (ids are ``0..n_chunks-1``)."""
        return self.chunks[cid]

    @property
    def volume(self) -> int:
        """Bytes that must arrive somewhere: Σ size × |post − pre| (|post| for reductions)."""
        total = 0
        for c in self.chunks:
            targets = c.post if c.reduce else c.post - c.pre
            total += c.size * len(targets)
        return total

    @property
    def npus(self) -> frozenset[int]:
        """Every NPU named by some chunk's pre or post set."""
        out: set[int] = set()
        for c in self.chunks:
            out |= c.pre | c.post
        return frozenset(out)

    @property
    def members(self) -> frozenset[int]:
        """The process group: ``group`` plus every NPU a chunk names."""
        return frozenset(self.group) | self.npus

    def relay_npus(self, relays: str = "members") -> frozenset[int] | None:
        """NPUs a schedule may relay through under ``relays`` (one of :data:`RELAY_MODES`):
        the members, or None for any NPU.  Raises ``ValueError`` for another mode."""
        if relays not in RELAY_MODES:
            raise ValueError(f"relays must be one of {', '.join(RELAY_MODES)}, not {relays!r}")
        return None if relays == "all" else self.members

    def label(self) -> str:
        """Short text such as ``allgather`` or ``broadcast(root=3)``."""
        if self.kind == "multi":
            return " + ".join(t.label() for t in self.tenants)
        return f"{self.kind}(root={self.root})" if self.root is not None else self.kind


def combine(collectives: Iterable[Collective]) -> Collective:
    """Merge several collectives (multi-tenant) into one with globally numbered chunks.

    Each chunk keeps its ``index`` and gets ``tenant`` = position of its collective.
    """
    parts = tuple(collectives)
    if len(parts) == 1:
        return parts[0]
    chunks: list[Chunk] = []
    group: list[int] = []
    for t, coll in enumerate(parts):
        for c in coll.chunks:
            chunks.append(replace(c, id=len(chunks), tenant=t))
        group.extend(n for n in coll.group if n not in group)
    return Collective(
        kind="multi",
        chunks=tuple(chunks),
        group=tuple(group),
        size=sum(c.size for c in parts),
        chunks_per_npu=max(c.chunks_per_npu for c in parts),
        name=" + ".join(c.name or c.kind for c in parts),
        tenants=parts,
    )
