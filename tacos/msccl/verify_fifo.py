"""Bounded-FIFO execution (``docs/msccl-xml.md`` §2.2 pass E): finds deadlocks.

Every tb runs its transmissions in order.  A transmission first waits until every dependency
flag it carries is reached (flags are posted only after ``hasdep`` transmissions, valued by the
kernel's step counter).  A receive needs a message at the head of its connection (with the same
``cnt``); a send needs room: each connection holds at most ``capacity`` (default 1) messages.
Fused receive-and-send ops (``rcs``, ``rrs``, ``rrcs``) pop first and then wait for room to
push, as the runtime streams them slice by slice.

Each tb's behaviour is fixed and every enabling condition, once true, stays true until that tb
acts (one reader and one writer per connection, monotone flags), so the outcome does not depend
on the interleaving: one run decides deadlock freedom.  The run also yields an execution order
that the symbolic data-flow check replays.
"""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass, field

from tacos.msccl.program import RECEIVING_TYPES, SENDING_TYPES
from tacos.msccl.verify_model import ConnKey, Model, TbKey, Tx
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


def run_fifo(model: Model, *, capacity: int = 1) -> FifoRun:
    """Execute the program with ``capacity`` messages per connection."""
    run = FifoRun()
    order = run.order
    pc: dict[TbKey, int] = dict.fromkeys(model.by_tb, 0)
    phase: dict[TbKey, int] = dict.fromkeys(model.by_tb, 0)
    flag: dict[TbKey, int] = dict.fromkeys(model.by_tb, -1)
    fifo: dict[ConnKey, deque[Tx]] = defaultdict(deque)
    waiting: dict[TbKey, list[TbKey]] = defaultdict(list)  # tb -> tbs waiting on its flag
    sender, receiver = model.sender, model.receiver
    # per tb, resolved once: its transmissions with (receives, sends, cnt) of each, the queue
    # it pops from and the tb that feeds it, the queue it pushes into and the tb that drains it
    ends = {}
    for key, txs in model.by_tb.items():
        tb = model.tbs[key]
        rconn, sconn = (tb.recv, key[0], tb.chan), (key[0], tb.send, tb.chan)
        kinds = [(tx.type in RECEIVING_TYPES, tx.type in SENDING_TYPES, tx.steps[0].cnt)
                 for tx in txs]
        ends[key] = (txs, kinds, fifo[rconn], sender.get(rconn), fifo[sconn],
                     receiver.get(sconn))
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
        txs, kinds, rq, feeder, sq, drainer = ends[key]
        rank = key[0]
        i, ph, n = pc[key], phase[key], len(txs)
        while i < n:
            tx = txs[i]
            recv, send, cnt = kinds[i]
            if ph == 0:
                short = None
                for d, k, _ in tx.waits:
                    if flag_get((rank, d), -1) < k:
                        short = (rank, d)
                        break
                if short is not None:
                    waiting[short].append(key)
                    break
                if recv:
                    if not rq or rq[0].steps[0].cnt != cnt:
                        break
                    rq.popleft()
                    order.append((tx.gid, "recv"))
                    wake(feeder)
                    if send:
                        ph = 1  # a fused op: its send half runs next
                        continue
                elif not send:
                    order.append((tx.gid, "exec"))
            if ph == 1 or (send and not recv):
                if len(sq) >= capacity:
                    break
                sq.append(tx)
                order.append((tx.gid, "send"))
                wake(drainer)
            ph = 0
            i += 1
            if tx.hasdep:
                flag[key] = tx.post
                for other in waiting.pop(key, ()):
                    wake(other)
        pc[key], phase[key] = i, ph
    for key, txs in model.by_tb.items():
        if pc[key] < len(txs):
            tx = txs[pc[key]]
            run.blocked_tx[key] = tx
            run.blocked[key] = _why(model, tx, phase[key], flag, fifo, capacity)
    return run


def _why(model: Model, tx: Tx, phase: int, flag: dict[TbKey, int],
         fifo: dict[ConnKey, deque[Tx]], capacity: int) -> str:
    st = tx.step
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
            if q:
                return (f"receives cnt={st.cnt} on connection {a}->{b} chan {c} but the "
                        f"message waiting there ({q[0].label()}) has cnt={q[0].step.cnt}")
            if conn not in model.sender:
                return f"receives on connection {a}->{b} chan {c}, which no tb on rank {a} sends on"
            sender = model.sender[conn]
            return (f"waits for a message on connection {a}->{b} chan {c} that rank {a} tb "
                    f"{sender[1]} has not sent")
    conn = model.send_conn(tx)
    a, b, c = conn
    rcv = model.receiver.get(conn)
    who = f"rank {b} tb {rcv[1]}" if rcv else f"no tb on rank {b}"
    return (f"waits for room on connection {a}->{b} chan {c} (capacity {capacity}); {who} "
            "does not receive the message in front")


def check_deadlock(model: Model, run: FifoRun, *, limit: int = 20) -> list[Violation]:
    """One ``deadlock`` violation per stuck tb (at most ``limit``), naming the blocked step."""
    out = []
    stuck = sorted(run.blocked)
    for key in stuck[:limit]:
        tx = run.blocked_tx[key]
        out.append(Violation("deadlock", f"blocked at {tx.type}: {run.blocked[key]}",
                             hint="with capacity-1 connections no schedule completes; "
                                  "reorder sends/receives or dependencies", **tx.where()))
    if len(stuck) > limit:
        out.append(Violation("deadlock", f"... and {len(stuck) - limit} more blocked tbs"))
    return out
