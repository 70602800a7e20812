"""MSCCL++ JSON plan verifier (``docs/msccl-xml.md`` §4), reported like the XML verifier.

Passes, in order (a pass is skipped, and says why, when an earlier one found the plan too broken
for it to mean anything):

1. ``structure`` - keys, numbering, channels, remote buffers, operation names
   (:mod:`tacos.msccl.mscclpp_reader`);
2. ``pairing`` - per (sender, receiver, k-th channel) as many ``signal``s as ``wait``s (the
   DSL's ``validate_signal_wait_pairing``);
3. ``syncthreads`` - a ``nop`` between a data operation and the ``signal``/``sem_release``
   that publishes it, and between a ``wait``/``sem_acquire`` and the data operation it guards;
4. ``execution`` - every thread block runs its operations in order; ``wait`` consumes a signal
   of the paired channel, ``sem_acquire`` a release (or the initial value), ``barrier`` waits
   for its thread blocks.  A state where no thread block can move is a deadlock;
5. ``races`` - vector clocks along program order and signal→wait, release→acquire and barrier
   edges (relaxed ``rlxsignal`` carries no data ordering): two accesses to one chunk, one a
   write, that are not ordered are a race; reads of chunks that hold no data yet and accesses
   outside a buffer are errors too;
6. ``symbolic`` - every input chunk starts as a label; puts, copies and reductions move and
   add labels, and the final outputs are compared with the collective's postcondition (each
   contribution exactly once), in-place aliasing applied when the plan is in-place.

NVLS ``glres`` (switch channel multimem load-reduce-store) reads the chunks of every rank of
the switch channel's group and writes the sum to all of them (to the destination switch
channel's buffer); ``gstore`` (multimem store) writes a local range to every rank of the
group.  LL packet operations, ``gstorepkt`` and ``pipeline`` are not modelled: a plan using
them is reported as not verified (an error), never as correct.
"""

from __future__ import annotations

from collections import defaultdict, deque
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tacos.msccl.mscclpp_reader import OPS_MODELLED, Op, Plan, Ref, load_plan, read_plan_text
from tacos.msccl.program import inplace_alias
from tacos.msccl.verify_report import MscclReport, Violation
from tacos.msccl.verify_symbolic import (
    CHECKED,
    Value,
    _expected,
    _fmt,
    _labels,
    _merge,
    _same,
    label,
)

DATA_OPS = frozenset({"put", "get", "copy", "re", "rre", "res", "rres", "glres", "gstore"})
PUBLISH = frozenset({"signal", "sem_release"})
GUARD = frozenset({"wait", "sem_acquire"})
LIMIT = 10

Loc = tuple[int, str, int]


def verify_mscclpp_text(text: str, source: str = "<plan>") -> MscclReport:
    """Verify MSCCL++ plan text."""
    plan, errors = read_plan_text(text, source)
    return _verify(plan, errors, source)


def verify_mscclpp_file(path: str | Path) -> MscclReport:
    """Verify an MSCCL++ plan file."""
    plan, errors = load_plan(path)
    return _verify(plan, errors, str(path))


def _summary(plan: Plan) -> dict[str, Any]:
    if not plan.ngpus:
        return {}
    per_gpu = [sum(1 for (g, _t) in plan.tbs if g == r) for r in range(plan.ngpus)]
    h = plan.header
    return {"name": plan.name, "coll": plan.coll, "ngpus": plan.ngpus, "proto": plan.protocol,
            "format": "mscclpp", "inplace": int(plan.inplace),
            "outofplace": int(not plan.inplace),
            "nchannels": None, "tbs_per_gpu": per_gpu[0] if len(set(per_gpu)) == 1
            and per_gpu else per_gpu, "tbs_min": min(per_gpu, default=0),
            "tbs_max": max(per_gpu, default=0), "tbs_total": len(plan.tbs),
            "steps_total": sum(len(ops) for ops in plan.tbs.values()),
            "minBytes": h.get("min_message_size", 0), "maxBytes": h.get("max_message_size")}


