"""The FIFO execution cuts a step into the executor's primitive calls: a paired send of
``cnt`` 8 before the receive deadlocks on hardware once each chunk fills a call (8 calls of 4
slots against 8 slots per connection) and passes when the whole step is one call."""

from __future__ import annotations

from pathlib import Path

import pytest

from tacos.msccl.fifo_calls import NCCL_STEPS, call_split, split_for
from tacos.msccl.verify import verify_xml
from tacos.msccl.xml_reader import parse_xml

GIB = 1 << 30


def paired(max_bytes: int, *, fixed: bool = False, proto: str = "Simple") -> str:
    """An in-place 2-rank all-gather: each rank sends its 8 chunks in one step (``cnt`` 8) to
    the other over one paired thread block; rank 1 sends before receiving unless ``fixed``."""
    first = ("r", 0, "s", 8) if fixed else ("s", 8, "r", 0)

    def step(s: int, kind: str, off: int) -> str:
        return (f'      <step s="{s}" type="{kind}" srcbuf="o" srcoff="{off}" dstbuf="o" '
                f'dstoff="{off}" cnt="8" depid="-1" deps="-1" hasdep="0"/>')

    return "\n".join([
        f'<algo name="pairs" proto="{proto}" nchannels="1" nchunksperloop="16" ngpus="2" '
        f'coll="allgather" inplace="1" outofplace="0" minBytes="0" maxBytes="{max_bytes}">',
        '  <gpu id="0" i_chunks="8" o_chunks="16" s_chunks="0">',
        '    <tb id="0" send="1" recv="1" chan="0">',
        step(0, "s", 0), step(1, "r", 8),
        "    </tb>", "  </gpu>",
        '  <gpu id="1" i_chunks="8" o_chunks="16" s_chunks="0">',
        '    <tb id="0" send="0" recv="0" chan="0">',
        step(0, first[0], first[1]), step(1, first[2], first[3]),
        "    </tb>", "  </gpu>", "</algo>", ""])


def test_split_follows_protocol_and_size() -> None:
    big = parse_xml(paired(GIB))
    split = call_split(big)
    assert (split.max_count, split.slots, split.capacity) == (1, 4, NCCL_STEPS)
    assert split.calls(8) == 8 and split.overflows(8) and not split.overflows(2)
    small = call_split(parse_xml(paired(1 << 20)))  # 64 KiB chunks: 32 fit one 2 MiB call
    assert small.max_count == 32 and small.calls(8) == 1 and not small.overflows(8)
    assert not split_for("LL", 16, GIB).overflows(8)  # 8 calls of one slot fit 8 slots
    assert split_for("LL", 16, GIB).overflows(9)
    assert call_split(parse_xml(paired(0))).max_count == 1  # no upper bound: any size


def test_per_call_split_deadlock_is_rejected() -> None:
    report = verify_xml(paired(GIB), source="pairs.xml")
    assert not report.ok and report.checks["fifo"] == "failed"
    dead = [v for v in report.violations if v.rule == "deadlock"]
    assert {(v.rank, v.tb, v.step) for v in dead} == {(0, 0, 0), (1, 0, 0)}
    v = dead[0]
    assert "call 3 of 8" in v.message and "free FIFO slot" in v.message
    assert "receive before sending" in v.hint and v.line is not None
    assert "pairs.xml" in report.text() and f":{v.line}:" in report.text()


@pytest.mark.parametrize("xml", [paired(GIB, fixed=True), paired(1 << 20),
                                 paired(GIB, proto="LL")],
                         ids=["receive-first", "one-call", "LL-fits"])
def test_variants_that_run_are_accepted(xml: str) -> None:
    report = verify_xml(xml)
    assert report.ok, report.text()
    assert report.checks["fifo"] == "passed"


def test_size_given_overrides_the_window() -> None:
    assert verify_xml(paired(0), nbytes=1 << 20).ok
    assert not verify_xml(paired(1 << 20), nbytes=GIB).ok


