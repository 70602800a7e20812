"""Dependency rules and the happens-before graph (``docs/msccl-xml.md`` §2.1 rules 11-15).

Rules: a ``depid`` names another existing tb of the same GPU (id <= 127), ``deps`` a real
(non-nop) step of it that has ``hasdep=1``; every nop carries a dependency and the step after a
run of nops has its own; fused ``re`` chains are well formed.  ``hasdep=1`` where nobody waits
is only a warning.

The happens-before graph has one node per transmission (see :mod:`tacos.msccl.verify_model`)
and edges for program order, dependency waits (from the transmission whose flag releases the
wait) and the k-th send -> k-th receive of each connection.  A cycle is a certain deadlock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from tacos.msccl.program import MAX_DEPENDED_TB, MAX_REDUCE_FUSION
from tacos.msccl.verify_model import Model
from tacos.msccl.verify_report import Violation


def check_dependencies(model: Model) -> tuple[list[Violation], bool]:
    """Dependency, nop, hasdep and ``re``-fusion rules; returns ``(violations, references_ok)``
    (False when a dependency points nowhere, so the graph would be incomplete)."""
    out: list[Violation] = []
    refs_ok = True
    referenced: set[tuple[int, int, int]] = set()
    for (rank, tid), tb in model.tbs.items():
        nops_before = 0
        for pos, st in enumerate(tb.steps):
            where = {"rank": rank, "tb": tid, "step": pos, "line": st.line or None}
            if st.depid >= 0:
                ok, msg, rule, hint = _target(model, rank, tid, st.depid, st.deps)
                if msg:
                    out.append(Violation(rule, msg, hint=hint, **where))
                if ok:
                    referenced.add((rank, st.depid, st.deps))
                elif rule == "dangling-dependency":
                    refs_ok = False
            elif st.depid < -1:
                out.append(Violation("dangling-dependency", f"depid={st.depid} must be -1 or "
                                     "a tb id", **where))
                refs_ok = False
            elif st.deps != -1:
                out.append(Violation("dependency-fields", f"deps={st.deps} without depid is "
                                     "ignored", severity="warning", **where))
            if st.is_nop:
                if st.depid < 0:
                    out.append(Violation(
                        "nop-dependency", "nop without a dependency: the runtime drops it but "
                        "still shifts its step counter, so later flags carry wrong indices",
                        hint="delete the nop or give it depid/deps", **where))
                if st.hasdep == 1:
                    out.append(Violation("hasdep-nop", "hasdep=1 on a nop is ignored (nops "
                                         "never post flags)", severity="warning", **where))
                nops_before += 1
                continue
            if nops_before and st.depid < 0:
                out.append(Violation(
                    "nop-chain", f"follows {nops_before} nop(s) but has no dependency of its "
                    "own: the runtime rejects the file (\"chain of dependencies\")",
                    hint="move the last nop's depid/deps onto this step", **where))
            nops_before = 0
        if nops_before:
            last = len(tb.steps) - 1
            out.append(Violation("nop-trailing", f"{nops_before} trailing nop(s) wait for "
                                 "nothing that follows", rank=rank, tb=tid, step=last,
                                 line=tb.steps[last].line or None, severity="warning"))
    out.extend(_hasdep_unused(model, referenced))
    out.extend(_chains(model))
    return out, refs_ok


def _target(model: Model, rank: int, tid: int, depid: int, deps: int
            ) -> tuple[bool, str, str, str | None]:
    """Validate one dependency; returns ``(valid reference, message, rule, hint)``."""
    if depid == tid:
        return False, f"depends on its own tb (depid={depid}); program order already " \
            "orders steps of one tb", "self-dependency", "drop depid/deps"
    target = model.tbs.get((rank, depid))
    if target is None:
        n = sum(1 for r, _ in model.tbs if r == rank)
        return False, f"depid={depid} names no tb of rank {rank} (tbs 0..{n - 1}); " \
            "dependencies only refer to tbs of the same GPU", "dangling-dependency", None
    if not 0 <= deps < len(target.steps):
        return False, f"deps={deps} is not a step of rank {rank} tb {depid} (steps 0.." \
            f"{len(target.steps) - 1})", "dangling-dependency", None
    st = target.steps[deps]
    if st.is_nop:
        return False, f"depends on rank {rank} tb {depid} step {deps}, a nop: nops never " \
            "post flags", "dependency-on-nop", "depend on the real step after the nop run"
    if depid > MAX_DEPENDED_TB:
        return True, f"depends on tb {depid}, but depid is stored in an int8 (tbs others " \
            f"wait on must be <= {MAX_DEPENDED_TB})", "depid-overflow", \
            "renumber tbs so depended-on ones come first"
    if st.hasdep != 1:
        return True, f"depends on rank {rank} tb {depid} step {deps}, which has hasdep=0: " \
            "that tb never posts a flag for it, so the wait ends only at a later hasdep " \
            "step or hangs", "hasdep-missing", f"set hasdep=\"1\" on tb {depid} step {deps}"
    tx = model.pos_tx[(rank, depid)][deps]
    if tx is not None and tx.last == deps and tx.post != deps:
        return True, f"rank {rank} tb {depid} step {deps} posts its flag as step counter " \
            f"{tx.post}, not {deps} (nops without dependencies shift the runtime's counter)", \
            "step-counter", None
    return True, "", "", None


def _hasdep_unused(model: Model, referenced: set[tuple[int, int, int]]) -> list[Violation]:
    out = []
    for (rank, tid), tb in model.tbs.items():
        for pos, st in enumerate(tb.steps):
            if st.hasdep == 1 and not st.is_nop and (rank, tid, pos) not in referenced:
                out.append(Violation(
                    "hasdep-unused", "hasdep=1 but no step waits on it (an unneeded flag "
                    "write; it also ends an re fusion chain)", rank, tid, pos, st.line or None,
                    severity="warning"))
    return out


def _chains(model: Model) -> list[Violation]:
    out = []
    for key, chains in model.chains.items():
        rank, tid = key
        tb = model.tbs[key]
        for first, last in chains:
            steps = tb.steps[first:last + 1]
            real = [s for s in steps if not s.is_nop]
            where = {"rank": rank, "tb": tid, "step": first, "line": steps[0].line or None}
            if len(real) > MAX_REDUCE_FUSION:
                out.append(Violation(
                    "re-fusion", f"steps {first}..{last} fuse {len(real)} re steps into one "
                    f"reduction; the kernel's source table holds {MAX_REDUCE_FUSION}",
                    hint="break the chain with hasdep or a dependency", **where))
            counts = {s.cnt for s in real}
            if len(counts) > 1:
                out.append(Violation(
                    "re-fusion", f"re steps {first}..{last} are fused (same dst, same srcbuf, "
                    f"no dependency) but have different cnt {sorted(counts)}; the runtime "
                    "uses the last cnt for all", **where))
            d = real[0]
            for s in real:
                if s.srcbuf == d.dstbuf and s.srcoff < d.dstoff + d.cnt and \
                        d.dstoff < s.srcoff + s.cnt:
                    out.append(Violation(
                        "re-fusion", f"fused re chain {first}..{last} reads its own "
                        f"destination {d.dstbuf}[{d.dstoff}] as a source", severity="warning",
                        **where))
                    break
    return out


# -- happens-before ---------------------------------------------------------------------------


@dataclass
class HappensBefore:
    """Predecessor lists per transmission, a topological order, and the nodes on or behind a
    cycle (empty when acyclic)."""

    preds: list[list[int]]
    order: list[int]
    stuck: list[int] = field(default_factory=list)
    wait_preds: dict[int, set[int]] = field(default_factory=dict)

    @property
    def acyclic(self) -> bool:
        """True when every transmission can be ordered."""
        return not self.stuck


def topological_order(preds: list[list[int]]) -> list[int]:
    """Kahn's order of the nodes ``0..len(preds)-1`` given each one's predecessors; nodes on a
    cycle (or after one) are left out."""
    n = len(preds)
    succs: list[list[int]] = [[] for _ in range(n)]
    indeg = [len(p) for p in preds]
    for v, ps in enumerate(preds):
        for u in ps:
            succs[u].append(v)
    order = [v for v in range(n) if indeg[v] == 0]
    i = 0
    while i < len(order):
        for w in succs[order[i]]:
            indeg[w] -= 1
            if indeg[w] == 0:
                order.append(w)
        i += 1
    return order


def build_hb(model: Model, order: Callable[[list[list[int]]], list[int]] | None = None
             ) -> HappensBefore:
    """Program-order, dependency and send->receive edges, then a topological sort (``order``:
    a function computing :func:`topological_order`'s result, e.g. compiled)."""
    n = len(model.txs)
    preds: list[list[int]] = [[] for _ in range(n)]
    wait_preds: dict[int, set[int]] = {}
    for txs in model.by_tb.values():
        for a, b in zip(txs, txs[1:], strict=False):
            preds[b.gid].append(a.gid)
        for tx in txs:
            for depid, deps, _ in tx.waits:
                rel = model.release(tx.rank, depid, deps)
                if rel is not None and rel.gid != tx.gid:
                    preds[tx.gid].append(rel.gid)
                    wait_preds.setdefault(tx.gid, set()).add(rel.gid)
    for conn, sends in model.sends.items():
        for s, r in zip(sends, model.recvs.get(conn, ()), strict=False):
            preds[r.gid].append(s.gid)
    order = (order or topological_order)(preds)
    done = set(order)
    stuck = [v for v in range(n) if v not in done]
    return HappensBefore(preds, order, stuck, wait_preds)


def check_cycles(model: Model, hb: HappensBefore) -> list[Violation]:
    """Report one happens-before cycle (a certain deadlock), naming the steps on it."""
    if hb.acyclic:
        return []
    stuck = set(hb.stuck)
    v = hb.stuck[0]
    seen: dict[int, int] = {}
    path: list[int] = []
    while v not in seen:
        seen[v] = len(path)
        path.append(v)
        v = next(u for u in hb.preds[v] if u in stuck)
    cycle = list(reversed(path[seen[v]:]))  # forward (cause -> effect) order
    parts = []
    for a, b in zip(cycle, cycle[1:] + cycle[:1], strict=False):
        ta, tb = model.txs[a], model.txs[b]
        kind = "then" if ta.key == tb.key else (
            "releases" if a in hb.wait_preds.get(b, ()) else "sends to")
        parts.append(f"{ta.label()} {kind}")
    text = " ".join(parts) + f" {model.txs[cycle[0]].label()}"
    if len(cycle) > 12:
        text = " ".join(parts[:12]) + f" ... ({len(cycle)} transmissions)"
    head = model.txs[cycle[0]]
    return [Violation(
        "cycle", f"happens-before cycle (certain deadlock): {text}; {len(stuck)} "
        "transmission(s) can never run", hint="reorder the steps or remove a dependency on "
        "the cycle", **head.where())]
