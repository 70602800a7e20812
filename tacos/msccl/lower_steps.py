"""Steps, cross-tb dependencies and the final :class:`~tacos.msccl.program.Program`.

Steps are appended to their tbs in the global event order (:mod:`tacos.msccl.lower_flow`), so
program order, FIFO order and every dependency point forward in that order.  Dependencies come
from the physical chunk slots each step reads and writes: a read waits for the slot's last writer
in another tb; a write waits for the last writer and for every reader since then.  A dependency
already implied (through program order or an earlier dependency, tracked with per-step vector
clocks) is dropped.  Each step keeps one dependency; every extra one becomes a ``nop`` placed
just before it (``docs/msccl-xml.md`` §1.9), and every step depended on gets ``hasdep=1``.

Fused steps (``rcs``/``rrs``/``rrcs``) finish only when their send fits into the outgoing FIFO,
i.e. after the peer received the previous message on that connection.  A fusion is kept only if
every step that depends on it comes after that receive in the global order; otherwise the caller
forbids it and rebuilds (see :func:`build_steps`' ``unsafe`` result).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from tacos.errors import TacosError
from tacos.msccl.lower_channels import TbKey, TbPlan
from tacos.msccl.lower_flow import Flow
from tacos.msccl.program import MAX_DEPENDED_TB, Gpu, Program, Step, Threadblock

Field = tuple[int, str, int]  # (owning rank, buffer, offset)
Ref = tuple[object, int]  # (tb key, step index)


@dataclass
class _Step:
    type: str
    src: Field
    dst: Field
    cnt: int
    pos: int
    dep: Ref | None = None
    hasdep: bool = False
    runs: tuple[int, ...] = ()


@dataclass
class _Tb:
    key: object
    send: int
    recv: int
    chan: int
    steps: list[_Step] = field(default_factory=list)
    vc: dict = field(default_factory=dict)
    units: list[tuple[tuple[int, ...], int]] = field(default_factory=list)


@dataclass
class Built:
    """Result of one build: a program, or what must change before it fits."""

    program: Program | None
    unsafe: set[tuple[int, int]]
    oversize: list[tuple[int, _Tb]]


def _step_fields(flow: Flow, plan: TbPlan) -> tuple[dict[int, str], dict[int, tuple],
                                                     dict[int, Field]]:
    """Receiving step type and ``(src, dst)`` fields per run, plus each message's ``DST``.

    Fused steps describe their local data with ``src == dst`` as the production files and
    msccl-tools do (``rcs``: where it stores; ``rrs``: the partial it reads).  Plain ``s`` and
    ``r`` carry their peer's side of the message: a send's ``dst`` is the ``dst`` field of the
    step that receives it (``DST``), a receive's ``src`` the ``src`` field of the step that sent
    it.
    """
    runs = flow.runs
    feeders = {b: a for a, b in plan.fused.items()}
    types: dict[int, str] = {}
    for r in runs:
        if r.id in plan.fused:
            types[r.id] = ("rcs" if r.prevs is None else
                           "rrs" if r.id in plan.unstored else "rrcs")
        else:
            types[r.id] = "r" if r.prevs is None else "rrc"
    fields: dict[int, tuple] = {}
    for r in runs:
        t, v = types[r.id], r.dst
        if t == "rcs":
            fields[r.id] = ((v, *r.rdst), (v, *r.rdst))
        elif t == "rrs":
            fields[r.id] = ((v, *r.rsrc), (v, *r.rsrc))
        elif t in ("rrc", "rrcs"):
            fields[r.id] = ((v, *r.rsrc), (v, *r.rdst))
    for r in runs:
        if types[r.id] == "r":
            a = feeders.get(r.id)
            src = fields[a][0] if a is not None else (r.src, *r.sloc)
            fields[r.id] = (src, (r.dst, *r.rdst))
    dst_of = {r.id: fields[r.id][1] for r in runs}
    return types, fields, dst_of


def build_steps(flow: Flow, chan: list[int], plan: TbPlan, *, max_steps: int) -> Built:
    """Build every rank's tbs; see the module docstring."""
    runs = flow.runs
    types, fields, dst_of = _step_fields(flow, plan)
    gpus: dict[int, dict[object, _Tb]] = defaultdict(dict)
    local_seq: dict[int, int] = defaultdict(int)
    last_writer: dict[tuple[int, str, int], Ref] = {}
    readers_since: dict[tuple[int, str, int], list[Ref]] = defaultdict(list)
    step_vc: dict[tuple[int, object, int], dict] = {}
    dependents: dict[tuple[int, object, int], int] = {}

    def tb_for(rank: int, key: TbKey) -> _Tb:
        tbs = gpus[rank]
        if key not in tbs:
            tbs[key] = _Tb(key, key[1], key[2], key[0])
        return tbs[key]

    def deps_for(rank: int, tb: _Tb, reads: list, writes: list) -> list[Ref]:
        best: dict[object, int] = {}
        for slot in reads:
            lw = last_writer.get((rank, *slot))
            if lw is not None and lw[0] != tb.key:
                best[lw[0]] = max(best.get(lw[0], -1), lw[1])
        for slot in writes:
            refs = list(readers_since.get((rank, *slot), ()))
            lw = last_writer.get((rank, *slot))
            if lw is not None:
                refs.append(lw)
            for k, i in refs:
                if k != tb.key:
                    best[k] = max(best.get(k, -1), i)
        cand = sorted(((k, i) for k, i in best.items() if tb.vc.get(k, -1) < i), key=repr)
        keep = []
        for d in cand:
            if not any(step_vc[(rank, *e)].get(d[0], -1) >= d[1] for e in cand if e != d):
                keep.append(d)
        return keep

    def append(rank: int, tb: _Tb, st: _Step, reads: list, writes: list, deps: list[Ref],
               units: tuple[int, ...]) -> None:
        vc = tb.vc
        if deps:
            vc = dict(vc)
            for d in deps:
                for k, i in step_vc[(rank, *d)].items():
                    if vc.get(k, -1) < i:
                        vc[k] = i
                vc[d[0]] = max(vc.get(d[0], -1), d[1])
                gpus[rank][d[0]].steps[d[1]].hasdep = True
                ref = (rank, *d)
                dependents[ref] = min(dependents.get(ref, st.pos), st.pos)
        for d in deps[:-1]:
            tb.steps.append(_Step("nop", (rank, "i", -1), (rank, "o", -1), 0, st.pos, d))
        st.dep = deps[-1] if deps else None
        tb.steps.append(st)
        idx = len(tb.steps) - 1
        tb.vc = vc
        step_vc[(rank, tb.key, idx)] = vc
        tb.units.append((units, len(deps) or 1))
        for slot in reads:
            readers_since[(rank, *slot)].append((tb.key, idx))
        for slot in writes:
            last_writer[(rank, *slot)] = (tb.key, idx)
            readers_since[(rank, *slot)] = []

    def span(f: Field | None, cnt: int) -> list[tuple[str, int]]:
        return [] if f is None else [(f[1], f[2] + j) for j in range(cnt)]

    for pos, (kind, idx) in enumerate(flow.order):
        if kind == "cpy":
            cp = flow.copies[idx]
            rank = cp.rank
            reads, writes = span((rank, *cp.src), cp.cnt), span((rank, *cp.dst), cp.cnt)
            key = ("local", local_seq[rank])
            tb = gpus[rank].get(key) or _Tb(key, -1, -1, 0)
            deps = deps_for(rank, tb, reads, writes)
            if len(tb.steps) + len(deps) + 1 > max_steps and tb.steps:
                local_seq[rank] += 1
                key = ("local", local_seq[rank])
                tb = _Tb(key, -1, -1, 0)
                deps = deps_for(rank, tb, reads, writes)
            gpus[rank][key] = tb
            st = _Step("cpy", (rank, *cp.src), (rank, *cp.dst), cp.cnt, pos)
            append(rank, tb, st, reads, writes, deps, ())
            continue
        r = runs[idx]
        if kind == "send":
            if idx in plan.absorbed:
                continue
            rank = r.src
            tb = tb_for(rank, plan.send_tb[idx])
            st = _Step("s", (rank, *r.sloc), dst_of[idx], r.cnt, pos, runs=(idx,))
            reads, writes = span(st.src, r.cnt), []
            units: tuple[int, ...] = (idx,)
        else:
            rank = r.dst
            tb = tb_for(rank, plan.recv_tb[idx])
            t = types[idx]
            src, dst = fields[idx]
            units = (idx, plan.fused[idx]) if idx in plan.fused else (idx,)
            st = _Step(t, src, dst, r.cnt, pos, runs=units)
            reads = span(src, r.cnt) if t in ("rrc", "rrs", "rrcs") else []
            writes = span(dst, r.cnt) if t in ("r", "rcs", "rrc", "rrcs") else []
        deps = deps_for(rank, tb, reads, writes)
        append(rank, tb, st, reads, writes, deps, units)

    unsafe: set[tuple[int, int]] = set()
    by_lane: dict[tuple, dict[int, int]] = defaultdict(dict)
    for r in runs:
        by_lane[(r.conn, chan[r.id])][r.conn_index] = r.id
    for (rank, key, i), first in dependents.items():
        st = gpus[rank][key].steps[i]
        if st.type not in ("rcs", "rrs", "rrcs"):
            continue
        a = st.runs[0]
        b = plan.fused[a]
        s = runs[b]
        prev = by_lane[(s.conn, chan[b])].get(s.conn_index - 1)
        if prev is not None and first <= runs[prev].recv_pos:
            unsafe.add((a, b))
    if unsafe:
        return Built(None, unsafe, [])
    oversize = [(rank, tb) for rank, tbs in gpus.items() for tb in tbs.values()
                if len(tb.steps) > max_steps]
    if oversize:
        return Built(None, set(), oversize)
    return Built(_finish(flow, gpus, chan), set(), [])


