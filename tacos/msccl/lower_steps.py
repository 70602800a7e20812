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

import dataclasses
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from types import MemberDescriptorType

from tacos.errors import TacosError
from tacos.msccl.lower_channels import TbPlan
from tacos.msccl.lower_flow import Flow
from tacos.msccl.lower_layout import Layout
from tacos.msccl.program import MAX_DEPENDED_TB, Gpu, Program, Step, Threadblock

Field = tuple[int, str, int]  # (owning rank, buffer, offset)
#: A step as built: ``(type, src, dst, cnt, dep, runs)``; ``dep`` is ``(tb, index)`` or None,
#: ``runs`` the runs the step carries (a fused receive and its send; none for nops and cpys).
Rec = tuple
#: A reference to a built step and the vector clock it was appended with: ``(tb, index, vc)``.
Ref = tuple
FUSED_TYPES = frozenset({"rcs", "rrs", "rrcs"})
_BUF_CODE = {"i": 0, "o": 1, "s": 2}


class _Tb:
    """A thread block under construction (identity-hashed: vector clocks are keyed by it)."""

    __slots__ = ("key", "rkey", "send", "recv", "chan", "steps", "hasdep", "vc")

    def __init__(self, key: object, send: int, recv: int, chan: int) -> None:
        self.key = key
        self.rkey = repr(key)  # dependencies are ordered by ``repr((key, index))``
        self.send = send
        self.recv = recv
        self.chan = chan
        self.steps: list[Rec] = []
        self.hasdep: set[int] = set()
        self.vc: dict[_Tb, int] = {}

    @property
    def units(self) -> list[tuple[tuple[int, ...], int]]:
        """Per step other than a nop, the runs it carries and its length with its nops."""
        out: list[tuple[tuple[int, ...], int]] = []
        n = 1
        for rec in self.steps:
            if rec[0] == "nop":
                n += 1
                continue
            out.append((rec[5], n))
            n = 1
        return out


@dataclass
class Built:
    """Result of one build: the thread blocks (:func:`finish_program` turns them into the
    program), or what must change before they fit."""

    tbs: dict[int, dict[object, _Tb]] | None
    unsafe: set[tuple[int, int]]
    #: ``(rank, units)`` of every tb over the limit (:attr:`_Tb.units`).
    oversize: list[tuple[int, list[tuple[tuple[int, ...], int]]]]
    #: Steps of the first tb in ``oversize``.
    longest: int = 0


def _step_fields(flow: Flow, plan: TbPlan) -> tuple[list[str], list[tuple], list[Field]]:
    """Receiving step type and ``(src, dst)`` fields per run, plus each message's ``DST``.

    Fused steps describe their local data with ``src == dst`` as the production files and
    msccl-tools do (``rcs``: where it stores; ``rrs``: the partial it reads).  Plain ``s`` and
    ``r`` carry their peer's side of the message: a send's ``dst`` is the ``dst`` field of the
    step that receives it (``DST``), a receive's ``src`` the ``src`` field of the step that sent
    it.  All three are lists indexed by run id.
    """
    runs = flow.runs
    fused, unstored = plan.fused, plan.unstored
    feeders = {b: a for a, b in fused.items()}
    types: list[str] = []
    fields: list[tuple] = []
    for r in runs:
        v = r.dst
        if r.id in fused:
            if r.prevs is None:
                t = "rcs"
                f = (v, *r.rdst)
                fields.append((f, f))
            elif r.id in unstored:
                t = "rrs"
                f = (v, *r.rsrc)
                fields.append((f, f))
            else:
                t = "rrcs"
                fields.append(((v, *r.rsrc), (v, *r.rdst)))
        elif r.prevs is None:
            t = "r"
            fields.append(())
        else:
            t = "rrc"
            fields.append(((v, *r.rsrc), (v, *r.rdst)))
        types.append(t)
    for r in runs:
        if types[r.id] == "r":
            a = feeders.get(r.id)
            src = fields[a][0] if a is not None else (r.src, *r.sloc)
            fields[r.id] = (src, (r.dst, *r.rdst))
    dst_of = [f[1] for f in fields]
    return types, fields, dst_of


