"""The symmetric plan file: a :class:`~tacos.model.symmetric_plan.SymmetricPlan` as JSON.

A plan for 8,192 GPUs stands for millions of transfers; the file keeps what the plan is made of
instead: the system's parameters, the parts, each distinct template schedule once (its transfers
on the axis's template topology, in the template's own ids) and the phases that run them.
``tacosc verify`` reads it back and checks it with
:func:`tacos.check.symmetric.verify_symmetric`, which never expands it.  The format
(``docs/scale.md``, "The plan file")::

    {"schema": "tacos.symmetric-plan/1",
     "system": {"type": "clos", "nodes": 1024, "tiers": 2, ...},   # or "torus", "shape"
     "collective": {"kind": "allreduce", "size": 1073741824, "npus": 8192},
     "parts": [bytes, ...],
     "templates": [{"axis": 0, "kind": "reducescatter", "size": bytes,
                    "transfers": [[start, end, src, dst, [link, ...], [chunk, ...], op], ...]}],
     "phases": [[part, axis, template, start], ...],   # or [..., start, [part, ...]]
     "makespan": seconds, "meta": {...}}

A template's ``kind`` is ``reducescatter``, ``allgather`` or ``allreduce`` (a fused digit of
an all-reduce plan, :mod:`tacos.scale.exchange`).  A phase row with a fifth element is a
joint phase: the listed parts ride the same template as ``part``
(:class:`~tacos.model.symmetric_plan.Phase`, ``joint``).

Version 2 (``tacos.symmetric-plan/2``, written only for plans with mixed phases, so every
other plan's file is byte-for-byte the version-1 file; the reader takes both) adds the
**mixed** template (``kind`` ``mixed``: ``size`` the all-gather's bytes, ``scatter`` the
reduce-scatter's; :mod:`tacos.scale.mixed`), a transfer's optional eighth element, its
``group`` id (a joint transfer's members share one), and a phase row's optional sixth
element, the parts the mixed phase reduce-scatters (``Phase.scatter``; the fifth is then the
joint parts, possibly empty).  Template topologies and collectives
are not stored: they are rebuilt from the system
(:meth:`~tacos.model.symmetry.SymmetricSystem.template`) and the template's kind and size, so a
file cannot bring its own.  Floats are written with ``repr`` (they read back exactly).

Version 3 (``tacos.symmetric-plan/3``, written only for plans that reduce in the switches,
:mod:`tacos.scale.sharp`) adds the system type ``clos-rails`` (a ``sharp`` Clos seen as
:class:`~tacos.model.clos_rails.RailAxes`: the fabric's fields) and the template kinds
``reduce`` and ``broadcast`` (root member 0, one chunk of ``size`` bytes).
"""

from __future__ import annotations

import json
import math
from dataclasses import fields
from typing import Any

from tacos.errors import TacosError
from tacos.model.clos import ClosFabric
from tacos.model.clos_rails import RailAxes
from tacos.model.patterns import build
from tacos.model.schedule import Schedule
from tacos.model.symmetric_plan import (
    PHASE_KINDS,
    PLAN_KINDS,
    ROOTED,
    Phase,
    SymmetricPlan,
    mixed_collective,
)
from tacos.model.symmetry import SymmetricSystem
from tacos.model.torus_axes import TorusAxes
from tacos.model.transfer import Transfer

SCHEMA = "tacos.symmetric-plan/1"
SCHEMA_MIXED = "tacos.symmetric-plan/2"
SCHEMA_ROOTED = "tacos.symmetric-plan/3"
SCHEMAS = (SCHEMA, SCHEMA_MIXED, SCHEMA_ROOTED)
SYSTEMS: dict[str, type] = {"clos": ClosFabric, "torus": TorusAxes}


def system_doc(system: SymmetricSystem) -> dict[str, Any]:
    """The constructor arguments of ``system`` with its ``type``."""
    if isinstance(system, RailAxes):
        return {**system_doc(system.fabric), "type": "clos-rails"}
    for name, cls in SYSTEMS.items():
        if isinstance(system, cls):
            doc: dict[str, Any] = {"type": name}
            for f in fields(cls):
                value = getattr(system, f.name)
                doc[f.name] = list(value) if isinstance(value, tuple) else value
            if doc.get("sharp") is False:
                del doc["sharp"]     # a plain fabric's file stays what it was before SHARP
            return doc
    raise TacosError(f"no plan file format for a {type(system).__name__}")


