"""Symbolic data flow (``docs/msccl-xml.md`` §2.1 rule 17, §2.2 step 6).

Every input chunk starts with a label ``(rank, chunk)``; a chunk's value is a multiset of labels
(label -> multiplicity).  Copies and messages carry values, reductions add multisets.  Replaying
the bounded-FIFO execution order, the check flags reads of chunks that hold no data yet and, at
the end, compares every output chunk with the collective's postcondition: each contribution
exactly once (double counting is reported as such).

Postconditions (N ranks, C = nchunksperloop, m = C/N): allgather ``o[j] = {(j//m, j%m)}``;
allreduce ``o[k] = {(q, k) for all q}``; reducescatter ``o[k]`` of rank r ``= {(q, r*m+k)}``;
alltoall ``o[j]`` of rank r ``= {(j//m, r*m + j%m)}``; broadcast ``o[k] = {(root, k)}`` on every
rank; reduce ``o[k] = {(q, k)}`` on the root.  The root of broadcast/reduce is not in the XML and
is inferred from the result.  Other collectives are reported as not checked.
"""

from __future__ import annotations

from collections import defaultdict, deque

from tacos.msccl.program import inplace_alias, needs_multiple_of_ngpus
from tacos.msccl.verify_fifo import FifoRun
from tacos.msccl.verify_model import Model, Tx
from tacos.msccl.verify_report import Violation

Label = tuple[int, int]
#: A value: ``(chunk, ranks)`` when it holds chunk ``chunk`` of each rank in the bitset
#: ``ranks`` exactly once (every value of a correct program: an O(1) merge however many ranks
#: contributed), else the general multiset ``{label: multiplicity}``; None = no data.
Value = tuple[int, int] | dict[Label, int] | None
CHECKED = ("allgather", "allreduce", "reducescatter", "alltoall", "broadcast", "reduce")


def label(rank: int, chunk: int) -> Value:
    """The initial value of input chunk ``chunk`` of ``rank``."""
    return (chunk, 1 << rank)


def _labels(v: Value) -> dict[Label, int]:
    """The multiset of a non-empty value."""
    if isinstance(v, tuple):
        chunk, ranks = v
        return {(q, chunk): 1 for q in range(ranks.bit_length()) if ranks >> q & 1}
    return dict(v or {})


def _merge(a: Value, b: Value) -> Value:
    if a is None or b is None:
        return None
    if isinstance(a, tuple) and isinstance(b, tuple) and a[0] == b[0] and not a[1] & b[1]:
        return (a[0], a[1] | b[1])
    out = _labels(a)
    for k, v in _labels(b).items():
        out[k] = out.get(k, 0) + v
    return out


def _same(got: Value, want: Value) -> bool:
    if isinstance(got, tuple) and isinstance(want, tuple):
        return got == want
    return got is not None and _labels(got) == _labels(want)


class _Replay:
    def __init__(self, model: Model, aliased: bool, limit: int) -> None:
        self.model = model
        p = model.program
        self.p = p
        self.aliased = aliased
        self.limit = limit
        self.mem: dict[tuple[int, str, int], Value] = {}
        self.writer: dict[tuple[int, str, int], Tx] = {}
        self.fifo: dict[tuple[int, int, int], deque[list[Value]]] = defaultdict(deque)
        self.carry: dict[int, list[Value]] = {}
        self.out: list[Violation] = []
        self.bad_reads = 0

    def loc(self, rank: int, buf: str, idx: int) -> tuple[int, str, int]:
        if self.aliased:
            buf, idx = inplace_alias(self.p.coll, self.p.ngpus, self.p.nchunksperloop, rank,
                                     buf, idx)
        return (rank, buf, idx)

    def read(self, tx: Tx, buf: str, off: int, cnt: int) -> list[Value]:
        get, rank = self.mem.get, tx.rank
        if self.aliased:
            vals = [get(self.loc(rank, buf, off + j)) for j in range(cnt)]
        else:
            vals = [get((rank, buf, j)) for j in range(off, off + cnt)]
        if None in vals:
            missing = [off + j for j, v in enumerate(vals) if v is None]
            self.bad_reads += 1
            if self.bad_reads <= self.limit:
                self.out.append(Violation(
                    "uninitialized-read", f"{tx.type} reads {buf}[{missing[0]}], which holds "
                    "no data at that point of the execution", hint="make it wait for the step "
                    "that fills the chunk", **tx.where()))
        return vals

    def write(self, tx: Tx, buf: str, off: int, vals: list[Value]) -> None:
        mem, writer, rank, aliased = self.mem, self.writer, tx.rank, self.aliased
        for j, v in enumerate(vals, off):
            key = self.loc(rank, buf, j) if aliased else (rank, buf, j)
            mem[key] = v
            writer[key] = tx

    def run(self, fifo_run: FifoRun) -> None:
        m = self.model
        # each tb's outgoing and incoming queue, looked up once
        sq = {key: self.fifo[(key[0], tb.send, tb.chan)] for key, tb in m.tbs.items()}
        rq = {key: self.fifo[(tb.recv, key[0], tb.chan)] for key, tb in m.tbs.items()}
        txs, carry = m.txs, self.carry
        for gid, what in fifo_run.order:
            tx = txs[gid]
            st = tx.step
            if what == "send" and gid in carry:
                sq[(tx.rank, tx.tb)].append(carry.pop(gid))
            elif what == "send":
                sq[(tx.rank, tx.tb)].append(self.read(tx, st.srcbuf, st.srcoff, st.cnt))
            elif what == "recv":
                got = list(rq[(tx.rank, tx.tb)].popleft())
                got = (got + [None] * st.cnt)[:st.cnt]
                if st.type in ("rrs", "rrc", "rrcs"):
                    local = self.read(tx, st.srcbuf, st.srcoff, st.cnt)
                    got = [_merge(a, b) for a, b in zip(got, local, strict=True)]
                if st.type in ("r", "rcs", "rrc", "rrcs"):
                    self.write(tx, st.dstbuf, st.dstoff, got)
                if st.sends:
                    self.carry[gid] = got
            elif st.type == "cpy":
                self.write(tx, st.dstbuf, st.dstoff, self.read(tx, st.srcbuf, st.srcoff, st.cnt))
            elif st.type == "re":
                cnt = tx.steps[-1].cnt  # the runtime keeps the last cnt of a fused chain
                acc = self.read(tx, st.dstbuf, st.dstoff, cnt)
                srcs = [self.read(tx, s.srcbuf, s.srcoff, cnt) for s in tx.steps]
                for vals in srcs:
                    acc = [_merge(a, b) for a, b in zip(acc, vals, strict=True)]
                self.write(tx, st.dstbuf, st.dstoff, acc)

    def initial(self) -> None:
        p = self.p
        n, c = p.ngpus, p.nchunksperloop
        count = c // n if p.coll == "allgather" else c
        for r in range(n):
            for k in range(count):
                self.mem[self.loc(r, "i", k)] = label(r, k)