def _step_maker() -> Callable[..., Step]:
    """A constructor of :class:`~tacos.msccl.program.Step` taking every field positionally
    (``line`` last) that fills the slots directly: a frozen dataclass's ``__init__`` goes
    through ``object.__setattr__`` per field, a third of building a million-step program.
    Falls back to the class itself if ``Step`` ever gets a ``__post_init__``."""
    names = [f.name for f in dataclasses.fields(Step)]
    if hasattr(Step, "__post_init__") or not all(
            isinstance(Step.__dict__.get(n), MemberDescriptorType) for n in names):
        return Step
    args = ", ".join(f"a{i}" for i in range(len(names)))
    body = "".join(f"    set{i}(st, a{i})\n" for i in range(len(names)))
    env: dict = {"new": object.__new__, "Step": Step}
    env.update({f"set{i}": Step.__dict__[n].__set__ for i, n in enumerate(names)})
    exec(f"def make({args}):\n    st = new(Step)\n{body}    return st\n", env)  # noqa: S102
    return env["make"]


make_step = _step_maker()


#: receiving step types that also read a local slot (the partial they reduce into)
_READING_RECEIVES = frozenset({"rrc", "rrs", "rrcs"})


def _slots(loc: tuple[str, int], cnt: int) -> range:
    """The chunk slots ``loc`` covers on its rank, as integers ``offset * 3 + buffer``."""
    code = loc[1] * 3 + _BUF_CODE[loc[0]]
    return range(code, code + 3 * cnt, 3)


def _dep_order(ref: Ref) -> str:
    return f"({ref[0].rkey}, {ref[1]})"


def _merged(vc: dict, dtb: _Tb, di: int, dvc: dict) -> dict:
    """A new vector clock: ``vc`` joined with ``dvc`` (the entrywise maximum) and with step
    ``di`` of ``dtb``."""
    if len(vc) < len(dvc):  # copy the larger clock, raise the smaller one's entries
        vc, dvc = dvc, vc
    out = dict(vc)
    get = out.get
    for k, i in dvc.items():
        if get(k, -1) < i:
            out[k] = i
    if get(dtb, -1) < di:
        out[dtb] = di
    return out


