"""The two-shot all-pairs all-reduce written directly as an MSCCL program, with staged
reductions.

Lowered from a schedule (:mod:`tacos.solvers.allpairs`), the reduce-scatter half reduces the
peers' partials of a block one after another into the same slot: each reduction waits for the
previous one in another thread block, ``N - 1`` dependent steps.  Microsoft's
``allreduce_pairs`` plans receive the partials side by side into scratch and sum them with one
fused multi-source ``re`` chain, spread over all their thread blocks.  This module writes that
program for ``N`` ranks and ``I`` instances (``nchunksperloop = N·N·I``: block b, instance p,
sub-chunk q is chunk ``(b·I + p)·N + q``; instance p runs on channel p):

* per instance, one thread block per peer w (``send=w recv=w``): send my partial of w's block
  to w's scratch and receive w's partial of mine into my scratch (``cnt = N``); then, once every
  peer's partial is in, sum the peers' sub-chunk ``1 + index(w)`` into my block (one fused
  ``re`` chain); then, once every sub-chunk is summed, send my reduced block to w and receive
  w's (``cnt = N``);
* per instance, one local thread block sums sub-chunk 0 (out-of-place: a ``cpy`` of the input
  first).

It is a candidate of the shape chooser like the lowered schedules
(:class:`AllPairsAllReduce` has their ``collective`` and a ``lower(shape, base)``).
"""

from __future__ import annotations

from dataclasses import dataclass

from tacos.errors import TacosError
from tacos.model.collective import Collective
from tacos.msccl.lower import MscclOptions
from tacos.msccl.program import Gpu, Program, Step, Threadblock, nop_step
from tacos.msccl.shape import Shape


@dataclass(frozen=True)
class AllPairsAllReduce:
    """The staged two-shot all-reduce over ``collective.group`` (any shape's instances; the
    port order and pairing do not apply: every peer has its own paired thread block)."""

    collective: Collective
    label: str = "two-shot all-pairs all-reduce, staged reductions"

    def lower(self, shape: Shape, base: MscclOptions | None = None) -> Program:
        """The program for ``shape`` with ``base``'s header fields."""
        opts = shape.options(base)
        opts.validate()
        if self.collective.kind != "allreduce":
            raise TacosError("the staged all-pairs program is an all-reduce")
        return allpairs_allreduce(len(self.collective.group), shape.instances, opts)


def allpairs_allreduce(n: int, instances: int, options: MscclOptions) -> Program:
    """The program (module docstring) for ``n`` ranks and ``instances``."""
    if n < 2:
        raise TacosError("an all-pairs all-reduce needs at least 2 ranks")
    inst = instances
    inplace = bool(options.inplace)
    out = "i" if inplace else "o"
    peers_of = {r: [(r + k) % n for k in range(1, n)] for r in range(n)}

    def chunk(b: int, p: int, q: int = 0) -> int:
        """Sub-chunk q of instance p of rank b's block."""
        return (b * inst + p) * n + q

    gpus = []
    for r in range(n):
        peers = peers_of[r]

        def slot(w: int, p: int, q: int = 0, r: int = r) -> int:
            """My scratch slot for peer w's partial of my block: instance p, sub-chunk q."""
            return (p * (n - 1) + peers_of[r].index(w)) * n + q

        # tb ids: the local reducer of instance p, then its peer tbs
        local = {p: p * n for p in range(inst)}
        peer_tb = {(p, w): p * n + 1 + k for p in range(inst) for k, w in enumerate(peers)}
        recv_step, reduce_end = 1, {}
        tbs: dict[int, list[Step]] = {}

        def reduce_steps(p: int, q: int, waits: list[tuple[int, int]], steps: list[Step],
                         r: int = r, peers: list[int] = peers) -> None:
            """Wait for ``waits``, then sum the peers' sub-chunk q of instance p into my
            block (out-of-place: copy my input first)."""
            for tb, st in waits[:-1]:
                steps.append(nop_step(len(steps), tb, st))
            dep = waits[-1] if waits else (-1, -1)
            mine = chunk(r, p, q)
            if not inplace:
                steps.append(Step(len(steps), "cpy", "i", mine, "o", mine, 1, *dep, 0))
                dep = (-1, -1)
            for k, w in enumerate(peers):
                last = k == len(peers) - 1
                steps.append(Step(len(steps), "re", "s", slot(w, p, q), out, mine, 1,
                                  dep[0] if k == 0 else -1, dep[1] if k == 0 else -1,
                                  int(last)))

        for p in range(inst):
            # the local tb reduces sub-chunk 0 once every peer's partial is in
            steps: list[Step] = []
            reduce_steps(p, 0, [(peer_tb[(p, w)], recv_step) for w in peers], steps)
            tbs[local[p]] = steps
            reduce_end[local[p]] = len(steps) - 1
            for k, w in enumerate(peers):
                tid = peer_tb[(p, w)]
                at_peer = (p * (n - 1) + peers_of[w].index(r)) * n
                steps = [Step(0, "s", "i", chunk(w, p), "s", at_peer, n),
                         Step(1, "r", "i", chunk(w, p), "s", slot(w, p), n, hasdep=1)]
                others = [(peer_tb[(p, x)], recv_step) for x in peers if x != w]
                reduce_steps(p, k + 1, others, steps)
                tbs[tid] = steps
                reduce_end[tid] = len(steps) - 1
        for p in range(inst):
            for w in peers:
                tid = peer_tb[(p, w)]
                steps = tbs[tid]
                reducers = [local[p]] + [peer_tb[(p, x)] for x in peers if x != w]
                for tb in reducers[:-1]:
                    steps.append(nop_step(len(steps), tb, reduce_end[tb]))
                last = reducers[-1]
                steps.append(Step(len(steps), "s", out, chunk(r, p), out, chunk(r, p), n,
                                  last, reduce_end[last], 0))
                steps.append(Step(len(steps), "r", out, chunk(w, p), out, chunk(w, p), n))
        blocks = []
        for tid in sorted(tbs):
            p, k = divmod(tid, n)
            send = recv = -1 if k == 0 else peers[k - 1]
            blocks.append(Threadblock(tid, send, recv, p, tuple(tbs[tid])))
        c = n * n * inst
        gpus.append(Gpu(r, c, 0 if inplace else c, (n - 1) * inst * n, tuple(blocks)))
    return Program(options.name or f"tacos_allpairs_allreduce_{n}gpus", options.proto, inst,
                   n * n * inst, n, "allreduce", int(inplace), int(options.out_of_place),
                   options.min_bytes, options.max_bytes, tuple(gpus), options.redop)
