"""Data races between thread blocks of one GPU (``docs/msccl-xml.md`` §2.1 rule 16).

Two accesses to the same physical chunk from different tbs of one GPU, at least one a write,
must be ordered by happens-before (program order, dependency waits, send -> receive).  Buffer
capacity never orders anything here.  Under in-place the input and output buffers alias
(:func:`tacos.msccl.program.inplace_alias`), so ``i[k]`` and ``o[r*C/N+k]`` are one chunk for
allgather; a ``cpy`` of a chunk onto itself under aliasing is not a write.  Ancestor sets are
Python integers used as bitsets over the topological order.
"""

from __future__ import annotations

from collections import defaultdict

from tacos.msccl.program import READS_DST, READS_SRC, WRITES_DST, Program, inplace_alias
from tacos.msccl.verify_deps import HappensBefore
from tacos.msccl.verify_model import Model, Tx
from tacos.msccl.verify_report import Violation

Access = tuple[int, int, bool, str]  # (gid, tb, is_write, text as written)


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


def ancestors(hb: HappensBefore) -> dict[int, int]:
    """Bitset of all happens-before ancestors of every orderable transmission."""
    anc: dict[int, int] = {}
    for v in hb.order:
        a = 0
        for u in hb.preds[v]:
            a |= anc[u] | (1 << u)
        anc[v] = a
    return anc


def check_races(model: Model, hb: HappensBefore, *, aliased: bool, limit: int = 20
                ) -> list[Violation]:
    """Report unordered conflicting accesses (at most ``limit`` plus a count of the rest)."""
    p = model.program
    anc = ancestors(hb)
    table: dict[tuple[int, str, int], list[Access]] = defaultdict(list)
    for tx in model.txs:
        if tx.gid not in anc:
            continue  # behind a cycle, already reported
        st = tx.step
        self_copy = aliased and st.type == "cpy" and _phys(p, tx.rank, st.srcbuf, st.srcoff) \
            == _phys(p, tx.rank, st.dstbuf, st.dstoff)
        for buf, off, cnt, write in accesses(tx):
            if write and self_copy:
                continue  # copies a chunk onto itself (in-place): nothing changes
            for j in range(off, off + cnt):
                phys = _phys(p, tx.rank, buf, j) if aliased else (buf, j)
                table[(tx.rank, phys[0], phys[1])].append((tx.gid, tx.tb, write, f"{buf}[{j}]"))
    found: dict[tuple[int, int], tuple[Access, Access]] = {}
    for accs in table.values():
        if len(accs) < 2 or not any(a[2] for a in accs):
            continue
        for i, a in enumerate(accs):
            for b in accs[i + 1:]:
                if a[1] == b[1] or not (a[2] or b[2]):
                    continue
                ga, gb = a[0], b[0]
                if (anc[gb] >> ga) & 1 or (anc[ga] >> gb) & 1:
                    continue
                key = (min(ga, gb), max(ga, gb))
                found.setdefault(key, (a, b) if ga < gb else (b, a))
    out = []
    for a, b in list(found.values())[:limit]:
        ta, tb_ = model.txs[a[0]], model.txs[b[0]]
        alias = " (in-place aliasing)" if aliased and a[3][0] != b[3][0] else ""
        out.append(Violation(
            "race", f"tb {tb_.tb} step {tb_.first} ({tb_.type} {_verb(b)} {b[3]}) and tb "
            f"{ta.tb} step {ta.first} ({ta.type} {_verb(a)} {a[3]}) touch the same chunk"
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
