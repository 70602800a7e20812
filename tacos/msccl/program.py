"""MSCCL program model: frozen dataclasses that mirror the MSCCL XML one to one.

The XML (see ``docs/msccl-xml.md`` §1) is a tree ``algo > gpu > tb > step``.  Field names equal
the XML attribute names (``minBytes``, ``i_chunks``, ``srcoff`` ...) so that an emitter can write
``attr="value"`` straight from the fields and the read-back can fill them straight from the
attributes.  ``line`` fields hold the 1-based source line of the element when the program was
read from a file (0 when built in memory); they never take part in equality.

Besides the tree this module holds the runtime's vocabulary (step types, buffer letters,
``coll`` spellings, protocols, limits) and the per-collective chunk geometry of §1.5 as plain
functions, so the lowering, the emitter and the verifier share one definition.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# --------------------------------------------------------------------------------------------
# Vocabulary
# --------------------------------------------------------------------------------------------

#: Step types the runtime parser accepts (§1.8).
STEP_TYPES: tuple[str, ...] = ("s", "r", "rcs", "rrs", "rrc", "rrcs", "cpy", "re", "nop")
#: Steps that push data into the tb's ``send`` connection.
SENDING_TYPES: frozenset[str] = frozenset({"s", "rcs", "rrs", "rrcs"})
#: Steps that pop data from the tb's ``recv`` connection.
RECEIVING_TYPES: frozenset[str] = frozenset({"r", "rcs", "rrs", "rrc", "rrcs"})
#: Steps that combine received or local data with a local source (need a reduction operator).
REDUCING_TYPES: frozenset[str] = frozenset({"rrs", "rrc", "rrcs", "re"})
#: Steps whose ``src`` is read locally.
READS_SRC: frozenset[str] = frozenset({"s", "rrs", "rrc", "rrcs", "cpy", "re"})
#: Steps whose ``dst`` is written locally.
WRITES_DST: frozenset[str] = frozenset({"r", "rcs", "rrc", "rrcs", "cpy", "re"})
#: Steps whose ``dst`` is also read locally (``dst = dst ⊕ src``).
READS_DST: frozenset[str] = frozenset({"re"})
#: Sides whose offset the runtime parser bounds-checks (``-1 <= off < declared``), §1.8 table.
PARSER_CHECKED_SIDES: dict[str, tuple[str, ...]] = {
    "s": ("src",),
    "r": ("dst",),
    "rcs": ("dst",),
    "rrs": ("src",),
    "rrc": (),
    "rrcs": ("src", "dst"),
    "cpy": ("src", "dst"),
    "re": ("src", "dst"),
    "nop": (),
}

#: Buffer letters: input (sendbuff), output (recvbuff), scratch.
BUFFERS: tuple[str, ...] = ("i", "o", "s")
#: Protocols, exact spelling.
PROTOS: tuple[str, ...] = ("Simple", "LL", "LL128")

#: ``coll`` values reachable from an NCCL API call (selection, §1.1/§1.5).
SELECTABLE_COLLS: tuple[str, ...] = (
    "allreduce",
    "allgather",
    "reducescatter",
    "alltoall",
    "broadcast",
    "reduce",
    "send",
    "recv",
)
#: Every ``coll`` value the runtime parser accepts.
COLLS: tuple[str, ...] = SELECTABLE_COLLS + ("gather", "scatter", "alltoallv")
#: Spellings other tools write that the runtime rejects, with the right spelling (or None).
COLL_MISSPELLINGS: dict[str, str | None] = {
    "reduce_scatter": "reducescatter",
    "reduceScatter": "reducescatter",
    "all_reduce": "allreduce",
    "all_gather": "allgather",
    "all_to_all": "alltoall",
    "allToAll": "alltoall",
    "custom": None,
}

#: XML attribute names, in the order an emitter should write them.
ALGO_ATTRS: tuple[str, ...] = (
    "name",
    "proto",
    "nchannels",
    "nchunksperloop",
    "ngpus",
    "coll",
    "inplace",
    "outofplace",
    "minBytes",
    "maxBytes",
)
#: ``<algo>`` attributes the runtime requires (all but ``name``).
ALGO_REQUIRED: tuple[str, ...] = ALGO_ATTRS[1:]
#: ``<algo>`` attributes written by other tools that the runtime never reads.
ALGO_OPTIONAL: tuple[str, ...] = ("name", "redop")
GPU_ATTRS: tuple[str, ...] = ("id", "i_chunks", "o_chunks", "s_chunks")
TB_ATTRS: tuple[str, ...] = ("id", "send", "recv", "chan")
STEP_ATTRS: tuple[str, ...] = (
    "s",
    "type",
    "srcbuf",
    "srcoff",
    "dstbuf",
    "dstoff",
    "cnt",
    "depid",
    "deps",
    "hasdep",
)

# --------------------------------------------------------------------------------------------
# Limits (msccl-executor-nccl, §1.11)
# --------------------------------------------------------------------------------------------

MAX_CHANNELS = 32  #: MAXCHANNELS; ``nchannels`` <= this, ``chan`` < ``nchannels``.
MAX_TBS = 1024  #: tb ids 0..1023.
MAX_DEPENDED_TB = 127  #: ``depid`` is stored in an int8.
MAX_TBS_PER_CHANNEL = 32  #: tbs with a send (recv) peer per GPU per channel.
MAX_COUNT = 71  #: ``cnt`` <= 71 (MSCCL_MAX_COUNT = 72).
DEFAULT_MAX_STEPS = 64  #: MSCCL_MAX_NUM_STEPS of a default build; steps per tb must be below.
MAX_REDUCE_FUSION = 16  #: longest fused ``re`` chain (longer ones are split silently).
MAX_NODES = 4096  #: parsed nodes per rank: 1 + ngpus + #tb + #step of that rank.
MAX_ATTRS = 16  #: attributes per element (extra ones are dropped silently).
MAX_STR_LEN = 255  #: longest attribute name or value.
MAX_CHILDREN = 1024  #: children per element (overflow unchecked by the runtime).
DEFAULT_SMS = 108  #: SM count assumed for the co-residency warning (A100).


# --------------------------------------------------------------------------------------------
# The tree
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Step:
    """One ``<step>``: an instruction of a thread block (§1.8)."""

    s: int
    type: str
    srcbuf: str
    srcoff: int
    dstbuf: str
    dstoff: int
    cnt: int
    depid: int = -1
    deps: int = -1
    hasdep: int = 0
    line: int = field(default=0, compare=False)

    @property
    def sends(self) -> bool:
        """True if the step pushes data to the tb's send peer."""
        return self.type in SENDING_TYPES

    @property
    def receives(self) -> bool:
        """True if the step pops data from the tb's recv peer."""
        return self.type in RECEIVING_TYPES

    @property
    def is_nop(self) -> bool:
        """True for ``nop`` (a dependency carrier, not stored by the runtime)."""
        return self.type == "nop"

    @property
    def has_dependency(self) -> bool:
        """True if the step waits on another tb (``depid >= 0``)."""
        return self.depid >= 0

    def reads(self) -> tuple[tuple[str, int, int], ...]:
        """Local ``(buffer, offset, cnt)`` ranges this step reads."""
        out: list[tuple[str, int, int]] = []
        if self.type in READS_SRC:
            out.append((self.srcbuf, self.srcoff, self.cnt))
        if self.type in READS_DST:
            out.append((self.dstbuf, self.dstoff, self.cnt))
        return tuple(out)

    def writes(self) -> tuple[tuple[str, int, int], ...]:
        """Local ``(buffer, offset, cnt)`` ranges this step writes."""
        if self.type in WRITES_DST:
            return ((self.dstbuf, self.dstoff, self.cnt),)
        return ()


