"""The derived fields of a JSON schedule, re-derived and compared when the file is read.

A ``tacos.schedule/2`` document repeats facts that follow from its topology, collective and
transfers: ``chunk_size`` (the chunks' common size), ``time`` (the last transfer's end, checked
by the reader), ``bound`` (the lower bound of :func:`tacos.bounds.lower_bound` on the embedded
topology and collective) and, in ``meta``, ``lower_bound`` and ``gap`` (time over the bound).
Each is re-derived here; an edited or foreign file whose derived fields disagree is refused
with the JSON path of the first field that does, so no field a reader or ``--report`` uses is
taken on trust.
"""

from __future__ import annotations

import math
from typing import Any

from tacos.errors import TacosError
from tacos.model.schedule import Schedule

REL = 1e-9
"""Relative tolerance for re-derived floats (the writer uses ``repr``, so they round-trip)."""

_HINT = ("derived fields follow from the topology, collective and transfers; the file was "
         "changed or is not from this tacos version: regenerate it with tacosc ... -o plan.json")


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=REL, abs_tol=1e-300)


def _fail(source: str, path: str, message: str) -> TacosError:
    return TacosError(f"{source}: {path}: {message}", hint=_HINT)


def check_derived(top: dict[str, Any], schedule: Schedule, source: str) -> None:
    """Raise :class:`~tacos.errors.TacosError` when ``chunk_size``, ``bound`` or
    ``meta.lower_bound``/``meta.gap`` of the document ``top`` disagree with what
    ``schedule`` (read from the same document) gives."""
    sizes = {c.size for c in schedule.collective.chunks}
    want = next(iter(sizes)) if len(sizes) == 1 else None
    have = top.get("chunk_size")
    if have != want:
        raise _fail(source, "$.chunk_size", f"{have!r}, but the collective's chunks are "
                    + (f"{want} bytes each" if want is not None else "of different sizes "
                       "(null)"))
    time = schedule.makespan
    bound = top.get("bound")
    value = None
    if bound is not None:
        value = _check_bound(bound, schedule, time, source)
    meta = top.get("meta") or {}
    lb = meta.get("lower_bound")
    if lb is not None:
        if not isinstance(lb, int | float) or isinstance(lb, bool) or not math.isfinite(lb):
            raise _fail(source, "$.meta.lower_bound", f"expected a number, got {lb!r}")
        if lb > time * (1 + REL):
            raise _fail(source, "$.meta.lower_bound", f"{lb!r} s exceeds the schedule's own "
                        f"time {time!r} s (a lower bound cannot)")
        if value is not None and not _close(lb, value):
            raise _fail(source, "$.meta.lower_bound", f"{lb!r} s, but $.bound.value is "
                        f"{value!r} s")
    gap = meta.get("gap")
    if gap is not None and isinstance(lb, int | float) and lb > 0:
        if not isinstance(gap, int | float) or isinstance(gap, bool) or \
                not _close(gap, time / lb):
            raise _fail(source, "$.meta.gap", f"{gap!r}, but time / lower bound is "
                        f"{time / lb!r}")


def _check_bound(bound: Any, schedule: Schedule, time: float, source: str) -> float:
    """The re-derived bound's value after checking ``bound`` (the document's) against it."""
    from tacos.check.bounds import lower_bound

    if not isinstance(bound, dict):
        raise _fail(source, "$.bound", "expected an object or null")
    declared = bound.get("value")
    if isinstance(declared, int | float) and not isinstance(declared, bool) and \
            declared > time * (1 + REL):
        raise _fail(source, "$.bound.value", f"{declared!r} s exceeds the schedule's own time "
                    f"{time!r} s (a lower bound cannot)")
    b = lower_bound(schedule.topology, schedule.collective)
    derived = {"value": b.value, "latency": b.latency, "bandwidth": b.bandwidth}
    for key, want in derived.items():
        have = bound.get(key)
        if want is None or not math.isfinite(want):
            ok = have is None
        else:
            ok = isinstance(have, int | float) and not isinstance(have, bool) and \
                _close(have, want)
        if not ok:
            raise _fail(source, f"$.bound.{key}", f"{have!r}, but the bound of this topology "
                        f"and collective is {want!r}")
    if bound.get("kind") != b.kind:
        raise _fail(source, "$.bound.kind", f"{bound.get('kind')!r}, but the bound of this "
                    f"topology and collective is {b.kind!r}")
    parts = bound.get("parts")
    want_parts = {**b.parts, **b.model}
    if not isinstance(parts, dict) or set(parts) != set(want_parts):
        raise _fail(source, "$.bound.parts", "expected the parts "
                    + ", ".join(sorted(want_parts)))
    for key, want in want_parts.items():
        have = parts[key]
        ok = have is None if want is None or not math.isfinite(want) else (
            isinstance(have, int | float) and not isinstance(have, bool) and _close(have, want))
        if not ok:
            raise _fail(source, f"$.bound.parts.{key}", f"{have!r}, but this topology and "
                        f"collective give {want!r}")
    return float(b.value)
