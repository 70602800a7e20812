"""Golden error messages: every malformed input gives a located error, never a traceback."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

import tacos
from tacos.cli import main
from tacos.errors import TacosError

GOLDEN = Path(__file__).parent / "golden" / "errors"
CASES = sorted(GOLDEN.glob("*.tdl"))
EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("*.tdl"))
LOCATED = re.compile(r"^[^:\n]+\.tdl:\d+:\d+: error: ", re.M)


def test_there_are_enough_golden_cases() -> None:
    assert len(CASES) >= 15


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.stem)
def test_golden_error(case: Path, monkeypatch: pytest.MonkeyPatch,
                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(GOLDEN)
    code = main(["info", case.name])
    err = capsys.readouterr().err
    assert code == 1
    assert "Traceback" not in err
    assert err.rstrip("\n") == case.with_suffix(".txt").read_text().rstrip("\n")


@pytest.mark.parametrize("case", CASES,
                         ids=lambda p: p.stem)
def test_error_has_location_source_line_and_caret(case: Path) -> None:
    with pytest.raises(TacosError) as info:
        tacos.load(case)
    text = info.value.render()
    assert LOCATED.match(text), text
    lines = text.splitlines()
    assert re.match(r"^\s+\d+ \| ", lines[1])
    assert lines[2].strip().startswith("|") and "^" in lines[2]
    # the caret points inside the quoted source line
    caret_col = lines[2].index("^")
    assert caret_col <= len(lines[1])


def _mutations(text: str, rng: random.Random) -> list[str]:
    """Truncations, deleted tokens, stray characters, corrupted numbers, swapped lines."""
    out = []
    lines = text.splitlines()
    for _ in range(4):
        out.append(text[: rng.randrange(1, max(2, len(text)))])
    tokens = re.findall(r"\S+|\s+", text)
    for _ in range(4):
        i = rng.randrange(len(tokens))
        out.append("".join(tokens[:i] + tokens[i + 1:]))
    for _ in range(3):
        i = rng.randrange(len(text))
        out.append(text[:i] + rng.choice("@$%^&[]{}()=<>-.,;\"\\") + text[i:])
    for m in list(re.finditer(r"\d+(\.\d+)?", text))[:3]:
        bad = rng.choice(["0", "-1", "1e999", "99999999", "1.2.3", "..", "0x10"])
        out.append(text[: m.start()] + bad + text[m.end():])
    if len(lines) > 2:
        for _ in range(2):
            i, j = rng.sample(range(len(lines)), 2)
            swapped = list(lines)
            swapped[i], swapped[j] = swapped[j], swapped[i]
            out.append("\n".join(swapped))
    return out


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_mutated_examples_fail_cleanly(example: Path) -> None:
    rng = random.Random(example.name)
    text = example.read_text()
    for mutated in _mutations(text, rng):
        try:
            tacos.parse(mutated, source=str(example))
        except TacosError as exc:
            rendered = exc.render()
            assert "error:" in rendered
            assert "Traceback" not in rendered
        # a mutation may still be valid TDL; then it parsed, which is fine


def test_non_text_empty_and_huge_files(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    binary = tmp_path / "b.tdl"
    binary.write_bytes(b"\x00\x01\x02npu a[2]")
    empty = tmp_path / "e.tdl"
    empty.write_text("   \n\n")
    comments = tmp_path / "c.tdl"
    comments.write_text("# only a comment\n")
    huge = tmp_path / "h.tdl"
    huge.write_text("# pad\n" * (2 * 1024 * 1024))
    latin = tmp_path / "l.tdl"
    latin.write_bytes("npu caf\xe9[2]".encode("latin-1"))
    expected = {binary: "not a text file", empty: "is empty", huge: "limited to",
                latin: "not UTF-8", comments: "declares no NPU"}
    for path, phrase in expected.items():
        assert main(["info", str(path)]) == 1
        err = capsys.readouterr().err
        assert phrase in err and "Traceback" not in err
    assert main(["info", str(tmp_path / "missing.tdl")]) == 1
    assert "no such file" in capsys.readouterr().err