def _fmt(labels: list[Label]) -> str:
    shown = ", ".join(f"(rank {r}, chunk {k})" for r, k in labels[:4])
    return shown + (f" and {len(labels) - 4} more" if len(labels) > 4 else "")


def _expected(p, rank: int, k: int, root: int) -> Value:
    n, c = p.ngpus, p.nchunksperloop
    m = c // n
    coll = p.coll
    everyone = (1 << n) - 1
    if coll == "allgather":
        return (k % m, 1 << (k // m))
    if coll == "allreduce":
        return (k, everyone)
    if coll == "reducescatter":
        return (rank * m + k, everyone)
    if coll == "alltoall":
        return (rank * m + k % m, 1 << (k // m))
    if coll == "broadcast":
        return (k, 1 << root)
    if coll == "reduce":
        return (k, everyone) if rank == root else None
    return None


def _root(rep: _Replay) -> int:
    p = rep.p
    if p.coll == "broadcast":
        v = _labels(rep.mem.get(rep.loc(0, "o", 0)))
        if len(v) == 1:
            return next(iter(v))[0]
        return 0
    best, root = -1, 0
    for r in range(p.ngpus):
        v = _labels(rep.mem.get(rep.loc(r, "o", 0)))
        if len(v) > best:
            best, root = len(v), r
    return root


def check_symbolic(model: Model, run: FifoRun, *, aliased: bool, limit: int = 10
                   ) -> tuple[list[Violation], str, dict]:
    """Replay ``run`` symbolically and check the postcondition.

    Returns ``(violations, status, info)``; ``status`` is ``"passed"``, ``"failed"`` or
    ``"not checked: ..."``; ``info`` holds the inferred ``root`` for broadcast/reduce.
    """
    p = model.program
    if p.coll not in CHECKED:
        return [], f"not checked: no fixed postcondition for coll={p.coll!r}", {}
    if p.ngpus < 1 or (needs_multiple_of_ngpus(p.coll) and p.nchunksperloop % p.ngpus):
        return [], "skipped: chunk geometry is invalid", {}
    rep = _Replay(model, aliased, limit)
    rep.initial()
    rep.run(run)
    if not run.completed:
        return rep.out, "failed" if rep.out else "skipped: execution deadlocks", {}
    root = _root(rep) if p.coll in ("broadcast", "reduce") else 0
    info = {"root": root} if p.coll in ("broadcast", "reduce") else {}
    n_out = p.nchunksperloop // p.ngpus if p.coll == "reducescatter" else p.nchunksperloop
    wrong = 0
    for r in range(p.ngpus):
        for k in range(n_out):
            want = _expected(p, r, k, root)
            if want is None:
                continue
            key = rep.loc(r, "o", k)
            got = rep.mem.get(key)
            if _same(got, want):
                continue
            wrong += 1
            if wrong > limit:
                continue
            w = rep.writer.get(key)
            where = w.where() if w else {"rank": r}
            where["rank"] = r
            name = f"o[{k}]" + (f" (stored as {key[1]}[{key[2]}])" if key[1:] != ("o", k) else "")
            want = _labels(want)
            if got is None:
                out = Violation("postcondition", f"output {name} of rank {r} is never written; "
                                f"it must hold {_fmt(sorted(want))}", **where)
            elif set(got := _labels(got)) == set(want):
                twice = sorted(lbl for lbl, cnt in got.items() if cnt > 1)
                out = Violation("double-count", f"output {name} of rank {r} counts "
                                f"{_fmt(twice)} more than once", **where)
            else:
                miss = sorted(set(want) - set(got))
                extra = sorted(set(got) - set(want))
                parts = []
                if miss:
                    parts.append(f"lacks {_fmt(miss)}")
                if extra:
                    parts.append(f"wrongly holds {_fmt(extra)}")
                out = Violation("postcondition", f"output {name} of rank {r} " +
                                " and ".join(parts), **where)
            rep.out.append(out)
    if wrong > limit:
        rep.out.append(Violation("postcondition", f"... and {wrong - limit} more wrong output "
                                 "chunks"))
    return rep.out, "failed" if rep.out else "passed", info
