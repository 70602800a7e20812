"""The thread-block builder the directly written multi-node programs share
(:mod:`tacos.msccl.multinode_program`, :mod:`tacos.msccl.multinode_rotated`): steps with their
dependencies, a send and a receive thread block per peer, ``hasdep`` set where others wait,
and the runtime parser's nodes per rank."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tacos.msccl.program import MAX_NODES, Gpu, Program, Step, Threadblock, nop_step

if TYPE_CHECKING:
    from tacos.msccl.lower import MscclOptions

Wait = tuple[int, int]  # (tb id, step index) of the same rank


class _Tb:
    """A thread block being written: its steps and the dependencies others take on it."""

    def __init__(self, tid: int, send: int, recv: int, chan: int) -> None:
        self.id, self.send, self.recv, self.chan = tid, send, recv, chan
        self.steps: list[Step] = []

    def add(self, kind: str, src: tuple[str, int], dst: tuple[str, int], cnt: int,
            waits: Sequence[Wait] = ()) -> int:
        """Append a step after nops for all of ``waits`` but the last (which it carries);
        returns its index."""
        own = [w for w in waits if w[0] != self.id]
        for tb, st in own[:-1]:
            self.steps.append(nop_step(len(self.steps), tb, st))
        dep = own[-1] if own else (-1, -1)
        self.steps.append(Step(len(self.steps), kind, src[0], src[1], dst[0], dst[1], cnt,
                               dep[0], dep[1], 0))
        return len(self.steps) - 1

    def reduce(self, sources: Sequence[tuple[str, int]], dst: tuple[str, int],
               waits: Sequence[Wait] = (), cnt: int = 1) -> int:
        """A fused ``re`` chain summing ``sources`` into ``dst``; returns its last index."""
        last = self.add("re", sources[0], dst, cnt, waits)
        for src in sources[1:]:
            last = self.add("re", src, dst, cnt)
        return last


def _peer_tbs(peers: Sequence[int], base: int, chan: int, paired: bool,
              into: dict[int, _Tb] | None = None) -> tuple[dict[int, _Tb], dict[int, _Tb]]:
    """Per peer, the thread block that sends to it and the one that receives from it (one
    ``send=w recv=w`` block when ``paired``), numbered from ``base`` on channel ``chan``;
    each is also entered in ``into`` (a rank's thread blocks by id) when given."""
    if paired:
        sends = recvs = {w: _Tb(base + j, w, w, chan) for j, w in enumerate(peers)}
    else:
        sends = {w: _Tb(base + j, w, -1, chan) for j, w in enumerate(peers)}
        recvs = {w: _Tb(base + len(peers) + j, -1, w, chan) for j, w in enumerate(peers)}
    if into is not None:
        into.update({tb.id: tb for tb in (*sends.values(), *recvs.values())})
    return sends, recvs


def _finish(ranks: dict[int, dict[int, _Tb]]) -> list[list[Threadblock]]:
    """Threadblocks with ``hasdep`` set on every step another tb waits for."""
    wanted = {(r, st.depid, st.deps) for r, tbs in ranks.items() for tb in tbs.values()
              for st in tb.steps if st.depid >= 0}
    gpus = []
    for r in sorted(ranks):
        blocks = []
        for tid in sorted(ranks[r]):
            tb = ranks[r][tid]
            steps = tuple(Step(st.s, st.type, st.srcbuf, st.srcoff, st.dstbuf, st.dstoff,
                               st.cnt, st.depid, st.deps, int((r, tid, k) in wanted))
                          for k, st in enumerate(tb.steps))
            blocks.append(Threadblock(tid, tb.send, tb.recv, tb.chan, steps))
        gpus.append(blocks)
    return gpus


def _parses(gpus: list[list[Threadblock]], n_ranks: int) -> bool:
    """Whether every rank's XML stays within the runtime parser's nodes per rank
    (:data:`~tacos.msccl.program.MAX_NODES`: the algo, ``n_ranks`` gpu elements, its thread
    blocks and their steps)."""
    return all(1 + n_ranks + len(tbs) + sum(len(tb.steps) for tb in tbs) <= MAX_NODES
               for tbs in gpus)


def _is_pow2(x: int) -> bool:
    return x > 0 and x & (x - 1) == 0


def _pow2_floor(x: int) -> int:
    return 1 << (max(1, x).bit_length() - 1)


def _program(kind: str, blocks_of: Sequence[Sequence[Threadblock]], name: str, channels: int,
             chunks: int, options: MscclOptions, scratch: int = 0) -> Program:
    """The program of a multi-node family from each rank's thread blocks: ``chunks`` per rank's
    input (an all-gather's output holds every rank's), ``channels`` in its header, the name
    ``options.name`` or ``name``."""
    n_ranks = len(blocks_of)
    inplace = bool(options.inplace)
    if kind == "allreduce":
        outs, total = 0 if inplace else chunks, chunks
    else:
        outs = total = n_ranks * chunks
    gpus = tuple(Gpu(r, chunks, outs, scratch, tuple(b)) for r, b in enumerate(blocks_of))
    return Program(options.name or name, options.proto, channels, total, n_ranks, kind,
                   int(inplace), int(options.out_of_place), options.min_bytes,
                   options.max_bytes, gpus, options.redop)
