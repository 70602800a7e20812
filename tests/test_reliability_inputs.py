"""Hostile inputs, round three: file types for every command, a JSON-schedule reader that
re-derives every field it reads, duplicate group members, importers' duplicate ids and
self-links, byte-order marks, links out of the include folders, and limit errors with a file
position."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from cli_output import after_phases

import tacos
from tacos.cli import main
from tacos.errors import TacosError
from tacos.importers import to_tdl

RING = "ring r[4] 10GB/s 1us\n"
NCCL = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "nccl-topo"
if not NCCL.is_dir():
    NCCL = Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "nccl-topo"


def tacosc(args: list[str], stdin: str | None = None, timeout: float = 60
           ) -> subprocess.CompletedProcess[str]:
    """``tacosc`` in its own process (a blocked read would hang this one: it times out)."""
    return subprocess.run([sys.executable, "-c", "import sys; from tacos.cli import main; "
                           "sys.exit(main())", *args], input=stdin if stdin is not None
                          else "", capture_output=True, text=True, timeout=timeout,
                          cwd=os.getcwd())


# -- 2. every path read is a regular file, or '-' ----------------------------------------------
class Blocked(BaseException):
    """Raised by the alarm when a command has not answered (past main's handlers)."""


def answers_within(seconds: float, args: list[str]) -> int:
    """``main(args)``, failing the test if it does not return within ``seconds``."""
    def alarm(signum, frame):
        raise Blocked(f"tacosc {' '.join(args)} did not answer within {seconds} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return main(args)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_no_command_blocks_on_a_named_pipe(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "pipe.tdl"
    os.mkfifo(fifo)
    topo = tmp_path / "ring.tdl"
    topo.write_text(RING + "collective allgather size 4KiB\n")
    plan = tmp_path / "plan.json"
    assert main([str(topo), "-q", "--solver", "greedy", "-o", str(plan)]) == 0
    f = str(fifo)
    commands = [
        ["info", f], [f, "-c", "allgather", "-q"], ["verify", f],
        ["verify", str(plan), "--topology", f], ["import", "nccl-topo", f, "--node", "dgx1"],
        ["import", "nvidia-smi", f], ["import", "taccl", f], ["import", "teccl", f],
        ["cost", f, "-c", "allreduce", "--size", "1MiB"], ["explore", f],
        ["allocate", f, "--budget", "300GB/s", "--op", "allreduce:64MiB"],
    ]
    capsys.readouterr()
    for args in commands:
        code = answers_within(20, args)
        err = capsys.readouterr().err
        assert code == (2 if args[0] == "verify" else 1), (args, err)  # verify: input error
        assert "named pipe" in err or "not a regular file" in err, (args, err)


@pytest.mark.parametrize("target, phrase", [("/dev/zero", "a device"),
                                            ("/dev/null", "a device")])
def test_devices_are_refused_before_reading(target: str, phrase: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", target]) == 1
    assert phrase in capsys.readouterr().err


def test_standard_input_is_read_when_asked_for() -> None:
    res = tacosc(["info", "-", "--json"], stdin=RING)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["npus"] == 4


# -- 3. the JSON-schedule reader re-derives what it reads -----------------------------------------
@pytest.fixture(scope="module")
def schedule_doc() -> dict:
    ring = tacos.builders.ring(4, bandwidth=10e9, latency=1e-6)
    coll = tacos.collective("allgather", range(4), size="16KiB")
    s = tacos.synthesize(ring, coll, solver="greedy", workers=1)
    assert tacos.verify(s).ok
    return json.loads(tacos.emit(s, "json"))


def edited(doc: dict, change) -> str:
    out = json.loads(json.dumps(doc))
    change(out)
    return json.dumps(out)


@pytest.mark.parametrize("name, change, where", [
    ("chunk size doubled", lambda d: d.update(chunk_size=d["chunk_size"] * 2), "$.chunk_size"),
    ("chunk size dropped", lambda d: d.update(chunk_size=None), "$.chunk_size"),
    ("bound above the time", lambda d: d["bound"].update(value=d["time"] * 3), "$.bound.value"),
    ("bound latency changed", lambda d: d["bound"].update(latency=d["bound"]["latency"] / 2),
     "$.bound.latency"),
    ("bound kind changed", lambda d: d["bound"].update(kind="nonsense"), "$.bound.kind"),
    ("bound part changed", lambda d: d["bound"]["parts"].update(cut=1.0), "$.bound.parts.cut"),
    ("meta lower bound", lambda d: d["meta"].update(lower_bound=d["time"] * 2),
     "$.meta.lower_bound"),
    ("meta gap", lambda d: d["meta"].update(gap=0.5), "$.meta.gap"),
    ("time", lambda d: d.update(time=d["time"] * 2), "$.time"),
    ("group twice", lambda d: d["collective"].update(group=[0, 1, 1, 2]), "$.collective.group"),
])
def test_edited_derived_fields_are_refused(schedule_doc: dict, name: str, change,
                                           where: str) -> None:
    assert tacos.verify(json.dumps(schedule_doc)).ok  # the unedited file passes
    with pytest.raises(TacosError) as info:
        tacos.verify(edited(schedule_doc, change))
    assert where in info.value.message, (name, info.value.message)


def test_verify_command_refuses_a_doubled_chunk_size(schedule_doc: dict, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(edited(schedule_doc, lambda d: d.update(chunk_size=d["chunk_size"] * 2)))
    topo = tmp_path / "ring.tdl"
    topo.write_text(RING)
    for extra in ([], ["--topology", str(topo)]):
        assert main(["verify", str(plan), *extra]) == 1
        assert "$.chunk_size" in capsys.readouterr().err


# -- 3. duplicate NPUs in a TDL group ------------------------------------------------------------
@pytest.mark.parametrize("group, second, first", [
    ("r[0], r[1], r[1], r[2]", 40, 34),
    ("r[0..2], r[1]", 37, 28),
])
def test_a_group_naming_an_npu_twice_is_an_error_with_both_positions(group: str, second: int,
                                                                     first: int) -> None:
    text = RING + f"collective allgather group {group} size 3KiB\n"
    with pytest.raises(TacosError) as info:
        tacos.parse(text, "g.tdl")
    err = info.value
    assert err.span.line == 2 and err.span.col == second
    assert f"first at 2:{first}" in err.message and "twice" in err.message


def test_a_job_group_naming_an_npu_twice_is_an_error() -> None:
    text = RING + 'job "a" group r[0], r[0] {\n  collective allreduce size 1MiB\n}\n'
    with pytest.raises(TacosError, match="twice"):
        tacos.parse(text, "j.tdl")


# -- 4. importers: duplicate ids and self-links ----------------------------------------------------
def nccl_text() -> str:
    path = NCCL / "ndv4-topo.xml"
    if not path.is_file():
        pytest.skip("shared NCCL topology fixtures are not beside the repository")
    return path.read_text()


def line_of(text: str, needle: str, nth: int = 1) -> int:
    lines = [i + 1 for i, ln in enumerate(text.splitlines()) if needle in ln]
    return lines[nth - 1]


def test_nccl_topology_with_a_duplicate_bus_id(tmp_path: Path) -> None:
    text = nccl_text().replace('busid="0004:00:00.0"', 'busid="0003:00:00.0"', 1)
    path = tmp_path / "dup.xml"
    path.write_text(text)
    with pytest.raises(TacosError) as info:
        to_tdl(path, "nccl-topo", node="dgx_a100_node")
    first, second = line_of(text, '"0003:00:00.0"'), line_of(text, '"0003:00:00.0"', 2)
    assert info.value.span.line == second and f"first on line {first}" in info.value.message


def nvlink_dump(links: str) -> str:
    return ('<system version="1">\n <cpu numaid="0">\n'
            '  <pci busid="0000:01:00.0" class="0x030200">\n'
            f'   <gpu dev="0">{links}</gpu>\n  </pci>\n'
            '  <pci busid="0000:02:00.0" class="0x030200">\n'
            '   <gpu dev="1"><nvlink target="0000:01:00.0" count="2"/></gpu>\n  </pci>\n'
            ' </cpu>\n</system>\n')


@pytest.mark.parametrize("links, phrase", [
    ('<nvlink target="0000:01:00.0" count="2"/>', "to itself"),
    ('<nvlink target="0000:02:00.0" count="0"/>', "out of range"),
])
def test_nccl_dump_nvlink_self_links_and_counts(links: str, phrase: str) -> None:
    with pytest.raises(TacosError) as info:
        to_tdl(nvlink_dump(links), "nccl-topo")
    assert phrase in info.value.message and info.value.span.line == 4


def test_nccl_dump_duplicate_gpu_index() -> None:
    text = nvlink_dump('<nvlink target="0000:02:00.0" count="2"/>').replace('dev="1"', 'dev="0"')
    with pytest.raises(TacosError) as info:
        to_tdl(text, "nccl-topo")
    assert "dev=0 appears twice (first on line 4)" in info.value.message
    assert info.value.span.line == 7
    good = to_tdl(nvlink_dump('<nvlink target="0000:02:00.0" count="2"/>'), "nccl-topo")
    assert tacos.parse(good).topology.n_npus == 2


@pytest.mark.parametrize("matrix, line, phrase", [
    ("\tGPU0\tGPU1\tGPU1\tCPU Affinity\nGPU0\t X \tNV1\tNV1\t0-1\n", 1, "column GPU1 appears"),
    ("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV1\t0-1\nGPU1\tNV1\t X \t0-1\n"
     "GPU1\tNV1\t X \t0-1\n", 4, "a second row for GPU1"),
])
def test_nvidia_smi_duplicate_devices(matrix: str, line: int, phrase: str) -> None:
    with pytest.raises(TacosError) as info:
        to_tdl(matrix, "nvidia-smi")
    assert phrase in info.value.message and info.value.span.line == line


# -- 6. byte-order marks, links out of the include folders, located limits -------------------------
def test_a_leading_byte_order_mark_is_accepted(schedule_doc: dict, tmp_path: Path) -> None:
    tdl = tmp_path / "bom.tdl"
    tdl.write_bytes(b"\xef\xbb\xbf" + RING.encode())
    assert tacos.load(tdl).topology.n_npus == 4
    plan = tmp_path / "bom.json"
    plan.write_bytes(b"\xef\xbb\xbf" + json.dumps(schedule_doc).encode())
    assert tacos.verify(plan).ok
    smi = tmp_path / "smi.txt"
    smi.write_bytes(b"\xef\xbb\xbf\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV2\t0-1\n"
                    b"GPU1\tNV2\t X \t0-1\n")
    assert "npu gpu[2]" in to_tdl(smi, "nvidia-smi")
    bad = tmp_path / "bad.tdl"  # positions still count from the first real character
    bad.write_bytes(b"\xef\xbb\xbfring r[4] 10GB/s\nlink r[0] => r[1]\n")
    with pytest.raises(TacosError) as info:
        tacos.load(bad)
    assert info.value.span.line == 2


def test_a_tdl_link_to_another_kind_of_file_is_not_quoted(tmp_path: Path) -> None:
    secret = tmp_path / "outside" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("password = hunter2\n")
    (tmp_path / "proj").mkdir()
    link = tmp_path / "proj" / "node.tdl"
    link.symlink_to(secret)
    top = tmp_path / "proj" / "top.tdl"
    top.write_text(f'use "{link}"\n')
    with pytest.raises(TacosError) as info:
        tacos.load(top, include_dirs=["/"])
    assert "not a .tdl file" in info.value.message and info.value.span.line == 1
    assert "hunter2" not in info.value.render()


@pytest.mark.parametrize("text, args, where", [
    ("ring a[200] 100GB/s 1us\n", ["-c", "allgather", "--limit", "deliveries=10000"], "1:6"),
    ("npu a[300]\nswitch s attach a[*] 100GB/s 1us\n",
     ["-c", "broadcast", "--root", "0", "--limit", "links=10000"], "2:8"),
    ("npu a[300]\nswitch s attach a[*] 100GB/s 1us\n", ["-c", "broadcast", "--root", "0",
     "--solver", "greedy", "-O", "model=unwound", "--limit", "links=10000"], "2:8"),
])
def test_limit_errors_name_the_file_position(text: str, args: list[str], where: str,
                                             tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    topo = tmp_path / "big.tdl"
    topo.write_text(text)
    assert main([str(topo), "-q", *args, "-o", str(tmp_path / "p.json")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"{topo}:{where}: error:") and "exceeds the limit" in err, err


def test_cost_limit_errors_name_the_file_position(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    topo = tmp_path / "big.tdl"
    topo.write_text("npu a[30000]\n")
    assert main(["cost", str(topo), "-c", "allgather", "--size", "1GiB"]) == 1
    assert after_phases(capsys.readouterr().err).startswith(f"{topo}:1:5: error:")