def system_from_doc(doc: Any, source: str = "<string>") -> SymmetricSystem:
    """The system a ``system`` object describes (a :class:`TacosError` naming ``source``)."""
    if isinstance(doc, dict) and doc.get("type") == "clos-rails":
        fabric = system_from_doc({**doc, "type": "clos"}, source)
        return RailAxes(fabric)  # type: ignore[arg-type]
    if not isinstance(doc, dict) or doc.get("type") not in SYSTEMS:
        raise TacosError(f"{source}: 'system' must be an object with type "
                         f"{' or '.join(map(repr, SYSTEMS))} or 'clos-rails'")
    cls = SYSTEMS[doc["type"]]
    names = {f.name for f in fields(cls)}
    extra = sorted(set(doc) - names - {"type"})
    if extra:
        raise TacosError(f"{source}: unknown system field {extra[0]!r}",
                         hint=f"{doc['type']} systems take {', '.join(sorted(names))}")
    args = {k: tuple(v) if isinstance(v, list) else v for k, v in doc.items() if k != "type"}
    try:
        return cls(**args)
    except TypeError as exc:
        raise TacosError(f"{source}: bad system: {exc}") from None


def _num(x: float) -> float:
    if not math.isfinite(x):
        raise TacosError("a symmetric plan has a time that is not finite")
    return x


def plan_doc(plan: SymmetricPlan) -> dict[str, Any]:
    """The plan file's JSON object (see the module docstring)."""
    index: dict[tuple[int, int], int] = {}
    templates: list[dict[str, Any]] = []
    phases = []
    for ph in plan.phases:
        t = ph.template
        # one entry per (template, axis): isomorphic axes (binary digits of one tier) share
        # template objects, and a file's template names its axis
        k = index.get((id(t), ph.axis))
        if k is None:
            k = index[id(t), ph.axis] = len(templates)
            entry: dict[str, Any] = {"axis": ph.axis, "kind": ph.kind,
                                     "size": t.collective.size}
            if ph.scatter:
                r = plan.system.axes[ph.axis].size
                gather = sum(c.size for c in t.collective.chunks[:r])
                entry.update(kind="mixed", size=gather, scatter=t.collective.size - gather)
            entry["transfers"] = [[_num(x.start), _num(x.end), x.src, x.dst, list(x.route),
                                   list(x.chunks), x.op] + ([] if x.group is None else [x.group])
                                  for x in t.transfers]
            templates.append(entry)
        row = [ph.part, ph.axis, k, _num(ph.start)]
        if ph.scatter:
            row += [list(ph.joint), list(ph.scatter)]
        elif ph.joint:
            row.append(list(ph.joint))
        phases.append(row)
    meta = {k: v for k, v in plan.meta.items()
            if k not in ("synthesis_cpu", "tried") and isinstance(v, (int, float, str, bool))}
    n = plan.system.n_npus
    mixed = any(ph.scatter for ph in plan.phases)
    rooted = any(ph.kind in ROOTED for ph in plan.phases)
    schema = SCHEMA_ROOTED if rooted else SCHEMA_MIXED if mixed else SCHEMA
    return {"schema": schema, "system": system_doc(plan.system),
            "collective": {"kind": plan.kind, "size": plan.size, "npus": n},
            "parts": list(plan.parts), "templates": templates, "phases": phases,
            "makespan": plan.makespan, "meta": meta}


def dumps(plan: SymmetricPlan) -> str:
    """The plan file's text (no clocks: the same plan gives the same bytes)."""
    return json.dumps(plan_doc(plan), separators=(",", ":")) + "\n"


def _need(cond: bool, source: str, what: str) -> None:
    if not cond:
        raise TacosError(f"{source}: {what}", hint="a symmetric plan file as `tacosc -o` "
                                                   "writes it (docs/scale.md)")


def _template(system: SymmetricSystem, doc: Any, source: str, k: int) -> Schedule:
    where = f"template {k}"
    _need(isinstance(doc, dict) and {"axis", "kind", "size", "transfers"} <= set(doc),
          source, f"{where} needs axis, kind, size and transfers")
    axis, kind, size = doc["axis"], doc["kind"], doc["size"]
    _need(isinstance(axis, int) and 0 <= axis < len(system.axes), source,
          f"{where}: no axis {axis!r}")
    kinds = (*PHASE_KINDS, "mixed")
    _need(kind in kinds, source, f"{where}: kind {kind!r} is not "
          + ", ".join(kinds[:-1]) + f" or {kinds[-1]}")
    r = system.axes[axis].size
    _need(isinstance(size, int) and size > 0 and (size % r == 0 or kind in ROOTED), source,
          f"{where}: size {size!r} does not split over {r} members")
    topo = system.template(axis)
    if kind == "mixed":
        scatter = doc.get("scatter")
        _need(isinstance(scatter, int) and scatter > 0 and scatter % r == 0, source,
              f"{where}: a mixed template needs a scatter size that splits over {r} members")
        coll = mixed_collective(r, size, scatter)
    elif kind in ROOTED:
        coll = build(kind, range(r), size=size, root=0)
    else:
        coll = build(kind, range(r), size=size)
    out = []
    for row in doc["transfers"] if isinstance(doc["transfers"], list) else [None]:
        _need(isinstance(row, list) and len(row) in (7, 8)
              and (len(row) == 7 or (isinstance(row[7], int) and not isinstance(row[7], bool))),
              source, f"{where}: a transfer is [start, end, src, dst, route, chunks, op] "
                      "or [..., op, group]")
        start, end, src, dst, route, chunks, op = row[:7]
        group = row[7] if len(row) == 8 else None
        ok = (all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (start, end))
              and all(isinstance(x, int) for x in (src, dst))
              and isinstance(route, list) and all(isinstance(x, int) for x in route)
              and isinstance(chunks, list) and all(isinstance(x, int) for x in chunks)
              and op in ("copy", "reduce"))
        _need(ok, source, f"{where}: a malformed transfer {row!r}"[:200])
        out.append(Transfer(float(start), float(end), src, dst, tuple(route), tuple(chunks), op,
                            group))
    return Schedule(topo, coll, tuple(out), {"template": topo.name})