def build_steps(flow: Flow, chan: list[int], plan: TbPlan, *, max_steps: int,
                ports: dict[int, tuple[int, ...]] | None = None) -> Built:
    """Build every rank's tbs; see the module docstring.  ``ports`` maps a run to the pseudo
    slots (negative integers, :mod:`tacos.msccl.lower_ports`) its send writes: each send then
    waits for the previous send of the same port lane in another tb."""
    ports = ports or {}
    runs = flow.runs
    types, fields, dst_of = _step_fields(flow, plan)
    ngpus = flow.layout.ngpus
    gpus: dict[int, dict[object, _Tb]] = {}
    local_seq = [0] * ngpus
    writer: list[dict[int, Ref]] = [{} for _ in range(ngpus)]
    readers: list[dict[int, list[Ref]]] = [{} for _ in range(ngpus)]
    dependents: dict[tuple[_Tb, int], int] = {}
    send_tb, recv_tb, fused, absorbed = plan.send_tb, plan.recv_tb, plan.fused, plan.absorbed
    copies = flow.copies

    def deps_for(lw: dict[int, Ref], rs: dict[int, list[Ref]], tb: _Tb, reads: range | tuple,
                 writes: range | tuple) -> list[Ref]:
        """The dependencies a step of ``tb`` needs, not implied by program order or by each
        other (a read waits for the slot's last writer, a write also for its readers)."""
        best: dict[_Tb, Ref] = {}
        for slot in reads:
            ref = lw.get(slot)
            if ref is not None and ref[0] is not tb:
                b = best.get(ref[0])
                if b is None or b[1] < ref[1]:
                    best[ref[0]] = ref
        for slot in writes:
            lst = rs.get(slot)
            if lst:
                for ref in lst:
                    if ref[0] is not tb:
                        b = best.get(ref[0])
                        if b is None or b[1] < ref[1]:
                            best[ref[0]] = ref
            ref = lw.get(slot)
            if ref is not None and ref[0] is not tb:
                b = best.get(ref[0])
                if b is None or b[1] < ref[1]:
                    best[ref[0]] = ref
        if not best:
            return []
        vc = tb.vc
        cand = [ref for ref in best.values() if vc.get(ref[0], -1) < ref[1]]
        if len(cand) > 1:
            cand.sort(key=_dep_order)
            cand = [d for d in cand
                    if not any(e[2].get(d[0], -1) >= d[1] for e in cand if e is not d)]
        return cand

    for pos, (kind, idx) in enumerate(flow.order):
        if kind == "cpy":
            cp = copies[idx]
            rank = cp.rank
            tbs = gpus.get(rank)
            if tbs is None:
                tbs = gpus[rank] = {}
            lw, rs = writer[rank], readers[rank]
            reads, writes = _slots(cp.src, cp.cnt), _slots(cp.dst, cp.cnt)
            key = ("local", local_seq[rank])
            tb = tbs.get(key) or _Tb(key, -1, -1, 0)
            deps = deps_for(lw, rs, tb, reads, writes)
            if len(tb.steps) + len(deps) + 1 > max_steps and tb.steps:
                local_seq[rank] += 1
                key = ("local", local_seq[rank])
                tb = _Tb(key, -1, -1, 0)
                deps = deps_for(lw, rs, tb, reads, writes)
            tbs[key] = tb
            t, src, dst, cnt, units = "cpy", (rank, *cp.src), (rank, *cp.dst), cp.cnt, ()
        else:
            r = runs[idx]
            if kind == "send":
                if idx in absorbed:
                    continue
                rank = r.src
                key = send_tb[idx]
                sloc = r.sloc
                cnt = r.cnt
                t, src, dst, units = "s", (rank, *sloc), dst_of[idx], (idx,)
                code = sloc[1] * 3 + _BUF_CODE[sloc[0]]
                reads = range(code, code + 3 * cnt, 3)
                writes = ports.get(idx, ()) if ports else ()
                if cnt == 1 and not writes:  # one slot read: its last writer, if needed
                    tbs = gpus.get(rank)
                    if tbs is None:
                        tbs = gpus[rank] = {}
                    tb = tbs.get(key)
                    if tb is None:
                        tb = tbs[key] = _Tb(key, key[1], key[2], key[0])
                    rs = readers[rank]
                    ref = writer[rank].get(code)
                    vc = tb.vc
                    if ref is not None and ref[0] is not tb and vc.get(ref[0], -1) < ref[1]:
                        dtb, di, dvc = ref
                        vc = _merged(vc, dtb, di, dvc)
                        dtb.hasdep.add(di)
                        if dtb.steps[di][0] in FUSED_TYPES and (dtb, di) not in dependents:
                            dependents[(dtb, di)] = pos
                        steps = tb.steps
                        steps.append((t, src, dst, cnt, (dtb, di), units))
                        tb.vc = vc
                    else:
                        steps = tb.steps
                        steps.append((t, src, dst, cnt, None, units))
                    ref = (tb, len(steps) - 1, vc)
                    lst = rs.get(code)
                    if lst is None:
                        rs[code] = [ref]
                    else:
                        lst.append(ref)
                    continue  # the general path below, for this common case
            else:
                rank = r.dst
                key = recv_tb[idx]
                t = types[idx]
                src, dst = fields[idx]
                cnt = r.cnt
                units = (idx, fused[idx]) if idx in fused else (idx,)
                if t in _READING_RECEIVES:  # _slots(src[1:], cnt), inline
                    code = src[2] * 3 + _BUF_CODE[src[1]]
                    reads = range(code, code + 3 * cnt, 3)
                else:
                    reads = ()
                if t != "rrs":
                    code = dst[2] * 3 + _BUF_CODE[dst[1]]
                    writes = range(code, code + 3 * cnt, 3)
                else:
                    writes = ()
                if idx in fused and fused[idx] in ports:
                    writes = (*writes, *ports[fused[idx]])
            tbs = gpus.get(rank)
            if tbs is None:
                tbs = gpus[rank] = {}
            tb = tbs.get(key)
            if tb is None:
                tb = tbs[key] = _Tb(key, key[1], key[2], key[0])
            lw, rs = writer[rank], readers[rank]
            deps = deps_for(lw, rs, tb, reads, writes)
        steps = tb.steps
        if deps:
            vc = tb.vc
            for dtb, di, dvc in deps:
                vc = _merged(vc, dtb, di, dvc)
                dtb.hasdep.add(di)
                if dtb.steps[di][0] in FUSED_TYPES and (dtb, di) not in dependents:
                    dependents[(dtb, di)] = pos
            for d in deps[:-1]:
                steps.append(("nop", None, None, 0, (d[0], d[1]), ()))
            last = deps[-1]
            steps.append((t, src, dst, cnt, (last[0], last[1]), units))
            tb.vc = vc
        else:
            vc = tb.vc
            steps.append((t, src, dst, cnt, None, units))
        ref = (tb, len(steps) - 1, vc)
        for slot in reads:
            lst = rs.get(slot)
            if lst is None:
                rs[slot] = [ref]
            else:
                lst.append(ref)
        for slot in writes:
            lw[slot] = ref
            rs.pop(slot, None)
    del writer, readers, fields, dst_of, types
    for tbs in gpus.values():
        for tb in tbs.values():
            tb.vc = {}  # vector clocks and dependencies link tbs in cycles: cut them

    unsafe: set[tuple[int, int]] = set()
    if dependents:
        by_lane: dict[tuple, dict[int, int]] = defaultdict(dict)
        for r in runs:
            by_lane[(r.conn, chan[r.id])][r.conn_index] = r.id
        for (tb, i), first in dependents.items():
            a = tb.steps[i][5][0]
            b = fused[a]
            s = runs[b]
            prev = by_lane[(s.conn, chan[b])].get(s.conn_index - 1)
            if prev is not None and first <= runs[prev].recv_pos:
                unsafe.add((a, b))
    if unsafe:
        _release(gpus)
        return Built(None, unsafe, [])
    long = [(rank, tb) for rank, tbs in gpus.items() for tb in tbs.values()
            if len(tb.steps) > max_steps]
    if long:
        oversize = [(rank, tb.units) for rank, tb in long]
        longest = len(long[0][1].steps)
        del long
        _release(gpus)
        return Built(None, set(), oversize, longest)
    return Built(gpus, set(), [])


