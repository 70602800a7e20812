"""One round of a pipelined schedule: what a runtime that pipelines by itself should run.

A pipelined schedule (``meta['pipeline'] = {'slices': s, 'chunks_per_npu': P}``, written by the
``forest`` solver) cuts every *base* chunk of a standard collective into s slices: chunk index
``i`` of a rank is slice ``i % s`` of base chunk ``i // s`` and round j moves slice j of every
base chunk along the same routes.  MSCCL's runtime loops over slices of every chunk itself
(``docs/msccl.md``), so its program is one round: :func:`first_round` keeps the transfers of
slice 0, renumbers their chunks as the collective with ``P / s`` chunks per NPU, and retimes
them with the simulator.  ``meta['pipeline']['channel_groups']`` (phase → root → group of each
base chunk) becomes ``meta['channel_of_transfer']``, which the MSCCL lowering uses to put
transfers of different tree groups on different channels.
"""

from __future__ import annotations

from tacos.check.simulate import simulate
from tacos.model import patterns
from tacos.model.schedule import Schedule, Transfer


def first_round(schedule: Schedule) -> Schedule:
    """The schedule of one pipeline round: MSCCL's runtime loops over slices of every chunk
    itself, so a pipelined schedule is lowered as its first round.

    Needs ``meta['pipeline'] = {'slices': s, 'chunks_per_npu': P}``: refined chunk i of a root is
    slice ``i % s`` of base chunk ``i // s``; the result keeps the transfers of slice 0 with
    chunks renumbered as the collective with ``P / s`` chunks per NPU.
    """
    info = schedule.meta.get("pipeline") or {}
    s = int(info.get("slices", 1))
    if s <= 1:
        return schedule
    coll = schedule.collective
    per = coll.chunks_per_npu
    base = patterns.build(coll.kind, coll.group, size=coll.size, chunks_per_npu=per // s,
                          root=coll.root, name=coll.name)
    keep = []
    for t in schedule.transfers:
        ids = []
        for c in t.chunks:
            idx = coll.chunks[c].index
            owner, i = divmod(idx, per)
            if i % s == 0:
                ids.append(owner * (per // s) + i // s)
        if ids:
            keep.append(Transfer(t.start, t.end, t.src, t.dst, t.route, tuple(sorted(ids)),
                                 t.op))
    meta = dict(schedule.meta)
    meta["pipeline"] = dict(info, slices=1, lowered_from_slices=s)
    out = simulate(Schedule(schedule.topology, base, tuple(sorted(keep)), meta)).schedule
    groups = info.get("channel_groups")
    if groups:  # channel group of each transfer: that of its first chunk's tree
        per_base = per // s
        hints = []
        for t in out.transfers:
            owner, b = divmod(base.chunks[t.chunks[0]].index, per_base)
            root = base.group[owner] if coll.root is None else coll.root
            row = groups.get("reduce" if t.op == "reduce" else "copy", {}).get(str(root))
            hints.append(row[b] if row and b < len(row) else 0)
        out.meta["channel_of_transfer"] = hints
    return out
