"""Read JSON schedules back into a :class:`~tacos.model.schedule.Schedule`.

Two versions are read: ``tacos.schedule/2`` (physical topology with switches, each transfer
with its ``route`` of physical links; what tacos writes) and ``tacos.schedule/1`` (older files:
a switch-unwound topology, each transfer over one ``link``, read as a one-link route).

Every problem is a :class:`~tacos.errors.TacosError` naming the file and the JSON path of the
bad field (``plan.json: $.transfers[3].start: expected a number``).  The document is checked
against ``tacos/schemas/schedule-v{1,2}.json`` when ``jsonschema`` is installed, and always by
the structural checks that build the IR.
"""

from __future__ import annotations

import json
import math
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from tacos.frontends.json_schedule_fields import check_derived

from tacos.check.tables import TIME_EPS
from tacos.declared import differences
from tacos.errors import Span, TacosError
from tacos.inputs import check_json_nesting, decode_text, json_nesting_error, read_capped
from tacos.limits import MAX_INTEGER, check_number
from tacos.model.collective import Chunk, Collective
from tacos.model.schedule import Schedule, Transfer
from tacos.model.topology import SWITCH_CAPABILITIES, UNWIND_POLICIES, Link, Npu, Switch, Topology
from tacos.nogc import paused_gc

SCHEMA_ID = "tacos.schedule/2"
SCHEMA_IDS = {"tacos.schedule/1": 1, "tacos.schedule/2": 2}
SCHEMA_SAMPLE = 64
_TOP = frozenset({"schema", "topology", "collective", "chunk_size", "transfers", "time", "bound",
                  "meta"})
_TOPOLOGY = frozenset({"name", "npus", "switches", "links", "failed_links"})
_NPU = frozenset({"id", "name", "failed"})
_SWITCH = frozenset({"id", "name", "policy", "degree"})
_SWITCH_V2 = _SWITCH | {"capabilities"}
_LINK = frozenset({"src", "dst", "alpha", "bandwidth", "multiplicity", "via", "tag", "dim"})
_COLLECTIVE = frozenset({"kind", "name", "group", "root", "size", "chunks_per_npu", "chunks",
                         "tenants"})
_CHUNK = frozenset({"id", "size", "pre", "post", "reduce", "index", "tenant"})
_TRANSFER_V1 = frozenset({"start", "end", "src", "dst", "link", "chunks", "op"})
_TRANSFER = frozenset({"start", "end", "src", "dst", "route", "chunks", "op"})
_TRANSFER_GROUP = _TRANSFER | {"group"}
_HINT = "the file does not follow schema tacos.schedule/2 (see docs/schedule-json.md)"


@cache
def schema(version: int = 2) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of ``tacos.schedule/<version>``."""
    text = resources.files("tacos").joinpath(f"schemas/schedule-v{version}.json"
                                             ).read_text("utf-8")
    return json.loads(text)


class _Doc:
    """Typed access to the parsed document; errors carry the file name and JSON path."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, path: str, message: str) -> TacosError:
        return TacosError(f"{self.source}: {path}: {message}", hint=_HINT)

    def obj(self, value: Any, path: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(path, f"expected an object, got {_kind(value)}")
        return value

    def get(self, d: dict[str, Any], key: str, path: str, kind: str) -> Any:
        where = f"{path}.{key}"
        if key not in d:
            raise self.fail(path, f"missing field {key!r}")
        value = d[key]
        nullable = kind.endswith("?")
        kind = kind.rstrip("?")
        if value is None and nullable:
            return None
        ok = {
            "int": isinstance(value, int) and not isinstance(value, bool)
            and abs(value) <= MAX_INTEGER,
            "num": isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value),
            "str": isinstance(value, str),
            "bool": isinstance(value, bool),
            "list": isinstance(value, list),
            "obj": isinstance(value, dict),
        }[kind]
        if not ok:
            names = {"int": "an integer", "num": "a number", "str": "a string",
                     "bool": "true or false", "list": "an array", "obj": "an object"}
            raise self.fail(where, f"expected {names[kind]}{' or null' if nullable else ''}, "
                            f"got {_kind(value)}")
        return value

    def only(self, d: dict[str, Any], path: str, allowed: frozenset[str]) -> None:
        """Reject fields the schema does not define (typos would be silently ignored)."""
        extra = d.keys() - allowed
        if extra:
            raise self.fail(f"{path}.{sorted(extra)[0]}", "unknown field (allowed: "
                            + ", ".join(sorted(allowed)) + ")")

    def ints(self, d: dict[str, Any], key: str, path: str, limit: int | None = None,
             what: str = "id") -> list[int]:
        values = self.get(d, key, path, "list")
        for i, v in enumerate(values):
            if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= MAX_INTEGER:
                raise self.fail(f"{path}.{key}[{i}]", f"expected a non-negative integer, "
                                f"got {_kind(v)}")
            if limit is not None and v >= limit:
                raise self.fail(f"{path}.{key}[{i}]", f"{what} {v} does not exist "
                                f"(there are {limit})")
        return values


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {value[:40]!r}"
    return "an array" if isinstance(value, list) else "an object"