def _finish(flow: Flow, gpus: dict[int, dict[object, _Tb]], chan: list[int]) -> Program:
    """Number tbs and scratch slots, and freeze into a Program (header filled by the caller)."""
    layout = flow.layout
    i_chunks, o_chunks = layout.declared()
    used: dict[int, set[int]] = defaultdict(set)
    for tbs in gpus.values():
        for tb in tbs.values():
            for st in tb.steps:
                if st.type == "nop":
                    continue
                for f in (st.src, st.dst):
                    if f[1] == "s":
                        used[f[0]].update(range(f[2], f[2] + st.cnt))
    smap = {r: {off: n for n, off in enumerate(sorted(offs))} for r, offs in used.items()}

    def fix(f: Field) -> tuple[str, int]:
        if f[1] == "s" and f[2] >= 0:
            return "s", smap[f[0]][f[2]]
        return f[1], f[2]

    gpu_list = []
    for rank in range(layout.ngpus):
        tbs = list(gpus.get(rank, {}).values())
        if not tbs:
            tbs = [_Tb(("local", 0), -1, -1, 0)]

        def order(tb: _Tb) -> tuple:
            local = tb.key[1] if tb.key[0] == "local" else -1
            return (tb.chan, tb.send, tb.recv, local)

        tbs.sort(key=order)
        depended = {tb.key for tb in tbs if any(st.hasdep for st in tb.steps)}
        if any(n > MAX_DEPENDED_TB and tb.key in depended for n, tb in enumerate(tbs)):
            tbs.sort(key=lambda tb: (tb.key not in depended, order(tb)))
            if any(n > MAX_DEPENDED_TB and tb.key in depended for n, tb in enumerate(tbs)):
                raise TacosError(f"rank {rank} needs more than {MAX_DEPENDED_TB + 1} thread "
                                 "blocks that others depend on (depid is an int8)",
                                 hint="use fewer chunks per NPU or instances")
        ids = {tb.key: n for n, tb in enumerate(tbs)}
        out_tbs = []
        for tb in tbs:
            steps = []
            for s, st in enumerate(tb.steps):
                if st.type == "nop":
                    steps.append(Step(s, "nop", "i", -1, "o", -1, 0, ids[st.dep[0]], st.dep[1],
                                      0))
                    continue
                sb, so = fix(st.src)
                db, do = fix(st.dst)
                depid, deps = (ids[st.dep[0]], st.dep[1]) if st.dep else (-1, -1)
                steps.append(Step(s, st.type, sb, so, db, do, st.cnt, depid, deps,
                                  int(st.hasdep)))
            out_tbs.append(Threadblock(ids[tb.key], tb.send, tb.recv, tb.chan, tuple(steps)))
        s_chunks = len(used.get(rank, ()))
        gpu_list.append(Gpu(rank, i_chunks, o_chunks, s_chunks, tuple(out_tbs)))
    nchannels = max([1] + [c + 1 for c in chan])
    return Program("", "Simple", nchannels, layout.nchunksperloop, layout.ngpus, layout.coll,
                   int(layout.inplace), int(not layout.inplace), 0, 0, tuple(gpu_list))
