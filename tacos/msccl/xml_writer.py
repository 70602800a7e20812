"""MSCCL XML backend: :class:`~tacos.msccl.program.Program` -> the text msccl-executor-nccl reads.

The runtime's parser is hand-written and stricter than XML (``docs/msccl-xml.md`` §1.2, §6), so
the output is fixed byte for byte:

* no ``<?xml?>`` prolog; ``<algo>`` is the first element, preceded only, for a process group
  whose NPUs are not ``0 .. n-1`` in order, by one ``<!-- tacos ranks: ... -->`` line giving
  each rank's NPU id (:mod:`tacos.msccl.ranks`; the runtime skips comments before ``<algo>``,
  as in the production files' licence headers);
* one element per line, indented by two spaces per level, ``\\n`` line ends, a final newline;
* each element's attributes on its line, in a fixed order (``algo``: name, proto, nchannels,
  nchunksperloop, ngpus, coll, inplace, outofplace, minBytes, maxBytes, then ``redop`` and any
  extra attributes kept from a read-back; ``gpu``: id, i_chunks, o_chunks, s_chunks; ``tb``: id,
  send, recv, chan; ``step``: s, type, srcbuf, srcoff, dstbuf, dstoff, cnt, depid, deps,
  hasdep), double-quoted, separated by one space;
* integers in plain decimal (no leading zeros, ``-1`` allowed);
* ``<step .../>`` self-closes without a space before ``/>`` (the production files' style; the
  msccl-tools output in §3.1 has ``" />"``, which the runtime also accepts).

:func:`emit_xml` never changes its input and is deterministic; :func:`iter_xml` yields the same
text in pieces and :func:`write_xml` streams it to a file.  :func:`schedule_to_xml` lowers a
schedule, verifies the program with :func:`tacos.msccl.verify.verify_program` and only then
returns the text.
"""

from __future__ import annotations

from collections.abc import Iterator

from tacos.atomic import atomic_path
from tacos.errors import TacosError, VerificationError
from tacos.model.schedule import Schedule
from tacos.msccl.program import (
    ALGO_ATTRS,
    ALGO_REQUIRED,
    BUFFERS,
    COLLS,
    GPU_ATTRS,
    MAX_ATTRS,
    MAX_STR_LEN,
    PROTOS,
    STEP_ATTRS,
    STEP_TYPES,
    TB_ATTRS,
    Program,
    Step,
)

__all__ = ["emit_xml", "iter_xml", "lower_verified", "schedule_to_xml", "write_xml"]