def _sample(value: Any) -> Any:
    """``value`` with every array cut to its first ``SCHEMA_SAMPLE`` items."""
    if isinstance(value, list):
        return [_sample(v) for v in value[:SCHEMA_SAMPLE]]
    if isinstance(value, dict):
        return {k: _sample(v) for k, v in value.items()}
    return value


def _validate_schema(doc: Any, source: str, version: int) -> None:
    """JSON Schema check when ``jsonschema`` is installed.

    Long arrays are sampled (``jsonschema`` takes minutes on a million transfers); the
    structural checks that build the IR check every record against the same rules.
    """
    try:
        import jsonschema
    except ImportError:  # structural checks below still run
        return
    validator = jsonschema.Draft202012Validator(schema(version))
    error = jsonschema.exceptions.best_match(validator.iter_errors(_sample(doc)))
    if error is not None:
        raise TacosError(f"{source}: {error.json_path}: {error.message}", hint=_HINT)


def _links(r: _Doc, items: list[Any], path: str, n_nodes: int) -> tuple[Link, ...]:
    out = []
    for i, raw in enumerate(items):
        p = f"{path}[{i}]"
        d = r.obj(raw, p)
        r.only(d, p, _LINK)
        src, dst = r.get(d, "src", p, "int"), r.get(d, "dst", p, "int")
        via = r.get(d, "via", p, "int?")
        for key, node in (("src", src), ("dst", dst), ("via", via)):
            if node is not None and not 0 <= node < n_nodes:
                raise r.fail(f"{p}.{key}", f"node {node} does not exist (there are {n_nodes})")
        bw = r.get(d, "bandwidth", p, "num")
        if bw <= 0:
            raise r.fail(f"{p}.bandwidth", "bandwidth must be positive")
        alpha = r.get(d, "alpha", p, "num")
        for key, kind, value in (("bandwidth", "bandwidth", bw), ("alpha", "latency", alpha)):
            problem = check_number(kind, value)
            if problem is not None:
                raise r.fail(f"{p}.{key}", problem)
        mult = r.get(d, "multiplicity", p, "int")
        if mult < 1:
            raise r.fail(f"{p}.multiplicity", "multiplicity must be at least 1")
        out.append(Link(src, dst, float(alpha), float(bw), mult,
                        r.get(d, "dim", p, "int?"), r.get(d, "tag", p, "str"), via))
    return tuple(out)


