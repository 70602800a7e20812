"""MSCCL++ JSON execution plans (``docs/msccl-xml.md`` §4, schema of MSCCL++ >= 0.8) → a plan
model the verifier replays (:mod:`tacos.msccl.verify_mscclpp`).

Reading never raises for a malformed plan: every problem becomes a
:class:`~tacos.msccl.verify_report.Violation` naming the JSON path (``gpus[2].threadblocks[0]
.ops[5]``) and, for syntax errors, the line and column.  Only a file that cannot be read at all
raises :class:`~tacos.errors.InputFileError`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tacos.errors import InputFileError
from tacos.msccl.verify_report import Violation

OPS_MODELLED = frozenset({"nop", "put", "get", "copy", "re", "signal", "wait", "rlxsignal",
                          "rlxwait", "flush", "pws", "pwsf", "sem_acquire", "sem_release",
                          "barrier", "rre", "rres", "res", "glres", "gstore"})
OPS_KNOWN = OPS_MODELLED | {"ppkt", "rppkt", "cpkt", "upkt", "repkt", "recpkt", "respkt",
                            "recspkt", "gstorepkt", "pipeline"}
BUFFERS = ("i", "o", "s")
MAX_OPERATIONS = 64


@dataclass
class Ref:
    """A buffer reference: ``rank``'s buffer ``buf`` chunks ``index .. index+size-1``."""

    rank: int
    buf: str
    index: int
    size: int


@dataclass
class Op:
    """One operation with its place (rank, tb, position) and resolved peers and buffers."""

    name: str
    rank: int
    tb: int
    pos: int
    src: list[Ref] = field(default_factory=list)
    dst: list[Ref] = field(default_factory=list)
    peers: list[tuple[int, int]] = field(default_factory=list)  # (peer rank, k-th channel)
    sems: list[int] = field(default_factory=list)
    barrier: tuple[int, int] | None = None  # (barrier id, number of tbs)


@dataclass
class Plan:
    """A parsed plan: header facts, each rank's chunk counts and semaphores, and the ops."""

    name: str = ""
    coll: str = ""
    protocol: str = ""
    inplace: bool = False
    ngpus: int = 0
    chunks: dict[int, dict[str, int]] = field(default_factory=dict)
    semaphores: dict[int, list[int]] = field(default_factory=dict)
    tbs: dict[tuple[int, int], list[Op]] = field(default_factory=dict)
    header: dict[str, Any] = field(default_factory=dict)


class _Reader:
    def __init__(self) -> None:
        self.errors: list[Violation] = []

    def bad(self, path: str, message: str, hint: str | None = None, **place: Any) -> None:
        self.errors.append(Violation("structure", f"{path}: {message}", hint=hint, **place))

    def get(self, obj: Any, key: str, kind: type | tuple, path: str, **place: Any) -> Any:
        if not isinstance(obj, dict) or key not in obj:
            self.bad(path, f"missing {key!r}", **place)
            return None
        value = obj[key]
        if isinstance(value, bool) and kind is not bool:
            value = None
        if not isinstance(value, kind):
            self.bad(f"{path}.{key}", f"{obj[key]!r} is not {_kind(kind)}", **place)
            return None
        return value


def _kind(kind: type | tuple) -> str:
    names = {int: "an integer", str: "a string", list: "a list", dict: "an object",
             bool: "true/false"}
    if isinstance(kind, tuple):
        return " or ".join(names.get(k, k.__name__) for k in kind)
    return names.get(kind, kind.__name__)