def _verify(plan: Plan, errors: list[Violation], source: str) -> MscclReport:
    checks: dict[str, str] = {"structure": "failed" if errors else "passed"}
    out = list(errors)
    if errors:
        for name in ("pairing", "syncthreads", "execution", "races", "symbolic"):
            checks[name] = "skipped: the plan's structure is broken"
        return MscclReport(source, tuple(out), (), _summary(plan), checks)
    unmodelled = [op for ops in plan.tbs.values() for op in ops if op.name not in OPS_MODELLED]
    for op in unmodelled[:LIMIT]:
        out.append(Violation("not-modelled", f"operation {op.name!r} (LL packets, NVLS or "
                             "pipeline) is not modelled by the verifier; the plan is not "
                             "verified", rank=op.rank, tb=op.tb, step=op.pos))
    found = _pairing(plan)
    out += found
    checks["pairing"] = "failed" if found else "passed"
    found = _syncthreads(plan)
    out += found
    checks["syncthreads"] = "failed" if found else "passed"
    if unmodelled:
        for name in ("execution", "races", "symbolic"):
            checks[name] = "skipped: the plan uses operations that are not modelled"
        return MscclReport(source, tuple(out), (), _summary(plan), checks)
    run = _Replay(plan)
    run.run()
    checks["execution"] = "failed" if run.deadlock else "passed"
    out += run.deadlock
    checks["races"] = "failed" if run.races else "passed"
    out += run.races
    if run.deadlock:
        checks["symbolic"] = "skipped: execution deadlocks"
    elif plan.coll not in CHECKED:
        checks["symbolic"] = f"not checked: no fixed postcondition for {plan.coll!r}"
    else:
        found = run.postcondition()
        out += found
        checks["symbolic"] = "failed" if found else "passed"
    return MscclReport(source, tuple(out), (), _summary(plan), checks)


def _pairing(plan: Plan) -> list[Violation]:
    signals: dict[tuple[int, int, int], int] = defaultdict(int)
    waits: dict[tuple[int, int, int], int] = defaultdict(int)
    for ops in plan.tbs.values():
        for op in ops:
            if op.name in ("signal", "rlxsignal", "pws", "pwsf"):
                for peer, nth in op.peers:
                    signals[(op.rank, peer, nth)] += 1
            elif op.name in ("wait", "rlxwait"):
                for peer, nth in op.peers:
                    waits[(peer, op.rank, nth)] += 1
    out = []
    for key in sorted(set(signals) | set(waits)):
        if signals[key] != waits[key]:
            a, b, nth = key
            out.append(Violation("pairing", f"rank {a} signals rank {b} {signals[key]} time(s) "
                                 f"on channel #{nth} but rank {b} waits {waits[key]} time(s)",
                                 rank=a, hint="every signal needs one wait on the peer"))
    return out[:LIMIT]


def _syncthreads(plan: Plan) -> list[Violation]:
    out = []
    for (g, t), ops in sorted(plan.tbs.items()):
        data_pending: Op | None = None
        guard_pending: Op | None = None
        for op in ops:
            if op.name == "nop":
                data_pending = guard_pending = None
                continue
            if op.name in PUBLISH and data_pending is not None:
                out.append(Violation("syncthreads", f"{op.name} publishes the data of "
                                     f"{data_pending.name} (op {data_pending.pos}) with no nop "
                                     "in between: other threads may still be writing",
                                     rank=g, tb=t, step=op.pos, hint="insert a nop"))
            if op.name in DATA_OPS and guard_pending is not None:
                out.append(Violation("syncthreads", f"{op.name} uses data guarded by "
                                     f"{guard_pending.name} (op {guard_pending.pos}) with no nop "
                                     "in between", rank=g, tb=t, step=op.pos,
                                     hint="insert a nop"))
            if op.name in DATA_OPS:
                data_pending = op
            if op.name in GUARD:
                guard_pending = op
    return out[:LIMIT]


