"""Packaging guards (see the architecture guide): the shipped folders import only as tacos.*."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent


@pytest.mark.parametrize("name", ["frontends", "backends", "grammar"])
def test_folders_are_not_top_level_modules(name: str, tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", f"import {name}"], cwd=tmp_path,
                          capture_output=True, text=True)
    assert proc.returncode != 0 and "ModuleNotFoundError" in proc.stderr


def test_subpackages_are_importable_from_outside_the_tree(tmp_path: Path) -> None:
    code = ("import tacos.frontends.tdl, tacos.backends, tacos.grammar, tacos.passes, "
            "tacos.solvers, tacos.msccl; from importlib import resources; "
            "print(resources.files('tacos.grammar').joinpath('tdl.lark').is_file())")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "True"


def test_every_package_folder_is_listed() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    mapping = config["tool"]["setuptools"]["package-dir"]
    found = {"tacos"}
    for init in (ROOT / "tacos").rglob("__init__.py"):
        rel = init.parent.relative_to(ROOT)
        found.add(".".join(rel.parts))
    for pkg, folder in mapping.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            found.add(".".join((pkg, *rel.parts)))
    assert found == listed


def test_no_tests_init() -> None:
    assert not (ROOT / "tests" / "__init__.py").exists()


def test_presets_and_grammar_are_package_data() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    data = config["tool"]["setuptools"]["package-data"]
    assert "*.lark" in data["tacos.grammar"]
    assert "presets/*.tdl" in data["tacos"]
