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

N is the group size and k the chunks per NPU.  Sizes are rounded down to whole bytes (at least
one byte per chunk).
"""

from __future__ import annotations

from collections.abc import Sequence

from tacos.collective import ROOTED_COLLECTIVES, STANDARD_COLLECTIVES, Chunk, Collective


def _chunk_size(size: int, parts: int) -> int:
    return max(1, int(size) // parts)


def build(
    kind: str,
    group: Sequence[int],
    *,
    size: int,
    chunks_per_npu: int = 1,
    root: int | None = None,
    name: str = "",
) -> Collective:
    """Build a standard collective over ``group`` (NPU ids).

    >>> c = build("allgather", [0, 1, 2, 3], size=4096)
    >>> c.n_chunks, c.chunks[1].pre, sorted(c.chunks[1].post)
    (4, frozenset({1}), [0, 1, 2, 3])
    """
    if kind not in STANDARD_COLLECTIVES:
        raise ValueError(f"unknown collective {kind!r}")
    g = tuple(group)
    n, k = len(g), int(chunks_per_npu)
    if n == 0:
        raise ValueError("a collective needs at least one NPU")
    if k < 1:
        raise ValueError("chunks per NPU must be at least 1")
    if kind in ROOTED_COLLECTIVES:
        if root is None:
            raise ValueError(f"{kind} needs a root")
        if root not in g:
            raise ValueError(f"root {root} is not in the group")
    everyone = frozenset(g)
    chunks: list[Chunk] = []

    def add(size_: int, pre: frozenset[int], post: frozenset[int], reduce: bool = False) -> None:
        chunks.append(Chunk(len(chunks), size_, pre, post, reduce, index=len(chunks)))

    if kind == "allgather":
        cs = _chunk_size(size, n * k)
        for src in g:
            for _ in range(k):
                add(cs, frozenset({src}), everyone)
    elif kind == "reducescatter":
        cs = _chunk_size(size, n * k)
        for dst in g:
            for _ in range(k):
                add(cs, everyone, frozenset({dst}), True)
    elif kind == "allreduce":
        cs = _chunk_size(size, n * k)
        for _ in range(n * k):
            add(cs, everyone, everyone, True)
    elif kind == "alltoall":
        cs = _chunk_size(size, n * k)
        for src in g:
            for dst in g:
                for _ in range(k):
                    add(cs, frozenset({src}), frozenset({dst}))
    elif kind == "broadcast":
        cs = _chunk_size(size, k)
        for _ in range(k):
            add(cs, frozenset({root}), everyone)
    elif kind == "reduce":
        cs = _chunk_size(size, k)
        for _ in range(k):
            add(cs, everyone, frozenset({root}), True)
    elif kind == "scatter":
        cs = _chunk_size(size, n * k)
        for dst in g:
            for _ in range(k):
                add(cs, frozenset({root}), frozenset({dst}))
    elif kind == "gather":
        cs = _chunk_size(size, n * k)
        for src in g:
            for _ in range(k):
                add(cs, frozenset({src}), frozenset({root}))
    return Collective(kind, tuple(chunks), g, int(size), k, root, name or kind)


def custom(
    chunks: Sequence[tuple[Sequence[int], Sequence[int], bool, int]],
    *,
    name: str = "custom",
) -> Collective:
    """Build a custom collective from ``(pre, post, reduce, size_bytes)`` tuples."""
    out = tuple(
        Chunk(i, int(sz), frozenset(pre), frozenset(post), bool(red), index=i)
        for i, (pre, post, red, sz) in enumerate(chunks)
    )
    group: list[int] = []
    for c in out:
        for v in sorted(c.pre | c.post):
            if v not in group:
                group.append(v)
    return Collective("custom", out, tuple(group), sum(c.size for c in out), 1, None, name)
