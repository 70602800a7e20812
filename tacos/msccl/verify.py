"""MSCCL XML verifier: every rule of ``docs/msccl-xml.md`` §2, as one report.

Passes, in order (a pass is skipped, and says why in ``report.checks``, when an earlier one
found the program too broken for it to mean anything):

1. ``parse`` - the runtime's lexical rules and required attributes
   (:mod:`tacos.msccl.xml_reader`);
2. ``structure`` - values, numbering, peers, channels, ownership, bounds
   (:mod:`~tacos.msccl.verify_structure`);
3. ``connections`` - symmetry and k-th send/k-th receive pairing
   (:mod:`~tacos.msccl.verify_connections`);
4. ``dependencies`` - depid/deps/hasdep, nops, ``re`` fusion (:mod:`~tacos.msccl.verify_deps`);
5. ``happens-before`` - acyclicity;
6. ``races`` - unordered conflicting accesses within a GPU, in-place aliasing applied
   (:mod:`~tacos.msccl.verify_races`);
7. ``fifo`` - capacity-1 execution, steps cut into the executor's primitive calls where they
   need more FIFO slots than a connection holds, deadlocks (:mod:`~tacos.msccl.verify_fifo`,
   :mod:`~tacos.msccl.fifo_calls`);
8. ``symbolic`` - final buffers against the collective's postcondition, once per in-place mode
   the file declares (:mod:`~tacos.msccl.verify_symbolic`);
9. ``timing`` - α-β time when a topology is given (:mod:`~tacos.msccl.timing`), rank r on
   the NPU :mod:`~tacos.msccl.ranks` finds for it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from tacos.errors import TacosError
from tacos.model.topology import Topology
from tacos.msccl import verify_columns, verify_jit
from tacos.msccl.fifo_calls import CallSplit, call_split, split_matters
from tacos.msccl.program import DEFAULT_MAX_STEPS, DEFAULT_SMS, Program
from tacos.msccl.ranks import declared_ranks, resolve_ranks
from tacos.msccl.timing import alpha_beta_time
from tacos.msccl.verify_connections import check_connections
from tacos.msccl.verify_deps import (
    HappensBefore,
    build_hb,
    check_cycles,
    check_dependencies,
)
from tacos.msccl.verify_fifo import check_deadlock, run_fifo
from tacos.msccl.verify_model import Model, build_model
from tacos.msccl.verify_races import check_races
from tacos.msccl.verify_report import MscclReport, Violation
from tacos.msccl.verify_structure import check_structure
from tacos.msccl.verify_symbolic import check_symbolic
from tacos.msccl.xml_reader import ParseOutcome, parse_xml_collect, read_xml_text
from tacos.nogc import paused_gc
from tacos.progress import Reporter, as_reporter

__all__ = ["MscclReport", "Violation", "summarize", "verify_program", "verify_xml",
           "verify_xml_file"]


def summarize(program: Program) -> dict:
    """Facts about a program for the report header."""
    per_gpu = [len(g.tbs) for g in program.gpus]
    uniform = len(set(per_gpu)) <= 1
    return {
        "name": program.name,
        "coll": program.coll,
        "ngpus": program.ngpus,
        "nchannels": program.nchannels,
        "channels_used": len({tb.chan for g in program.gpus for tb in g.tbs}),
        "nchunksperloop": program.nchunksperloop,
        "tbs_per_gpu": per_gpu[0] if uniform and per_gpu else per_gpu,
        "tbs_min": min(per_gpu, default=0),
        "tbs_max": max(per_gpu, default=0),
        "tbs_total": program.num_tbs,
        "steps_total": program.num_steps,
        "max_steps_per_tb": max((len(tb.steps) for g in program.gpus for tb in g.tbs),
                                default=0),
        "proto": program.proto,
        "inplace": program.inplace,
        "outofplace": program.outofplace,
        "minBytes": program.minBytes,
        "maxBytes": program.maxBytes,
    }


def _modes(p: Program) -> list[bool]:
    """In-place aliasing modes the program must be correct under (True = aliased)."""
    modes = []
    if p.inplace == 1:
        modes.append(True)
    if p.outofplace == 1 or p.inplace != 1:
        modes.append(False)
    return modes


def _analyse(program: Program, out: list[Violation], checks: dict[str, str], *,
             topology: Topology | None, max_steps: int, sms: int, capacity: int,
             nbytes: int | None, ranks: _Ranks, progress: Reporter) -> tuple[float | None, dict]:
    def record(name: str, found: list[Violation]) -> None:
        out.extend(found)
        checks[name] = "failed" if any(v.severity == "error" for v in found) else "passed"

    steps = program.num_steps
    with progress.phase(f"structure ({steps} steps)"):
        found, integrity = check_structure(program, max_steps=max_steps, sms=sms)
    record("structure", found)
    later = ("connections", "dependencies", "happens-before", "races", "fifo", "symbolic")
    if not integrity:
        for name in later:
            checks[name] = "skipped: fix the structural errors first"
        return None, {}
    modes = _modes(program)
    split = call_split(program, nbytes)
    # the compiled checks run whole messages: a step cut into more calls than its connection
    # holds is run call by call in Python
    if not found and not split_matters(program, split) and \
            _compiled_clean(program, capacity, modes, progress):
        model = hb = None
        for name in later[:-1]:
            checks[name] = "passed"
        for name in _symbolic_names(modes):
            checks[name] = "passed"
    else:
        model, hb = _python_passes(program, out, checks, record, capacity=capacity,
                                   split=split, modes=modes, progress=progress)
    if topology is None:
        return None, {}
    if model is None or hb is None:
        model = build_model(program)
        hb = build_hb(model)
    if not hb.acyclic:
        checks["timing"] = "skipped: the program deadlocks"
        return None, {}
    try:
        mapping, source = resolve_ranks(topology, program.ngpus, **ranks)
        with progress.phase("timing"):
            res = alpha_beta_time(program, topology, nbytes=nbytes, model=model, hb=hb,
                                  ranks=mapping, ranks_from=source)
    except TacosError as exc:
        out.append(Violation("topology", exc.message, hint=exc.hint))
        checks["timing"] = "failed"
        return None, {}
    checks["timing"] = "passed"
    timing = res.as_dict()
    from tacos.runtime.msccl_exec import estimate_program

    try:
        with progress.phase("runtime model"):
            est = estimate_program(program, topology, res.nbytes, ranks=mapping)
        timing["runtime"] = {**est.to_json(), "of": "the program as msccl-executor-nccl runs it"}
    except TacosError as exc:
        timing["runtime"] = {"time": None, "note": f"runtime model: {exc.message}"}
    return res.time, timing


def _symbolic_names(modes: list[bool]) -> list[str]:
    """Check names of the symbolic pass, one per in-place mode."""
    return ["symbolic" + ("" if len(modes) == 1 else
                          (" (in-place)" if aliased else " (out-of-place)")) for aliased in modes]


def _compiled_clean(program: Program, capacity: int, modes: list[bool],
                    progress: Reporter) -> bool:
    """True when the compiled checks (:mod:`tacos.msccl.verify_jit`) find every pass after
    ``structure`` clean; False when they are off, not worth loading, or cannot vouch for the
    program (the Python passes then produce the report)."""
    if not (verify_jit.available() and verify_jit.worth_it(program)
            and verify_jit.supported(program)):
        return False
    with progress.phase("compiled checks (connections to symbolic data flow)"):
        return verify_jit.clean(program, capacity=capacity, modes=modes) is None


def _python_passes(program: Program, out: list[Violation], checks: dict[str, str],
                   record: Callable[[str, list[Violation]], None],
                   *, capacity: int, modes: list[bool], progress: Reporter,
                   split: CallSplit | None = None) -> tuple[Model, HappensBefore]:
    """Connections to symbolic data flow, each pass in Python with its exact report."""
    with progress.phase("connections and dependencies"):
        model = build_model(program)
        record("connections", check_connections(model))
        found, refs_ok = check_dependencies(model)
        record("dependencies", found)
        hb = build_hb(model)
        record("happens-before", check_cycles(model, hb))
    if refs_ok:
        with progress.phase("races"):
            record("races", check_races(model, hb, aliased=bool(modes) and modes[0]))
    else:
        checks["races"] = "skipped: dependencies point to missing steps"
    with progress.phase("FIFO execution"):
        run = run_fifo(model, capacity=capacity, split=split)
    record("fifo", check_deadlock(model, run))
    for aliased, name in zip(modes, _symbolic_names(modes), strict=True):
        with progress.phase(f"{name} data flow"):
            found, status, info = check_symbolic(model, run, aliased=aliased)
        out.extend(found)
        checks[name] = status
        if info:
            checks[name] += f" (root {info['root']})" if status == "passed" else ""
    return model, hb


_CNT = re.compile(r"\bcnt\s*=\s*[\"'](\d+)")
_Ranks = dict  # keyword arguments of resolve_ranks: explicit, embedded, declared


def _rank_sources(text: str | None, ranks: Sequence[int] | None,
                  groups: Iterable[Sequence[int]]) -> tuple[_Ranks, list[Violation]]:
    found: list[Violation] = []
    embedded = None
    if text is not None:
        try:
            embedded = declared_ranks(text)
        except TacosError as exc:
            found.append(Violation("ranks", exc.message, hint=exc.hint))
    return {"explicit": ranks, "embedded": embedded, "declared": list(groups)}, found


def _report(source: str, program: Program | None, parse: ParseOutcome | None, *,
            topology: Topology | None, max_steps: int, sms: int, capacity: int,
            nbytes: int | None, ranks: _Ranks | None = None, progress: Any = None
            ) -> MscclReport:
    found: list[Violation] = list(parse.problems) if parse else []
    checks: dict[str, str] = {}
    if parse is not None:
        checks["parse"] = "failed" if parse.errors else "passed"
    time, timing = None, {}
    if program is not None and (parse is None or not parse.damaged):
        with paused_gc():
            time, timing = _analyse(program, found, checks, topology=topology,
                                    max_steps=max_steps, sms=sms, capacity=capacity,
                                    nbytes=nbytes, ranks=ranks or {},
                                    progress=as_reporter(progress))
    else:
        checks["structure"] = "skipped: the file has missing or unreadable values"
    if nbytes is not None and program is not None:
        from tacos.msccl.size_fit import xml_size_problems

        sized = xml_size_problems(program, nbytes)
        found += sized
        checks["size"] = "failed" if any(v.severity == "error" for v in sized) else "passed"
    errors = tuple(v for v in found if v.severity == "error")
    warnings = tuple(v for v in found if v.severity != "error")
    return MscclReport(source, errors, warnings, summarize(program) if program else {},
                       checks, time, timing)


def verify_program(program: Program, *, topology: Topology | None = None,
                   max_steps: int = DEFAULT_MAX_STEPS, sms: int = DEFAULT_SMS,
                   capacity: int = 1, nbytes: int | None = None,
                   source: str = "<program>", ranks: Sequence[int] | None = None,
                   progress: Any = None) -> MscclReport:
    """Verify an in-memory program (e.g. before emitting it).

    ``max_steps`` is the runtime's MSCCL_MAX_NUM_STEPS (steps per tb, nops included);
    ``progress`` (a :class:`tacos.progress.Reporter`) is told each analysis as a phase;
    ``sms`` the SM count for the co-residency warning; ``capacity`` the messages per connection
    in the FIFO execution; ``topology`` and ``nbytes`` enable the α-β time, with rank r on NPU
    ``ranks[r]`` (default NPU r).
    The runtime-required ``outofplace``/``minBytes``/``maxBytes`` must be set (None is an
    error here, since only files from older tools lack them).
    """
    report = _report(source, program, None, topology=topology, max_steps=max_steps, sms=sms,
                     capacity=capacity, nbytes=nbytes,
                     ranks={"explicit": ranks}, progress=progress)
    missing = [k for k in ("outofplace", "minBytes", "maxBytes") if getattr(program, k) is None]
    if missing:
        v = Violation("missing-attribute", f"<algo> lacks {', '.join(missing)}, which the "
                      "runtime requires", line=program.line or None)
        report = MscclReport(report.source, (v,) + report.violations, report.warnings,
                             report.summary, report.checks, report.time, report.timing)
    return report


def verify_xml(text: str, *, source: str = "<string>", topology: Topology | None = None,
               strict: bool = True, max_steps: int = DEFAULT_MAX_STEPS,
               sms: int = DEFAULT_SMS, capacity: int = 1, nbytes: int | None = None,
               ranks: Sequence[int] | None = None, groups: Iterable[Sequence[int]] = (),
               progress: Any = None) -> MscclReport:
    """Verify MSCCL XML text; parse problems become violations (nothing is raised).

    A missing ``outofplace``/``minBytes``/``maxBytes`` (older msccl-tools and TACCL output)
    is an error, as it is for the runtime, which refuses to load the file; ``strict=False``
    reports it as a warning, for checking such output before fixing it up.  With a
    ``topology``, rank r is timed on NPU ``ranks[r]``; without ``ranks`` the mapping comes from
    the plan's ``tacos ranks`` comment, else from the one of ``groups`` (the topology file's
    declared collective groups) with ``ngpus`` NPUs, else rank r = NPU r
    (:mod:`tacos.msccl.ranks`).
    """
    groups = list(groups)
    fast = _vouched(text, source, topology=topology, strict=strict, max_steps=max_steps,
                    sms=sms, capacity=capacity, ranks=ranks, groups=groups, progress=progress,
                    nbytes=nbytes)
    if fast is not None:
        return fast
    with paused_gc(), as_reporter(progress).phase("parsing"):
        parse = parse_xml_collect(text, source=source, strict=strict)
    sources, found = _rank_sources(text, ranks, groups)
    parse.problems.extend(found)
    return _report(source, parse.program, parse, topology=topology, max_steps=max_steps,
                   sms=sms, capacity=capacity, nbytes=nbytes, ranks=sources, progress=progress)


def verify_xml_file(path: str | Path, *, topology: Topology | None = None,
                    strict: bool = True, max_steps: int = DEFAULT_MAX_STEPS,
                    sms: int = DEFAULT_SMS, capacity: int = 1, nbytes: int | None = None,
                    ranks: Sequence[int] | None = None, groups: Iterable[Sequence[int]] = (),
                    progress: Any = None) -> MscclReport:
    """Verify an MSCCL XML file (see :func:`verify_xml`).

    Raises ``InputFileError`` only when the file cannot be read as text.
    """
    groups = list(groups)
    with paused_gc(), as_reporter(progress).phase(f"reading {path}"):
        text = read_xml_text(path)
    fast = _vouched(text, str(path), topology=topology, strict=strict, max_steps=max_steps,
                    sms=sms, capacity=capacity, ranks=ranks, groups=groups, progress=progress)
    if fast is not None:
        return fast
    with paused_gc(), as_reporter(progress).phase(f"parsing {path}"):
        parse = parse_xml_collect(text, source=str(path), strict=strict)
    sources, found = _rank_sources("\n".join(parse.lines), ranks, groups)
    parse.problems.extend(found)
    return _report(str(path), parse.program, parse, topology=topology, max_steps=max_steps,
                   sms=sms, capacity=capacity, nbytes=nbytes, ranks=sources, progress=progress)


def _vouched(text: str, source: str, *, topology: Topology | None, strict: bool,
             max_steps: int, sms: int, capacity: int, ranks: Sequence[int] | None,
             groups: list[Sequence[int]], progress: Any,
             nbytes: int | None = None) -> MscclReport | None:
    """The report of a large correct file read without building its steps
    (:mod:`tacos.msccl.verify_columns`); None when that path cannot vouch for it."""
    if topology is not None or len(text) < verify_columns.MIN_BYTES:
        return None
    if _rank_sources(text, ranks, groups)[1]:
        return None
    with paused_gc(), as_reporter(progress).phase("parsing and compiled checks"):
        got = verify_columns.vouch(text, source=source, strict=strict, max_steps=max_steps,
                                   sms=sms, capacity=capacity, modes=_modes)
    if got is None:
        return None
    program, lens = got
    cnts = [int(c) for c in _CNT.findall(text)]
    if cnts and call_split(program, nbytes).overflows(max(cnts)):
        return None  # steps cut into more calls than a connection holds: the full passes
    summary = summarize(program)
    summary["steps_total"] = int(lens.sum())
    summary["max_steps_per_tb"] = int(lens.max(initial=0))
    checks = dict.fromkeys(("parse", "structure", "connections", "dependencies",
                            "happens-before", "races", "fifo"), "passed")
    checks.update(dict.fromkeys(_symbolic_names(_modes(program)), "passed"))
    return MscclReport(source, (), (), summary, checks, None, {})
