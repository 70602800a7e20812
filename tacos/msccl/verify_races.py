"""Data races between thread blocks of one GPU (``docs/msccl-xml.md`` §2.1 rule 16).

Two accesses to the same physical chunk from different tbs of one GPU, at least one a write,
must be ordered by happens-before (program order, dependency waits, send -> receive).  Buffer
capacity never orders anything here.  Under in-place the input and output buffers alias
(:func:`tacos.msccl.program.inplace_alias`), so ``i[k]`` and ``o[r*C/N+k]`` are one chunk for
allgather; a ``cpy`` of a chunk onto itself under aliasing is not a write.

The check is linear in the number of accesses.  Transmissions are visited in a topological
order of happens-before; per chunk it keeps the last write and the reads since then.  A read
must come after the last write, a write after the last write and after every read since it:
if all of these hold, every conflicting pair is ordered (by transitivity through the chain of
writes), and if some conflicting pair is unordered, one of these checks fails.  Each check
first asks the rank-local order (program order plus dependency waits, as sparse vector clocks
over the rank's tbs, which is how lowered programs order their accesses); only when that does
not order the pair does it search the whole happens-before graph (sends and receives of other
ranks included), backwards from the later access and never below the earlier one's position.
"""

from __future__ import annotations

from tacos.msccl.program import READS_DST, READS_SRC, WRITES_DST, Program, inplace_alias
from tacos.msccl.verify_deps import HappensBefore
from tacos.msccl.verify_model import Model, Tx
from tacos.msccl.verify_report import Violation

Access = tuple[int, int, bool, str, int]  # (gid, tb, is_write, buffer, offset)


def accesses(tx: Tx) -> list[tuple[str, int, int, bool]]:
    """Local ``(buffer, offset, cnt, is_write)`` ranges of a transmission (fused chains read
    the destination and every source, then write the destination)."""
    st = tx.step
    out = []
    if st.type in READS_SRC:
        out.extend((s.srcbuf, s.srcoff, s.cnt, False) for s in tx.steps if not s.is_nop)
    if st.type in READS_DST:
        out.append((st.dstbuf, st.dstoff, st.cnt, False))
    if st.type in WRITES_DST:
        out.append((st.dstbuf, st.dstoff, st.cnt, True))
    return out


class _Order:
    """Happens-before queries between transmissions of one rank."""

    def __init__(self, model: Model, hb: HappensBefore) -> None:
        self.model = model
        self.hb = hb
        self.pos = [-1] * len(model.txs)
        for k, v in enumerate(hb.order):
            self.pos[v] = k
        self.clock: dict[int, dict[int, int]] = {}  # gid -> rank-local vector clock
        self.tb_clock: dict[tuple[int, int], dict[int, int]] = {}

    def visit(self, tx: Tx) -> None:
        """Compute ``tx``'s rank-local vector clock (predecessors visited first)."""
        if not tx.waits:  # the tb's clock stays as it is (an absent clock is empty)
            if tx.hasdep:
                key = (tx.rank, tx.tb)
                vc = self.tb_clock.get(key)
                if vc is None:
                    vc = self.tb_clock[key] = {}
                self.clock[tx.gid] = vc
            return
        vc = self.tb_clock.get(tx.key, {})
        fresh = False
        for depid, deps, _ in tx.waits:
            rel = self.model.release(tx.rank, depid, deps)
            if rel is None or rel.gid == tx.gid or self.pos[rel.gid] < 0:
                continue
            other = self.clock.get(rel.gid, {})
            if vc.get(rel.tb, -1) >= rel.index and all(vc.get(k, -1) >= i
                                                      for k, i in other.items()):
                continue
            if not fresh:
                vc, fresh = dict(vc), True
            for k, i in other.items():
                if vc.get(k, -1) < i:
                    vc[k] = i
            if vc.get(rel.tb, -1) < rel.index:
                vc[rel.tb] = rel.index
        self.tb_clock[tx.key] = vc
        if tx.hasdep:
            self.clock[tx.gid] = vc

    def before(self, a: Tx, b: Tx) -> bool:
        """True if ``a`` happens before ``b``; ``a`` was visited earlier and ``b`` is the
        latest visited transmission of its tb."""
        if a.tb == b.tb:
            return a.index < b.index
        if self.tb_clock.get(b.key, {}).get(a.tb, -1) >= a.index:
            return True
        return self._search(a.gid, b.gid)

    def _search(self, a: int, b: int) -> bool:
        """Exact reachability ``a -> b`` over the whole graph, pruned below ``a``'s position."""
        floor = self.pos[a]
        preds = self.hb.preds
        pos = self.pos
        seen = {b}
        stack = [b]
        while stack:
            v = stack.pop()
            for u in preds[v]:
                if u == a:
                    return True
                if u not in seen and pos[u] > floor:
                    seen.add(u)
                    stack.append(u)
        return False


