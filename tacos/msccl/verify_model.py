"""Execution model of an MSCCL program, as the runtime builds it (``docs/msccl-xml.md`` §1.9).

The runtime does not execute ``<step>`` elements one by one.  Its parser folds them into
*transmissions*: a ``nop`` is not stored, it only adds one dependency to the next stored step;
consecutive ``re`` steps with the same destination and source buffer and no dependency are fused
into one multi-source reduction.  The kernel keeps its own step counter (advanced by the number
of extra dependencies and fused reductions) and posts it as the tb's progress flag after a
``hasdep`` transmission; a wait ``(depid, deps)`` is released once that flag reaches ``deps``.

:func:`build_model` reproduces that folding exactly (including the runtime's quirk that a fused
chain is cut when the tb's 16th ``re`` overall is reached) and indexes connections, so that the
dependency, happens-before, race, FIFO and data-flow analyses all see what the GPU would run.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

from tacos.msccl.program import (
    MAX_REDUCE_FUSION,
    RECEIVING_TYPES,
    SENDING_TYPES,
    Program,
    Step,
    Threadblock,
)

TbKey = tuple[int, int]  # (rank, tb id)
ConnKey = tuple[int, int, int]  # (sending rank, receiving rank, channel)


@dataclass(slots=True)
class Tx:
    """One transmission: a stored step, or a fused chain of ``re`` steps.

    ``first``/``last`` are document positions in the tb (equal unless fused); ``waits`` lists
    ``(depid, deps, position of the step carrying it)`` including those of preceding nops;
    ``post`` is the kernel's step counter when the transmission ends (the flag value it posts
    when ``hasdep``).
    """

    gid: int
    rank: int
    tb: int
    index: int
    first: int
    last: int
    type: str
    steps: tuple[Step, ...]
    waits: list[tuple[int, int, int]] = field(default_factory=list)
    hasdep: bool = False
    post: int = 0

    @property
    def step(self) -> Step:
        """The first (for a fused chain: leading) step."""
        return self.steps[0]

    @property
    def key(self) -> TbKey:
        """``(rank, tb)`` of the owning thread block."""
        return (self.rank, self.tb)

    def where(self) -> dict:
        """Keyword arguments locating this transmission in a :class:`Violation`."""
        return {"rank": self.rank, "tb": self.tb, "step": self.first,
                "line": self.step.line or None}

    def label(self) -> str:
        """``rank R tb T step S (type)`` for messages."""
        return f"rank {self.rank} tb {self.tb} step {self.first} ({self.type})"


@dataclass
class Model:
    """Transmissions of every tb plus the connection index."""

    program: Program
    txs: list[Tx] = field(default_factory=list)
    by_tb: dict[TbKey, list[Tx]] = field(default_factory=dict)
    tbs: dict[TbKey, Threadblock] = field(default_factory=dict)
    #: per tb: document position -> transmission that contains / absorbs it
    pos_tx: dict[TbKey, list[Tx | None]] = field(default_factory=dict)
    #: per tb: (first position, last position) of each fused ``re`` chain longer than 1
    chains: dict[TbKey, list[tuple[int, int]]] = field(default_factory=dict)
    sender: dict[ConnKey, TbKey] = field(default_factory=dict)
    receiver: dict[ConnKey, TbKey] = field(default_factory=dict)
    sends: dict[ConnKey, list[Tx]] = field(default_factory=dict)
    recvs: dict[ConnKey, list[Tx]] = field(default_factory=dict)
    #: per tb: the posts and transmissions of its ``hasdep`` transmissions (built on demand)
    flags: dict[TbKey, tuple[list[int], list[Tx]]] = field(default_factory=dict)

    def release(self, rank: int, depid: int, deps: int) -> Tx | None:
        """The transmission whose flag first satisfies a wait ``(depid, deps)`` on ``rank``:
        the first ``hasdep`` transmission of tb ``depid`` posting a value ``>= deps``."""
        flags = self.flags.get((rank, depid))
        if flags is None:
            txs = [tx for tx in self.by_tb.get((rank, depid), ()) if tx.hasdep]
            flags = self.flags[(rank, depid)] = ([tx.post for tx in txs], txs)
        k = bisect_left(flags[0], deps)  # posts grow along a tb: the first one >= deps
        return flags[1][k] if k < len(flags[1]) else None

    def send_conn(self, tx: Tx) -> ConnKey:
        """Connection a sending transmission pushes into."""
        tb = self.tbs[tx.key]
        return (tx.rank, tb.send, tb.chan)

    def recv_conn(self, tx: Tx) -> ConnKey:
        """Connection a receiving transmission pops from."""
        tb = self.tbs[tx.key]
        return (tb.recv, tx.rank, tb.chan)


def _fold(model: Model, rank: int, tb: Threadblock) -> None:
    key = (rank, tb.id)
    txs: list[Tx] = []
    pos_tx: list[Tx | None] = [None] * len(tb.steps)
    pending: list[tuple[int, int, int]] = []
    chain_key: tuple[str, int, str] | None = None
    total_re = 0
    base = len(model.txs)
    for pos, st in enumerate(tb.steps):
        typ = st.type
        depid = st.depid
        if depid >= 0:
            pending.append((depid, st.deps, pos))
        if typ == "nop":
            continue
        if typ == "re" and depid == -1 and chain_key == (st.dstbuf, st.dstoff, st.srcbuf):
            tx = txs[-1]
            tx.steps = tx.steps + (st,)
            tx.last = pos
            tx.hasdep = st.hasdep == 1
        else:
            tx = Tx(base + len(txs), rank, tb.id, len(txs), pos, pos, typ, (st,),
                    pending, st.hasdep == 1)
            pending = []
            txs.append(tx)
        pos_tx[pos] = tx
        if typ == "re":
            total_re += 1
            if st.hasdep == 1 or total_re == MAX_REDUCE_FUSION:
                chain_key = None
            else:
                chain_key = (st.dstbuf, st.dstoff, st.srcbuf)
        else:
            chain_key = None
    # the kernel's step counter
    counter = 0
    for tx in txs:
        if tx.waits:
            counter += len(tx.waits) - 1
        counter += len(tx.steps) - 1
        tx.post = counter
        counter += 1
    # nops attach to the transmission that consumes their dependency
    nxt: Tx | None = None
    steps = tb.steps
    for pos in range(len(steps) - 1, -1, -1):
        here = pos_tx[pos]
        if here is not None:
            nxt = here
        elif steps[pos].type == "nop":
            pos_tx[pos] = nxt
    model.txs.extend(txs)
    model.by_tb[key] = txs
    model.pos_tx[key] = pos_tx
    model.chains[key] = [(t.first, t.last) for t in txs if len(t.steps) > 1]


def build_model(program: Program) -> Model:
    """Fold every tb into transmissions and index connections.

    Assumes structural integrity (unique ranks and tb ids, legal step types); with duplicated
    connection owners the first tb in document order is indexed.
    """
    model = Model(program)
    for g in program.gpus:
        for tb in g.tbs:
            key = (g.id, tb.id)
            model.tbs[key] = tb
            _fold(model, g.id, tb)
            if tb.send >= 0:
                model.sender.setdefault((g.id, tb.send, tb.chan), key)
            if tb.recv >= 0:
                model.receiver.setdefault((tb.recv, g.id, tb.chan), key)
    for conn, key in model.sender.items():
        model.sends[conn] = [t for t in model.by_tb[key] if t.steps[0].type in SENDING_TYPES]
    for conn, key in model.receiver.items():
        model.recvs[conn] = [t for t in model.by_tb[key]
                             if t.steps[0].type in RECEIVING_TYPES]
    return model