def nop_step(s: int, depid: int, deps: int) -> Step:
    """A ``nop`` carrying one dependency, with the conventional placeholder fields."""
    return Step(s, "nop", "i", -1, "o", -1, 0, depid, deps, 0)


@dataclass(frozen=True, slots=True)
class Threadblock:
    """One ``<tb>``: a CUDA block with at most one send peer and one recv peer (§1.7)."""

    id: int
    send: int
    recv: int
    chan: int
    steps: tuple[Step, ...] = ()
    line: int = field(default=0, compare=False)


@dataclass(frozen=True, slots=True)
class Gpu:
    """One ``<gpu>``: a rank, its declared buffer sizes in chunks, and its thread blocks."""

    id: int
    i_chunks: int
    o_chunks: int
    s_chunks: int
    tbs: tuple[Threadblock, ...] = ()
    line: int = field(default=0, compare=False)

    def chunks(self, buf: str) -> int:
        """Declared chunk count of buffer ``buf`` (``'i'``, ``'o'`` or ``'s'``)."""
        return {"i": self.i_chunks, "o": self.o_chunks, "s": self.s_chunks}[buf]


@dataclass(frozen=True)
class Program:
    """One ``<algo>``: the whole MSCCL algorithm (§1.4).

    ``outofplace``, ``minBytes`` and ``maxBytes`` are ``None`` only when a read-back file lacks
    them (older msccl-tools output); the runtime requires them, so an emitter must set them.
    ``extra`` keeps attributes the runtime never reads (besides ``name``/``redop``) as
    ``(name, value)`` pairs for faithful round trips.
    """

    name: str
    proto: str
    nchannels: int
    nchunksperloop: int
    ngpus: int
    coll: str
    inplace: int
    outofplace: int | None
    minBytes: int | None  # noqa: N815 - XML attribute name
    maxBytes: int | None  # noqa: N815 - XML attribute name
    gpus: tuple[Gpu, ...] = ()
    redop: str | None = None
    extra: tuple[tuple[str, str], ...] = ()
    line: int = field(default=0, compare=False)

    @property
    def num_tbs(self) -> int:
        """Total number of thread blocks over all GPUs."""
        return sum(len(g.tbs) for g in self.gpus)

    @property
    def num_steps(self) -> int:
        """Total number of steps (nops included) over all GPUs."""
        return sum(len(tb.steps) for g in self.gpus for tb in g.tbs)

    def gpu(self, rank: int) -> Gpu:
        """The ``<gpu>`` with ``id == rank`` (KeyError if absent)."""
        for g in self.gpus:
            if g.id == rank:
                return g
        raise KeyError(rank)


