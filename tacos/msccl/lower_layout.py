"""Buffer layout of a collective in MSCCL terms (``docs/msccl-xml.md`` §1.5, §1.6).

The lowering maps every chunk of a standard collective onto MSCCL chunk slots of the input
(``i``), output (``o``) and scratch (``s``) buffers of each rank.  With ``N`` ranks, ``k`` chunks
per rank and ``I`` instances (each chunk split into ``I`` equal pieces sent on separate channels)
the base geometry is:

=============  ==========  =====================  ======================  =====================
collective     C / I       chunk ``x`` input slot  chunk ``x`` output slot  declared i / o chunks
=============  ==========  =====================  ======================  =====================
allgather      N·k         ``x mod k`` (source)    ``x``                    C/N / C
reducescatter  N·k         ``x``                   ``x mod k`` (target)     C / C/N
allreduce      N·k         ``x``                   ``x``                    C / C
alltoall       N·k         ``dst·k + j``           ``src·k + j``            C / C
broadcast      k           ``x``                   ``x``                    C / C
reduce         k           ``x``                   ``x``                    C / C
=============  ==========  =====================  ======================  =====================

(for alltoall ``x = (src·N + dst)·k + j``).  Piece ``p`` of slot ``y`` is MSCCL chunk
``y·I + p``, so each rank's share of a gathered/scattered buffer stays contiguous.  Ranks are the
positions of the NPUs in ``collective.group`` (NCCL rank order), not NPU ids.

Under in-place the input and output are one memory region; every location is written in its
canonical buffer (:func:`tacos.msccl.program.inplace_alias`: ``o`` for allgather, ``i`` for the
others) and the other buffer is declared with 0 chunks.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from tacos.errors import TacosError
from tacos.model.collective import Collective
from tacos.msccl.program import chunk_geometry, inplace_alias

#: Collectives the MSCCL runtime can select from an NCCL call and the lowering supports.
LOWERABLE = ("allgather", "reducescatter", "allreduce", "alltoall", "broadcast", "reduce")

JSON_HINT = ("write the schedule as JSON instead (e.g. `-o plan.json`), which can express any "
             "collective")

Loc = tuple[str, int]


@dataclass(frozen=True)
class Layout:
    """Where each chunk of a collective lives on each rank, in MSCCL chunk slots."""

    coll: str
    ngpus: int
    chunks_per_rank: int
    instances: int
    inplace: bool
    group: tuple[int, ...]
    base_chunks: int
    in_slot: tuple[int, ...]
    out_slot: tuple[int, ...]
    pre: tuple[frozenset[int], ...]
    post: tuple[frozenset[int], ...]

    @property
    def nchunksperloop(self) -> int:
        """``C``: chunks the whole buffer is cut into."""
        return self.base_chunks * self.instances

    @cached_property
    def ranks(self) -> dict[int, int]:
        """NPU id -> NCCL rank (its position in the collective's group)."""
        return {npu: r for r, npu in enumerate(self.group)}

    def rank_of(self, npu: int) -> int:
        """NCCL rank of an NPU (its position in the collective's group)."""
        return self.ranks[npu]

    def declared(self) -> tuple[int, int]:
        """``(i_chunks, o_chunks)`` every rank declares (0 for the aliased buffer in-place)."""
        i_chunks, o_chunks = chunk_geometry(self.coll, self.ngpus, self.nchunksperloop)
        if self.inplace:
            if self.coll == "allgather":
                return 0, o_chunks
            return i_chunks, 0
        return i_chunks, o_chunks

    def _canon(self, rank: int, loc: Loc) -> Loc:
        if not self.inplace:
            return loc
        return inplace_alias(self.coll, self.ngpus, self.nchunksperloop, rank, *loc)

    def input_loc(self, rank: int, chunk: int, piece: int) -> Loc:
        """Canonical location of ``rank``'s initial copy (or contribution) of a chunk piece."""
        return self._canon(rank, ("i", self.in_slot[chunk] * self.instances + piece))

    def output_loc(self, rank: int, chunk: int, piece: int) -> Loc:
        """Canonical location where ``rank`` must end with a chunk piece."""
        return self._canon(rank, ("o", self.out_slot[chunk] * self.instances + piece))


def _fail(msg: str, hint: str | None = None) -> TacosError:
    return TacosError(msg, hint=hint)


def build_layout(collective: Collective, *, inplace: bool, instances: int) -> Layout:
    """Check that ``collective`` is one MSCCL can run and compute its layout.

    Raises :class:`~tacos.errors.TacosError` for collectives MSCCL cannot express (scatter,
    gather, custom, multi-tenant) and for chunk sets that do not follow the standard layout.
    """
    kind = collective.kind
    if kind == "multi":
        raise _fail("MSCCL XML cannot express a multi-tenant plan: one XML file holds exactly "
                    f"one collective ({collective.label()})", JSON_HINT)
    if kind not in LOWERABLE:
        raise _fail(f"MSCCL XML cannot express the collective {kind!r}: the runtime selects "
                    f"algorithms only for {', '.join(LOWERABLE)}", JSON_HINT)
    group = tuple(collective.group)
    n, k = len(group), max(1, int(collective.chunks_per_npu))
    if len(set(group)) != n or n == 0:
        raise _fail(f"the {kind} group {list(group)} is empty or names an NPU twice")
    rank = {npu: r for r, npu in enumerate(group)}
    everyone = frozenset(range(n))
    chunks = sorted(collective.chunks, key=lambda c: c.id)
    expected = {"allgather": n * k, "reducescatter": n * k, "allreduce": n * k,
                "alltoall": n * n * k, "broadcast": k, "reduce": k}[kind]
    if len(chunks) != expected or [c.id for c in chunks] != list(range(expected)):
        raise _fail(f"the {kind} has {len(chunks)} chunks but the standard layout with "
                    f"{n} ranks and {k} chunk(s) per rank has {expected}",
                    "build it with tacos.patterns.build")
    base = n * k if kind != "broadcast" and kind != "reduce" else k
    in_slot: list[int] = []
    out_slot: list[int] = []
    pre: list[frozenset[int]] = []
    post: list[frozenset[int]] = []
    root = rank.get(collective.root) if collective.root is not None else None
    for c in chunks:
        x = c.index
        if not 0 <= x < expected:
            raise _fail(f"chunk {c.id} of the {kind} has index {x} outside 0..{expected - 1}")
        try:
            p = frozenset(rank[v] for v in c.pre)
            q = frozenset(rank[v] for v in c.post)
        except KeyError as exc:
            raise _fail(f"chunk {c.id} names NPU {exc.args[0]}, which is not in the {kind} "
                        "group") from None
        if kind == "allgather":
            want = (frozenset({x // k}), everyone, False)
            slots = (x % k, x)
        elif kind == "reducescatter":
            want = (everyone, frozenset({x // k}), True)
            slots = (x, x % k)
        elif kind == "allreduce":
            want = (everyone, everyone, True)
            slots = (x, x)
        elif kind == "alltoall":
            src, dst, j = x // (n * k), (x // k) % n, x % k
            want = (frozenset({src}), frozenset({dst}), False)
            slots = (dst * k + j, src * k + j)
        elif kind == "broadcast":
            want = (frozenset({root}), everyone, False)
            slots = (x, x)
        else:  # reduce
            want = (everyone, frozenset({root}), True)
            slots = (x, x)
        if (p, q, bool(c.reduce)) != want:
            raise _fail(f"chunk {c.id} (index {x}) of the {kind} does not follow the standard "
                        "layout (its pre/post sets or reduce flag differ)",
                        "build it with tacos.patterns.build")
        in_slot.append(slots[0])
        out_slot.append(slots[1])
        pre.append(p)
        post.append(q)
    return Layout(kind, n, k, instances, inplace, group, base, tuple(in_slot),
                  tuple(out_slot), tuple(pre), tuple(post))