class _Replay:
    """Runs the thread blocks with vector clocks and symbolic chunk values."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.keys = sorted(plan.tbs)
        self.index = {k: i for i, k in enumerate(self.keys)}
        n = len(self.keys)
        self.clock = [[0] * n for _ in range(n)]
        self.pc = [0] * n
        self.chan: dict[tuple[int, int, int], deque[list[int] | None]] = defaultdict(deque)
        self.sem: dict[tuple[int, int], deque[list[int] | None]] = defaultdict(deque)
        for g, inits in plan.semaphores.items():
            for s, v in enumerate(inits):
                self.sem[(g, s)].extend([None] * int(v or 0))
        self.barrier: dict[tuple[int, int], list[int]] = defaultdict(list)
        self.released: set[int] = set()  # thread blocks whose barrier has opened
        self.mem: dict[Loc, Value] = {}
        self.last_write: dict[Loc, tuple[int, int, Op]] = {}
        self.reads: dict[Loc, list[tuple[int, int, Op]]] = defaultdict(list)
        self.races: list[Violation] = []
        self.deadlock: list[Violation] = []
        c = plan.chunks.get(0, {})
        self.total = c.get("o", 0) if plan.coll == "allgather" else c.get("i", 0)
        for r in range(plan.ngpus):
            for k in range(plan.chunks[r].get("i", 0)):
                self.mem[self.loc(r, "i", k)] = label(r, k)

    # -- memory ------------------------------------------------------------------------------
    def loc(self, rank: int, buf: str, idx: int) -> Loc:
        if self.plan.inplace and self.plan.ngpus:
            buf, idx = inplace_alias(self.plan.coll, self.plan.ngpus, self.total, rank, buf, idx)
        return (rank, buf, idx)

    def _flag(self, rule: str, message: str, op: Op, hint: str | None = None) -> None:
        if len(self.races) < LIMIT:
            self.races.append(Violation(rule, message, rank=op.rank, tb=op.tb, step=op.pos,
                                        hint=hint))

    def _before(self, event: tuple[int, int, Op], me: int) -> bool:
        who, stamp, _op = event
        return self.clock[me][who] >= stamp

    def _in_bounds(self, ref: Ref, op: Op) -> bool:
        size = self.plan.chunks.get(ref.rank, {}).get(ref.buf, 0)
        if ref.index + ref.size > size:
            last = ref.index + ref.size - 1
            self._flag("bounds", f"{op.name} touches {ref.buf}[{ref.index}..{last}] of rank "
                       f"{ref.rank}, which has {size} chunk(s)", op)
            return False
        return True

    def read(self, ref: Ref, op: Op, me: int) -> list[Value]:
        if not self._in_bounds(ref, op):
            return [None] * ref.size
        vals = []
        for j in range(ref.size):
            key = self.loc(ref.rank, ref.buf, ref.index + j)
            w = self.last_write.get(key)
            if w is not None and not self._before(w, me):
                self._flag("race", f"{op.name} reads {ref.buf}[{ref.index + j}] of rank "
                           f"{ref.rank} while rank {w[2].rank} tb {w[2].tb} op {w[2].pos} "
                           f"({w[2].name}) may still write it", op,
                           "order them with signal/wait or a semaphore")
            value = self.mem.get(key)
            if value is None:
                self._flag("uninitialized-read", f"{op.name} reads {ref.buf}[{ref.index + j}] "
                           f"of rank {ref.rank}, which holds no data at that point", op)
            self.reads[key].append((me, self.clock[me][me], op))
            vals.append(value)
        return vals

    def write(self, ref: Ref, vals: list[Value], op: Op, me: int) -> None:
        if not self._in_bounds(ref, op):
            return
        for j in range(ref.size):
            key = self.loc(ref.rank, ref.buf, ref.index + j)
            prior = [self.last_write[key]] if key in self.last_write else []
            for ev in prior + self.reads.get(key, []):
                if ev[0] != me and not self._before(ev, me):
                    self._flag("race", f"{op.name} writes {ref.buf}[{ref.index + j}] of rank "
                               f"{ref.rank} while rank {ev[2].rank} tb {ev[2].tb} op "
                               f"{ev[2].pos} ({ev[2].name}) may still access it", op,
                               "order them with signal/wait or a semaphore")
                    break
            self.mem[key] = vals[j] if j < len(vals) else None
            self.last_write[key] = (me, self.clock[me][me], op)
            self.reads[key] = []

    # -- execution ---------------------------------------------------------------------------
    def _join(self, me: int, other: list[int] | None) -> None:
        if other is not None:
            mine = self.clock[me]
            for i, v in enumerate(other):
                if v > mine[i]:
                    mine[i] = v

    def _ready(self, op: Op, me: int) -> bool:
        if op.name in ("wait", "rlxwait"):
            return all(self.chan[(op.rank, peer, nth)] for peer, nth in op.peers)
        if op.name == "sem_acquire":
            return all(self.sem[(op.rank, s)] for s in op.sems)
        if op.name == "barrier" and op.barrier is not None:
            if me in self.released:
                return True
            key = (op.rank, op.barrier[0])
            if me not in self.barrier[key]:
                self.barrier[key].append(me)
            if len(self.barrier[key]) < op.barrier[1]:
                return False
            group = self.barrier.pop(key)
            joined = [max(col) for col in zip(*(self.clock[i] for i in group), strict=True)]
            for i in group:
                self.clock[i] = list(joined)
            self.released.update(group)
            return True
        return True

    def _step(self, op: Op, me: int) -> None:
        self.clock[me][me] += 1
        name = op.name
        if name in ("wait", "rlxwait"):
            for peer, nth in op.peers:
                stamp = self.chan[(op.rank, peer, nth)].popleft()
                self._join(me, stamp)
        elif name == "sem_acquire":
            for s in op.sems:
                self._join(me, self.sem[(op.rank, s)].popleft())
        elif name == "barrier":
            self.released.discard(me)
        if name in DATA_OPS or name in ("pws", "pwsf"):
            self._data(op, me)
        if name in ("signal", "rlxsignal", "pws", "pwsf"):
            stamp = None if name == "rlxsignal" else list(self.clock[me])
            for peer, nth in op.peers:
                self.chan[(peer, op.rank, nth)].append(stamp)
        elif name == "sem_release":
            for s in op.sems:
                self.sem[(op.rank, s)].append(list(self.clock[me]))

    def _data(self, op: Op, me: int) -> None:
        if op.name in ("put", "pws", "pwsf", "get", "copy"):
            for src, dst in zip(op.src, op.dst, strict=False):
                vals = self.read(src, op, me)
                self.write(dst, (vals + [None] * dst.size)[:dst.size], op, me)
            return
        width = min((r.size for r in op.src + op.dst), default=0)
        acc: list[Value] | None = None
        for src in op.src:
            vals = self.read(Ref(src.rank, src.buf, src.index, width), op, me)
            acc = vals if acc is None else [_merge(a, b) for a, b in zip(acc, vals, strict=True)]
        for dst in op.dst:
            self.write(Ref(dst.rank, dst.buf, dst.index, width), acc or [None] * width, op, me)

    def run(self) -> None:
        n = len(self.keys)
        moved = True
        while moved:
            moved = False
            for me in range(n):
                ops = self.plan.tbs[self.keys[me]]
                while self.pc[me] < len(ops) and self._ready(ops[self.pc[me]], me):
                    self._step(ops[self.pc[me]], me)
                    self.pc[me] += 1
                    moved = True
        stuck = [me for me in range(n) if self.pc[me] < len(self.plan.tbs[self.keys[me]])]
        for me in stuck[:LIMIT]:
            op = self.plan.tbs[self.keys[me]][self.pc[me]]
            what = {"wait": "a signal", "rlxwait": "a signal", "sem_acquire": "a semaphore "
                    "release", "barrier": "the other thread blocks of its barrier"}.get(
                        op.name, "its turn")
            peers = ", ".join(f"rank {p}" for p, _n in op.peers)
            self.deadlock.append(Violation(
                "deadlock", f"{op.name} waits forever for {what}"
                + (f" from {peers}" if peers else ""), rank=op.rank, tb=op.tb, step=op.pos,
                hint="every wait needs a matching signal that is reachable"))

    # -- postcondition -----------------------------------------------------------------------
    def postcondition(self) -> list[Violation]:
        plan = self.plan
        p = SimpleNamespace(ngpus=plan.ngpus, nchunksperloop=self.total, coll=plan.coll)
        root = 0
        if plan.coll in ("broadcast", "reduce"):
            best = -1
            for r in range(plan.ngpus):
                got = _labels(self.mem.get(self.loc(r, "o", 0)))
                if plan.coll == "broadcast" and len(got) == 1:
                    root = next(iter(got))[0]
                    break
                if plan.coll == "reduce" and len(got) > best:
                    best, root = len(got), r
        out: list[Violation] = []
        for r in range(plan.ngpus):
            for k in range(plan.chunks[r].get("o", 0)):
                want = _expected(p, r, k, root)
                if want is None:
                    continue
                got = self.mem.get(self.loc(r, "o", k))
                if _same(got, want):
                    continue
                want = _labels(want)
                if got is None:
                    text = f"output o[{k}] of rank {r} is never written; it must hold " \
                        f"{_fmt(sorted(want))}"
                elif set(got := _labels(got)) == set(want):
                    text = f"output o[{k}] of rank {r} counts a contribution more than once"
                else:
                    miss, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
                    parts = ([f"lacks {_fmt(miss)}"] if miss else []) + \
                        ([f"wrongly holds {_fmt(extra)}"] if extra else [])
                    text = f"output o[{k}] of rank {r} " + " and ".join(parts)
                out.append(Violation("postcondition", text, rank=r))
                if len(out) >= LIMIT:
                    return out
        return out
