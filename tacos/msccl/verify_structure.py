"""Structural rules of an MSCCL program (``docs/msccl-xml.md`` §2.1 rules 1-7, 10, 12, 18).

Local checks that need no execution model: ``<algo>`` values, GPU and tb numbering, peers and
channels, connection ownership and per-channel limits, step numbering, types, buffers, counts
and buffer bounds.  :func:`check_structure` also says whether the program is sound enough
(``integrity``) for the whole-program analyses, which index ranks, tbs and buffers blindly.
"""

from __future__ import annotations

from collections import defaultdict

from tacos.msccl.program import (
    BUFFERS,
    COLLS,
    DEFAULT_MAX_STEPS,
    DEFAULT_SMS,
    MAX_CHANNELS,
    MAX_CHILDREN,
    MAX_COUNT,
    MAX_NODES,
    MAX_TBS,
    MAX_TBS_PER_CHANNEL,
    PROTOS,
    READS_DST,
    READS_SRC,
    RECEIVING_TYPES,
    SELECTABLE_COLLS,
    SENDING_TYPES,
    STEP_TYPES,
    WRITES_DST,
    Gpu,
    Program,
    Step,
    Threadblock,
    chunk_geometry,
    needs_multiple_of_ngpus,
    suggest_coll,
)
from tacos.msccl.verify_report import Violation

MAX_BUFFER_CHUNKS = 1 << 24
"""Most buffer chunks (ngpus × nchunksperloop) the whole-program analyses replay."""
MAX_REPORTED = 64
"""Missing ranks reported one by one before the rest are summed up."""


class _Out:
    """Collects violations and tracks whether later analyses may run."""

    def __init__(self) -> None:
        self.items: list[Violation] = []
        self.integrity = True

    def add(self, rule: str, message: str, *, rank: int | None = None, tb: int | None = None,
            step: int | None = None, line: int | None = None, severity: str = "error",
            hint: str | None = None, breaks: bool = False) -> None:
        self.items.append(Violation(rule, message, rank, tb, step, line or None, None,
                                    severity, hint))
        if breaks:
            self.integrity = False


def check_structure(program: Program, *, max_steps: int = DEFAULT_MAX_STEPS,
                    sms: int = DEFAULT_SMS) -> tuple[list[Violation], bool]:
    """Check the structural rules; returns ``(violations, integrity)``.

    ``integrity`` is False when ranks, tbs, peers, step types or buffers are malformed in a way
    that makes happens-before, FIFO and data-flow analyses meaningless.
    """
    out = _Out()
    _check_algo(program, out)
    _check_parser_limits(program, out)
    ok_ranks = _check_gpus(program, out)
    for g in program.gpus:
        if g.id not in ok_ranks:
            continue
        _check_tbs(program, g, out, sms)
        for tb in g.tbs:
            _check_steps(program, g, tb, out, max_steps)
    return out.items, out.integrity