def _topology(r: _Doc, d: dict[str, Any], path: str, version: int) -> Topology:
    r.only(d, path, _TOPOLOGY)
    npus = []
    for i, raw in enumerate(r.get(d, "npus", path, "list")):
        p = f"{path}.npus[{i}]"
        n = r.obj(raw, p)
        r.only(n, p, _NPU)
        if r.get(n, "id", p, "int") != i:
            raise r.fail(f"{p}.id", f"NPU ids must be 0, 1, 2, ... in order; expected {i}")
        npus.append(Npu(i, r.get(n, "name", p, "str"), r.get(n, "failed", p, "bool")))
    switches = []
    for j, raw in enumerate(r.get(d, "switches", path, "list")):
        p = f"{path}.switches[{j}]"
        s = r.obj(raw, p)
        r.only(s, p, _SWITCH_V2 if version >= 2 else _SWITCH)
        sid = len(npus) + j
        if r.get(s, "id", p, "int") != sid:
            raise r.fail(f"{p}.id", f"switch ids follow the NPUs in order; expected {sid}")
        policy = r.get(s, "policy", p, "str")
        if policy not in UNWIND_POLICIES:
            raise r.fail(f"{p}.policy", f"unknown policy {policy!r}")
        caps: frozenset[str] = frozenset()
        if version >= 2:
            raw_caps = r.get(s, "capabilities", p, "list")
            for k, cap in enumerate(raw_caps):
                if cap not in SWITCH_CAPABILITIES:
                    raise r.fail(f"{p}.capabilities[{k}]", f"unknown capability {_kind(cap)} "
                                 f"(known: {', '.join(SWITCH_CAPABILITIES)})")
            caps = frozenset(raw_caps)
        switches.append(Switch(sid, r.get(s, "name", p, "str"), policy,
                               r.get(s, "degree", p, "int?"), capabilities=caps))
    n_nodes = len(npus) + len(switches)
    links = _links(r, r.get(d, "links", path, "list"), f"{path}.links", n_nodes)
    failed = _links(r, r.get(d, "failed_links", path, "list"), f"{path}.failed_links",
                    n_nodes)
    return Topology(tuple(npus), tuple(switches), links, r.get(d, "name", path, "str"), failed)


def _collective(r: _Doc, d: dict[str, Any], path: str, n_npus: int) -> Collective:
    r.only(d, path, _COLLECTIVE)
    chunks = []
    for i, raw in enumerate(r.get(d, "chunks", path, "list")):
        p = f"{path}.chunks[{i}]"
        c = r.obj(raw, p)
        r.only(c, p, _CHUNK)
        if r.get(c, "id", p, "int") != i:
            raise r.fail(f"{p}.id", f"chunk ids must be 0, 1, 2, ... in order; expected {i}")
        size = r.get(c, "size", p, "int")
        if size < 1:
            raise r.fail(f"{p}.size", "a chunk has at least one byte")
        if check_number("size", size) is not None:
            raise r.fail(f"{p}.size", check_number("size", size))
        chunks.append(Chunk(i, size, frozenset(r.ints(c, "pre", p, n_npus, "NPU")),
                            frozenset(r.ints(c, "post", p, n_npus, "NPU")),
                            r.get(c, "reduce", p, "bool"), r.get(c, "index", p, "int"),
                            r.get(c, "tenant", p, "int")))
    tenants = tuple(
        _collective(r, r.obj(t, f"{path}.tenants[{k}]"), f"{path}.tenants[{k}]", n_npus)
        for k, t in enumerate(r.get(d, "tenants", path, "list"))
    )
    root = r.get(d, "root", path, "int?")
    if root is not None and not 0 <= root < n_npus:
        raise r.fail(f"{path}.root", f"NPU {root} does not exist (there are {n_npus})")
    return Collective(r.get(d, "kind", path, "str"), tuple(chunks),
                      tuple(r.ints(d, "group", path, n_npus, "NPU")),
                      r.get(d, "size", path, "int"), r.get(d, "chunks_per_npu", path, "int"),
                      root, r.get(d, "name", path, "str"), tenants)


def _transfers(r: _Doc, items: list[Any], version: int) -> tuple[Transfer, ...]:
    out = []
    append = out.append
    keys = _TRANSFER if version >= 2 else _TRANSFER_V1
    for i, t in enumerate(items):
        if type(t) is dict and t.keys() == keys:  # fast path for well-formed records
            start, end, src, dst = t["start"], t["end"], t["src"], t["dst"]
            chunks, op = t["chunks"], t["op"]
            route = t["route"] if version >= 2 else [t["link"]]
            if (type(start) in (float, int) and type(end) in (float, int)
                    and 0 <= start < math.inf and 0 <= end < math.inf
                    and type(src) is int and type(dst) is int and type(route) is list
                    and route and all(type(x) is int and 0 <= x <= MAX_INTEGER for x in route)
                    and 0 <= src <= MAX_INTEGER and 0 <= dst <= MAX_INTEGER
                    and op in ("copy", "reduce") and type(chunks) is list and chunks
                    and all(type(c) is int and 0 <= c <= MAX_INTEGER for c in chunks)):
                append(Transfer(float(start), float(end), src, dst, tuple(route), tuple(chunks),
                                op))
                continue
        append(_transfer_slow(r, t, f"$.transfers[{i}]", version))
    return tuple(out)