def check_races(model: Model, hb: HappensBefore, *, aliased: bool, limit: int = 20
                ) -> list[Violation]:
    """Report unordered conflicting accesses (at most ``limit`` plus a count of the rest)."""
    p = model.program
    order = _Order(model, hb)
    txs = model.txs
    last_write: dict[tuple[int, str, int], Access] = {}
    reads: dict[tuple[int, str, int], list[Access]] = {}
    found: dict[tuple[int, int], tuple[Access, Access]] = {}

    def ordered(x: Access, y: Access) -> bool:
        return x[1] == y[1] or order.before(txs[x[0]], txs[y[0]])

    def flag(x: Access, y: Access) -> None:
        key = (min(x[0], y[0]), max(x[0], y[0]))
        found.setdefault(key, (x, y) if x[0] < y[0] else (y, x))

    visit, get_write = order.visit, last_write.get
    for gid in hb.order:
        tx = txs[gid]
        visit(tx)
        st = tx.steps[0]
        rank, tb = tx.rank, tx.tb
        self_copy = aliased and st.type == "cpy" and _phys(p, rank, st.srcbuf, st.srcoff) \
            == _phys(p, rank, st.dstbuf, st.dstoff)
        for buf, off, cnt, write in accesses(tx):
            if write and self_copy:
                continue  # copies a chunk onto itself (in-place): nothing changes
            for j in range(off, off + cnt):
                slot = (rank, *_phys(p, rank, buf, j)) if aliased else (rank, buf, j)
                acc = (gid, tb, write, buf, j)
                w = get_write(slot)
                if w is not None and w[0] != gid and not ordered(w, acc):
                    flag(w, acc)
                if write:
                    for r in reads.pop(slot, ()):
                        if r[0] != gid and not ordered(r, acc):
                            flag(r, acc)
                    last_write[slot] = acc
                else:
                    reads.setdefault(slot, []).append(acc)
    out = []
    for a, b in list(found.values())[:limit]:
        ta, tb_ = model.txs[a[0]], model.txs[b[0]]
        alias = " (in-place aliasing)" if aliased and a[3][:1] != b[3][:1] else ""
        out.append(Violation(
            "race", f"tb {tb_.tb} step {tb_.first} ({tb_.type} {_verb(b)} {b[3]}[{b[4]}]) and tb "
            f"{ta.tb} step {ta.first} ({ta.type} {_verb(a)} {a[3]}[{a[4]}]) touch the same chunk"
            f"{alias} with no happens-before order between them",
            hint="make one wait for the other with depid/deps (and hasdep=1 on the target)",
            **tb_.where()))
    if len(found) > limit:
        out.append(Violation("race", f"... and {len(found) - limit} more unordered access "
                             "pairs", rank=None))
    return out


def _phys(p: Program, rank: int, buf: str, off: int) -> tuple[str, int]:
    return inplace_alias(p.coll, p.ngpus, p.nchunksperloop, rank, buf, off)


def _verb(a: Access) -> str:
    return "writes" if a[2] else "reads"