def _check_algo(p: Program, out: _Out) -> None:
    line = p.line
    if p.proto not in PROTOS:
        out.add("proto", f"proto={p.proto!r} is not one of {', '.join(PROTOS)} (exact "
                "spelling)", line=line, hint="use Simple, LL or LL128")
    if p.coll not in COLLS:
        better = suggest_coll(p.coll)
        hint = f'write coll="{better}"' if better else \
            f"use one of {', '.join(SELECTABLE_COLLS)}"
        out.add("coll", f"coll={p.coll!r} is rejected by the runtime (\"unsupported "
                "collective\")", line=line, hint=hint)
    elif p.coll not in SELECTABLE_COLLS:
        out.add("coll", f"coll={p.coll!r} is never selected for an NCCL call (only through "
                "mscclRunAlgo)", line=line, severity="warning")
    if p.ngpus < 1:
        out.add("algo-attribute", f"ngpus={p.ngpus} must be at least 1", line=line,
                breaks=True)
    if p.nchunksperloop < 1:
        out.add("algo-attribute", f"nchunksperloop={p.nchunksperloop} must be at least 1",
                line=line, breaks=True)
    elif p.ngpus >= 1 and p.ngpus * p.nchunksperloop > MAX_BUFFER_CHUNKS:
        out.add("chunk-geometry", f"ngpus={p.ngpus} x nchunksperloop={p.nchunksperloop} "
                f"buffer chunks exceed the {MAX_BUFFER_CHUNKS:,} this verifier replays",
                line=line, breaks=True,
                hint="no real program has that many chunks per loop; check the value")
    elif p.ngpus >= 1 and needs_multiple_of_ngpus(p.coll) and p.nchunksperloop % p.ngpus:
        out.add("chunk-geometry", f"nchunksperloop={p.nchunksperloop} is not a multiple of "
                f"ngpus={p.ngpus}, which {p.coll} needs", line=line, breaks=True)
    if not 1 <= p.nchannels <= MAX_CHANNELS:
        out.add("nchannels", f"nchannels={p.nchannels} must be in 1..{MAX_CHANNELS}",
                line=line)
    for name in ("inplace", "outofplace"):
        v = getattr(p, name)
        if v is not None and v not in (0, 1):
            out.add("algo-attribute", f"{name}={v} must be 0 or 1", line=line)
    if p.inplace == 0 and p.outofplace == 0:
        out.add("algo-attribute", "inplace=0 and outofplace=0: the runtime never selects "
                "this algorithm", line=line, severity="warning")
    if p.coll in ("send", "recv") and p.inplace == 1:
        out.add("algo-attribute", f"{p.coll} calls are never in-place; inplace=1 is unused",
                line=line, severity="warning")
    lo, hi = p.minBytes, p.maxBytes
    if lo is not None and lo < 0:
        out.add("size-window", f"minBytes={lo} is negative", line=line)
    if hi is not None and hi < 0:
        out.add("size-window", f"maxBytes={hi} is negative (0 means unlimited)", line=line)
    if lo is not None and hi not in (None, 0) and hi < lo:
        out.add("size-window", f"maxBytes={hi} < minBytes={lo}: no message size selects this "
                "algorithm", line=line)


def _check_parser_limits(p: Program, out: _Out) -> None:
    """The runtime parser's fixed tables: children per element and parsed nodes per rank."""
    ngpus = len(p.gpus)
    if ngpus > MAX_CHILDREN:
        out.add("children-limit", f"{ngpus} <gpu> elements exceed the runtime's "
                f"{MAX_CHILDREN} children per element", line=p.line)
    for g in p.gpus:
        if len(g.tbs) > MAX_CHILDREN:
            out.add("children-limit", f"{len(g.tbs)} <tb> elements exceed {MAX_CHILDREN}",
                    rank=g.id, line=g.line)
        steps = 0
        for tb in g.tbs:
            steps += len(tb.steps)
            if len(tb.steps) > MAX_CHILDREN:
                out.add("children-limit", f"{len(tb.steps)} <step> elements exceed "
                        f"{MAX_CHILDREN}", rank=g.id, tb=tb.id, line=tb.line)
        nodes = 1 + ngpus + len(g.tbs) + steps
        if nodes > MAX_NODES:
            out.add("node-limit", f"rank {g.id} needs {nodes} parsed nodes (1 algo + {ngpus} "
                    f"gpu + tbs + steps); the runtime parser holds {MAX_NODES}", rank=g.id,
                    line=g.line, hint="use fewer, longer steps")


def _check_gpus(p: Program, out: _Out) -> set[int]:
    seen: dict[int, Gpu] = {}
    ok: set[int] = set()
    ids = [g.id for g in p.gpus]
    if ids != sorted(ids):
        out.add("gpu-ids", "<gpu> elements are not in rank order", line=p.line,
                severity="warning", hint="emit ranks 0..ngpus-1 in order")
    for g in p.gpus:
        if g.id in seen:
            out.add("gpu-ids", f"rank {g.id} appears twice (also at line {seen[g.id].line}); "
                    "the runtime uses the first", rank=g.id, line=g.line, breaks=True)
            continue
        seen[g.id] = g
        if not 0 <= g.id < max(p.ngpus, 0):
            out.add("gpu-ids", f"gpu id {g.id} is outside 0..{p.ngpus - 1}", rank=g.id,
                    line=g.line, breaks=True)
            continue
        ok.add(g.id)
        _check_chunks(p, g, out)
    missing = 0
    for r in range(max(p.ngpus, 0)):
        if r in seen:
            continue
        missing += 1
        if missing > MAX_REPORTED:  # ngpus may be huge: stop after a few
            out.add("gpu-ids", f"ranks {r}..{p.ngpus - 1} have no <gpu> either "
                    f"(ngpus={p.ngpus}, {len(seen)} <gpu> elements)", line=p.line,
                    breaks=True)
            break
        out.add("gpu-ids", f"no <gpu id=\"{r}\">: that rank launches 0 thread blocks "
                "(CUDA rejects the launch)", rank=r, line=p.line, breaks=True)
    return ok


