"""One MSCCL XML per message-size window, and the check that a folder of them loads as a set.

msccl-executor-nccl reads every file of ``MSCCL_ALGO_DIR`` (older MSCCL builds: the files
listed in ``MSCCL_XML_FILES``) and, per call, runs the first algorithm in sorted path order
whose ``coll``, ``ngpus``, in-place mode and ``[minBytes, maxBytes]`` window match
(``docs/msccl-xml.md`` §1.1).  A sweep's files therefore have disjoint windows that cover the
whole range, so the order never matters and no size falls through to NCCL by accident:

* the boundary between two measured sizes is their geometric mean (rounded down): size ``a``'s
  window ends there and size ``b``'s starts one byte later;
* the first window starts at ``min_bytes`` (default 0) and the last ends at ``max_bytes``
  (default 0: no limit);
* adjacent windows whose plans lower to the same program (same XML apart from the name and the
  window) are merged into one file;
* a boundary moves up to the smallest power-of-two size the upper window's plan's
  ``nchunksperloop`` divides (2-byte elements) when the window below runs the sizes in between
  (:func:`tacos.msccl.size_fit.fit_windows`): the runtime would skip the upper plan there and
  run NCCL's own algorithm.  :func:`tacos.msccl.size_fit.window_gaps` names the sizes a folder
  still leaves to NCCL and why (``tacosc`` prints them after a sweep).
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from tacos.errors import TacosError, UsageError

if TYPE_CHECKING:
    from tacos.msccl.shape_choose import Choice
    from tacos.sweep import Sweep


def windows(sizes: list[int], min_bytes: int = 0, max_bytes: int = 0
            ) -> list[tuple[int, int]]:
    """``[lo, hi]`` per size (``hi = 0``: no limit) as the module doc describes."""
    if max_bytes and max_bytes < min_bytes:
        raise UsageError(f"--max-bytes {max_bytes} is below --min-bytes {min_bytes}")
    outside = [s for s in sizes if s < min_bytes or (max_bytes and s > max_bytes)]
    if outside:
        raise UsageError(f"size {outside[0]} is outside --min-bytes/--max-bytes "
                         f"[{min_bytes}, {max_bytes or 'no limit'}]")
    out = []
    for i, _ in enumerate(sizes):
        lo = min_bytes if i == 0 else math.isqrt(sizes[i - 1] * sizes[i]) + 1
        hi = max_bytes if i == len(sizes) - 1 else math.isqrt(sizes[i] * sizes[i + 1])
        out.append((lo, hi))
    return out


def write_windows(result: Sweep, folder: Path, *, min_bytes: int = 0, max_bytes: int = 0,
                  proto: str = "Simple", inplace: bool = False,
                  choices: list[Choice] | None = None) -> list[Path]:
    """Write the sweep's plans as MSCCL XML files with disjoint windows into ``folder``
    (created if missing; it must hold no other ``.xml`` file, since the runtime loads them
    all).  Files are written to a temporary folder first and moved in when all are ready.
    ``choices`` (one per row in size order, :func:`tacos.sweep_shaped.choose_windows`) are
    written instead of each row's plan lowered with ``proto``."""
    from tacos.msccl.lower import MscclOptions
    from tacos.msccl.xml_writer import schedule_to_xml

    rows = sorted(result.rows, key=lambda r: r.size)
    if choices is not None:
        return _write_choices(rows, choices, Path(folder), min_bytes, max_bytes, inplace)
    missing = [r.size for r in rows if r.xml_schedule is None]
    if missing:
        raise TacosError(f"no plan without in-switch operations for size {missing[0]}; MSCCL "
                         "XML cannot express it", hint="write JSON schedules instead")
    spans = windows([r.size for r in rows], min_bytes, max_bytes)
    base = MscclOptions(proto=proto, inplace=inplace, outofplace=not inplace)
    merged: list[list] = []  # [lo, hi, body, row]
    for row, (lo, hi) in zip(rows, spans, strict=True):
        body = schedule_to_xml(row.xml_schedule, replace(base, name="tacos"))
        if merged and merged[-1][2] == body:
            merged[-1][1] = hi
        else:
            merged.append([lo, hi, body, row])
    _fit(merged)
    coll = result.rows[0].schedule.collective
    mode = "inplace" if inplace else "outofplace"

    def texts() -> Iterable[tuple[str, str]]:
        for lo, hi, _, row in merged:
            name = f"{coll.kind}-{len(coll.group)}gpus-{mode}-{lo}-{hi or 'max'}"
            opts = replace(base, name=f"tacos {row.xml_plan} {name}"[:200], min_bytes=lo,
                           max_bytes=hi)
            yield name, schedule_to_xml(row.xml_schedule, opts)

    return _write_all(Path(folder), texts(), mode)