def _transfer_slow(r: _Doc, raw: Any, p: str, version: int) -> Transfer:
    """Parse one transfer field by field, raising on the first bad one."""
    t = r.obj(raw, p)
    r.only(t, p, _TRANSFER_GROUP if version >= 2 else _TRANSFER_V1)
    start, end = r.get(t, "start", p, "num"), r.get(t, "end", p, "num")
    for key, value in (("start", start), ("end", end)):
        if value < 0:
            raise r.fail(f"{p}.{key}", f"times are non-negative, got {value!r}")
    src, dst = r.get(t, "src", p, "int"), r.get(t, "dst", p, "int")
    for key, value in (("src", src), ("dst", dst)):
        if value < 0:
            raise r.fail(f"{p}.{key}", f"expected a non-negative integer, got {value!r}")
    if version >= 2:
        route = r.ints(t, "route", p)
        if not route:
            raise r.fail(f"{p}.route", "a route has at least one link")
    else:
        link = r.get(t, "link", p, "int")
        if link < 0:
            raise r.fail(f"{p}.link", f"expected a non-negative integer, got {link!r}")
        route = [link]
    op = r.get(t, "op", p, "str")
    if op not in ("copy", "reduce"):
        raise r.fail(f"{p}.op", f"expected \"copy\" or \"reduce\", got {op!r}")
    chunks = r.ints(t, "chunks", p)
    if not chunks:
        raise r.fail(f"{p}.chunks", "a transfer carries at least one chunk")
    group = None
    if "group" in t:
        group = r.get(t, "group", p, "int")
        if group < 0:
            raise r.fail(f"{p}.group", f"expected a non-negative integer, got {group!r}")
    return Transfer(float(start), float(end), src, dst, tuple(route), tuple(chunks), op, group)


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number in JSON")


def loads(text: str, *, source: str = "<string>") -> Schedule:
    """Parse a ``tacos.schedule/2`` (or ``/1``) document into a Schedule (``meta`` from its
    ``meta``)."""
    with paused_gc():
        return _loads(text, source)


def _loads(text: str, source: str) -> Schedule:
    try:
        doc = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as e:
        lines = text.splitlines()
        line = lines[e.lineno - 1] if 0 < e.lineno <= len(lines) else None
        raise TacosError(f"not valid JSON: {e.msg}", span=Span(source, e.lineno, e.colno),
                         source_line=line, hint=_HINT) from None
    except ValueError as e:
        raise TacosError(f"{source}: not valid JSON: {e}", hint=_HINT) from None
    except RecursionError:
        raise json_nesting_error(text, source) from None
    check_json_nesting(doc, source)
    r = _Doc(source)
    top = r.obj(doc, "$")
    declared = top.get("schema")
    version = SCHEMA_IDS.get(declared) if isinstance(declared, str) else None
    if version is None:
        raise TacosError(f"{source}: $.schema: expected {SCHEMA_ID!r}, got {_kind(declared)}",
                         hint="this is not a tacos schedule, or one from another tacos "
                              "version; regenerate it with tacosc ... -o plan.json")
    _validate_schema(doc, source, version)
    r.only(top, "$", _TOP)
    topology = _topology(r, r.get(top, "topology", "$", "obj"), "$.topology", version)
    collective = _collective(r, r.get(top, "collective", "$", "obj"), "$.collective",
                             topology.n_npus)
    found = differences(collective)
    if found:
        where, message = found[0]
        more = f" (and {len(found) - 1} more difference(s))" if len(found) > 1 else ""
        raise TacosError(f"{source}: {where}: {message}{more}",
                         hint="the chunks must be what the declared collective (kind, group, "
                         "size, chunks per NPU, root) has; the file was changed or is not from "
                         "tacos")
    transfers = _transfers(r, r.get(top, "transfers", "$", "list"), version)
    time = r.get(top, "time", "$", "num")
    makespan = max((t.end for t in transfers), default=0.0)
    if abs(time - makespan) > TIME_EPS * max(abs(time), abs(makespan)):
        raise TacosError(f"{source}: $.time: {time!r} s, but the last transfer ends at "
                         f"{makespan!r} s", hint="the collective time is the schedule's "
                         "makespan; the file was changed or is not from tacos")
    r.get(top, "chunk_size", "$", "int?")
    r.get(top, "bound", "$", "obj?")
    meta = r.get(top, "meta", "$", "obj")
    schedule = Schedule(topology, collective, transfers, dict(meta))
    check_derived(top, schedule, source)  # chunk_size, bound, meta.lower_bound/gap
    return schedule


