"""MSCCL++ JSON execution plan backend (``docs/msccl-xml.md`` §4, schema of MSCCL++ >= 0.8).

The plan is derived from a lowered and verified MSCCL program, keeping its thread blocks, step
order and dependencies, and turning the two-sided FIFO transfers into one-sided ``put``s
(§4.7):

* every MSCCL connection ``(A -> B, chan)`` becomes one pair of memory channels (A lists B, B
  lists A, in the same order on both sides, so the k-th channels pair up);
* a message is ``put`` straight into the receiver's destination slot when no other step of the
  receiver can touch that slot before the receiving step (checked with the receiver's
  happens-before order: program order plus dependencies); otherwise, and always for reductions,
  it lands in a fresh scratch *staging* slot that only this message uses;
* the sender then ``signal``s; the receiving step ``wait``s on the paired channel, and copies
  (``copy``) or reduces (``re``) the staging slot into place; ``rcs``/``rrs``/``rrcs`` forward
  with another ``put`` + ``signal``;
* each MSCCL dependency (``depid``/``deps``, nops included) becomes a device semaphore:
  ``sem_release`` after the step depended on, ``sem_acquire`` before the waiting step;
* ``nop`` (``__syncthreads``) separates a ``put``/``re``/``copy`` from the ``signal`` or
  ``sem_release`` that publishes it, and a ``wait``/``sem_acquire`` from the data it guards.

Since a put never waits for the receiver, this is the MSCCL program with unbounded FIFOs, which
cannot deadlock when the MSCCL program does not.  Only the Simple protocol is written (LL packet
operations are not generated); ``max_steps`` must keep every tb under the executor's 64
operations (``MAX_OPERATION``), which :func:`emit_mscclpp_json` ensures by lowering with a
smaller MSCCL step limit when given a schedule.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import replace
from typing import Any

from tacos.errors import TacosError, VerificationError
from tacos.model.schedule import Schedule
from tacos.msccl.mscclpp_channels import peer_channel_type
from tacos.msccl.program import Program, chunk_geometry, inplace_alias

__all__ = ["MAX_OPERATIONS", "emit_mscclpp_json", "program_to_mscclpp"]

#: Executor limit on operations per thread block (``MAX_OPERATION``).
MAX_OPERATIONS = 64
#: MSCCL step limits tried, largest first, when lowering a schedule for MSCCL++.
STEP_LIMITS = (16, 12, 8, 6, 4, 3, 2)
MAX_SEMAPHORES_PER_OP = 16
UINT64_MAX = 2**64 - 1

StepRef = tuple[int, int]  # (tb id, step index) within one rank


def _hb_after(program: Program) -> tuple[dict[int, dict[StepRef, int]],
                                         dict[int, dict[StepRef, int]]]:
    """Per rank: each step's bit, and the bitset of steps at or after it (program order + deps)."""
    out: dict[int, dict[StepRef, int]] = {}
    bits: dict[int, dict[StepRef, int]] = {}
    for g in program.gpus:
        nodes = [(tb.id, i) for tb in g.tbs for i in range(len(tb.steps))]
        bit = {n: k for k, n in enumerate(nodes)}
        succ: dict[StepRef, list[StepRef]] = defaultdict(list)
        indeg = dict.fromkeys(nodes, 0)
        for tb in g.tbs:
            for i, st in enumerate(tb.steps):
                if i + 1 < len(tb.steps):
                    succ[(tb.id, i)].append((tb.id, i + 1))
                    indeg[(tb.id, i + 1)] += 1
                if st.depid >= 0 and (st.depid, st.deps) in bit:
                    succ[(st.depid, st.deps)].append((tb.id, i))
                    indeg[(tb.id, i)] += 1
        order = [n for n in nodes if indeg[n] == 0]
        for n in order:
            for m in succ[n]:
                indeg[m] -= 1
                if indeg[m] == 0:
                    order.append(m)
        if len(order) != len(nodes):
            raise TacosError(f"rank {g.id}: the program's dependencies form a cycle")
        after: dict[StepRef, int] = {}
        for n in reversed(order):
            mask = 0
            for m in succ[n]:
                mask |= after[m] | (1 << bit[m])
            after[n] = mask
        out[g.id] = {n: after[n] | (1 << bit[n]) for n in nodes}
        bits[g.id] = bit
    return out, bits