def _release(gpus: dict[int, dict[object, _Tb]]) -> None:
    """Drop the steps (their dependencies reference other tbs: reference cycles)."""
    for tbs in gpus.values():
        for tb in tbs.values():
            tb.steps = []


def finish_program(layout: Layout, gpus: dict[int, dict[object, _Tb]],
                   nchannels: int) -> Program:
    """Number tbs and scratch slots, and freeze into a Program (header filled by the caller).
    Empties the tbs' step lists as it goes (the caller no longer needs the flow by then)."""
    i_chunks, o_chunks = layout.declared()
    used: dict[int, set[int]] = defaultdict(set)
    for tbs in gpus.values():
        for tb in tbs.values():
            for rec in tb.steps:
                if rec[0] == "nop":
                    continue
                f = rec[1]
                if f[1] == "s":
                    used[f[0]].update(range(f[2], f[2] + rec[3]))
                f = rec[2]
                if f[1] == "s":
                    used[f[0]].update(range(f[2], f[2] + rec[3]))
    smap = {r: {off: n for n, off in enumerate(sorted(offs))} for r, offs in used.items()}

    def order(tb: _Tb) -> tuple:
        local = tb.key[1] if tb.key[0] == "local" else -1
        return (tb.chan, tb.send, tb.recv, local)

    make = make_step
    gpu_list = []
    for rank in range(layout.ngpus):
        tbs = list(gpus.get(rank, {}).values())
        if not tbs:
            tbs = [_Tb(("local", 0), -1, -1, 0)]
        tbs.sort(key=order)
        depended = {tb for tb in tbs if tb.hasdep}
        if any(n > MAX_DEPENDED_TB and tb in depended for n, tb in enumerate(tbs)):
            tbs.sort(key=lambda tb: (tb not in depended, order(tb)))
            if any(n > MAX_DEPENDED_TB and tb in depended for n, tb in enumerate(tbs)):
                raise TacosError(f"rank {rank} needs more than {MAX_DEPENDED_TB + 1} thread "
                                 "blocks that others depend on (depid is an int8)",
                                 hint="use fewer chunks per NPU or instances")
        ids = {tb: n for n, tb in enumerate(tbs)}
        out_tbs = []
        for tb in tbs:
            steps = []
            hasdep = tb.hasdep
            for s, (t, src, dst, cnt, dep, _units) in enumerate(tb.steps):
                if t == "nop":
                    steps.append(make(s, "nop", "i", -1, "o", -1, 0, ids[dep[0]], dep[1], 0, 0))
                    continue
                _, sb, so = src
                if sb == "s" and so >= 0:
                    so = smap[src[0]][so]
                _, db, do = dst
                if db == "s" and do >= 0:
                    do = smap[dst[0]][do]
                depid, deps = (ids[dep[0]], dep[1]) if dep else (-1, -1)
                steps.append(make(s, t, sb, so, db, do, cnt, depid, deps,
                                  1 if s in hasdep else 0, 0))
            out_tbs.append(Threadblock(ids[tb], tb.send, tb.recv, tb.chan, tuple(steps)))
            tb.steps = []  # free the records as the program grows
        s_chunks = len(used.get(rank, ()))
        gpu_list.append(Gpu(rank, i_chunks, o_chunks, s_chunks, tuple(out_tbs)))
    return Program("", "Simple", nchannels, layout.nchunksperloop, layout.ngpus, layout.coll,
                   int(layout.inplace), int(not layout.inplace), 0, 0, tuple(gpu_list))