def test_staged_allpairs_at_1gib_is_rejected_and_never_chosen() -> None:
    """The staged all-pairs all-reduce sends ``cnt`` = 8 before receiving on every paired
    thread block: in Simple at 1 GiB each chunk fills a call, so it hangs; the chooser rejects
    those shapes with the reason and picks one that runs."""
    import tacos
    from tacos.model import patterns
    from tacos.msccl.allpairs_program import AllPairsAllReduce
    from tacos.msccl.lower import MscclOptions
    from tacos.msccl.shape import Shape, shapes
    from tacos.msccl.shape_choose import ShapeCache, choose_shape
    from tacos.msccl.verify import verify_program
    from tacos.msccl.verify_fifo import split_deadlocks

    topo = tacos.load(Path(tacos.__file__).parent / "presets" / "dgx_a100_node.tdl").topology
    coll = patterns.build("allreduce", topo.live_npus, size=GIB, chunks_per_npu=1)
    staged = AllPairsAllReduce(coll)
    prog = staged.lower(Shape(1, "Simple"), MscclOptions(inplace=True))
    report = verify_program(prog, nbytes=GIB)
    assert not report.ok and report.checks["fifo"] == "failed"
    assert any("free FIFO slot" in v.message for v in report.violations)
    assert verify_program(prog, nbytes=1 << 20).ok  # one call per step: runs
    assert "free FIFO slot" in split_deadlocks(prog, GIB)[0].message

    choice = choose_shape({"allpairs-staged": staged}, topo, GIB,
                          base=MscclOptions(inplace=True),
                          candidates=shapes(protos=("LL", "Simple"), instances=(1, 2)),
                          cache=ShapeCache())
    simple = [c for c in choice.considered if c.shape.proto == "Simple"]
    assert simple and all(c.time is None for c in simple)
    assert any("primitive calls" in p for c in simple for p in c.problems)
    assert choice.shape.proto != "Simple"
    assert verify_program(choice.program, nbytes=GIB).ok
    assert not split_deadlocks(choice.program, 2 * GIB)


@pytest.mark.slow
def test_large_files_read_by_columns_are_not_vouched_for_past_the_split() -> None:
    """A file large enough for the column reader, which checks whole messages, still gets the
    call-by-call execution."""
    from tacos.msccl import verify_columns

    pad = "<!-- " + "x" * verify_columns.MIN_BYTES + " -->\n"
    bad = verify_xml(paired(GIB).replace("</algo>", pad + "</algo>"))
    assert not bad.ok and any(v.rule == "deadlock" for v in bad.violations)
    assert verify_xml(paired(GIB, fixed=True).replace("</algo>", pad + "</algo>")).ok


def test_the_window_a_file_serves_is_the_one_judged() -> None:
    """A program chosen for 1 MiB whose window has no upper limit (``top=0``) is judged at every
    size, so the staged all-pairs program's Simple shapes, which run at 1-2 MiB, are rejected;
    with the default window (twice the size) they stand, and the chosen program verifies in
    the window it is written with."""
    import tacos
    from tacos.model import patterns
    from tacos.msccl.allpairs_program import AllPairsAllReduce
    from tacos.msccl.lower import MscclOptions
    from tacos.msccl.shape import shapes
    from tacos.msccl.shape_choose import ShapeCache, choose_shape
    from tacos.msccl.verify import verify_program
    from tacos.msccl.verify_fifo import split_deadlocks

    mib = 1 << 20
    topo = tacos.load(Path(tacos.__file__).parent / "presets" / "dgx_a100_node.tdl").topology
    staged = AllPairsAllReduce(patterns.build("allreduce", topo.live_npus, size=mib,
                                              chunks_per_npu=1))
    cands = shapes(protos=("Simple",), instances=(1,))

    def choose(top: int | None):
        return choose_shape({"allpairs-staged": staged}, topo, mib, top=top, cache=ShapeCache(),
                            base=MscclOptions(inplace=True), candidates=cands)

    windowed = choose(None)
    assert windowed.shape.proto == "Simple" and not split_deadlocks(windowed.program, 2 * mib)
    assert verify_program(windowed.program, nbytes=2 * mib).ok
    from tacos.errors import TacosError

    with pytest.raises(TacosError, match="primitive calls"):
        choose(0)  # no upper limit: every Simple shape hangs at large sizes; nothing else allowed