def read_plan_text(text: str, source: str = "<plan>") -> tuple[Plan, list[Violation]]:
    """Parse plan text; returns the plan and the structural violations found."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        return Plan(), [Violation("parse", f"not JSON: {exc.msg}", line=exc.lineno,
                                  col=exc.colno)]
    return read_plan(doc)


def load_plan(path: str | Path) -> tuple[Plan, list[Violation]]:
    """Read a plan file (missing or unreadable files raise :class:`InputFileError`)."""
    from tacos.inputs import check_regular, strip_bom

    p = Path(path)
    check_regular(p, "MSCCL++ plan")
    try:
        text = strip_bom(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise InputFileError(f"{p}: cannot read ({exc})") from None
    return read_plan_text(text, str(p))


def read_plan(doc: Any) -> tuple[Plan, list[Violation]]:
    """Turn a decoded plan document into a :class:`Plan` (see the module docstring)."""
    r = _Reader()
    plan = Plan()
    if not isinstance(doc, dict):
        return plan, [Violation("structure", "the plan is not a JSON object")]
    plan.name = r.get(doc, "name", str, "plan") or ""
    plan.coll = r.get(doc, "collective", str, "plan") or ""
    plan.protocol = r.get(doc, "protocol", str, "plan") or ""
    plan.inplace = bool(r.get(doc, "inplace", bool, "plan"))
    plan.header = {k: v for k, v in doc.items() if k != "gpus"}
    gpus = r.get(doc, "gpus", list, "plan") or []
    plan.ngpus = len(gpus)
    channels: dict[int, dict[str, list[int]]] = {}
    remotes: dict[int, list[tuple[int, str]]] = {}
    switches: dict[int, list[tuple[str, list[int]]]] = {}
    for g, gpu in enumerate(gpus):
        path = f"gpus[{g}]"
        if r.get(gpu, "id", int, path, rank=g) not in (g, None):
            r.bad(f"{path}.id", f"is {gpu['id']}, must equal its position {g}", rank=g)
        plan.chunks[g] = {b: r.get(gpu, f"{name}_chunks", int, path, rank=g) or 0
                          for b, name in (("i", "input"), ("o", "output"), ("s", "scratch"))}
        flat: dict[str, list[int]] = {}
        switches[g] = []
        for c, ch in enumerate(r.get(gpu, "channels", list, path, rank=g) or []):
            ctype = r.get(ch, "channel_type", str, f"{path}.channels[{c}]", rank=g)
            if ctype == "switch":
                for grp in ch.get("rank_groups", []) or []:
                    ranks = grp.get("ranks", []) if isinstance(grp, dict) else []
                    if ch.get("buffer_type") not in BUFFERS or not all(
                            isinstance(x, int) and 0 <= x < len(gpus) for x in ranks):
                        r.bad(f"{path}.channels[{c}]", "a switch channel needs buffer_type "
                              "i, o or s and rank_groups of ranks of the plan", rank=g)
                        ranks = []
                    switches[g].append((ch.get("buffer_type"), list(ranks)))
                continue
            peers = ch.get("connected_to", []) if isinstance(ch, dict) else []
            if not isinstance(peers, list) or not all(isinstance(x, int) and 0 <= x < len(gpus)
                                                      and x != g for x in peers):
                r.bad(f"{path}.channels[{c}].connected_to", f"{peers!r} is not a list of other "
                      "ranks", rank=g)
                peers = []
            flat.setdefault(ctype or "?", []).extend(peers)
        channels[g] = flat
        remotes[g] = []
        for b, rb in enumerate(r.get(gpu, "remote_buffers", list, path, rank=g) or []):
            rank = r.get(rb, "rank", int, f"{path}.remote_buffers[{b}]", rank=g)
            buf = r.get(rb, "type", str, f"{path}.remote_buffers[{b}]", rank=g)
            if rank is not None and not 0 <= rank < len(gpus) or buf not in BUFFERS:
                r.bad(f"{path}.remote_buffers[{b}]", "needs a rank of the plan and a type "
                      "i, o or s", rank=g)
                rank, buf = None, None
            remotes[g].append((rank, buf))
        plan.semaphores[g] = [s.get("init_value", 0) if isinstance(s, dict) else 0
                              for s in (gpu.get("semaphores", []) or [])]
    for g, gpu in enumerate(gpus):
        for t, tb in enumerate(r.get(gpu, "threadblocks", list, f"gpus[{g}]", rank=g) or []):
            _read_tb(r, plan, g, t, tb, channels, remotes, switches[g])
    return plan, r.errors


def _read_tb(r: _Reader, plan: Plan, g: int, t: int, tb: Any,
             channels: dict[int, dict[str, list[int]]],
             remotes: dict[int, list[tuple[int, str]]],
             switches: list[tuple[str, list[int]]] = ()) -> None:
    path = f"gpus[{g}].threadblocks[{t}]"
    if r.get(tb, "id", int, path, rank=g, tb=t) not in (t, None):
        r.bad(f"{path}.id", f"must equal its position {t}", rank=g, tb=t)
    local_ch: dict[str, list[int]] = {}
    for c in (tb.get("channels", []) if isinstance(tb, dict) else []) or []:
        if isinstance(c, dict):
            local_ch.setdefault(c.get("channel_type", "?"), []).extend(c.get("channel_ids", []))
    local_buf: dict[str, list[int]] = {}
    for c in (tb.get("remote_buffer_refs", []) if isinstance(tb, dict) else []) or []:
        if isinstance(c, dict):
            local_buf.setdefault(c.get("access_channel_type", "?"), []).extend(
                c.get("remote_buffer_ids", []))
    ops = r.get(tb, "ops", list, path, rank=g, tb=t) or []
    if len(ops) > MAX_OPERATIONS:
        r.bad(f"{path}.ops", f"{len(ops)} operations; the executor allows {MAX_OPERATIONS} "
              "per thread block (MAX_OPERATION)", rank=g, tb=t)
    out: list[Op] = []
    for k, raw in enumerate(ops):
        opath = f"{path}.ops[{k}]"
        name = r.get(raw, "name", str, opath, rank=g, tb=t, step=k)
        if name is None:
            continue
        if name not in OPS_KNOWN:
            r.bad(opath, f"unknown operation {name!r}", rank=g, tb=t, step=k)
            continue
        op = Op(name, g, t, k)
        ctype = raw.get("channel_type", "memory")
        for side, refs in (("src", raw.get("src_buff", [])), ("dst", raw.get("dst_buff", []))):
            for j, ref in enumerate(refs or []):
                if isinstance(ref, dict) and "switch_channel_id" in ref:
                    getattr(op, side).extend(_switch_refs(
                        r, ref, f"{opath}.{side}_buff[{j}]", g, t, k,
                        local_ch.get("switch", []), switches))
                    continue
                got = _ref(r, ref, f"{opath}.{side}_buff[{j}]", g, t, k, ctype, local_buf,
                           remotes[g])
                if got is not None:
                    getattr(op, side).append(got)
        for cid in raw.get("channel_ids", []) or []:
            ids = local_ch.get(ctype, [])
            flat = channels[g].get(ctype, [])
            if not isinstance(cid, int) or not 0 <= cid < len(ids) \
                    or not 0 <= ids[cid] < len(flat):
                r.bad(opath, f"channel {cid!r} is not a {ctype} channel of this thread block",
                      rank=g, tb=t, step=k)
                continue
            gid = ids[cid]
            peer = flat[gid]
            nth = flat[:gid].count(peer)  # k-th channel toward that peer pairs with its k-th
            op.peers.append((peer, nth))
        op.sems = [s for s in raw.get("semaphore_ids", []) or [] if isinstance(s, int)]
        if name == "barrier":
            op.barrier = (int(raw.get("barrier_id", 0)), int(raw.get("num_threadblocks", 0)))
        out.append(op)
    plan.tbs[(g, t)] = out


def _switch_refs(r: _Reader, ref: dict, path: str, g: int, t: int, k: int, local: list[int],
                 switches: list[tuple[str, list[int]]]) -> list[Ref]:
    """A switch (NVLS multimem) reference: the same chunks of every rank of the group."""
    sid, index, size = ref.get("switch_channel_id"), ref.get("index"), ref.get("size")
    if not isinstance(sid, int) or not 0 <= sid < len(local) \
            or not 0 <= local[sid] < len(switches) or not isinstance(index, int) \
            or not isinstance(size, int) or index < 0 or size < 1:
        r.bad(path, f"switch channel {sid!r} is not a switch channel of this thread block "
              "(or index/size are not integers)", rank=g, tb=t, step=k)
        return []
    buf, ranks = switches[local[sid]]
    return [Ref(rank, buf, index, size) for rank in ranks]


def _ref(r: _Reader, ref: Any, path: str, g: int, t: int, k: int, ctype: str,
         local_buf: dict[str, list[int]], remotes: list[tuple[int, str]]) -> Ref | None:
    if not isinstance(ref, dict) or not isinstance(ref.get("index"), int) \
            or not isinstance(ref.get("size"), int) or ref["index"] < 0 or ref["size"] < 1:
        r.bad(path, "needs an integer index >= 0 and size >= 1", rank=g, tb=t, step=k)
        return None
    if "buffer_id" in ref:
        ids = local_buf.get(ctype, [])
        bid = ref["buffer_id"]
        if not isinstance(bid, int) or not 0 <= bid < len(ids) \
                or not 0 <= ids[bid] < len(remotes) or remotes[ids[bid]][0] is None:
            r.bad(path, f"remote buffer {bid!r} is not in this thread block's "
                  f"{ctype} remote_buffer_refs", rank=g, tb=t, step=k)
            return None
        rank, buf = remotes[ids[bid]]
        return Ref(rank, buf, ref["index"], ref["size"])
    if ref.get("type") not in BUFFERS:
        r.bad(path, f"type {ref.get('type')!r} is not i, o or s", rank=g, tb=t, step=k)
        return None
    return Ref(g, ref["type"], ref["index"], ref["size"])
