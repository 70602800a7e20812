"""Input files: includes read only regular *.tdl files from allowed folders with the size cap
applied while reading, never echo another file's content; whole-file errors carry a position;
a name set twice by let/param is a located error."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from cli_output import after_phases

import tacos
from tacos import limits
from tacos.cli import main
from tacos.errors import InputFileError, TacosError


def load_error(path: Path, **kw) -> TacosError:
    t0 = time.perf_counter()
    with pytest.raises(TacosError) as info:
        tacos.load(path, **kw)
    assert time.perf_counter() - t0 < 3
    return info.value


@pytest.mark.parametrize("target", ["/dev/zero", "/dev/urandom", "/etc/passwd"])
def test_use_of_a_device_or_system_file(tmp_path: Path, target: str) -> None:
    f = tmp_path / "main.tdl"
    f.write_text(f'npu a[2]\nuse "{target}"\n')
    err = load_error(f)
    assert err.span.line == 2 and "not a .tdl file" in err.message
    assert "root:" not in err.render()  # never the content of the used file


def test_use_outside_the_allowed_folders(tmp_path: Path) -> None:
    (tmp_path / "lib").mkdir()
    (tmp_path / "proj").mkdir()
    (tmp_path / "lib" / "node.tdl").write_text("npu gpu[4]\n")
    main_file = tmp_path / "proj" / "main.tdl"
    main_file.write_text('use "../lib/node.tdl" as box[2]\n')
    err = load_error(main_file)
    assert "outside the folders" in err.message and "--include-dir" in err.hint
    spec = tacos.load(main_file, include_dirs=[tmp_path / "lib"])
    assert spec.topology.n_npus == 8
    # a symbolic link inside the folder that points outside it is followed, then refused
    (tmp_path / "proj" / "link.tdl").symlink_to(tmp_path / "lib" / "node.tdl")
    main_file.write_text('use "link.tdl"\n')
    assert "outside the folders" in load_error(main_file).message
    # relative to the including file, also from a nested include; presets by path too
    (tmp_path / "proj" / "sub").mkdir()
    (tmp_path / "proj" / "sub" / "inner.tdl").write_text('use "leaf.tdl"\n')
    (tmp_path / "proj" / "sub" / "leaf.tdl").write_text("npu x[3]\n")
    main_file.write_text('use "sub/inner.tdl"\nuse "dgx1.tdl"\n')
    assert tacos.load(main_file).topology.n_npus == 11


def test_use_of_a_named_pipe_does_not_block(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.tdl"
    os.mkfifo(fifo)
    f = tmp_path / "main.tdl"
    f.write_text('npu a[2]\nuse "pipe.tdl"\n')
    err = load_error(f)
    assert "not a regular file" in err.message and err.span.line == 2


def test_verify_refuses_named_pipes_without_blocking(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """``tacosc verify`` of a pipe, or of a sweep folder holding one, answers at once (reading
    the pipe would block until a writer came)."""
    from tacos.cli import main

    (tmp_path / "plans").mkdir()
    os.mkfifo(tmp_path / "plans" / "a.xml")
    os.mkfifo(tmp_path / "plan.json")
    for target in (tmp_path / "plans", tmp_path / "plans" / "a.xml", tmp_path / "plan.json"):
        t0 = time.perf_counter()
        assert main(["verify", str(target)]) == 2  # an input error, not a broken rule
        assert "not a regular file" in capsys.readouterr().err
        assert time.perf_counter() - t0 < 3


def test_size_cap_is_applied_while_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    """Standard input (``-``, a stream without a size) is cut off at the cap, not read whole."""
    import io
    import sys

    read_end, write_end = os.pipe()

    def feed() -> None:
        with open(write_end, "wb") as w:
            try:
                for _ in range(64):
                    w.write(b"# padding padding padding padding\n" * 4096)
            except BrokenPipeError:
                pass

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    with open(read_end, "rb", buffering=0) as stdin:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(stdin)))
        with limits.raised(tdl_bytes=1 << 20):
            err = load_error("-")
    assert isinstance(err, InputFileError) and "more than 1,048,576 bytes" in err.message
    writer.join(timeout=5)


def test_whole_file_errors_have_a_position(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    nul = tmp_path / "nul.tdl"
    nul.write_bytes(b"npu a[2]\nnpu b\x00c\n")
    err = load_error(nul)
    assert (err.span.line, err.span.col) == (2, 6) and "NUL" in err.message
    latin = tmp_path / "latin.tdl"
    latin.write_bytes("npu a[2]\n\nnpu caf\xe9\n".encode("latin-1"))
    err = load_error(latin)
    assert (err.span.line, err.span.col) == (3, 8) and "UTF-8" in err.message
    empty = tmp_path / "empty.tdl"
    empty.write_text("  \n\n")
    assert (load_error(empty).span.line, load_error(empty).span.col) == (1, 1)
    none = tmp_path / "none.tdl"
    none.write_text('topology "x"\n# no npu\n')
    err = load_error(none)
    assert err.span.line == 2 and "declares no NPU" in err.message
    assert main(["info", str(nul)]) == 1
    assert after_phases(capsys.readouterr().err).startswith(f"{nul}:2:6: error:")


@pytest.mark.parametrize("text, line", [
    ("param n = 2\nparam n = 3\nnpu a[n]\n", 2),
    ("let x = 1\nlet x = 2\nnpu a[2]\n", 2),
    ("param n = 2\nlet n = 3\nnpu a[n]\n", 2),
    ("npu a[2]\nif 1 == 1 {\n  let k = 1\n}\nlet k = 2\n", 5),
])
def test_a_name_is_set_once(text: str, line: int) -> None:
    with pytest.raises(TacosError) as info:
        tacos.parse(text, source="d.tdl")
    err = info.value
    assert err.span.line == line and "already defined at d.tdl:" in err.message
    assert "pick another name" in err.hint


def test_names_set_in_a_loop_body_and_passed_parameters_are_not_duplicates(
        tmp_path: Path) -> None:
    spec = tacos.parse("npu a[4]\nfor i in 0..2 {\n  let j = i + 1\n  link a[i] -> a[j] 1GB/s\n}\n")
    assert len(spec.topology.links) == 3
    part = tmp_path / "part.tdl"
    part.write_text("param n = 2\nnpu g[n]\n")
    top = tmp_path / "top.tdl"
    top.write_text('use "part.tdl"(n=3) as p[2]\n')
    assert tacos.load(top).topology.n_npus == 6
    assert tacos.load(part, {"n": 5}).topology.n_npus == 5


@pytest.mark.parametrize("fmt", ["taccl", "teccl"])
def test_deeply_nested_import_json_is_a_located_limit_error(
        fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tacos.cli import main

    f = tmp_path / "deep.json"
    f.write_text('{"a":\n' + "[" * 100_000 + "]" * 100_000 + "}\n")
    assert main(["import", fmt, str(f), "-o", str(tmp_path / "x.tdl")]) == 1
    err = capsys.readouterr().err
    assert "deep.json:2:100: error: JSON nested deeper than 100 levels (nesting)" in err, err
    assert not (tmp_path / "x.tdl").exists()


def test_errors_show_a_window_of_a_long_source_line() -> None:
    from tacos.errors import SHOWN_LINE, Span

    line = "x" * 5000 + "BAD" + "y" * 5000
    err = TacosError("bad thing", span=Span("f.tdl", 1, 5001, end_col=5004),
                     source_line=line)
    shown, caret = err.render().splitlines()[1:3]
    assert len(shown) < SHOWN_LINE + 20 and shown.count("...") == 2
    assert shown[caret.index("^"):caret.index("^") + 3] == "BAD" and caret.count("^") == 3
    short = TacosError("bad", span=Span("f.tdl", 1, 3), source_line="abcdef").render()
    assert short.splitlines()[1:] == ["  1 | abcdef", "    |   ^"]