def _check_chunks(p: Program, g: Gpu, out: _Out) -> None:
    if p.nchunksperloop < 1 or p.ngpus < 1:
        return
    want_i, want_o = chunk_geometry(p.coll, p.ngpus, p.nchunksperloop)
    aliased = _aliased_buffer(p.coll) if p.inplace == 1 else None
    for buf, have, want in (("i", g.i_chunks, want_i), ("o", g.o_chunks, want_o)):
        if have == want or (buf == aliased and have == 0):
            continue
        extra = f" (or 0 for the aliased '{buf}' buffer under in-place)" if buf == aliased \
            else ""
        out.add("chunk-geometry", f"{buf}_chunks={have} but {p.coll} with "
                f"nchunksperloop={p.nchunksperloop} and ngpus={p.ngpus} needs {want}{extra}",
                rank=g.id, line=g.line,
                severity="error" if have > want else "warning",
                hint="declare the §1.5 geometry: bounds checks use these counts")
    if g.s_chunks < 0:
        out.add("chunk-geometry", f"s_chunks={g.s_chunks} must be >= 0", rank=g.id,
                line=g.line)


def _aliased_buffer(coll: str) -> str:
    """The buffer an in-place program of ``coll`` does not need to reference."""
    return "i" if coll in ("allgather", "gather") else "o"


def _check_tbs(p: Program, g: Gpu, out: _Out, sms: int) -> None:
    r = g.id
    ids: dict[int, Threadblock] = {}
    owners: dict[tuple[int, str, int], Threadblock] = {}
    per_chan: dict[tuple[int, str], int] = defaultdict(int)
    for tb in g.tbs:
        where = {"rank": r, "tb": tb.id, "line": tb.line}
        if tb.id in ids:
            out.add("tb-ids", f"tb id {tb.id} repeated (also at line {ids[tb.id].line})",
                    breaks=True, **where)
            continue
        ids[tb.id] = tb
        if not 0 <= tb.id < MAX_TBS:
            out.add("tb-ids", f"tb id {tb.id} is outside 0..{MAX_TBS - 1}", breaks=True,
                    **where)
        for kind in ("send", "recv"):
            peer = getattr(tb, kind)
            if peer == r:
                out.add("self-peer", f"{kind}={peer} is the tb's own rank", breaks=True,
                        hint="a tb exchanges data only with other ranks; use cpy/re locally",
                        **where)
            elif peer < -1 or peer >= p.ngpus:
                out.add("peer", f"{kind}={peer} is not -1 or a rank in 0..{p.ngpus - 1}",
                        breaks=True, **where)
            elif peer >= 0:
                key = (tb.chan, kind, peer)
                if key in owners:
                    o = owners[key]
                    out.add("connection-owner", f"tb {o.id} and tb {tb.id} both {kind} "
                            f"{'to' if kind == 'send' else 'from'} rank {peer} on channel "
                            f"{tb.chan}: they would race on one NCCL connection",
                            hint="give each (channel, direction, peer) to a single tb, or "
                                 "use another channel", **where)
                else:
                    owners[key] = tb
                per_chan[(tb.chan, kind)] += 1
        if not 0 <= tb.chan < p.nchannels:
            out.add("channel", f"chan={tb.chan} is outside 0..{p.nchannels - 1} "
                    f"(nchannels={p.nchannels})", hint="raise nchannels or renumber channels",
                    **where)
    for (chan, kind), n in sorted(per_chan.items()):
        if n > MAX_TBS_PER_CHANNEL:
            out.add("tbs-per-channel", f"{n} tbs with a {kind} peer on channel {chan} "
                    f"(the runtime allows {MAX_TBS_PER_CHANNEL})", rank=r, line=g.line)
    expected = set(range(len(ids)))
    if set(ids) != expected:
        missing = sorted(expected - set(ids))
        out.add("tb-ids", f"tb ids are not contiguous from 0 (tb {missing[0]} is missing)",
                rank=r, line=g.line, breaks=True,
                hint="number thread blocks 0..k-1 (\"thread block %d is missing\")")
    if len(g.tbs) > sms:
        out.add("tbs-per-gpu", f"{len(g.tbs)} tbs on one GPU exceed {sms} SMs: blocks spin "
                "on each other and may never be co-resident", rank=r, line=g.line,
                severity="warning")


