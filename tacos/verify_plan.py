"""``tacos.verify``: one entry point for every plan tacos reads.

:func:`verify` takes a :class:`~tacos.schedule.Schedule`, a path, or the text of a plan, and
tells the format from the content (not the file name): MSCCL XML (``<algo ...>``), a tacos JSON
schedule (``"schema": "tacos.schedule/..."``), a symmetric plan file
(``"schema": "tacos.symmetric-plan/..."``) or an MSCCL++ JSON execution plan (``"gpus"`` and
``"collective"``).  It returns the format's report (``.ok``, ``.text()``, ``.as_dict()``,
``.raise_if_failed()``) and raises :class:`~tacos.errors.TacosError` only when the input is none
of these or cannot be read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tacos.errors import TacosError, VerificationError
from tacos.model.schedule import Schedule
from tacos.model.topology import Topology

FORMATS = ("msccl-xml", "schedule-json", "mscclpp-json", "symmetric-json")


def sniff(text: str) -> str:
    """``'msccl-xml'``, ``'schedule-json'``, ``'mscclpp-json'`` or ``'symmetric-json'`` (the
    symmetric plan file, :mod:`tacos.scale.plan_json`) for plan text.

    >>> sniff('<algo name="x">'), sniff('{"schema": "tacos.schedule/1"}')
    ('msccl-xml', 'schedule-json')
    """
    head = text.lstrip("\ufeff \t\r\n")
    if head.startswith("<"):
        return "msccl-xml"
    if head.startswith("{"):
        try:
            doc = json.loads(text)
        except (ValueError, RecursionError):  # bad or too deeply nested: the reader says
            doc = None
        if isinstance(doc, dict):
            if str(doc.get("schema", "")).startswith("tacos.schedule"):
                return "schedule-json"
            if str(doc.get("schema", "")).startswith("tacos.symmetric-plan"):
                return "symmetric-json"
            if "gpus" in doc and "collective" in doc:
                return "mscclpp-json"
        if '"tacos.symmetric-plan' in text[:4096]:
            return "symmetric-json"
        if '"tacos.schedule' in text[:4096]:
            return "schedule-json"
        if '"gpus"' in text:
            return "mscclpp-json"
    raise TacosError("cannot tell what kind of plan this is",
                     hint="tacos verifies MSCCL XML (<algo ...>), tacos JSON schedules "
                          "(\"schema\": \"tacos.schedule/1\") and MSCCL++ JSON plans")


def _read(plan: str | Path) -> tuple[str, str]:
    """(text, source name) of a path or of plan text."""
    if isinstance(plan, Path) or (isinstance(plan, str) and "\n" not in plan
                                  and not plan.lstrip().startswith(("<", "{"))):
        from tacos import limits
        from tacos.inputs import decode_text, read_capped

        p = Path(plan)
        cap = max(limits.current().xml_bytes, limits.current().schedule_bytes)
        with limits.raised(xml_bytes=cap):
            data = read_capped(p, limit="xml_bytes", what="plan file")
        return decode_text(data, str(p), "plan file"), str(p)
    return plan, "<string>"


def verify(plan: Schedule | str | Path, *, topology: Topology | None = None,
           max_steps: int = 64, strict: bool = True, nbytes: int | None = None,
           ranks: Any = None) -> Any:
    """Verify a schedule or a plan (path or text); returns the report.

    ``topology`` (MSCCL XML: also time the plan on it with the α-β model; schedule JSON:
    check the schedule was made for it; MSCCL++: time it with the runtime model on ``nbytes``,
    default its ``max_message_size`` or 1 MiB, rank r on NPU ``ranks[r]``), ``max_steps`` and
    ``strict`` (MSCCL XML: missing
    ``outofplace``/``minBytes``/``maxBytes`` fail as the runtime's loader does unless
    ``strict=False``) are passed on to the format's verifier.

    >>> import tacos
    >>> ring = tacos.builders.ring(4, bandwidth=1e9, latency=1e-6)
    >>> s = tacos.synthesize(ring, tacos.collective("allgather", range(4), size="4KiB"),
    ...                      workers=1)
    >>> texts = [tacos.emit(s, f) for f in ("json", "xml", "mscclpp")]
    >>> [tacos.verify(text).ok for text in texts]
    [True, True, True]
    """
    if isinstance(plan, Schedule):
        from tacos.check.verify import verify_schedule

        return verify_schedule(plan)
    if not isinstance(plan, str | Path):
        raise TacosError(f"cannot verify a {type(plan).__name__}",
                         hint="pass a Schedule, a path, or the text of a plan")
    text, source = _read(plan)
    kind = sniff(text)
    if kind == "msccl-xml":
        from tacos.msccl.verify import verify_xml

        return verify_xml(text, source=source, topology=topology, max_steps=max_steps,
                          strict=strict)
    if kind == "mscclpp-json":

        from tacos.msccl.verify_mscclpp import verify_mscclpp_text

        report = verify_mscclpp_text(text, source)
        if topology is not None:
            report = _check_mscclpp_channels(report, text, topology, ranks)
        if nbytes is not None:
            report = _check_mscclpp_size(report, text, nbytes)
        if topology is not None and report.ok:
            report = _time_mscclpp(report, text, topology, nbytes, ranks)
        return report
    if kind == "symmetric-json":
        from tacos.scale.verify_file import verify_symmetric_text

        return verify_symmetric_text(text, source, topology=topology)
    from tacos.check.verify import verify_schedule
    from tacos.frontends.json_schedule import check_against_topology, loads

    schedule = loads(text, source=source)
    if topology is not None:
        problems = check_against_topology(schedule, topology)
        if problems:
            raise VerificationError(f"{source} was not made for this topology: {problems[0]}",
                                    hint=f"{len(problems)} difference(s) in all")
    return verify_schedule(schedule)


def _check_mscclpp_channels(report: Any, text: str, topology: Topology, ranks: Any) -> Any:
    """``report`` with the plan's channels checked against ``topology``
    (:func:`tacos.msccl.mscclpp_channels.channel_type_violations`)."""
    import json
    from dataclasses import replace

    from tacos.msccl.mscclpp_channels import channel_type_violations

    try:
        doc = json.loads(text)
    except ValueError:
        return report  # the structure pass has said so
    found = channel_type_violations(doc, topology, ranks)
    checks = dict(report.checks, channels="failed" if found else "passed")
    return replace(report, violations=report.violations + tuple(found), checks=checks)


def _check_mscclpp_size(report: Any, text: str, nbytes: int) -> Any:
    """``report`` with MSCCL++'s loader checks at message size ``nbytes``
    (:func:`tacos.msccl.mscclpp_loader.size_problems`): a plan the executor refuses there."""
    import json
    from dataclasses import replace

    from tacos.msccl.mscclpp_loader import size_problems
    from tacos.msccl.verify_report import Violation

    try:
        doc = json.loads(text)
    except ValueError:
        return report
    found = [Violation("size", msg, hint="compile for this size, or use a plan whose chunks "
                       "divide it") for msg in size_problems(doc, nbytes)]
    checks = dict(report.checks, size="failed" if found else "passed")
    return replace(report, violations=report.violations + tuple(found), checks=checks)


def _time_mscclpp(report: Any, text: str, topology: Topology, nbytes: int | None,
                  ranks: Any) -> Any:
    """``report`` with the runtime model's time of the verified MSCCL++ plan."""
    from dataclasses import replace

    from tacos.msccl.mscclpp_reader import read_plan_text
    from tacos.runtime.mscclpp_exec import estimate_mscclpp

    plan, _ = read_plan_text(text)
    top = int(plan.header.get("max_message_size") or 0)
    size = nbytes or (top if 0 < top < 2**63 else 0) or (1 << 20)  # 2^64-1: no limit
    try:
        est = estimate_mscclpp(plan, topology, size, ranks=ranks)
    except TacosError as exc:
        checks = dict(report.checks, timing=f"failed: {exc.message}")
        return replace(report, checks=checks)
    timing = {"model": est.model, "nbytes": size,
              "runtime": {**est.to_json(), "of": "the plan as the MSCCL++ executor runs it"}}
    return replace(report, checks=dict(report.checks, timing="passed"), time=est.time,
                   timing=timing)
