"""Helpers the MSCCL program tests share: a preset node's topology and a program checked by
the verifier on its way into a test."""

from __future__ import annotations

from pathlib import Path

import tacos
from tacos.model.topology import Topology
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
