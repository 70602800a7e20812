"""JSON schedule backend (schema ``tacos.schedule/2``, see ``docs/schedule-json.md``).

The document embeds everything needed to verify the schedule without the original spec: the
physical topology (NPUs, switches with their capabilities, links), the collective with every
chunk's pre/postcondition, the transfers with their routes, the collective time and a lower
bound.  Output is deterministic: the same schedule always gives
the same bytes (floats are written with ``repr``, so they read back exactly), and facts that vary
from run to run (``synthesis_time``, the portfolio's ``auto_seconds``) are left out of ``meta``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from tacos.atomic import write_text
from tacos.errors import TacosError
from tacos.model.collective import Collective
from tacos.model.columns import BLOCK, TransferColumns
from tacos.model.schedule import Schedule
from tacos.model.topology import Link, Topology
from tacos.model.transfer import OPS
from tacos.nogc import paused_gc

SCHEMA_ID = "tacos.schedule/2"
VOLATILE_META = frozenset({"synthesis_time", "auto_seconds"})  # wall clock: left out of output


def _float(x: float, where: str) -> float:
    value = float(x)
    if not math.isfinite(value):
        raise TacosError(f"cannot write {where} = {x!r} to JSON: not a finite number",
                         hint="verify the schedule first; it has a broken time or value")
    return value


def _opt_float(x: float | None) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None


def _link(lk: Link, where: str) -> dict[str, Any]:
    return {"src": lk.src, "dst": lk.dst, "alpha": _float(lk.alpha, f"{where}.alpha"),
            "bandwidth": _float(lk.bandwidth, f"{where}.bandwidth"),
            "multiplicity": int(lk.multiplicity), "via": lk.via, "tag": lk.tag, "dim": lk.dim}


def topology_doc(topo: Topology) -> dict[str, Any]:
    """The ``topology`` section."""
    return {
        "name": topo.name,
        "npus": [{"id": n.id, "name": n.name, "failed": bool(n.failed)} for n in topo.npus],
        "switches": [{"id": s.id, "name": s.name, "policy": s.policy, "degree": s.degree,
                      "capabilities": sorted(s.capabilities)}
                     for s in topo.switches],
        "links": [_link(lk, f"links[{i}]") for i, lk in enumerate(topo.links)],
        "failed_links": [_link(lk, f"failed_links[{i}]")
                         for i, lk in enumerate(topo.failed_links)],
    }


def collective_doc(coll: Collective) -> dict[str, Any]:
    """The ``collective`` section (tenants nested the same way)."""
    return {
        "kind": coll.kind,
        "name": coll.name,
        "group": list(coll.group),
        "root": coll.root,
        "size": int(coll.size),
        "chunks_per_npu": int(coll.chunks_per_npu),
        "chunks": [{"id": c.id, "size": int(c.size), "pre": sorted(c.pre), "post": sorted(c.post),
                    "reduce": bool(c.reduce), "index": c.index, "tenant": c.tenant}
                   for c in coll.chunks],
        "tenants": [collective_doc(t) for t in coll.tenants],
    }


def _bound_doc(schedule: Schedule) -> dict[str, Any]:
    from tacos.check.bounds import lower_bound

    b = lower_bound(schedule.topology, schedule.collective)
    return {"value": _opt_float(b.value), "latency": _opt_float(b.latency),
            "bandwidth": _opt_float(b.bandwidth), "kind": b.kind,
            "parts": {k: _opt_float(v) for k, v in {**b.parts, **b.model}.items()}}


def to_document(schedule: Schedule, *, bound: bool = True) -> dict[str, Any]:
    """The schedule as a JSON-ready dict (``bound=False`` writes ``"bound": null``)."""
    transfers = [
        {"start": _float(t.start, f"transfers[{i}].start"),
         "end": _float(t.end, f"transfers[{i}].end"),
         "src": t.src, "dst": t.dst, "route": list(t.route), "chunks": list(t.chunks),
         "op": t.op, **({} if t.group is None else {"group": int(t.group)})}
        for i, t in enumerate(schedule.transfers)
    ]
    return _document(schedule, transfers, bound)


def _document(schedule: Schedule, transfers: Any, bound: bool) -> dict[str, Any]:
    from tacos.report import json_safe

    coll = schedule.collective
    sizes = {c.size for c in coll.chunks}
    return {
        "schema": SCHEMA_ID,
        "topology": topology_doc(schedule.topology),
        "collective": collective_doc(coll),
        "chunk_size": int(next(iter(sizes))) if len(sizes) == 1 else None,
        "transfers": transfers,
        "time": _float(schedule.makespan, "time"),
        "bound": _bound_doc(schedule) if bound else None,
        "meta": json_safe({k: v for k, v in schedule.meta.items() if k not in VOLATILE_META}),
    }


# -- layout: sections indented, one record (npu, link, chunk, transfer) per line -------------
def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(", ", ": "))


def _emit(value: Any, level: int, key: str = "") -> str:
    pad, inner = "  " * level, "  " * (level + 1)
    if isinstance(value, _ColumnLines):
        return value.emit(level)
    if isinstance(value, dict) and value:
        items = [f"{inner}{json.dumps(k, ensure_ascii=False)}: {_emit(v, level + 1, k)}"
                 for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        line = _transfer_line if level == 1 and key == "transfers" else _compact
        return "[\n" + ",\n".join(inner + line(v) for v in value) + "\n" + pad + "]"
    return _compact(value)


def _transfer_line(t: dict[str, Any]) -> str:
    """``_compact`` for a transfer record, without the generic encoder (same bytes)."""
    chunks = ", ".join(str(int(c)) for c in t["chunks"])
    route = ", ".join(str(int(x)) for x in t["route"])
    group = f', "group": {int(t["group"])}' if "group" in t else ""
    return (f'{{"start": {t["start"]!r}, "end": {t["end"]!r}, "src": {int(t["src"])}, '
            f'"dst": {int(t["dst"])}, "route": [{route}], "chunks": [{chunks}], '
            f'"op": {json.dumps(t["op"], ensure_ascii=False)}{group}}}')


class _ColumnLines:
    """The ``transfers`` section of a column-backed schedule, written straight from its columns
    (the same bytes as :func:`_transfer_line` of each transfer's record)."""

    def __init__(self, columns: TransferColumns) -> None:
        self.columns = columns
        for name in ("start", "end"):
            col = getattr(columns, name)
            bad = np.flatnonzero(~np.isfinite(col))
            if len(bad):
                i = int(bad[0])
                _float(float(col[i]), f"transfers[{i}].{name}")

    def emit(self, level: int) -> str:
        c = self.columns
        if not len(c):
            return "[]"
        inner = "  " * (level + 1)
        parts = []
        for a in range(0, len(c), BLOCK):
            b = min(len(c), a + BLOCK)
            route = _joined(c.route_ptr if not c.single_link else None, c.route_links, a, b)
            chunks = _joined(c.chunk_ptr if not c.single_chunk else None, c.chunk_ids, a, b)
            ops = [json.dumps(o, ensure_ascii=False) for o in OPS]
            op = c.op[a:b].tolist()
            group = [f', "group": {g}' if g >= 0 else "" for g in c.group[a:b].tolist()]
            parts.extend(
                f'{inner}{{"start": {s!r}, "end": {e!r}, "src": {x}, "dst": {y}, '
                f'"route": [{r}], "chunks": [{ch}], "op": {ops[o]}{g}}}'
                for s, e, x, y, r, ch, o, g in zip(
                    c.start[a:b].tolist(), c.end[a:b].tolist(), c.src[a:b].tolist(),
                    c.dst[a:b].tolist(), route, chunks, op, group, strict=True))
        pad = "  " * level
        return "[\n" + ",\n".join(parts) + "\n" + pad + "]"


def _joined(ptr: np.ndarray | None, data: np.ndarray, a: int, b: int) -> list[str]:
    """Rows ``a..b`` of a CSR pair as ``", "``-joined text."""
    if ptr is None:
        return [str(x) for x in data[a:b].tolist()]
    p = ptr[a:b + 1].tolist()
    base = p[0]
    items = [str(x) for x in data[base:p[-1]].tolist()]
    return [", ".join(items[p[k] - base:p[k + 1] - base]) for k in range(b - a)]


def dumps(schedule: Schedule, *, bound: bool = True) -> str:
    """Serialize ``schedule`` to JSON text (schema ``tacos.schedule/2``), ending in a newline.

    A column-backed schedule is written from its columns, without ``Transfer`` objects (the
    same bytes)."""
    with paused_gc():
        if isinstance(schedule.transfers, TransferColumns):
            doc = _document(schedule, _ColumnLines(schedule.transfers), bound)
        else:
            doc = to_document(schedule, bound=bound)
        return _emit(doc, 0) + "\n"


def dump(schedule: Schedule, path: str | Path, *, bound: bool = True) -> None:
    """Write :func:`dumps` to ``path`` (UTF-8) atomically."""
    write_text(path, dumps(schedule, bound=bound))
