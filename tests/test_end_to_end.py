"""End to end: every shipped example, every standard collective, through the verifiers.

Each schedule goes through the independent schedule verifier; for the collectives the MSCCL
runtime supports, the emitted XML is parsed back and goes through the XML verifier too.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import tacos
from tacos.check.verify import verify_schedule
from tacos.cli import main
from tacos.model import patterns
from tacos.model.collective import ROOTED_COLLECTIVES, STANDARD_COLLECTIVES
from tacos.msccl.verify import verify_xml
from tacos.msccl.xml_writer import schedule_to_xml
from tacos.synthesize import synthesize

EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("*.tdl"))
BIG = 16  # examples with this many live NPUs or more run every collective only in the slow run
# (0.4-0.9 s each; the smaller examples, switched and failing ones among them, keep the default run)
SLOW_EXAMPLES = ("reshard_p3", "hypercube", "composition")  # 0.5-0.7 s each
MSCCL_KINDS = ("allgather", "reducescatter", "allreduce", "alltoall", "broadcast", "reduce")


def _sized(example: Path):
    if len(tacos.load(example).topology.live_npus) >= BIG or example.stem in SLOW_EXAMPLES:
        return pytest.param(example, marks=pytest.mark.slow, id=example.stem)
    return pytest.param(example, id=example.stem)


@pytest.mark.parametrize("example", [_sized(p) for p in EXAMPLES])
def test_every_collective_on_every_example(example: Path) -> None:
    spec = tacos.load(example)
    topo = spec.topology
    live = topo.live_npus
    for kind in STANDARD_COLLECTIVES:
        root = live[-1] if kind in ROOTED_COLLECTIVES else None
        coll = patterns.build(kind, live, size=len(live) * 4096, root=root)
        schedule = synthesize(topo, coll, trials=1, workers=1, seed=0, solver="greedy")
        report = verify_schedule(schedule)
        assert report.ok, f"{example.stem} {kind}: {report.text()}"
        assert schedule.makespan > 0
        if kind in MSCCL_KINDS:
            xml = schedule_to_xml(schedule)
            xreport = verify_xml(xml, source=f"{example.stem}-{kind}.xml")
            assert xreport.ok, f"{example.stem} {kind}: {xreport.text()}"
            assert xreport.summary["ngpus"] == len(coll.group)  # ranks = the group


@pytest.mark.parametrize("example", [  # multidim: ~1 s, 64 NPUs and four collectives
    pytest.param(p, marks=pytest.mark.slow) if p.stem == "multidim" else p for p in EXAMPLES],
    ids=lambda p: p.stem)
def test_declared_collectives(example: Path) -> None:
    spec = tacos.load(example)
    if spec.collective is None:
        pytest.skip("declares no collective")
    schedule = synthesize(spec.topology, spec.collective, trials=2, workers=1, seed=1,
                          solver="greedy")
    assert verify_schedule(schedule).ok
    delivered = {(c, t.dst) for t in schedule.transfers for c in t.chunks}
    for chunk in spec.collective.chunks:
        targets = chunk.post if chunk.reduce else chunk.post - chunk.pre
        for npu in targets:
            assert (chunk.id, npu) in delivered


@pytest.mark.parametrize("shape", [
    "fixed",
    pytest.param("auto", marks=pytest.mark.slow),  # the default: shaping takes ~12 s here
])
@pytest.mark.slow
def test_cli_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str], shape: str) -> None:
    topo = Path(__file__).parent.parent / "examples" / "mesh4x4.tdl"
    xml, js = tmp_path / "plan.xml", tmp_path / "plan.json"
    args = [str(topo), "--collective", "allreduce", "--size", "1MiB", "--trials", "2",
            "--workers", "1", "-q"]
    xml_args = [*args, "--shape", shape]
    assert main([*xml_args, "-o", str(xml)]) == 0
    assert main([*args, "-o", str(js), "--report"]) == 0
    out = capsys.readouterr().out
    assert "algbw" in out
    assert main(["verify", str(xml), "--topology", str(topo)]) == 0
    assert main(["verify", str(js), "--topology", str(topo)]) == 0
    # same seed, same bytes
    xml2 = tmp_path / "again.xml"
    assert main([*xml_args, "-o", str(xml2)]) == 0
    assert xml.read_bytes().replace(b'name="plan"', b"") == \
        xml2.read_bytes().replace(b'name="again"', b"")
    other = Path(__file__).parent.parent / "examples" / "ring8.tdl"
    assert main(["verify", str(js), "--topology", str(other)]) == 1
