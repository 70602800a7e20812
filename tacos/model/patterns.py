"""Builders for the standard collectives (pre/postconditions of each pattern).

Size conventions follow nccl-tests (``size`` is what nccl-tests reports for the op):

=============  ================================  ==========================
collective     ``size`` means                    chunk size
=============  ================================  ==========================
allgather      total output buffer               size / (N·k)
reducescatter  total input buffer                size / (N·k)
allreduce      the buffer                        size / (N·k)
alltoall       one rank's send buffer            size / (N·k)
broadcast      the buffer                        size / k
reduce         the buffer                        size / k
scatter        root's send buffer (all ranks)    size / (N·k)
gather         root's receive buffer             size / (N·k)
=============  ================================  ==========================

N is the group size and k the chunks per NPU.  ``size`` is bytes or a text with a unit
(``"64MiB"``, read by :func:`tacos.model.units.parse_size`) and is never rounded: when it does not
divide evenly, chunks differ by one byte (as the runtimes split buffers), and a per-rank
collective whose size is not a multiple of N is refused with the nearest sizes that are (see
:func:`chunk_sizes`).
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from tacos import limits
from tacos.errors import TacosError
from tacos.model.collective import ROOTED_COLLECTIVES, STANDARD_COLLECTIVES, Chunk, Collective
from tacos.model.units import format_size, parse_size

PER_RANK = ("allgather", "reducescatter", "alltoall", "scatter", "gather")
"""Collectives whose buffer is N equal per-rank pieces (the NCCL API's count per rank)."""


def _even(total: int, parts: int) -> list[int]:
    """``total`` bytes in ``parts`` chunks as even as possible (the first ones 1 B larger)."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def chunk_sizes(kind: str, size: int | str, n: int, chunks_per_npu: int = 1) -> list[int]:
    """Bytes of each chunk of one piece: a rank's piece for the per-rank collectives
    (:data:`PER_RANK`), the whole buffer for allreduce (``n * chunks_per_npu`` chunks),
    broadcast and reduce (``chunks_per_npu`` chunks).

    The sizes add up to exactly the requested bytes; when they do not divide evenly, chunks
    differ by one byte (the runtimes split buffers the same way).  A per-rank collective's
    size must be a multiple of ``n`` (each rank contributes the same count, as in NCCL's API)
    and every chunk needs a byte: otherwise :class:`~tacos.errors.TacosError` says which sizes
    work.

    >>> chunk_sizes("allreduce", 1000, 16)[:2], sum(chunk_sizes("allreduce", 1000, 16))
    ([63, 63], 1000)
    >>> chunk_sizes("allgather", 1000, 16)
    Traceback (most recent call last):
    ...
    tacos.errors.TacosError: error: an allgather of 1000 B over 16 NPUs: the buffer must split \
into 16 equal rank pieces
    hint: use 992 B or 1008 B (a multiple of 16 B)
    """
    nbytes = parse_size(size)
    k = chunks_per_npu
    if kind in PER_RANK:
        if nbytes % n:
            down, up = nbytes // n * n, (nbytes // n + 1) * n
            choices = f"{_bytes(down)} or {_bytes(up)}" if down else _bytes(up)
            raise TacosError(f"an {kind} of {_bytes(nbytes)} over {n} NPUs: the buffer must "
                             f"split into {n} equal rank pieces",
                             hint=f"use {choices} (a multiple of {n} B)")
        total, parts = nbytes // n, k
    elif kind == "allreduce":
        total, parts = nbytes, n * k
    else:
        total, parts = nbytes, k
    if total < parts:
        need = parts * (n if kind in PER_RANK else 1)
        raise TacosError(f"{_bytes(nbytes)} is too small for {kind} over {n} NPUs with {k} "
                         f"chunk(s) per NPU: every chunk needs at least one byte",
                         hint=f"use at least {need} B, or fewer chunks")
    return _even(total, parts)


DEFAULT_SIZE = 1 << 20
"""Size used when none is given (TDL, command line): 1 MiB."""


def default_size(kind: str, n: int, chunks_per_npu: int = 1) -> int:
    """:data:`DEFAULT_SIZE`, rounded down to a multiple of ``n`` for the per-rank collectives
    (so that the default always works; a size the user gives is never rounded)."""
    if kind in PER_RANK:
        return max(n * chunks_per_npu, DEFAULT_SIZE // n * n)
    return max(chunks_per_npu * (n if kind == "allreduce" else 1), DEFAULT_SIZE)


def _bytes(n: int) -> str:
    """``'67108864 B (64 MiB)'``; the unit form only when it is exact."""
    exact = n >= 1024 and any(n % (1 << s) == 0 and n >> s < 1024 for s in (10, 20, 30, 40))
    return f"{n} B ({format_size(n)})" if exact else f"{n} B"


def build(
    kind: str,
    group: Sequence[int],
    *,
    size: int | str,
    chunks_per_npu: int = 1,
    root: int | None = None,
    name: str = "",
) -> Collective:
    """Build a standard collective over ``group`` (NPU ids).

    ``size`` is in bytes or a text with a unit (``"64MiB"``) and must split into equal whole
    chunks (see :func:`chunk_sizes`).  Mistakes raise :class:`~tacos.errors.TacosError`.

    >>> c = build("allgather", [0, 1, 2, 3], size="4KiB")
    >>> c.n_chunks, c.chunks[1].size, c.chunks[1].pre, sorted(c.chunks[1].post)
    (4, 1024, frozenset({1}), [0, 1, 2, 3])
    """
    if kind not in STANDARD_COLLECTIVES:
        close = difflib.get_close_matches(str(kind), STANDARD_COLLECTIVES, n=1)
        raise TacosError(f"unknown collective {kind!r}",
                         hint=f"did you mean '{close[0]}'?" if close
                         else f"use one of {', '.join(STANDARD_COLLECTIVES)}")
    g = tuple(group)
    if len(set(g)) != len(g):
        raise TacosError(f"the group {list(g)} names an NPU twice")
    if any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in g):
        raise TacosError(f"the group {list(g)} must hold NPU ids (integers >= 0)")
    if isinstance(chunks_per_npu, bool) or not isinstance(chunks_per_npu, int):
        raise TacosError(f"chunks_per_npu must be an integer, not {chunks_per_npu!r}")
    n, k = len(g), chunks_per_npu
    if n == 0:
        raise TacosError("a collective needs at least one NPU")
    if k < 1:
        raise TacosError("chunks per NPU must be at least 1", hint="chunks_per_npu=1")
    limits.check_deliveries_of(kind, n, k)  # before building (or sizing) that many chunks
    nbytes = parse_size(size)
    problem = limits.check_number("size", nbytes) if nbytes >= 1 else None
    if problem is not None:
        raise TacosError(problem)
    if kind in ROOTED_COLLECTIVES:
        if root is None:
            raise TacosError(f"{kind} needs a root", hint=f"e.g. root={g[0]}")
        if root not in g:
            raise TacosError(f"root {root} is not in the group {list(g)}")
    elif root is not None:
        raise TacosError(f"{kind} takes no root",
                         hint=f"roots belong to {', '.join(ROOTED_COLLECTIVES)}")
    sizes = chunk_sizes(kind, size, n, k)
    everyone = frozenset(g)
    chunks: list[Chunk] = []

    def add(size_: int, pre: frozenset[int], post: frozenset[int], reduce: bool = False) -> None:
        chunks.append(Chunk(len(chunks), size_, pre, post, reduce, index=len(chunks)))

    if kind == "allgather":
        for src in g:
            for j in range(k):
                add(sizes[j], frozenset({src}), everyone)
    elif kind == "reducescatter":
        for dst in g:
            for j in range(k):
                add(sizes[j], everyone, frozenset({dst}), True)
    elif kind == "allreduce":
        for j in range(n * k):
            add(sizes[j], everyone, everyone, True)
    elif kind == "alltoall":
        for src in g:
            for dst in g:
                for j in range(k):
                    add(sizes[j], frozenset({src}), frozenset({dst}))
    elif kind == "broadcast":
        for j in range(k):
            add(sizes[j], frozenset({root}), everyone)
    elif kind == "reduce":
        for j in range(k):
            add(sizes[j], everyone, frozenset({root}), True)
    elif kind == "scatter":
        for dst in g:
            for j in range(k):
                add(sizes[j], frozenset({root}), frozenset({dst}))
    elif kind == "gather":
        for src in g:
            for j in range(k):
                add(sizes[j], frozenset({src}), frozenset({root}))
    return Collective(kind, tuple(chunks), g, parse_size(size), k, root, name or kind)


def custom(
    chunks: Sequence[tuple[Sequence[int], Sequence[int], bool, int | str]],
    *,
    name: str = "custom",
) -> Collective:
    """Build a custom collective from ``(pre, post, reduce, size)`` tuples.

    ``size`` is bytes or a text with a unit; ``pre`` and ``post`` are NPU ids.

    >>> c = custom([([0], [1, 2], False, "1KiB"), ([0, 1], [2], True, 512)])
    >>> [(sorted(ch.post), ch.size, ch.reduce) for ch in c.chunks]
    [([1, 2], 1024, False), ([2], 512, True)]
    """
    out = []
    for i, item in enumerate(chunks):
        try:
            pre, post, red, sz = item
        except (TypeError, ValueError):
            raise TacosError(f"chunk {i}: {item!r} is not a (pre, post, reduce, size) tuple"
                             ) from None
        nbytes = parse_size(sz, f"chunk {i} size")
        if nbytes < 1:
            raise TacosError(f"chunk {i}: a chunk needs at least 1 byte")
        if not pre or not post:
            raise TacosError(f"chunk {i}: a chunk needs NPUs in both its pre- and "
                             "postcondition")
        out.append(Chunk(i, nbytes, frozenset(pre), frozenset(post), bool(red), index=i))
    group: list[int] = []
    for c in out:
        for v in sorted(c.pre | c.post):
            if v not in group:
                group.append(v)
    return Collective("custom", tuple(out), tuple(group), sum(c.size for c in out), 1, None,
                      name)
