"""Columnar transfers: a schedule's transfers as numpy arrays, ``Transfer`` objects on demand.

A :class:`~tacos.model.schedule.Transfer` costs about 600 bytes as a Python object; a schedule of
millions of them (the greedy at 4096 NPUs makes 16.7 million) does not fit in memory as a
tuple.  :class:`TransferColumns` keeps the same transfers as parallel columns, about 50 bytes
each:

* ``start``, ``end``: ``float64`` seconds;
* ``src``, ``dst``: ``int32`` NPU ids;
* ``route_ptr`` (``int64``), ``route_links`` (``int32``): the routes in CSR form, transfer
  ``i``'s links are ``route_links[route_ptr[i]:route_ptr[i + 1]]``;
* ``chunk_ptr`` (``int64``), ``chunk_ids`` (``int32``): the chunks, likewise;
* ``op``: ``uint8`` index into :data:`~tacos.model.schedule.OPS`;
* ``group``: ``int64`` in-switch group id, ``-1`` for none.

It is an immutable :class:`~collections.abc.Sequence` of ``Transfer``: ``len``, iteration and
indexing build ``Transfer`` objects on demand, equal to (and hashing like) the ones a tuple would
hold; a slice is again a ``TransferColumns``; it equals a tuple of the same transfers, and
``+`` concatenates.  Pickling ships the arrays (a few bytes per transfer), which is what the
process-pool and Dask engines send between processes.

Memory: the common shapes cost nothing extra -- one link per route or one chunk per transfer
keeps no pointer column (``route_ptr``/``chunk_ptr`` are then built when asked for), and all-copy
or group-free schedules keep no ``op``/``group`` column (read-only broadcast arrays stand in).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, overload

import numpy as np

from tacos.model.transfer import OPS, Transfer, transfers_from_columns

BLOCK = 8192
"""Transfers materialized per block while iterating (columns are converted a block at a time)."""

INT32 = np.iinfo(np.int32)
_OP_INDEX = {name: i for i, name in enumerate(OPS)}


def _frozen(a: Any, dtype: Any) -> np.ndarray:
    """``a`` as a read-only one-dimensional array of ``dtype`` (a view when no copy is
    needed, so the caller's array stays writable)."""
    raw = np.asarray(a)
    target = np.dtype(dtype)
    if raw.dtype != target and raw.dtype.kind in "iu" and target.kind in "iu" and raw.size:
        lim = np.iinfo(target)
        if int(raw.min()) < lim.min or int(raw.max()) > lim.max:
            raise ValueError(f"a value does not fit in {target.name}")
    arr = raw.astype(target, copy=False)
    if arr.ndim != 1:
        raise ValueError(f"expected a one-dimensional column, got shape {arr.shape}")
    arr = arr.view()
    arr.flags.writeable = False
    return arr


def _check_ptr(ptr: np.ndarray, n: int, n_data: int, what: str) -> None:
    if len(ptr) != n + 1 or (n + 1 and (ptr[0] != 0 or ptr[-1] != n_data)):
        raise ValueError(f"{what}_ptr must have {n + 1} entries from 0 to {n_data}")
    if n and bool(np.any(ptr[1:] < ptr[:-1])):
        raise ValueError(f"{what}_ptr must not decrease")


def csr_take(ptr: np.ndarray | None, data: np.ndarray, idx: np.ndarray
             ) -> tuple[np.ndarray | None, np.ndarray]:
    """Rows ``idx`` of the CSR pair ``(ptr, data)`` (``ptr`` None: one item per row), as a new
    ``(ptr, data)`` pair (``ptr`` None again when every taken row holds one item)."""
    idx = np.asarray(idx, dtype=np.int64)
    if ptr is None:
        return None, data[idx]
    first = ptr[idx]
    lens = ptr[idx + 1] - first
    if len(lens) and bool(np.all(lens == 1)):
        return None, data[first]
    out = np.zeros(len(idx) + 1, dtype=np.int64)
    np.cumsum(lens, out=out[1:])
    pos = np.repeat(first - out[:-1], lens)
    pos += np.arange(int(out[-1]), dtype=np.int64)
    return out, data[pos]


def unit_ptr(ptr: np.ndarray) -> bool:
    """True when the CSR offsets ``ptr`` give every row exactly one item (checked a block
    at a time: no array as long as ``ptr`` is built)."""
    step = 1 << 20
    for a in range(0, len(ptr), step):
        part = ptr[a:a + step]
        if not bool(np.all(part == np.arange(a, a + len(part), dtype=np.int64))):
            return False
    return True


class TransferColumns(Sequence[Transfer]):
    """An immutable sequence of transfers stored as numpy columns (see the module docstring).

    Build it with :meth:`from_transfers` or from raw columns (``route_ptr``/``chunk_ptr`` None:
    one link / one chunk per transfer; ``op``/``group`` None: every transfer a ``copy`` /
    ungrouped).
    """

    __slots__ = ("_chunk_ids", "_chunk_ptr", "_dst", "_end", "_group", "_hash", "_n", "_op",
                 "_route_links", "_route_ptr", "_src", "_start")

    def __init__(self, start: Any, end: Any, src: Any, dst: Any, route_ptr: Any,
                 route_links: Any, chunk_ptr: Any, chunk_ids: Any, op: Any = None,
                 group: Any = None) -> None:
        self._start = _frozen(start, np.float64)
        n = self._n = len(self._start)
        self._end = _frozen(end, np.float64)
        self._src = _frozen(src, np.int32)
        self._dst = _frozen(dst, np.int32)
        self._route_links = _frozen(route_links, np.int32)
        self._chunk_ids = _frozen(chunk_ids, np.int32)
        for name in ("_end", "_src", "_dst"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"column {name[1:]} has {len(getattr(self, name))} entries, "
                                 f"not {n}")
        self._route_ptr = None if route_ptr is None else _frozen(route_ptr, np.int64)
        self._chunk_ptr = None if chunk_ptr is None else _frozen(chunk_ptr, np.int64)
        for what, ptr, data in (("route", self._route_ptr, self._route_links),
                                ("chunk", self._chunk_ptr, self._chunk_ids)):
            if ptr is None:
                if len(data) != n:
                    raise ValueError(f"{what} column has {len(data)} entries without a "
                                     f"{what}_ptr, not {n}")
            else:
                _check_ptr(ptr, n, len(data), what)
        self._op = None
        if op is not None:
            arr = _frozen(op, np.uint8)
            if len(arr) != n:
                raise ValueError(f"column op has {len(arr)} entries, not {n}")
            if n and int(arr.max()) >= len(OPS):
                raise ValueError(f"op indices must be below {len(OPS)} ({', '.join(OPS)})")
            self._op = arr if n and arr.any() else None
        self._group = None
        if group is not None:
            arr = _frozen(group, np.int64)
            if len(arr) != n:
                raise ValueError(f"column group has {len(arr)} entries, not {n}")
            if n and int(arr.min()) < -1:
                raise ValueError("group ids must be -1 (none) or non-negative")
            self._group = arr if n and bool((arr >= 0).any()) else None
        self._hash: int | None = None

    # -- constructors ------------------------------------------------------------------------
    @classmethod
    def from_transfers(cls, transfers: Iterable[Transfer]) -> TransferColumns:
        """Columns of ``transfers`` (any iterable of :class:`~tacos.model.schedule.Transfer`).

        Raises ``TypeError``/``ValueError`` for transfers the columns cannot hold exactly:
        non-numeric times, non-integer ids or routes, an unknown ``op``, a negative or
        non-integer ``group``.
        """
        if isinstance(transfers, TransferColumns):
            return transfers
        ts = transfers if isinstance(transfers, (tuple, list)) else list(transfers)
        n = len(ts)
        for t in ts:
            if type(t) is not Transfer:
                raise TypeError(f"expected Transfer objects, got {type(t).__name__}")
            for x in (t.start, t.end):
                if type(x) not in (float, int):
                    raise TypeError(f"transfer time {x!r} is not a number")
            for x in (t.src, t.dst):
                if type(x) is not int:
                    raise TypeError(f"transfer endpoint {x!r} is not an integer")
            if type(t.route) is not tuple or type(t.chunks) is not tuple:
                raise TypeError("transfer route and chunks must be tuples")
            for x in t.route + t.chunks:
                if type(x) is not int:
                    raise TypeError(f"route link or chunk id {x!r} is not an integer")
            if t.op not in _OP_INDEX:
                raise ValueError(f"unknown op {t.op!r}")
            g = t.group
            if g is not None and (type(g) is not int or g < 0):
                raise ValueError(f"group {g!r} is not a non-negative integer")
        start = np.fromiter((t.start for t in ts), dtype=np.float64, count=n)
        end = np.fromiter((t.end for t in ts), dtype=np.float64, count=n)
        src = np.fromiter((t.src for t in ts), dtype=np.int32, count=n)
        dst = np.fromiter((t.dst for t in ts), dtype=np.int32, count=n)
        route_ptr, route_links = _csr_of([t.route for t in ts])
        chunk_ptr, chunk_ids = _csr_of([t.chunks for t in ts])
        op = np.fromiter((_OP_INDEX[t.op] for t in ts), dtype=np.uint8, count=n)
        group = np.fromiter((-1 if t.group is None else t.group for t in ts), dtype=np.int64,
                            count=n)
        return cls(start, end, src, dst, route_ptr, route_links, chunk_ptr, chunk_ids, op,
                   group)

    # -- columns -----------------------------------------------------------------------------
    @property
    def start(self) -> np.ndarray:
        """Start times (``float64`` seconds)."""
        return self._start

    @property
    def end(self) -> np.ndarray:
        """End times (``float64`` seconds)."""
        return self._end

    @property
    def src(self) -> np.ndarray:
        """Source NPUs (``int32``)."""
        return self._src

    @property
    def dst(self) -> np.ndarray:
        """Destination NPUs (``int32``)."""
        return self._dst

    @property
    def route_links(self) -> np.ndarray:
        """All routes' links, transfer after transfer (``int32``)."""
        return self._route_links

    @property
    def route_ptr(self) -> np.ndarray:
        """Route offsets (``int64``, ``len + 1`` entries); built when every route is one link."""
        return np.arange(self._n + 1, dtype=np.int64) if self._route_ptr is None \
            else self._route_ptr

    @property
    def chunk_ids(self) -> np.ndarray:
        """All transfers' chunk ids, transfer after transfer (``int32``)."""
        return self._chunk_ids

    @property
    def chunk_ptr(self) -> np.ndarray:
        """Chunk offsets (``int64``, ``len + 1`` entries); built when every transfer carries
        one chunk."""
        return np.arange(self._n + 1, dtype=np.int64) if self._chunk_ptr is None \
            else self._chunk_ptr

    @property
    def op(self) -> np.ndarray:
        """``uint8`` index into :data:`~tacos.model.schedule.OPS` per transfer."""
        if self._op is None:
            return np.broadcast_to(np.uint8(0), (self._n,))
        return self._op

    @property
    def group(self) -> np.ndarray:
        """In-switch group id per transfer (``int64``, ``-1`` for none)."""
        if self._group is None:
            return np.broadcast_to(np.int64(-1), (self._n,))
        return self._group

    @property
    def single_link(self) -> bool:
        """True when every route is one link (no ``route_ptr`` is stored)."""
        return self._route_ptr is None

    @property
    def single_chunk(self) -> bool:
        """True when every transfer carries one chunk (no ``chunk_ptr`` is stored)."""
        return self._chunk_ptr is None

    @property
    def has_groups(self) -> bool:
        """True when some transfer belongs to an in-switch group."""
        return self._group is not None

    @property
    def has_reduce(self) -> bool:
        """True when some transfer's op is not ``copy``."""
        return self._op is not None

    def route_counts(self) -> np.ndarray:
        """Links per route (``int64``; a read-only broadcast of ones when all are one link)."""
        if self._route_ptr is None:
            return np.broadcast_to(np.int64(1), (self._n,))
        return np.diff(self._route_ptr)

    def chunk_counts(self) -> np.ndarray:
        """Chunks per transfer (``int64``; a broadcast of ones when all carry one chunk)."""
        if self._chunk_ptr is None:
            return np.broadcast_to(np.int64(1), (self._n,))
        return np.diff(self._chunk_ptr)

    @property
    def nbytes(self) -> int:
        """Bytes held by the stored columns."""
        arrays = (self._start, self._end, self._src, self._dst, self._route_ptr,
                  self._route_links, self._chunk_ptr, self._chunk_ids, self._op, self._group)
        return sum(a.nbytes for a in arrays if a is not None)

    # -- the sequence ------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, i: int) -> Transfer: ...

    @overload
    def __getitem__(self, i: slice) -> TransferColumns: ...

    def __getitem__(self, i: int | slice) -> Transfer | TransferColumns:
        if isinstance(i, slice):
            return self.take(np.arange(self._n, dtype=np.int64)[i])
        try:
            k = i.__index__()
        except AttributeError:
            raise TypeError(f"indices must be integers or slices, not {type(i).__name__}"
                            ) from None
        if k < 0:
            k += self._n
        if not 0 <= k < self._n:
            raise IndexError("transfer index out of range")
        return next(self._iter(k, k + 1))

    def __iter__(self) -> Iterator[Transfer]:
        return self._iter(0, self._n)

    def _iter(self, lo: int, hi: int) -> Iterator[Transfer]:
        rp, cp = self._route_ptr, self._chunk_ptr
        ones: dict[int, tuple[int]] = {}
        for a in range(lo, hi, BLOCK):
            b = min(hi, a + BLOCK)
            yield from transfers_from_columns(
                self._start[a:b].tolist(), self._end[a:b].tolist(), self._src[a:b].tolist(),
                self._dst[a:b].tolist(), _tuples(rp, self._route_links, a, b, ones),
                _tuples(cp, self._chunk_ids, a, b, ones),
                "copy" if self._op is None else [OPS[o] for o in self._op[a:b].tolist()],
                None if self._group is None else
                [None if g < 0 else g for g in self._group[a:b].tolist()])

    def take(self, idx: Any) -> TransferColumns:
        """The transfers at indices ``idx`` (an integer array), in that order."""
        idx = np.asarray(idx, dtype=np.int64)
        rp, rl = csr_take(self._route_ptr, self._route_links, idx)
        cp, ci = csr_take(self._chunk_ptr, self._chunk_ids, idx)
        return TransferColumns(self._start[idx], self._end[idx], self._src[idx],
                               self._dst[idx], rp, rl, cp, ci,
                               None if self._op is None else self._op[idx],
                               None if self._group is None else self._group[idx])

    def with_times(self, start: Any, end: Any) -> TransferColumns:
        """The same transfers with new ``start``/``end`` columns."""
        return TransferColumns(start, end, self._src, self._dst, self._route_ptr,
                               self._route_links, self._chunk_ptr, self._chunk_ids, self._op,
                               self._group)

    # -- comparisons, hashing, concatenation, pickling ------------------------------------------
    def _same(self, other: TransferColumns) -> bool:
        if self._n != other._n:
            return False
        eq = np.array_equal
        return (eq(self._start, other._start) and eq(self._end, other._end)
                and eq(self._src, other._src) and eq(self._dst, other._dst)
                and eq(self.route_counts(), other.route_counts())
                and eq(self._route_links, other._route_links)
                and eq(self.chunk_counts(), other.chunk_counts())
                and eq(self._chunk_ids, other._chunk_ids)
                and eq(self.op, other.op) and eq(self.group, other.group))

    def __eq__(self, other: object) -> bool:
        if other is self:
            return True
        if isinstance(other, TransferColumns):
            return self._same(other)
        if isinstance(other, tuple):
            return len(other) == self._n and all(
                a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self) -> int:
        """The hash of the tuple of the same transfers (computed once, streaming: the tuple
        is never built)."""
        if self._hash is None:
            self._hash = tuple_hash(self, self._n)
        return self._hash

    def __add__(self, other: object) -> TransferColumns:
        if isinstance(other, TransferColumns):
            return concat([self, other])
        if isinstance(other, tuple):
            return concat([self, TransferColumns.from_transfers(other)])
        return NotImplemented

    def __radd__(self, other: object) -> TransferColumns:
        if isinstance(other, tuple):
            return concat([TransferColumns.from_transfers(other), self])
        return NotImplemented

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (TransferColumns, (self._start, self._end, self._src, self._dst,
                                  self._route_ptr, self._route_links, self._chunk_ptr,
                                  self._chunk_ids, self._op, self._group))

    def __repr__(self) -> str:
        return f"TransferColumns({self._n} transfers, {self.nbytes} bytes)"


def concat(parts: Sequence[TransferColumns]) -> TransferColumns:
    """The transfers of ``parts`` one after the other."""
    if not parts:
        return TransferColumns.from_transfers(())

    def cat(name: str) -> np.ndarray:
        return np.concatenate([getattr(p, name) for p in parts])

    def ptr(single: str, counts: str) -> np.ndarray | None:
        if all(getattr(p, single) for p in parts):
            return None
        c = np.concatenate([getattr(p, counts)() for p in parts])
        out = np.zeros(len(c) + 1, dtype=np.int64)
        np.cumsum(c, out=out[1:])
        return out

    return TransferColumns(
        cat("start"), cat("end"), cat("src"), cat("dst"),
        ptr("single_link", "route_counts"), cat("route_links"),
        ptr("single_chunk", "chunk_counts"), cat("chunk_ids"),
        cat("op") if any(p.has_reduce for p in parts) else None,
        cat("group") if any(p.has_groups for p in parts) else None)


_M64 = (1 << 64) - 1
_XX1, _XX2, _XX5 = 11400714785074694791, 14029467366897019727, 2870177450012600261


def tuple_hash(items: Iterable[object], n: int) -> int:
    """``hash(tuple(items))`` (``n`` items) without building the tuple: CPython's tuple hash
    (xxHash-style lanes, 64-bit builds)."""
    acc = _XX5
    for x in items:
        lane = hash(x) & _M64
        acc = (acc + lane * _XX2) & _M64
        acc = ((acc << 31) | (acc >> 33)) & _M64
        acc = (acc * _XX1) & _M64
    acc = (acc + (n ^ (_XX5 ^ 3527539))) & _M64
    if acc == _M64:
        return 1546275796
    return acc - (1 << 64) if acc >= 1 << 63 else acc


def _csr_of(rows: list[tuple[int, ...]]) -> tuple[np.ndarray | None, np.ndarray]:
    """``(ptr, data)`` of integer tuples (``ptr`` None when every tuple has one item)."""
    lens = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
    total = int(lens.sum())
    data = np.fromiter((x for r in rows for x in r), dtype=np.int64, count=total)
    if total and (int(data.min()) < INT32.min or int(data.max()) > INT32.max):
        raise ValueError("a route link or chunk id does not fit in 32 bits")
    if len(rows) and total == len(rows) and bool(np.all(lens == 1)):
        return None, data
    ptr = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lens, out=ptr[1:])
    return ptr, data


def _tuples(ptr: np.ndarray | None, data: np.ndarray, a: int, b: int,
            ones: dict[int, tuple[int]]) -> list[tuple[int, ...]]:
    """Rows ``a..b`` of a CSR pair as tuples of Python ints (one-item tuples shared)."""
    if ptr is None:
        out = []
        for x in data[a:b].tolist():
            t = ones.get(x)
            if t is None:
                t = ones[x] = (x,)
            out.append(t)
        return out
    p = ptr[a:b + 1].tolist()
    base = p[0]
    items = data[base:p[-1]].tolist()
    return [tuple(items[p[k] - base:p[k + 1] - base]) for k in range(b - a)]