def _messages(program: Program):
    """Pair k-th send and k-th receive of every connection: yields (conn, send ref, recv ref)."""
    sends: dict[tuple[int, int, int], list[StepRef]] = defaultdict(list)
    recvs: dict[tuple[int, int, int], list[StepRef]] = defaultdict(list)
    for g in program.gpus:
        for tb in g.tbs:
            for i, st in enumerate(tb.steps):
                if st.sends:
                    sends[(g.id, tb.send, tb.chan)].append((tb.id, i))
                if st.receives:
                    recvs[(tb.recv, g.id, tb.chan)].append((tb.id, i))
    for conn in sorted(set(sends) | set(recvs)):
        s, r = sends.get(conn, []), recvs.get(conn, [])
        if len(s) != len(r):
            raise TacosError(f"connection {conn[0]}->{conn[1]} chan {conn[2]} has {len(s)} sends "
                             f"but {len(r)} receives", hint="verify the MSCCL program first")
        for a, b in zip(s, r, strict=True):
            yield conn, a, b


def _phys(program: Program, rank: int, buf: str, off: int) -> tuple[str, int]:
    if program.inplace == 1:
        return inplace_alias(program.coll, program.ngpus, program.nchunksperloop, rank, buf, off)
    return buf, off


def program_to_mscclpp(program: Program, *, name: str | None = None,
                       nodes: list[int] | None = None) -> dict[str, Any]:
    """The MSCCL++ execution plan (as a JSON-ready dict) equivalent to ``program``.

    ``nodes[r]`` is rank r's node: peers on one node talk over memory channels, peers on
    different nodes over port channels (proxy + NIC).  Without ``nodes`` every channel is a
    memory channel (one node).
    """

    def kind(a: int, b: int) -> str:
        return peer_channel_type(nodes, a, b)

    gpus = {g.id: g for g in program.gpus}
    tbs = {(g.id, tb.id): tb for g in program.gpus for tb in g.tbs}
    after, bit_of = _hb_after(program)
    access: dict[int, dict[tuple[str, int], list[StepRef]]] = defaultdict(lambda: defaultdict(list))
    for g in program.gpus:
        for tb in g.tbs:
            for i, st in enumerate(tb.steps):
                for buf, off, cnt in st.reads() + st.writes():
                    for j in range(cnt):
                        access[g.id][_phys(program, g.id, buf, off + j)].append((tb.id, i))
    staging = {g.id: g.s_chunks for g in program.gpus}
    landing: dict[tuple[int, StepRef], tuple[str, int]] = {}  # (recv rank, recv ref) -> slot
    staged: set[tuple[int, StepRef]] = set()
    out_msg: dict[tuple[int, StepRef], tuple] = {}  # send -> (conn, peer, receiving step key)
    in_msg: dict[tuple[int, StepRef], tuple[int, int, int]] = {}
    conns: set[tuple[int, int, int]] = set()
    for conn, sref, rref in _messages(program):
        a, b, _ = conn
        conns.add(conn)
        st = tbs[(b, rref[0])].steps[rref[1]]
        bits = bit_of[b]
        fresh = st.type in ("r", "rcs")
        if fresh:
            later = after[b][rref]
            for j in range(st.cnt):
                for other in access[b][_phys(program, b, st.dstbuf, st.dstoff + j)]:
                    if other != rref and not later >> bits[other] & 1:
                        fresh = False
        if fresh:
            landing[(b, rref)] = (st.dstbuf, st.dstoff)
        else:
            landing[(b, rref)] = ("s", staging[b])
            staging[b] += st.cnt
            staged.add((b, rref))
        out_msg[(a, sref)] = (conn, b, (b, rref))
        in_msg[(b, rref)] = conn
    # channels: peers in order of first use; a pair's connections in one order on both sides
    first_use: dict[int, list[int]] = defaultdict(list)
    for key in sorted(set(in_msg) | set(out_msg)):
        rank = key[0]
        used = ([in_msg[key]] if key in in_msg else []) + \
            ([out_msg[key][0]] if key in out_msg else [])
        for conn in used:
            peer = conn[0] if conn[1] == rank else conn[1]
            if peer not in first_use[rank]:
                first_use[rank].append(peer)
    chan_index: dict[tuple[int, tuple[int, int, int]], int] = {}
    connected: dict[int, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for rank in sorted(gpus):
        for peer in first_use[rank]:
            peers = connected[rank][kind(rank, peer)]
            for c in sorted(c for c in conns if set(c[:2]) == {rank, peer}):
                chan_index[(rank, c)] = len(peers)
                peers.append(peer)
    remote: dict[int, list[tuple[int, str]]] = defaultdict(list)
    semaphores: dict[tuple[int, StepRef, StepRef], int] = {}
    sem_count: dict[int, int] = defaultdict(int)
    released: dict[tuple[int, StepRef], list[int]] = defaultdict(list)
    for g in program.gpus:
        for tb in g.tbs:
            for i, st in enumerate(tb.steps):
                if st.depid >= 0:
                    sid = sem_count[g.id]
                    sem_count[g.id] += 1
                    semaphores[(g.id, (tb.id, i), (st.depid, st.deps))] = sid
                    released[(g.id, (st.depid, st.deps))].append(sid)
    out_gpus = []
    for g in program.gpus:
        tb_out = []
        for tb in g.tbs:
            ctx = _TbCtx(g.id, chan_index, remote, kind)
            ops: list[dict[str, Any]] = []
            pending: list[int] = []
            for i, st in enumerate(tb.steps):
                ref = (tb.id, i)
                if st.depid >= 0:
                    pending.append(semaphores[(g.id, ref, (st.depid, st.deps))])
                if st.is_nop:
                    continue
                if pending:
                    for k in range(0, len(pending), MAX_SEMAPHORES_PER_OP):
                        ops.append({"name": "sem_acquire",
                                    "semaphore_ids": pending[k:k + MAX_SEMAPHORES_PER_OP]})
                    ops.append({"name": "nop"})
                    pending = []
                ops.extend(_step_ops(ctx, st, g.id, ref, landing, staged, in_msg, out_msg))
                rel = released.get((g.id, ref))
                if rel:
                    ops.append({"name": "nop"})
                    for k in range(0, len(rel), MAX_SEMAPHORES_PER_OP):
                        ops.append({"name": "sem_release",
                                    "semaphore_ids": rel[k:k + MAX_SEMAPHORES_PER_OP]})
            ops = [op for k, op in enumerate(ops)
                   if not (op["name"] == "nop" and k and ops[k - 1]["name"] == "nop")]
            if len(ops) > MAX_OPERATIONS:
                raise TacosError(f"rank {g.id} tb {tb.id} needs {len(ops)} MSCCL++ operations; "
                                 f"the executor allows {MAX_OPERATIONS}",
                                 hint="lower with a smaller max_steps_per_tb")
            tb_out.append({
                "id": tb.id,
                "ops": ops,
                "channels": [{"channel_type": t, "channel_ids": ids}
                             for t, ids in sorted(ctx.channels.items())],
                "remote_buffer_refs": [{"access_channel_type": t, "remote_buffer_ids": ids}
                                       for t, ids in sorted(ctx.buffers.items())],
            })
        i_chunks, o_chunks = chunk_geometry(program.coll, program.ngpus, program.nchunksperloop)
        out_gpus.append({
            "id": g.id,
            "input_chunks": i_chunks,
            "output_chunks": o_chunks,
            "scratch_chunks": staging[g.id],
            "threadblocks": tb_out,
            "channels": [{"channel_type": t, "connected_to": peers}
                         for t, peers in sorted(connected[g.id].items())],
            "remote_buffers": [{"rank": r, "type": t, "access_channel_types": [kind(g.id, r)]}
                               for r, t in remote[g.id]],
            "semaphores": [{"init_value": 0} for _ in range(sem_count[g.id])],
        })
    return {
        "name": name or program.name,
        "collective": program.coll,
        "protocol": "Simple",
        "inplace": program.inplace == 1,
        "reuse_resources": False,
        "gpus": out_gpus,
        "num_threads_per_block": 1024,
        "use_double_scratch_buffer": False,
        "buffer_alignment": 16,
        "min_message_size": int(program.minBytes or 0),
        "max_message_size": int(program.maxBytes) if program.maxBytes else UINT64_MAX,
    }


class _TbCtx:
    """Per-tb tables: GPU-level channel and remote-buffer ids in tb-local order."""

    def __init__(self, rank: int, chan_index, remote, kind) -> None:
        self.rank = rank
        self.chan_index = chan_index
        self.remote = remote
        self.kind = kind
        self.channels: dict[str, list[int]] = defaultdict(list)
        self.buffers: dict[str, list[int]] = defaultdict(list)

    def channel(self, conn: tuple[int, int, int]) -> tuple[int, str]:
        """The tb-local index of the connection's channel, and the channel's type."""
        gid = self.chan_index[(self.rank, conn)]
        ctype = self.kind(conn[0], conn[1])
        ids = self.channels[ctype]
        if gid not in ids:
            ids.append(gid)
        return ids.index(gid), ctype

    def buffer(self, peer: int, buf: str) -> int:
        table = self.remote[self.rank]
        if (peer, buf) not in table:
            table.append((peer, buf))
        gid = table.index((peer, buf))
        ids = self.buffers[self.kind(self.rank, peer)]
        if gid not in ids:
            ids.append(gid)
        return ids.index(gid)


def _loc(buf: str, off: int, cnt: int) -> dict[str, Any]:
    return {"type": buf, "index": off, "size": cnt}


def _step_ops(ctx: _TbCtx, st, rank: int, ref: StepRef, landing, staged, in_msg, out_msg
              ) -> list[dict[str, Any]]:
    ops: list[dict[str, Any]] = []
    src, dst = (st.srcbuf, st.srcoff), (st.dstbuf, st.dstoff)
    if st.type == "cpy":
        return [{"name": "copy", "src_buff": [_loc(*src, st.cnt)],
                 "dst_buff": [_loc(*dst, st.cnt)]}]
    if st.type == "re":
        return [{"name": "re", "src_buff": [_loc(*dst, st.cnt), _loc(*src, st.cnt)],
                 "dst_buff": [_loc(*dst, st.cnt)], "reduce_op": "sum"}]
    out_from = src
    if st.receives:
        conn = in_msg[(rank, ref)]
        land = landing[(rank, ref)]
        cid, ctype = ctx.channel(conn)
        ops.append({"name": "wait", "channel_ids": [cid], "channel_type": ctype})
        ops.append({"name": "nop"})
        if st.type in ("rrc", "rrs", "rrcs"):
            into = land if st.type == "rrs" else dst
            ops.append({"name": "re", "src_buff": [_loc(*src, st.cnt), _loc(*land, st.cnt)],
                        "dst_buff": [_loc(*into, st.cnt)], "reduce_op": "sum"})
            out_from = into
        else:
            if (rank, ref) in staged:
                ops.append({"name": "copy", "src_buff": [_loc(*land, st.cnt)],
                            "dst_buff": [_loc(*dst, st.cnt)]})
            out_from = dst
        if st.sends:
            ops.append({"name": "nop"})
    if st.sends:
        conn, peer, receiver = out_msg[(rank, ref)]
        land = landing[receiver]
        cid, ctype = ctx.channel(conn)
        put: dict[str, Any] = {"name": "put", "src_buff": [_loc(*out_from, st.cnt)],
                               "dst_buff": [{"buffer_id": ctx.buffer(peer, land[0]),
                                             "index": land[1], "size": st.cnt}],
                               "channel_type": ctype}
        if ctype == "port":  # a port put is issued by the proxy through the channel
            put["channel_ids"] = [cid]
        ops.append(put)
        ops.append({"name": "nop"})
        ops.append({"name": "signal", "channel_ids": [cid], "channel_type": ctype})
    return ops


def emit_mscclpp_json(plan: Schedule | Program, *, options=None, name: str | None = None,
                      indent: int | None = 2) -> str:
    """MSCCL++ JSON text for a schedule (lowered and verified here) or an MSCCL program.

    A schedule's ranks talk over memory channels inside a node and port channels across nodes
    (:mod:`tacos.msccl.mscclpp_channels`); a schedule with in-switch groups becomes a plan of
    switch-channel operations (:mod:`tacos.msccl.mscclpp_switch`).  A schedule is lowered with
    :func:`tacos.msccl.lower.lower` (``options``; its step limit is
    lowered step by step from 16 until every tb fits in the executor's 64 operations) and the
    program is verified with :func:`tacos.msccl.verify.verify_program` first.  A program is
    converted as is.  Output is deterministic (sorted nothing, fixed key order).
    """
    if isinstance(plan, Program):
        return json.dumps(program_to_mscclpp(plan, name=name), indent=indent) + "\n"
    from tacos.msccl.mscclpp_switch import has_switch_groups, switch_plan_json

    if has_switch_groups(plan):  # in-switch groups: switch channels (NVLS multimem)
        opts = options
        return switch_plan_json(plan, inplace=bool(opts.inplace) if opts else True,
                                name=name or (opts.name if opts and opts.name else
                                              "tacos_switch"),
                                min_bytes=int(opts.min_bytes) if opts else 0,
                                max_bytes=int(opts.max_bytes or 0) if opts and opts.max_bytes
                                else 2**64 - 1)
    from tacos.msccl.lower import MscclOptions, lower
    from tacos.msccl.mscclpp_channels import node_of_ranks

    nodes = node_of_ranks(plan.topology, plan.collective.group)
    from tacos.msccl.verify import verify_program

    base = options or MscclOptions()
    last: TacosError | None = None
    for limit in STEP_LIMITS:
        if limit > base.max_steps_per_tb:
            continue
        program = lower(plan, options=replace(base, max_steps_per_tb=limit))
        report = verify_program(program, max_steps=limit)
        if not report.ok:
            raise VerificationError("the lowered program fails verification:\n"
                                    + report.text(warnings=False))
        try:
            return json.dumps(program_to_mscclpp(program, name=name, nodes=nodes),
                              indent=indent) + "\n"
        except TacosError as exc:
            if "operations" not in exc.message:
                raise
            last = exc
    raise last or TacosError("no step limit fits the MSCCL++ operation limit")
