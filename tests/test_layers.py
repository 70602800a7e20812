"""The floors of the package hold: imports run down, never up, and circles stay out.

Every import counts -- module level, inside functions and under ``TYPE_CHECKING`` -- read with
``ast`` from the source (nothing is imported).  ``docs/architecture.md`` draws the floors.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"tacos": "tacos", "frontends": "tacos.frontends", "backends": "tacos.backends",
           "grammar": "tacos.grammar"}
BASE = {"tacos.errors", "tacos.limits", "tacos.nogc", "tacos.atomic", "tacos.inputs",
        "tacos.progress"}
"""The ground floor: error types and plumbing every floor may use; imports only itself."""


def _modules() -> dict[str, tuple[Path, bool]]:
    out = {}
    for folder, package in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            name = ".".join([package] + (parts[:-1] if is_package else parts))
            out[name] = (path, is_package)
    return out


MODULES = _modules()


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


@functools.cache  # each source is parsed once per run, not once per test that reads it
def imports_of(module: str) -> frozenset[str]:
    """Every tacos module ``module`` imports anywhere in its source."""
    path, is_package = MODULES[module]
    package = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package
                for _ in range(node.level - 1):
                    up = up.rpartition(".")[0]
                base = f"{up}.{base}" if base else up
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base
                     for a in node.names]
        else:
            continue
        for name in names:
            target = _resolve(name) if name.split(".")[0] == "tacos" else None
            if target and target != module:
                found.add(target)
    return frozenset(found)


def _is_cli(module: str) -> bool:
    last = module.rpartition(".")[2]
    return last in ("cli", "__main__") or last.startswith("cli_")


def import_circles() -> list[set[str]]:
    """Strongly connected groups of modules, leaving out the imports CLI modules make (their
    imports are lazy on purpose, for start-up time)."""
    graph = nx.DiGraph()
    for module in MODULES:
        graph.add_node(module)
        if not _is_cli(module):
            graph.add_edges_from((module, t) for t in imports_of(module))
    return [c for c in nx.strongly_connected_components(graph) if len(c) > 1]


def _floor(prefix: str) -> list[str]:
    return sorted(m for m in MODULES if m == prefix or m.startswith(prefix + "."))


def test_the_scan_sees_imports_inside_functions_and_type_checking() -> None:
    # simulate imports the tables at module level; the schedule imports its columns lazily;
    # msccl.sweep_xml imports Sweep only for type checkers
    assert "tacos.check.tables" in imports_of("tacos.check.simulate")
    assert "tacos.model.columns" in imports_of("tacos.model.schedule")
    assert "tacos.sweep" in imports_of("tacos.msccl.sweep_xml")
    assert _floor("tacos.model") and _floor("tacos.check") and len(MODULES) > 150


@pytest.mark.parametrize("module", _floor("tacos.model"))
def test_model_imports_nothing_above_itself(module: str) -> None:
    above = {m for m in imports_of(module) if not m.startswith("tacos.model") and m not in BASE}
    assert not above, f"{module} reaches up into {sorted(above)}"


@pytest.mark.parametrize("module", _floor("tacos.check"))
def test_check_imports_only_the_model(module: str) -> None:
    other = {m for m in imports_of(module)
             if not m.startswith(("tacos.model", "tacos.check")) and m not in BASE}
    assert not other, f"{module} imports {sorted(other)}"


@pytest.mark.parametrize("module", sorted(BASE))
def test_the_ground_floor_imports_only_itself(module: str) -> None:
    assert imports_of(module) <= BASE


def test_the_msccl_dialect_does_not_import_front_or_back_ends() -> None:
    wrong = {(m, t) for m in _floor("tacos.msccl") for t in imports_of(m)
             if t.startswith(("tacos.frontends", "tacos.backends"))}
    assert not wrong


def test_at_most_one_import_circle_of_at_most_three_modules() -> None:
    circles = import_circles()
    assert len(circles) <= 1 and all(len(c) <= 3 for c in circles), circles