def _text(value: object, what: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TacosError(f"MSCCL attribute {what} has the non-integer value {value!r}")
    text = str(value)
    bad = [ch for ch in text if not (32 <= ord(ch) < 127) or ch in '"<>&']
    if bad or len(text) > MAX_STR_LEN:
        raise TacosError(f"MSCCL attribute {what}={text!r} cannot be written: the runtime reads "
                         f"at most {MAX_STR_LEN} plain ASCII characters without quotes, '<', "
                         "'>' or '&' (it does not decode XML entities)")
    return text


def _attrs(pairs: list[tuple[str, object]], element: str) -> str:
    if len(pairs) > MAX_ATTRS:
        raise TacosError(f"<{element}> would get {len(pairs)} attributes; the runtime keeps "
                         f"only the first {MAX_ATTRS}")
    return " ".join(f'{k}="{_text(v, f"{element}@{k}")}"' for k, v in pairs)


def _algo_attrs(p: Program) -> list[tuple[str, object]]:
    missing = [a for a in ALGO_REQUIRED if getattr(p, a) is None]
    if missing:
        raise TacosError(f"<algo> lacks {', '.join(missing)}, which the runtime requires",
                         hint="set them (outofplace=0/1, minBytes/maxBytes in bytes, "
                              "maxBytes=0 for no limit) before emitting")
    if p.proto not in PROTOS:
        raise TacosError(f"proto={p.proto!r} is not one of {', '.join(PROTOS)}")
    if p.coll not in COLLS:
        raise TacosError(f"coll={p.coll!r} is not a collective the runtime accepts")
    pairs: list[tuple[str, object]] = [(a, getattr(p, a)) for a in ALGO_ATTRS]
    if p.redop is not None:
        pairs.append(("redop", p.redop))
    taken = {k for k, _ in pairs}
    pairs.extend((k, v) for k, v in p.extra if k not in taken)
    return pairs


def _step_line(st: Step, rank: int, tb: int) -> str:
    """One ``<step .../>`` line; the values are checked as :func:`_attrs` would, inlined for
    speed (a large plan has millions of steps)."""
    if st.type not in STEP_TYPES or st.srcbuf not in BUFFERS or st.dstbuf not in BUFFERS:
        raise TacosError(f"rank {rank} tb {tb} step {st.s}: type {st.type!r} or "
                         f"buffers {st.srcbuf!r}/{st.dstbuf!r} are not MSCCL's")
    nums = (st.s, st.srcoff, st.dstoff, st.cnt, st.depid, st.deps, st.hasdep)
    if any(type(v) is not int for v in nums):  # noqa: E721 - bool and floats are refused
        _attrs([(a, getattr(st, a)) for a in STEP_ATTRS], "step")  # raises the exact error
    return (f'      <step s="{st.s}" type="{st.type}" srcbuf="{st.srcbuf}" '
            f'srcoff="{st.srcoff}" dstbuf="{st.dstbuf}" dstoff="{st.dstoff}" cnt="{st.cnt}" '
            f'depid="{st.depid}" deps="{st.deps}" hasdep="{st.hasdep}"/>\n')


def iter_xml(program: Program) -> Iterator[str]:
    """The MSCCL XML text of ``program`` in pieces (one per thread block), for writing large
    plans without holding the whole text; ``"".join(iter_xml(p)) == emit_xml(p)``."""
    yield f"<algo {_attrs(_algo_attrs(program), 'algo')}>\n"
    for g in program.gpus:
        yield f"  <gpu {_attrs([(a, getattr(g, a)) for a in GPU_ATTRS], 'gpu')}>\n"
        for tb in g.tbs:
            lines = [f"    <tb {_attrs([(a, getattr(tb, a)) for a in TB_ATTRS], 'tb')}>\n"]
            lines.extend(_step_line(st, g.id, tb.id) for st in tb.steps)
            lines.append("    </tb>\n")
            yield "".join(lines)
        yield "  </gpu>\n"
    yield "</algo>\n"


def emit_xml(program: Program) -> str:
    """The MSCCL XML text of ``program`` (see the module docstring for the exact format).

    Raises :class:`~tacos.errors.TacosError` if a required attribute is missing or a value
    cannot be written in a form the runtime parses.
    """
    return "".join(iter_xml(program))


def lower_verified(schedule: Schedule, options=None, *, progress=None) -> Program:
    """Lower ``schedule`` and verify the program in memory (:func:`tacos.msccl.verify.
    verify_program`: every rule ``tacosc verify`` applies to the file, with the same step
    limit).  The emitter writes exactly this program (the tests parse emitted plans back and
    compare), so the text need not be parsed again.  Raises
    :class:`~tacos.errors.VerificationError` with the verifier's report on a violation.
    ``progress`` is a :class:`tacos.progress.Reporter` (one phase for the lowering, one per
    analysis of the verifier)."""
    from tacos.msccl.lower import MscclOptions, lower
    from tacos.msccl.verify import verify_program
    from tacos.progress import as_reporter

    opts = options or MscclOptions()
    reporter = as_reporter(progress)
    program = lower(schedule, options=opts, progress=reporter)
    report = verify_program(program, max_steps=opts.max_steps_per_tb, source="<lowered plan>",
                            progress=reporter)
    if not report.ok:
        raise VerificationError(
            "the lowered MSCCL program fails verification:\n" + report.text(warnings=False),
            hint="this is a bug in the lowering; please report it with the schedule")
    return program


def schedule_to_xml(schedule: Schedule, options=None) -> str:
    """Lower ``schedule``, verify the program, and return its XML.

    ``options`` is a :class:`tacos.msccl.lower.MscclOptions` (defaults: out-of-place, Simple,
    no size window).  Rank r is the r-th NPU of ``schedule.collective.group``; a group other
    than NPUs ``0 .. n-1`` is recorded in a ``tacos ranks`` comment before ``<algo>``.  Any
    violation raises :class:`~tacos.errors.VerificationError` with the verifier's report
    (:func:`lower_verified`), so no unverified XML is ever returned.
    """
    from tacos.msccl.ranks import ranks_comment

    program = lower_verified(schedule, options)
    return ranks_comment(schedule.collective.group) + emit_xml(program)


def write_xml(program: Program, path, *, header: str = "") -> None:
    """Write ``header`` and :func:`emit_xml` output to ``path`` (ASCII, ``\\n`` line ends),
    streaming: the text is never held whole.  The file appears only complete
    (:func:`tacos.atomic.atomic_path`: written next to ``path`` and renamed over it)."""
    with atomic_path(path) as tmp, open(tmp, "w", encoding="ascii", newline="\n") as fh:
        fh.write(header)
        for piece in iter_xml(program):
            fh.write(piece)
