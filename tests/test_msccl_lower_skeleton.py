"""The lowering's first rounds on runs without locations (tacos/msccl/lower_skeleton.py): the
skeleton's runs and order are the full flow's where the rounds read them, and a lowering that
runs them first gives exactly what it gives without them (the program, or the error)."""

from __future__ import annotations

import pytest
from msccl_programs import forget_lowerings, lowering_outcome, synthesized

import tacos.msccl.lower as lower_mod
import tacos.msccl.lower_flow as flow_mod
from tacos.errors import TacosError
from tacos.msccl.lower import MscclOptions, lower
from tacos.msccl.lower_flow import build_flow
from tacos.msccl.lower_layout import build_layout
from tacos.msccl.lower_skeleton import skeleton_flow

RING = 'topology "r"\nbiring r[6] 100GB/s 1us\n'
TORUS = 'topology "t"\ntorus t[3, 2] 50GiB/s 0.5us\n'
TORUS44 = 'topology "t"\ntorus t[4, 4] 50GiB/s 0.5us\n'

#: the fields of a run the rounds before the first step build read
READ = ("id", "transfer", "piece", "part", "src", "dst", "lane", "chunks", "reads", "creates",
        "conn", "cnt", "send_key", "recv_key", "conn_index")




def _same_rounds(schedule, inplace: bool, steps, caps, monkeypatch) -> int:
    """Lower under every step limit, cap, pairing and instance count with the skeleton's
    rounds forced first and with them off: the outcomes must be equal.  Counts the failures
    the skeleton raised itself."""
    raised = 0
    for max_steps in steps:
        for cap in caps:
            for pair in (False, True):
                for instances in (1, 2):
                    opts = MscclOptions(inplace=inplace, outofplace=not inplace,
                                        max_steps_per_tb=max_steps, max_channels=cap,
                                        pair_peers=pair, instances=instances, fit_fifo=False)
                    monkeypatch.setattr(lower_mod, "likely_over", lambda *a: False)
                    off = lowering_outcome(schedule, opts, fresh=True)
                    monkeypatch.setattr(lower_mod, "likely_over", lambda *a: True)
                    built: list[int] = []
                    real = flow_mod.build_flow
                    monkeypatch.setattr(flow_mod, "build_flow",
                                        lambda *a, _b=built, _r=real: _b.append(1) or _r(*a))
                    assert lowering_outcome(schedule, opts, fresh=True) == off
                    monkeypatch.setattr(flow_mod, "build_flow", real)
                    if not built:
                        assert off.startswith("error: the plan needs")
                        raised += 1
    return raised


@pytest.mark.parametrize("text,solver,chunks,located", [
    (RING, "nccl-ring", 1, False),  # one chunk per transfer
    pytest.param(TORUS44, "hierarchical", 2, True,  # all-reduce, chunks apart per transfer
                 marks=pytest.mark.slow),
])
def test_the_skeleton_is_the_flow_where_the_rounds_read_it(text, solver, chunks,
                                                           located) -> None:
    _, _, sched = synthesized(text, "allreduce", solver, chunks)
    fields = READ + (("prevs", "sloc", "rsrc", "rdst") if located else ())
    built = 0
    for instances in (1, 2, 3):
        for inplace in (False, True):
            layout = build_layout(sched.collective, inplace=inplace, instances=instances)
            skeleton = skeleton_flow(sched, layout)
            if skeleton is None:  # two chunks of adjacent slots in a transfer, one instance
                assert instances == 1 and located
                continue
            full = build_flow(sched, layout)
            built += 1
            assert len(skeleton.runs) == len(full.runs)
            for a, b in zip(full.runs, skeleton.runs, strict=True):
                assert [getattr(a, f) for f in fields] == [getattr(b, f) for f in fields]
                assert (a.prevs is None) == (b.prevs is None)
            assert skeleton.order == [ev for ev in full.order if ev[0] != "cpy"]
    assert built >= 4


def test_a_transfer_of_two_chunks_gets_no_skeleton() -> None:
    _, _, sched = synthesized(RING, "allgather", "greedy", 3)
    layout = build_layout(sched.collective, inplace=False, instances=1)
    if all(len(t.chunks) == 1 for t in sched.transfers):
        pytest.skip("every transfer of this plan carries one chunk")
    assert skeleton_flow(sched, layout) is None


def test_the_skeleton_rounds_change_nothing_on_a_ring(monkeypatch) -> None:
    _, _, sched = synthesized(RING, "allreduce", "nccl-ring", 1)
    assert _same_rounds(sched, True, (3, 8), (2, 6), monkeypatch)


@pytest.mark.slow
@pytest.mark.parametrize("text,kind,solver", [
    (RING, "allreduce", "greedy"),
    (TORUS, "allreduce", "greedy"),
    (TORUS, "reducescatter", "nccl-ring"),
    (TORUS44, "allreduce", "nccl-ring"),
    (TORUS44, "allgather", "greedy"),
    (TORUS44, "allreduce", "hierarchical"),  # transfers of several chunks, slots apart
])
def test_the_skeleton_rounds_change_nothing(text, kind, solver, monkeypatch) -> None:
    _, _, sched = synthesized(text, kind, solver, 1)
    assert _same_rounds(sched, kind in ("allreduce", "allgather"), (2, 4, 8), (1, 3, 6, 32),
                        monkeypatch)


def test_a_transfer_outside_the_group_is_refused_as_before(monkeypatch) -> None:
    from test_msccl_lower import line, make

    from tacos.model import patterns

    coll = patterns.build("broadcast", [0, 2], size=1024, root=0)
    sched = make(line(3), coll, [(0, 0, 1, (0,), "copy"), (1, 1, 2, (0,), "copy")])
    layout = build_layout(coll, inplace=False, instances=1)
    assert not lower_mod.likely_over(sched, layout, 64, 32)
    assert skeleton_flow(sched, layout) is None
    monkeypatch.setattr(lower_mod, "likely_over", lambda *a: True)
    forget_lowerings()
    with pytest.raises(TacosError, match="NPU 1, which is not a rank"):
        lower(sched)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["group_noncontiguous_allgather_forest",  # channel hints
                                  "dgx1_broadcast_reducescatter_greedy"])
def test_the_skeleton_rounds_change_nothing_on_stored_plans(name, monkeypatch) -> None:
    from pathlib import Path

    from tacos.frontends.json_schedule import load

    sched = load(Path(__file__).parent / "fixtures" / "lowering" / f"{name}.json")
    _same_rounds(sched, False, (2, 4), (1, 2, 4, 32), monkeypatch)
