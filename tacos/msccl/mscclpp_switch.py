"""In-switch schedules as MSCCL++ execution plans with switch (NVLS multimem) channels.

A schedule whose transfers are in-switch groups (``Transfer.group``, :mod:`tacos.check.in_switch`)
- forest's star all-reduce (:mod:`tacos.solvers.forest.in_switch`), NCCL's NVLS all-reduce,
all-gather and reduce-scatter inside one node (:mod:`tacos.solvers.nccl.nvls`) - cannot be
written as MSCCL XML, which has no switch operation.  MSCCL++'s executor (v0.9,
``execution_kernel.hpp``) runs three operations on a switch channel, i.e. a multicast object
bound to the same buffer (``i``, ``o`` or ``s``) of every rank of a rank group:

* ``glres`` - ``multimem.ld_reduce`` of a range from every member (the sum arrives at the
  issuing GPU) then ``multimem.st`` of the sum to the same range of every member: a reduce group
  into the issuing rank followed by a multicast group out of it;
* ``gstore`` - ``multimem.st`` of a local range to every member: a multicast group;
* ``gstorepkt`` - the LL-packet ``gstore`` (not written here).

There is no reduce-only operation (the DSL's ``glre`` exists only fused with a store into
``glres``).  So the groups map as follows, by collective, each chunk checked:

* **all-reduce**: every chunk is reduced (from every rank) into one rank R, and later multicast
  from R to every rank - one ``glres`` by R (source and destination: the ``i`` switch channel in
  place; ``i`` to ``o`` out of place).  The star reduces everything into one root, so the root
  issues every ``glres``; NCCL's NVLS reduces shard g into GPU g, so each rank issues its shard's;
* **all-gather**: every chunk is multicast from its owner to every rank - one ``gstore`` from
  the owner's copy (``o`` in place, ``i`` out of place) into the ``o`` switch channel;
* **reduce-scatter**: every chunk is reduced from every rank into its owner - a ``glres`` from
  the ``i`` switch channel into the ``s`` (scratch) switch channel, then the owner copies its
  scratch range to its output after the closing barrier, each thread block its part (the
  store side of ``glres`` writes every member, so it must not land in another rank's input or
  output).

A group over a subset of the ranks, a chunk reduced or multicast twice, a multicast that does
not follow its reduction (all-reduce), plain transfers mixed with groups, or a group whose ranks
no one switch with ``multicast`` (and ``reduce``) joins, is refused with a
:class:`~tacos.errors.TacosError` that says which chunk or group.

Consecutive operations of one rank on adjacent ranges merge (the switch pipelines a long range
itself), and the chunk unit is the coarsest that keeps every operation whole, so the plan cuts
the buffer into as few chunks as possible.  Every rank runs the same frame as MSCCL++'s
``allreduce_nvls_zero_copy`` example: thread block 0 signals and waits on a memory channel to
every other rank (all inputs are ready), releases the other thread blocks by semaphores; each of
the ``T`` thread blocks does its ``1/T`` sub-range of every operation; thread block 0 acquires
them back and closes with a second signal/wait barrier.  ``T`` is the runtime model's choice
(:func:`best_switch_plan`).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from math import gcd
from typing import Any

from tacos.errors import TacosError
from tacos.model.schedule import Schedule

__all__ = ["SWITCH_KINDS", "TB_CHOICES", "SwitchOp", "best_switch_plan", "has_switch_groups",
           "switch_ops", "switch_plan"]

#: Collectives whose in-switch schedules have an MSCCL++ form.
SWITCH_KINDS = ("allreduce", "allgather", "reducescatter")
#: Thread-block counts tried per rank.
TB_CHOICES = (1, 2, 4, 8, 16, 32)
UINT64_MAX = 2**64 - 1
MAX_OPERATIONS = 64
_TOL = 1e-12


@dataclass(frozen=True)
class SwitchOp:
    """One switch-channel operation: ``kind`` ``'glres'`` (reduce + multicast), ``'reduce'``
    (``glres`` into scratch, reduce-scatter) or ``'gstore'`` (multicast), issued by ``rank`` on
    buffer slots ``start .. start+count-1`` (in the collective's chunk slots), at schedule time
    ``when``."""

    kind: str
    rank: int
    start: int
    count: int
    when: float


def has_switch_groups(schedule: Schedule) -> bool:
    """True when some transfer group of ``schedule`` has more than one member (an in-switch
    multicast or reduction)."""
    size: dict[int, int] = defaultdict(int)
    for t in schedule.transfers:
        if t.group is not None:
            size[t.group] += 1
    return any(n > 1 for n in size.values())


def _refuse(message: str) -> TacosError:
    return TacosError(message, hint="write the schedule as JSON (it keeps the groups), or "
                      "synthesize without in-switch groups (--solver auto, or forest with -O "
                      "in_switch=false) for memory/port channels")


def switch_ops(schedule: Schedule, *, inplace: bool = True) -> tuple[Any, list[SwitchOp]]:
    """The layout (:class:`tacos.msccl.lower_layout.Layout`) and the merged switch operations of
    an in-switch schedule (module doc); a :class:`TacosError` naming the chunk or group when the
    schedule has no switch-channel form."""
    from tacos.msccl.lower_layout import build_layout
    from tacos.msccl.mscclpp_channels import switch_for

    coll = schedule.collective
    if coll.kind not in SWITCH_KINDS:
        raise _refuse(f"MSCCL++ switch channels run all-reduce, all-gather and reduce-scatter, "
                      f"not {coll.kind}")
    layout = build_layout(coll, inplace=inplace, instances=1)
    topo = schedule.topology
    n = layout.ngpus
    everyone = frozenset(range(n))
    groups: dict[int, list] = defaultdict(list)
    for t in schedule.transfers:
        if t.group is None:
            raise _refuse(f"the schedule mixes plain transfers (NPU {t.src} -> {t.dst}, chunks "
                          f"{list(t.chunks)[:4]}) with in-switch groups: an MSCCL++ switch "
                          "plan runs only switch operations")
        groups[t.group].append(t)
    reduced: dict[int, tuple[int, float, float]] = {}  # chunk -> (rank, start, end)
    cast: dict[int, tuple[int, float]] = {}
    for gid, members in sorted(groups.items()):
        first = members[0]
        kind = "reduce" if first.op == "reduce" else "multicast"
        if len(members) < 2:
            raise _refuse(f"group {gid} has one transfer (NPU {first.src} -> {first.dst}): "
                          "a plain transfer, which a switch plan cannot run")
        try:
            root = layout.rank_of(first.dst if kind == "reduce" else first.src)
            peers = {layout.rank_of(t.src if kind == "reduce" else t.dst) for t in members}
        except KeyError as exc:
            raise _refuse(f"group {gid} relays through NPU {exc.args[0]}, outside the "
                          "collective's group") from None
        ranks = peers | {root}
        if ranks != everyone:
            raise _refuse(f"group {gid} ({kind} of chunks {list(first.chunks)}) joins ranks "
                          f"{sorted(ranks)}, not all {n}: a switch operation writes (or reads) "
                          "every rank of its switch channel")
        npus = [layout.group[r] for r in sorted(ranks)]
        if switch_for(topo, npus, reduce=kind == "reduce") is None:
            need = "multicast and reduce" if kind == "reduce" else "multicast"
            raise _refuse(f"group {gid}: no switch with {need} joins NPUs {npus}: switch "
                          "channels run inside one NVSwitch node")
        for c in first.chunks:
            table = reduced if kind == "reduce" else cast
            if c in table:
                raise _refuse(f"chunk {c} is {'reduced' if kind == 'reduce' else 'multicast'} "
                              "twice: a switch plan runs each chunk's reduction and multicast "
                              "once")
            if kind == "reduce":
                reduced[c] = (root, min(t.start for t in members), max(t.end for t in members))
            else:
                cast[c] = (root, min(t.start for t in members))
    ops: list[SwitchOp] = []
    for c in range(len(layout.in_slot)):
        if layout.coll == "allreduce":
            if c not in reduced or c not in cast:
                raise _refuse(f"chunk {c} is not both reduced into one rank and multicast "
                              "from it, which is what glres does")
            (r, s0, e0), (m, s1) = reduced[c], cast[c]
            if m != r or s1 < e0 - _TOL * max(1.0, e0):
                raise _refuse(f"chunk {c} is multicast from rank {m} before (or without) its "
                              f"reduction into that rank: glres reduces then multicasts")
            ops.append(SwitchOp("glres", r, layout.in_slot[c], 1, s0))
        elif layout.coll == "allgather":
            if c in reduced or c not in cast or cast[c][0] not in layout.pre[c]:
                raise _refuse(f"chunk {c} of the all-gather is not multicast by its owner")
            ops.append(SwitchOp("gstore", cast[c][0], layout.out_slot[c], 1, cast[c][1]))
        else:  # reducescatter
            if c in cast or c not in reduced or reduced[c][0] not in layout.post[c]:
                raise _refuse(f"chunk {c} of the reduce-scatter is not reduced into its owner")
            ops.append(SwitchOp("reduce", reduced[c][0], layout.in_slot[c], 1, reduced[c][1]))
    return layout, _merge(ops)


def _merge(ops: list[SwitchOp]) -> list[SwitchOp]:
    """Per rank, in schedule order, adjacent ranges of one kind as one operation."""
    out: list[SwitchOp] = []
    for op in sorted(ops, key=lambda o: (o.rank, o.when, o.start)):
        last = out[-1] if out else None
        if last is not None and last.rank == op.rank and last.kind == op.kind \
                and last.start + last.count == op.start:
            out[-1] = SwitchOp(last.kind, last.rank, last.start, last.count + op.count,
                               last.when)
        else:
            out.append(op)
    return out


def switch_plan(schedule: Schedule, *, threadblocks: int = 1, inplace: bool = True,
                name: str = "tacos_switch", min_bytes: int = 0,
                max_bytes: int = UINT64_MAX) -> dict[str, Any]:
    """The MSCCL++ plan (JSON-ready dict) of an in-switch schedule with ``threadblocks`` thread
    blocks on every rank that issues switch operations (module doc)."""
    layout, ops = switch_ops(schedule, inplace=inplace)
    if not 1 <= threadblocks <= 32:
        raise TacosError("threadblocks must be 1 to 32")
    n, coll = layout.ngpus, layout.coll
    total = len(layout.in_slot)  # the collective's chunk slots (the larger buffer)
    unit = total  # coarsest slot count that keeps every operation (and rank share) whole
    for op in ops:
        unit = gcd(gcd(unit, op.start), op.count)
    if coll in ("allgather", "reducescatter"):
        unit = gcd(unit, total // n)
    t = threadblocks
    chunks = total // unit * t  # each coarse unit cut into t plan chunks
    per_rank = chunks // n

    def span(op: SwitchOp) -> tuple[int, int]:
        """First plan chunk of ``op`` and the chunks each of its t thread blocks does."""
        return op.start // unit * t, op.count // unit

    types = {"allreduce": ("i",) if inplace else ("i", "o"), "allgather": ("o",),
             "reducescatter": ("i", "s")}[coll]
    sw = {b: k for k, b in enumerate(types)}  # GPU-level switch channel of each buffer type
    by_rank: dict[int, list[SwitchOp]] = defaultdict(list)
    for op in ops:
        by_rank[op.rank].append(op)
    gpus = []
    for r in range(n):
        mine = by_rank.get(r, [])
        nt = t if mine else 1
        peers = [p for p in range(n) if p != r]
        local = list(range(len(peers)))
        sync = [{"name": "signal", "channel_ids": local, "channel_type": "memory"},
                {"name": "wait", "channel_ids": local, "channel_type": "memory"}]
        tbs = []
        for b in range(nt):
            used: list[int] = []

            def ref(buf: str, index: int, size: int, used: list[int] = used) -> dict[str, Any]:
                if sw[buf] not in used:
                    used.append(sw[buf])
                return {"switch_channel_id": used.index(sw[buf]), "index": index, "size": size}

            data: list[dict[str, Any]] = []
            copies: list[dict[str, Any]] = []
            for op in mine:
                first, length = span(op)
                lo = first + b * length
                if op.kind == "glres":
                    data.append({"name": "glres", "src_buff": [ref("i", lo, length)],
                                 "dst_buff": [ref("i" if inplace else "o", lo, length)],
                                 "channel_type": "switch", "reduce_op": "sum"})
                elif op.kind == "gstore":
                    src = ("o", lo) if inplace else ("i", lo - r * per_rank)
                    data.append({"name": "gstore",
                                 "src_buff": [{"type": src[0], "index": src[1], "size": length}],
                                 "dst_buff": [ref("o", lo, length)], "channel_type": "switch"})
                else:
                    data.append({"name": "glres", "src_buff": [ref("i", lo, length)],
                                 "dst_buff": [ref("s", lo, length)],
                                 "channel_type": "switch", "reduce_op": "sum"})
            for op in mine:
                if op.kind == "reduce":
                    first, length = span(op)
                    lo = first + b * length
                    copies.append({"name": "copy",
                                   "src_buff": [{"type": "s", "index": lo, "size": length}],
                                   "dst_buff": [{"type": "o", "index": lo - r * per_rank,
                                                 "size": length}]})
            after = 2 * (nt - 1)  # semaphores after + k: tb 0 -> tb k+1 past the barrier
            if b == 0:
                others = list(range(nt - 1))  # semaphore k: tb 0 -> tb k+1; nt-1+k: back
                ops_b = sync + [{"name": "nop"}]
                if others:
                    ops_b.append({"name": "sem_release", "semaphore_ids": others})
                ops_b += data
                if data:
                    ops_b.append({"name": "nop"})
                if others:
                    ops_b += [{"name": "sem_acquire", "semaphore_ids": [nt - 1 + k
                                                                         for k in others]},
                              {"name": "nop"}]
                ops_b += sync
                if copies:
                    ops_b.append({"name": "nop"})
                    if others:
                        ops_b.append({"name": "sem_release",
                                      "semaphore_ids": [after + k for k in others]})
                    ops_b += copies
                channels = [{"channel_type": "memory", "channel_ids": local}]
            else:
                ops_b = [{"name": "sem_acquire", "semaphore_ids": [b - 1]}, {"name": "nop"},
                         *data, {"name": "nop"},
                         {"name": "sem_release", "semaphore_ids": [nt - 1 + b - 1]}]
                if copies:  # the scratch range is read once the closing barrier has passed
                    ops_b += [{"name": "sem_acquire", "semaphore_ids": [after + b - 1]},
                              {"name": "nop"}, *copies]
                channels = []
            if used:
                channels.append({"channel_type": "switch", "channel_ids": used})
            if len(ops_b) > MAX_OPERATIONS:
                raise TacosError(f"rank {r} tb {b} needs {len(ops_b)} MSCCL++ operations; the "
                                 f"executor allows {MAX_OPERATIONS}",
                                 hint="the schedule's switch operations do not merge into few "
                                      "ranges; use fewer slices")
            tbs.append({"id": b, "ops": ops_b, "channels": channels, "remote_buffer_refs": []})
        i_chunks, o_chunks = {"allgather": (per_rank, chunks),
                              "reducescatter": (chunks, per_rank)}.get(coll, (chunks, chunks))
        gpus.append({
            "id": r, "input_chunks": i_chunks, "output_chunks": o_chunks,
            "scratch_chunks": chunks if "s" in types else 0,
            "threadblocks": tbs,
            "channels": [{"channel_type": "memory", "connected_to": peers}]
            + [{"channel_type": "switch", "buffer_type": b,
                "rank_groups": [{"size": n, "ranks": list(range(n))}]} for b in types],
            "remote_buffers": [],
            "semaphores": [{"init_value": 0}
                           for _ in range((3 if "s" in types else 2) * (nt - 1))],
        })
    return {"name": name, "collective": coll, "protocol": "Simple", "inplace": inplace,
            "reuse_resources": False, "gpus": gpus, "num_threads_per_block": 1024,
            "use_double_scratch_buffer": False, "buffer_alignment": 16,
            "min_message_size": int(min_bytes), "max_message_size": int(max_bytes)}


def best_switch_plan(schedule: Schedule, *, inplace: bool = True, name: str = "tacos_switch",
                     min_bytes: int = 0, max_bytes: int = UINT64_MAX,
                     nbytes: int | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The switch plan with the thread-block count of :data:`TB_CHOICES` that the MSCCL++
    runtime model times fastest at ``nbytes`` (default the schedule's size; ties to fewer
    thread blocks), and why: ``{"threadblocks", "times_us": {T: time}, "chunks"}``."""
    from tacos.msccl.mscclpp_reader import read_plan
    from tacos.runtime.mscclpp_exec import estimate_mscclpp

    size = int(nbytes or schedule.collective.size)
    group = list(schedule.collective.group)
    best: tuple[float, int, dict[str, Any]] | None = None
    times: dict[int, float] = {}
    for t in TB_CHOICES:
        doc = switch_plan(schedule, threadblocks=t, inplace=inplace, name=name,
                          min_bytes=min_bytes, max_bytes=max_bytes)
        plan, _ = read_plan(doc)
        time = estimate_mscclpp(plan, schedule.topology, size, ranks=group).time
        times[t] = time
        if best is None or time < best[0] * (1 - 1e-9):
            best = (time, t, doc)
    assert best is not None
    doc = best[2]
    return doc, {"threadblocks": best[1], "times_us": {t: round(v * 1e6, 3)
                                                       for t, v in times.items()},
                 "chunks": doc["gpus"][0]["input_chunks"]}


def switch_plan_json(schedule: Schedule, *, inplace: bool = True, name: str = "tacos_switch",
                     min_bytes: int = 0, max_bytes: int = UINT64_MAX) -> str:
    """:func:`best_switch_plan`'s plan as JSON text, checked by MSCCL++'s loader rules
    (:func:`tacos.msccl.mscclpp_loader.loader_problems`) first."""
    from tacos.msccl.mscclpp_loader import loader_problems

    doc, _why = best_switch_plan(schedule, inplace=inplace, name=name, min_bytes=min_bytes,
                                 max_bytes=max_bytes)
    problems = loader_problems(doc)
    if problems:
        raise TacosError("the switch plan would not load: " + problems[0])
    return json.dumps(doc, indent=2) + "\n"