def plan_from_doc(doc: Any, source: str = "<string>") -> SymmetricPlan:
    """The :class:`SymmetricPlan` a plan file's object describes; a :class:`TacosError`
    (naming ``source``) when it is not one.  Whether the plan is right is
    :func:`~tacos.check.symmetric.verify_symmetric`'s to say."""
    _need(isinstance(doc, dict) and doc.get("schema") in SCHEMAS, source,
          f"not a {SCHEMA} (or /2, /3) file")
    for key in ("system", "collective", "parts", "templates", "phases"):
        _need(key in doc, source, f"no {key!r}")
    system = system_from_doc(doc["system"], source)
    coll = doc["collective"]
    _need(isinstance(coll, dict) and coll.get("kind") in PLAN_KINDS
          and isinstance(coll.get("size"), int), source,
          f"'collective' needs a kind ({', '.join(PLAN_KINDS)}) and an integer size")
    _need(coll.get("npus", system.n_npus) == system.n_npus, source,
          f"the collective's {coll.get('npus')} NPUs are not the system's {system.n_npus}")
    parts = doc["parts"]
    _need(isinstance(parts, list) and parts and all(isinstance(p, int) for p in parts),
          source, "'parts' must be a list of byte counts")
    templates = doc["templates"]
    _need(isinstance(templates, list), source, "'templates' must be a list")
    made = [_template(system, t, source, k) for k, t in enumerate(templates)]
    phases = []
    for row in doc["phases"] if isinstance(doc["phases"], list) else [None]:
        _need(isinstance(row, list) and len(row) in (4, 5, 6)
              and all(isinstance(x, int) for x in row[:3])
              and isinstance(row[3], (int, float)) and math.isfinite(row[3])
              and (len(row) == 4 or (isinstance(row[4], list) and (row[4] or len(row) == 6)
                                     and all(isinstance(x, int) for x in row[4])))
              and (len(row) < 6 or (isinstance(row[5], list) and row[5]
                                    and all(isinstance(x, int) for x in row[5]))), source,
              f"a phase is [part, axis, template, start] or [part, axis, template, start, "
              f"[part, ...]] or [..., [part, ...], [part, ...]], not {row!r}"[:200])
        part, axis, k, start = row[:4]
        joint = tuple(row[4]) if len(row) >= 5 else ()
        scatter = tuple(row[5]) if len(row) == 6 else ()
        _need(all(0 <= x < len(parts) for x in (*joint, *scatter)), source,
              f"joint phase of part {part}: no part among {list(joint) + list(scatter)}")
        _need(0 <= part < len(parts), source, f"phase of part {part}: no such part")
        _need(0 <= k < len(made), source, f"phase of part {part}: no template {k}")
        _need(templates[k]["axis"] == axis, source,
              f"phase of part {part}: template {k} is for axis {templates[k]['axis']}, "
              f"not {axis}")
        _need((templates[k]["kind"] == "mixed") == bool(scatter), source,
              f"phase of part {part}: a mixed template goes with scatter parts, and only it")
        kind = "allgather" if scatter else templates[k]["kind"]
        phases.append(Phase(part, axis, kind, made[k], float(start), joint, scatter))
    meta = doc.get("meta") if isinstance(doc.get("meta"), dict) else {}
    return SymmetricPlan(system, coll["kind"], coll["size"], tuple(parts), tuple(phases),
                         dict(meta))


def loads(text: str, source: str = "<string>") -> SymmetricPlan:
    """Read a plan file's text (see :func:`plan_from_doc`)."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise TacosError(f"{source}: not JSON ({exc})") from None
    return plan_from_doc(doc, source)