# --------------------------------------------------------------------------------------------
# Chunk geometry (§1.5)
# --------------------------------------------------------------------------------------------

_MULTIPLIED = frozenset({"allgather", "reducescatter", "alltoall"})


def size_multiplier(coll: str, ngpus: int) -> int:
    """``sizeMultiplier``: total elements = ``count * size_multiplier`` (§1.5)."""
    return ngpus if coll in _MULTIPLIED else 1


def chunk_geometry(coll: str, ngpus: int, nchunksperloop: int) -> tuple[int, int]:
    """``(i_chunks, o_chunks)`` a rank must declare for an out-of-place program (§1.5).

    Under in-place the aliased (unused) buffer may instead be declared 0.
    """
    c = nchunksperloop
    if coll in ("allgather", "gather"):
        return c // ngpus, c
    if coll in ("reducescatter", "scatter"):
        return c, c // ngpus
    return c, c


def needs_multiple_of_ngpus(coll: str) -> bool:
    """True if ``nchunksperloop`` must be a multiple of ``ngpus`` for ``coll``."""
    return coll in _MULTIPLIED or coll in ("gather", "scatter")


def inplace_alias(
    coll: str, ngpus: int, nchunksperloop: int, rank: int, buf: str, off: int
) -> tuple[str, int]:
    """Map a buffer reference to its physical location when the call is in-place.

    Input and output are one memory region under in-place; this returns the canonical name:
    ``o`` for allgather (input chunk k of rank r is output chunk ``r*C/N + k``), ``i`` for
    reducescatter (output chunk k is input chunk ``r*C/N + k``), and ``i`` for the others
    (input and output coincide).  Scratch is never aliased.
    """
    if buf == "s":
        return buf, off
    share = nchunksperloop // ngpus if ngpus else 0
    if coll in ("allgather", "gather"):
        return ("o", rank * share + off) if buf == "i" else (buf, off)
    if coll in ("reducescatter", "scatter"):
        return ("i", rank * share + off) if buf == "o" else (buf, off)
    return ("i", off) if buf == "o" else (buf, off)


def suggest_coll(coll: str) -> str | None:
    """The runtime spelling for a known misspelling of ``coll`` (None if unknown/none)."""
    if coll in COLL_MISSPELLINGS:
        return COLL_MISSPELLINGS[coll]
    folded = coll.replace("_", "").replace("-", "").lower()
    return folded if folded in COLLS else None
