"""The front- and back-end registries name functions that exist, and ``tacos.emit`` dispatches
on the back-end registry."""

from __future__ import annotations

import importlib
import json

import pytest
from tacos.backends import ALIASES, EMITTERS
from tacos.frontends import READERS

import tacos
from tacos.model import patterns


@pytest.mark.parametrize("entry", sorted(set(EMITTERS.values()) | set(READERS.values())))
def test_registry_entries_resolve(entry: str) -> None:
    module, _, attr = entry.partition(":")
    assert callable(getattr(importlib.import_module(module), attr))


def test_every_alias_names_a_format() -> None:
    assert set(ALIASES.values()) <= set(EMITTERS)


@pytest.fixture(scope="module")
def ring_schedule() -> tacos.Schedule:
    ring = tacos.builders.ring(4, bandwidth=1e9, latency=1e-6)
    s = tacos.synthesize(ring, patterns.build("allgather", range(4), size="4KiB"), workers=1)
    tacos.verify(s).raise_if_failed()
    return s


@pytest.mark.parametrize("fmt", sorted(EMITTERS))
def test_emit_every_format_verifies(ring_schedule: tacos.Schedule, fmt: str) -> None:
    text = tacos.emit(ring_schedule, fmt)
    assert tacos.verify(text).ok
    short = next((a for a, f in ALIASES.items() if f == fmt), None)
    if short:
        assert tacos.emit(ring_schedule, short) == text


def _reader(fmt: str):
    module, _, attr = READERS[fmt].partition(":")
    return getattr(importlib.import_module(module), attr)


def test_emit_passes_options_and_reads_back(ring_schedule: tacos.Schedule, tmp_path) -> None:
    xml = tacos.emit(ring_schedule, "msccl-xml", name="ring4", instances=2)
    assert 'name="ring4"' in xml and tacos.verify(xml).ok
    (tmp_path / "p.xml").write_text(xml)
    assert _reader("msccl-xml")(tmp_path / "p.xml").name == "ring4"
    text = tacos.emit(ring_schedule, "json", bound=False)
    assert json.loads(text)["bound"] is None
    assert json.loads(tacos.emit(ring_schedule, "json"))["bound"] is not None
    (tmp_path / "p.json").write_text(text)
    assert _reader("schedule-json")(tmp_path / "p.json") == ring_schedule


def test_emit_unknown_format_hints() -> None:
    with pytest.raises(tacos.TacosError) as err:
        tacos.emit(None, "msccl-xlm")  # type: ignore[arg-type]
    assert "msccl-xml" in (err.value.hint or "")


def test_every_solver_declares_its_capabilities_and_a_gate() -> None:
    from tacos.solvers.registry import SOLVERS, Capabilities, Problem, solver_class

    ring = tacos.builders.ring(4, bandwidth=1e9, latency=1e-6)
    problem = Problem(ring, patterns.build("allgather", range(4), size="4KiB"))
    for name in SOLVERS:
        cls = solver_class(name)
        assert isinstance(cls.capabilities, Capabilities), name
        reason = cls().accepts(problem)
        assert reason is None or name in ("a2a", "nccl-tree", "collnet", "nvls"), (name, reason)
    assert solver_class("a2a")().accepts(problem) == "solver 'a2a' runs all-to-all, not allgather"


def test_the_driver_asks_the_gate_before_any_work() -> None:
    from tacos.errors import UsageError

    ring = tacos.builders.ring(4, bandwidth=1e9, latency=1e-6)
    with pytest.raises(UsageError, match="'forest' does not handle alltoall"):
        tacos.synthesize(ring, patterns.build("alltoall", range(4), size="4KiB"),
                         solver="forest")
    with pytest.raises(UsageError, match="rhd baseline does not implement alltoall"):
        tacos.synthesize(ring, patterns.build("alltoall", range(4), size="4KiB"), solver="rhd")


def test_required_packages_are_checked_without_importing_them() -> None:
    from tacos.solvers.registry import Capabilities, Problem, SolverBase

    class Needy(SolverBase):
        name = "needy"
        capabilities = Capabilities(requires=("numpy", "no_such_package_tacos"))

    ring = tacos.builders.ring(4, bandwidth=1e9, latency=1e-6)
    reason = Needy().accepts(Problem(ring, patterns.build("allgather", range(4), size=64)))
    assert reason == "solver 'needy' needs no_such_package_tacos, which is not installed"