def _write_choices(rows: list, choices: list[Choice], folder: Path, min_bytes: int,
                   max_bytes: int, inplace: bool) -> list[Path]:
    """The shaped choices as windows; adjacent windows with the same program are merged."""
    from tacos.msccl.xml_writer import emit_xml
    from tacos.sweep_shaped import named

    if len(choices) != len(rows):
        raise TacosError(f"{len(choices)} shaped plans for {len(rows)} sizes")
    spans = windows([r.size for r in rows], min_bytes, max_bytes)
    merged: list[list] = []  # [lo, hi, body, choice]
    for ch, (lo, hi) in zip(choices, spans, strict=True):
        body = emit_xml(named(ch, "tacos", 0, 0).program)
        if merged and merged[-1][2] == body:
            merged[-1][1] = hi
        else:
            merged.append([lo, hi, body, ch])
    _fit(merged)
    coll = rows[0].schedule.collective
    mode = "inplace" if inplace else "outofplace"

    def texts() -> Iterable[tuple[str, str]]:
        for lo, hi, _, ch in merged:
            name = f"{coll.kind}-{len(coll.group)}gpus-{mode}-{lo}-{hi or 'max'}"
            label = f"tacos {ch.plan} {ch.shape.proto} x{ch.shape.instances} {name}"[:200]
            yield name, named(ch, label, lo, hi).xml()

    return _write_all(folder, texts(), mode)


def _fit(merged: list[list]) -> None:
    """Narrow ``[lo, hi, body, ...]`` windows in place to the sizes their plans run at."""
    import re

    from tacos.msccl.size_fit import fit_windows

    spans = []
    for lo, hi, body, *_ in merged:
        m = re.search(r'nchunksperloop="(\d+)"', body)
        spans.append((lo, hi, int(m.group(1)) if m else 1))
    for item, (lo, hi) in zip(merged, fit_windows(spans), strict=True):
        item[0], item[1] = lo, hi


def _write_all(folder: Path, texts: Iterable[tuple[str, str]],
               mode: str | None = None) -> list[Path]:
    """Write ``(name, text)`` pairs as ``name.xml`` into ``folder``: all files or none."""
    check_folder(folder, mode=mode)
    folder.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(prefix=".tacos-", dir=folder))
    paths: list[Path] = []
    moved: list[Path] = []
    try:
        for name, text in texts:
            with open(staged / f"{name}.xml", "w", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            paths.append(folder / f"{name}.xml")
        for p in paths:
            os.replace(staged / p.name, p)
            moved.append(p)
    except OSError as exc:
        for p in moved:  # all files or none: a partial set would load with a gap
            p.unlink(missing_ok=True)
        raise TacosError(f"cannot write {folder}: {exc.strerror or exc}",
                         hint="check that the folder is writable and has space") from None
    finally:
        for leftover in staged.glob("*"):
            leftover.unlink()
        staged.rmdir()
    return paths


def check_folder(folder: str | Path, *, mode: str | None = None) -> None:
    """Raise a :class:`TacosError` now if a sweep cannot be written into ``folder`` later: it
    must be a folder (or not exist yet, under a writable one) and hold no ``.xml`` file - but
    for ``mode`` ``'inplace'`` (``'outofplace'``) files that only serve the other kind of call,
    which the runtime keeps apart (a folder may hold both sets)."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{folder} is a file; the sweep writes a folder of XML files")
    clash = [f for f in sorted(folder.glob("*.xml")) if not _other_mode(f, mode)] \
        if folder.is_dir() else []
    if clash:
        raise UsageError(f"{folder} already holds XML files ({clash[0].name}"
                         + (f", also {mode}" if mode else "") + "), and the runtime loads every "
                         "file in its folder", hint="write the sweep into an empty folder, or "
                         "one holding only the other (in-place / out-of-place) set")
    existing = folder
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"cannot write {folder}: {existing} is not a writable folder",
                         hint="write the sweep somewhere else")


def _other_mode(path: Path, mode: str | None) -> bool:
    """True when the XML file at ``path`` serves only the other kind of call than ``mode``."""
    if mode not in ("inplace", "outofplace"):
        return False
    from tacos.msccl.xml_reader import load_xml

    try:
        p = load_xml(path)
    except TacosError:
        return False
    return not (p.inplace if mode == "inplace" else p.outofplace)


def check_set(paths: Iterable[str | Path]) -> list[str]:
    """Problems that keep MSCCL XML files from loading as one set: per ``(coll, ngpus,
    in-place mode)``, windows that overlap or leave a gap between the smallest ``minBytes``
    and the largest ``maxBytes`` (0 = no limit).  Empty when they form a set."""
    from tacos.msccl.xml_reader import load_xml

    groups: dict[tuple, list[tuple[int, int, str]]] = {}
    for path in paths:
        p = load_xml(path)
        hi = p.maxBytes or 0
        for mode, flag in (("inplace", p.inplace), ("outofplace", p.outofplace)):
            if flag:
                groups.setdefault((p.coll, p.ngpus, mode), []).append(
                    (p.minBytes or 0, hi, Path(path).name))
    problems = []
    for (coll, ngpus, mode), items in sorted(groups.items()):
        items.sort()
        for (lo1, hi1, f1), (lo2, _, f2) in zip(items, items[1:], strict=False):
            if hi1 == 0 or hi1 >= lo2:
                problems.append(f"{coll} on {ngpus} GPUs ({mode}): {f1} [{lo1}, "
                                f"{hi1 or 'no limit'}] overlaps {f2} from {lo2}")
            elif hi1 + 1 < lo2:
                problems.append(f"{coll} on {ngpus} GPUs ({mode}): no plan for "
                                f"{hi1 + 1}..{lo2 - 1} bytes (between {f1} and {f2})")
    return problems
