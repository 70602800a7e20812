"""Bounded-FIFO execution (``docs/msccl-xml.md`` §2.2 pass E): finds deadlocks.

Every tb runs its transmissions in order.  A transmission first waits until every dependency
flag it carries is reached (flags are posted only after ``hasdep`` transmissions, valued by the
kernel's step counter).  A receive needs a message at the head of its connection (with the same
``cnt``); a send needs room: each connection holds at most ``capacity`` (default 1) messages.
Fused receive-and-send ops (``rcs``, ``rrs``, ``rrcs``) pop first and then wait for room to
push, as the runtime streams them slice by slice.

With a :class:`~tacos.msccl.fifo_calls.CallSplit`, a step that needs more FIFO slots than a
connection holds is run as the executor's primitive calls (``split.calls(cnt)`` of
``split.slots`` slots each): its first call still needs fewer than ``capacity`` messages in the
connection, every later one a free slot of the connection's ``split.capacity``; its receive
pops and a fused op forwards call by call.  Steps that fit stay whole messages, as above.

Each tb's behaviour is fixed and every enabling condition, once true, stays true until that tb
acts (one reader and one writer per connection, monotone flags), so the outcome does not depend
on the interleaving: one run decides deadlock freedom.  The run also yields an execution order
that the symbolic data-flow check replays.
"""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass, field

from tacos.msccl.fifo_calls import CallSplit, call_split, split_matters
from tacos.msccl.program import RECEIVING_TYPES, SENDING_TYPES, Program
from tacos.msccl.verify_model import ConnKey, Model, TbKey, Tx, build_model
from tacos.msccl.verify_report import Violation

Event = tuple[int, str]  # (transmission gid, "exec" | "recv" | "send")


@dataclass
class FifoRun:
    """Outcome: the events in execution order and, per stuck tb, why it cannot go on."""

    order: list[Event] = field(default_factory=list)
    blocked: dict[TbKey, str] = field(default_factory=dict)
    blocked_tx: dict[TbKey, Tx] = field(default_factory=dict)

    @property
    def completed(self) -> bool:
        """True when every tb ran to its end."""
        return not self.blocked


def run_fifo(model: Model, *, capacity: int = 1, split: CallSplit | None = None) -> FifoRun:
    """Execute the program with ``capacity`` messages per connection; with ``split``, every
    step is ``split.calls(cnt)`` primitive calls of ``split.slots`` slots each and a
    connection holds at most ``split.capacity`` slots (:mod:`tacos.msccl.fifo_calls`)."""
    run = FifoRun()
    order = run.order
    pc: dict[TbKey, int] = dict.fromkeys(model.by_tb, 0)
    phase: dict[TbKey, int] = dict.fromkeys(model.by_tb, 0)
    call: dict[TbKey, int] = dict.fromkeys(model.by_tb, 0)
    flag: dict[TbKey, int] = dict.fromkeys(model.by_tb, -1)
    # per connection: the calls in flight (tx, call index, calls of the tx), the slots they
    # hold and the messages they belong to
    fifo: dict[ConnKey, deque[tuple[Tx, int, int]]] = defaultdict(deque)
    held: dict[ConnKey, list[int]] = defaultdict(lambda: [0, 0])  # [slots, messages]
    waiting: dict[TbKey, list[TbKey]] = defaultdict(list)  # tb -> tbs waiting on its flag
    sender, receiver = model.sender, model.receiver
    slots = split.slots if split is not None else 0
    room = split.capacity if split is not None else 0
    # per tb, resolved once: its transmissions with (receives, sends, cnt, calls) of each, the
    # queue it pops from and the tb that feeds it, the queue it pushes into and the tb that
    # drains it
    ends = {}
    for key, txs in model.by_tb.items():
        tb = model.tbs[key]
        rconn, sconn = (tb.recv, key[0], tb.chan), (key[0], tb.send, tb.chan)
        kinds = [(tx.type in RECEIVING_TYPES, tx.type in SENDING_TYPES, tx.steps[0].cnt,
                  _calls(split, tx.steps[0].cnt)) for tx in txs]
        ends[key] = (txs, kinds, fifo[rconn], held[rconn], sender.get(rconn), fifo[sconn],
                     held[sconn], receiver.get(sconn))
    work = deque(model.by_tb)
    queued = set(work)

    def wake(key: TbKey | None) -> None:
        if key is not None and key not in queued:
            queued.add(key)
            work.append(key)

    flag_get = flag.get
    while work:
        key = work.popleft()
        queued.discard(key)
        txs, kinds, rq, rheld, feeder, sq, sheld, drainer = ends[key]
        rank = key[0]
        i, ph, j, n = pc[key], phase[key], call[key], len(txs)
        while i < n:
            tx = txs[i]
            recv, send, cnt, k = kinds[i]
            if ph == 0:
                if j == 0:
                    short = None
                    for d, want, _ in tx.waits:
                        if flag_get((rank, d), -1) < want:
                            short = (rank, d)
                            break
                    if short is not None:
                        waiting[short].append(key)
                        break
                if recv:
                    if not rq:
                        break
                    head, hj, hk = rq[0]
                    if hj != j or head.steps[0].cnt != cnt:
                        break
                    rq.popleft()
                    if hk > 1:
                        rheld[0] -= slots
                    if hj == hk - 1:
                        rheld[1] -= 1
                    if j == k - 1:
                        order.append((tx.gid, "recv"))
                    wake(feeder)
                    if send:
                        ph = 1  # a fused op: the send half of this call runs next
                        continue
                elif not send:
                    order.append((tx.gid, "exec"))
            if ph == 1 or (send and not recv):
                if (j == 0 and sheld[1] >= capacity) or (k > 1 and sheld[0] + slots > room):
                    break
                sq.append((tx, j, k))
                if k > 1:
                    sheld[0] += slots
                if j == 0:
                    sheld[1] += 1
                if j == k - 1:
                    order.append((tx.gid, "send"))
                wake(drainer)
            ph = 0
            j += 1
            if j < k and (recv or send):
                continue
            j = 0
            i += 1
            if tx.hasdep:
                flag[key] = tx.post
                for other in waiting.pop(key, ()):
                    wake(other)
        pc[key], phase[key], call[key] = i, ph, j
    for key, txs in model.by_tb.items():
        if pc[key] < len(txs):
            tx = txs[pc[key]]
            run.blocked_tx[key] = tx
            run.blocked[key] = _why(model, tx, phase[key], call[key], flag, fifo, capacity,
                                    split)
    return run


