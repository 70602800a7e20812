"""Golden recipes: every ``tacosc`` command in ``docs/running.md`` runs, and each file it writes
passes the checks of the runtime it is for (MSCCL++'s loader, NCCL's tuner plugin format, the
MSCCL executor's parser via the verifier); the printed one-line recipes name each runtime's
environment."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from tacos.cli import main
from tacos.msccl.mscclpp_loader import loader_problems
from tacos.msccl.sweep_xml import check_set
from tacos.msccl.verify import verify_xml_file
from tacos.recipes import recipe
from tacos.runtime.tuner_csv import parse_tuner_csv
from tacos.verify_plan import verify

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "running.md"


def _commands() -> list[tuple[str, list[str]]]:
    """(section anchor, tacosc argv) for every command in the page's ``sh`` blocks."""
    out, section = [], ""
    for block in re.finditer(r'<a id="([^"]+)"></a>|```sh\n(.*?)```', DOC.read_text(), re.S):
        if block.group(1):
            section = block.group(1)
            continue
        for line in block.group(2).splitlines():
            if line.startswith("tacosc "):
                out.append((section, shlex.split(line)[1:]))
    return out


def _absolute(argv: list[str]) -> list[str]:
    return [str(ROOT / a) if a.startswith(("examples/", "tacos/presets/")) else a for a in argv]


def test_the_page_has_a_command_per_runtime():
    sections = {s for s, _ in _commands()}
    assert {"mscclpp", "nccl-tuner", "msccl-xml"} <= sections
    assert compile(re.search(r"```python\n(.*?)```", DOC.read_text(), re.S).group(1),
                   "running.md", "exec")  # the registration snippet is valid Python


@pytest.mark.slow
def test_every_command_runs_and_its_files_load(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for section, argv in _commands():
        assert main(_absolute(argv)) == 0, (section, argv)
        err = capsys.readouterr().err
        out = argv[argv.index("-o") + 1] if "-o" in argv else None
        if out is None:
            continue
        path = tmp_path / out
        if section == "mscclpp":
            assert "libmscclpp_nccl.so" in err
            doc = json.loads(path.read_text())
            assert loader_problems(doc) == []
            assert verify(path).ok
            if "--nvls" in argv or "forest" in argv or "nvls" in argv:
                assert any(ch["channel_type"] == "switch" for ch in doc["gpus"][0]["channels"])
            if "2node" in argv[0]:
                assert any(ch["channel_type"] == "port" for ch in doc["gpus"][0]["channels"])
        elif section == "nccl-tuner":
            assert "NCCL_TUNER_CONFIG_FILE" in err
            assert parse_tuner_csv(path.read_text())
        elif section == "msccl-xml":
            files = sorted(path.glob("*.xml"))
            assert files and check_set(files) == []
            assert all(verify_xml_file(f).ok for f in files)
    modes = {("inplace" in f.name) for f in (tmp_path / "plans").glob("*.xml")}
    assert modes == {True, False}  # the folder holds both sets, as the page says


@pytest.mark.parametrize("fmt, words", [
    ("xml", ["MSCCL_ALGO_DIR=", "all_reduce_perf", "-g 1"]),
    ("xml-dir", ["MSCCL_ALGO_DIR=", "NCCL_DEBUG=INFO"]),
    ("mscclpp", ["LD_PRELOAD=libmscclpp_nccl.so", "mscclpp.ExecutionPlan(", "torchrun"]),
    ("nccl-tuner", ["NCCL_TUNER_PLUGIN=", "NCCL_TUNER_CONFIG_FILE=", "NCCL_DEBUG_SUBSYS=TUNING"]),
])
def test_one_line_recipes(tmp_path, fmt, words):
    line = recipe(fmt, tmp_path / "plan.x", nranks=16, kind="allreduce")
    assert line.startswith("run: ") and "\n" not in line
    for w in words:
        assert w in line
    assert str(tmp_path.resolve()) in line