def load(path: str | Path) -> Schedule:
    """Read and parse a JSON schedule file."""
    data = read_capped(path, limit="schedule_bytes", what="schedule file")
    return loads(decode_text(data, str(path), "schedule file"), source=str(path))


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0)


def check_against_topology(schedule: Schedule, topology: Topology) -> list[str]:
    """Differences between the topology embedded in ``schedule`` and ``topology``.

    A schedule on the physical topology (every ``tacos.schedule/2`` file tacos writes) is
    compared with ``topology`` itself; a schedule on a switch-free view of a switched topology
    (``tacos.schedule/1`` files) with ``topology`` unwound
    (:func:`tacos.passes.unwind.unwind_switches`).  Links are compared as a multiset keyed by
    (src, dst, via), so link order does not matter.  Returns readable messages, empty when they
    agree.
    """
    from tacos.passes.unwind import unwind_switches

    mine = schedule.topology
    physical = any(mine.is_switch(lk.src) or mine.is_switch(lk.dst) for lk in mine.links)
    theirs = topology if physical or not topology.switches else unwind_switches(topology)
    out: list[str] = []
    if mine.n_npus != theirs.n_npus:
        out.append(f"the plan has {mine.n_npus} NPUs, the topology {theirs.n_npus}")
    for a, b in zip(mine.npus, theirs.npus, strict=False):
        if a.name != b.name:
            out.append(f"NPU {a.id} is {a.name!r} in the plan but {b.name!r} in the topology")
        if a.failed != b.failed:
            state = {True: "failed", False: "live"}
            out.append(f"NPU {a.name} is {state[a.failed]} in the plan but "
                       f"{state[b.failed]} in the topology")
    if [(s.name, s.policy, s.degree, s.capabilities) for s in mine.switches] != \
            [(s.name, s.policy, s.degree, s.capabilities) for s in theirs.switches]:
        out.append("the switches (names, unwinding policies, degrees or capabilities) differ")

    def name(topo: Topology, lk: Link) -> str:
        def node(v: int) -> str:
            return topo.node_name(v) if 0 <= v < topo.n_nodes else str(v)
        via = f" via {node(lk.via)}" if lk.via is not None else ""
        return f"{node(lk.src)}->{node(lk.dst)}{via}"

    def grouped(topo: Topology) -> dict[tuple, list[Link]]:
        g: dict[tuple, list[Link]] = {}
        for lk in topo.links:
            g.setdefault((lk.src, lk.dst, lk.via), []).append(lk)
        return g

    ga, gb = grouped(mine), grouped(theirs)
    for key in sorted(ga.keys() | gb.keys(), key=repr):
        la, lb = ga.get(key, []), gb.get(key, [])
        if not lb:
            out.append(f"link {name(mine, la[0])} of the plan is not in the topology")
            continue
        if not la:
            out.append(f"link {name(theirs, lb[0])} of the topology is not in the plan")
            continue
        if len(la) != len(lb):
            out.append(f"link {name(mine, la[0])}: {len(la)} in the plan, {len(lb)} in the "
                       "topology")
        for x, y in zip(la, lb, strict=False):
            for field, unit in (("alpha", "s"), ("bandwidth", "B/s")):
                if not _close(getattr(x, field), getattr(y, field)):
                    out.append(f"link {name(mine, x)}: {field} {getattr(x, field):g} {unit} in "
                               f"the plan, {getattr(y, field):g} {unit} in the topology")
            if x.multiplicity != y.multiplicity:
                out.append(f"link {name(mine, x)}: multiplicity {x.multiplicity} in the plan, "
                           f"{y.multiplicity} in the topology")
    return out