def _calls(split: CallSplit | None, cnt: int) -> int:
    """Calls a step of ``cnt`` chunks is run as: one message unless it overflows the slots."""
    return split.calls(cnt) if split is not None and split.overflows(cnt) else 1


def _why(model: Model, tx: Tx, phase: int, at: int, flag: dict[TbKey, int],
         fifo: dict[ConnKey, deque[tuple[Tx, int, int]]], capacity: int,
         split: CallSplit | None) -> str:
    st = tx.step
    calls = _calls(split, st.cnt)
    part = f"call {at + 1} of {calls}: " if calls > 1 else ""
    if phase == 0:
        for d, k, pos in tx.waits:
            have = flag.get((tx.rank, d), -1)
            if have < k:
                via = f" (via the nop at step {pos})" if pos != tx.first else ""
                posted = "no flag yet" if have < 0 else f"its flag is at step {have}"
                return f"waits for tb {d} to reach step {k}{via}; {posted}"
        if st.receives:
            conn = model.recv_conn(tx)
            a, b, c = conn
            q = fifo.get(conn)
            if q and q[0][0].step.cnt != st.cnt:
                return (f"receives cnt={st.cnt} on connection {a}->{b} chan {c} but the "
                        f"message waiting there ({q[0][0].label()}) has cnt={q[0][0].step.cnt}")
            if conn not in model.sender:
                return f"receives on connection {a}->{b} chan {c}, which no tb on rank {a} sends on"
            sender = model.sender[conn]
            return (f"{part}waits for a message on connection {a}->{b} chan {c} that rank {a} "
                    f"tb {sender[1]} has not sent")
    conn = model.send_conn(tx)
    a, b, c = conn
    rcv = model.receiver.get(conn)
    who = f"rank {b} tb {rcv[1]}" if rcv else f"no tb on rank {b}"
    if calls > 1 and split is not None and at > 0:
        return (f"{part}waits for a free FIFO slot on connection {a}->{b} chan {c} "
                f"(cnt={st.cnt} is {calls} primitive calls of {split.slots} slots, "
                f"{split.capacity} slots per connection; {split.describe()}); {who} does not "
                "drain it")
    return (f"waits for room on connection {a}->{b} chan {c} (capacity {capacity}); {who} "
            "does not receive the message in front")


def check_deadlock(model: Model, run: FifoRun, *, limit: int = 20) -> list[Violation]:
    """One ``deadlock`` violation per stuck tb (at most ``limit``), naming the blocked step."""
    out = []
    stuck = sorted(run.blocked)
    for key in stuck[:limit]:
        tx = run.blocked_tx[key]
        why = run.blocked[key]
        hint = ("a step of more primitive calls than its connection's FIFO slots hold needs "
                "its receiver running: receive before sending on paired connections, lower "
                "cnt, or use more instances or another protocol"
                if "FIFO slot" in why else
                "with capacity-1 connections no schedule completes; "
                "reorder sends/receives or dependencies")
        out.append(Violation("deadlock", f"blocked at {tx.type}: {why}", hint=hint,
                             **tx.where()))
    if len(stuck) > limit:
        out.append(Violation("deadlock", f"... and {len(stuck) - limit} more blocked tbs"))
    return out


def split_deadlocks(program: Program, nbytes: int | None = None) -> list[Violation]:
    """The deadlocks of ``program`` run call by call at ``nbytes`` (default: the top of its
    window, :func:`tacos.msccl.fifo_calls.judged_size`) - empty when no step needs more slots
    than its connection holds (the whole-message execution of ``tacosc verify`` then decides
    alone).  The rule the shape chooser applies to a candidate at the size it is chosen for;
    ``tacosc verify`` applies the same execution."""
    split = call_split(program, nbytes)
    if not split_matters(program, split):
        return []
    model = build_model(program)
    found = check_deadlock(model, run_fifo(model, split=split), limit=len(model.by_tb))
    # the sends stuck on full slots first: the others wait on them
    return sorted(found, key=lambda v: "FIFO slot" not in v.message)
