"""Helpers the MSCCL program tests share: a preset node's topology, a program checked by
the verifier on its way into a test, a synthesized plan to lower, verified likewise, and a
lowering's outcome with nothing remembered from earlier lowerings."""

from __future__ import annotations

from pathlib import Path

import tacos
import tacos.msccl.lower as lower_mod
import tacos.msccl.lower_flow as flow_mod
from tacos.check.verify import verify_schedule
from tacos.errors import TacosError
from tacos.model.collective import Collective
from tacos.model.patterns import build
from tacos.model.schedule import Schedule
from tacos.model.topology import Topology
from tacos.msccl.lower import MscclOptions, lower
from tacos.msccl.program import Program
from tacos.msccl.xml_writer import emit_xml

PRESETS = Path(tacos.__file__).parent / "presets"


def node(name: str = "dgx_a100_node") -> Topology:
    """The topology of the preset ``name`` (a single node)."""
    return tacos.load(PRESETS / f"{name}.tdl").topology


def verified(program: Program) -> Program:
    """``program``, after ``tacos.verify`` accepts its XML (the test fails otherwise)."""
    report = tacos.verify(emit_xml(program))
    assert report.ok, report.text()
    return program


def synthesized(text: str, kind: str, solver: str, chunks: int
                ) -> tuple[Topology, Collective, Schedule]:
    """The topology of the TDL ``text``, a ``kind`` collective of ``chunks`` 64 KiB chunks per
    NPU over its live NPUs, and ``solver``'s schedule of it (one trial, one worker), after
    the verifier accepts the schedule (the test fails otherwise)."""
    topo = tacos.parse(text, source="test").topology
    npus = topo.live_npus
    coll = build(kind, npus, size=len(npus) * chunks * 65536, chunks_per_npu=chunks)
    sched = tacos.synthesize(topo, coll, solver=solver, trials=1, workers=1)
    report = verify_schedule(sched)
    assert report.ok, report.text()
    return topo, coll, sched


def forget_lowerings() -> None:
    """Drop what the lowering remembers between calls (kept and failed lowerings, flows and
    their orders), so the next lowering starts from nothing."""
    lower_mod._KEPT.clear()
    lower_mod._FAILED.clear()
    flow_mod._FLOWS.clear()
    flow_mod._ORDERED.clear()


def lowering_outcome(schedule: Schedule, opts: MscclOptions, *, fresh: bool = False) -> str:
    """The XML ``schedule`` lowers to with ``opts``, or its error's message and hint
    (``fresh``: after :func:`forget_lowerings`)."""
    if fresh:
        forget_lowerings()
    try:
        return emit_xml(lower(schedule, options=opts))
    except TacosError as exc:
        return f"error: {exc.message} / {exc.hint}"