def _check_steps(p: Program, g: Gpu, tb: Threadblock, out: _Out, max_steps: int) -> None:
    r = g.id
    if len(tb.steps) > max_steps:
        st = tb.steps[max_steps]
        out.add("step-limit", f"{len(tb.steps)} steps (nops included) exceed the step limit "
                f"{max_steps} (MSCCL_MAX_NUM_STEPS)", rank=r, tb=tb.id, step=max_steps,
                line=st.line, hint="spread the work over more tbs or channels")
    sizes = {"i": g.i_chunks, "o": g.o_chunks, "s": g.s_chunks}
    can_send, can_recv = tb.send >= 0, tb.recv >= 0
    for pos, st in enumerate(tb.steps):
        kind = st.type
        if (st.s == pos and kind in _PLAIN and st.srcbuf in sizes and st.dstbuf in sizes
                and st.hasdep in (0, 1) and 0 < st.cnt <= MAX_COUNT
                and (can_send or kind not in SENDING_TYPES)
                and (can_recv or kind not in RECEIVING_TYPES)
                and _in_bounds(st, sizes)):
            continue  # the common case: nothing to report (checked without building text)
        if kind == "nop" and st.s == pos and st.srcbuf in sizes and st.dstbuf in sizes \
                and st.hasdep in (0, 1):
            continue
        _check_step(g, tb, pos, st, out)


_PLAIN = frozenset(STEP_TYPES) - {"nop"}


def _in_bounds(st: Step, sizes: dict[str, int]) -> bool:
    cnt = max(st.cnt, 1)
    kind = st.type
    if kind in READS_SRC and not (0 <= st.srcoff and st.srcoff + cnt <= sizes[st.srcbuf]):
        return False
    if (kind in WRITES_DST or kind in READS_DST) and \
            not (0 <= st.dstoff and st.dstoff + cnt <= sizes[st.dstbuf]):
        return False
    return True


def _check_step(g: Gpu, tb: Threadblock, pos: int, st: Step, out: _Out) -> None:
    """Every rule for one step, with messages (the slow path of :func:`_check_steps`)."""
    where = {"rank": g.id, "tb": tb.id, "step": pos, "line": st.line}
    if st.s != pos:
        out.add("step-numbering", f"s={st.s} but this is step {pos} of the tb; the "
                "runtime counts steps in document order, so dependencies on s would "
                "point elsewhere", hint=f'write s="{pos}"', **where)
    if st.type not in STEP_TYPES:
        out.add("step-type", f"type={st.type!r} is not one of {', '.join(STEP_TYPES)}",
                breaks=True, **where)
        return
    for side in ("srcbuf", "dstbuf"):
        if getattr(st, side) not in BUFFERS:
            out.add("buffer", f"{side}={getattr(st, side)!r} is not i, o or s (checked "
                    "on nops too)", breaks=True, **where)
    if st.hasdep not in (0, 1):
        out.add("hasdep", f"hasdep={st.hasdep} must be 0 or 1",
                severity="warning" if st.is_nop else "error", **where)
    if st.is_nop:
        return
    if not 0 <= st.cnt <= MAX_COUNT:
        out.add("count", f"cnt={st.cnt} is outside 1..{MAX_COUNT}", breaks=True, **where)
    elif st.cnt == 0:
        out.add("count", "cnt=0 on a data step moves nothing", severity="warning",
                **where)
    if st.sends and tb.send < 0:
        out.add("peer-missing", f"{st.type} sends but the tb has send=-1", breaks=True,
                **where)
    if st.receives and tb.recv < 0:
        out.add("peer-missing", f"{st.type} receives but the tb has recv=-1",
                breaks=True, **where)
    _check_bounds(g, st, out, where)


def _check_bounds(g: Gpu, st: Step, out: _Out, where: dict) -> None:
    ranges = dict.fromkeys(st.reads() + st.writes())
    for buf, off, cnt in ranges:
        if buf not in BUFFERS:
            continue
        have = g.chunks(buf)
        if off < 0 or off + max(cnt, 1) > have:
            out.add("offset", f"{st.type} accesses {buf}[{off}..{off + cnt - 1}] but rank "
                    f"{g.id} declares {buf}_chunks={have}", breaks=True,
                    hint=f"keep 0 <= off and off+cnt <= {buf}_chunks", **where)
