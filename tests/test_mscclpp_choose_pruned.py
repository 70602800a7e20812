"""The MSCCL++ thread-block search skips counts that cannot load and still chooses what the
exhaustive search chooses."""

from __future__ import annotations

import json

import pytest

import tacos
from tacos.errors import TacosError
from tacos.msccl.lower import MscclOptions
from tacos.msccl.mscclpp_choose import _doomed, choose_mscclpp
from tacos.msccl.mscclpp_loader import size_problems
from tacos.msccl.mscclpp_writer import emit_mscclpp_json
from tacos.verify_plan import verify

CASES = [
    ("use dgx1()\n", "allreduce", "4MiB", 1),
    ("use dgx_a100_node()\n", "allgather", "16MiB", 1),
    ("use dgx_a100_node()\n", "reducescatter", "1MiB", 2),
    ("biring r[6] 50GB/s 1us\n", "alltoall", "36MiB", 1),
]


def _schedule(tdl: str, kind: str, size: str, per: int):
    topo = tacos.parse(tdl).topology
    coll = tacos.collective(kind, topo.live_npus, size=size, chunks_per_npu=per)
    return topo, tacos.synthesize(topo, coll, solver="greedy", workers=1)


@pytest.mark.slow
@pytest.mark.parametrize("tdl,kind,size,per", CASES)
def test_pruned_search_chooses_what_the_exhaustive_search_chooses(tdl, kind, size, per):
    topo, schedule = _schedule(tdl, kind, size, per)
    opts = MscclOptions(inplace=kind != "alltoall")
    got = {s: choose_mscclpp(schedule, opts, search=s) for s in ("pruned", "climb",
                                                                   "exhaustive")}
    assert got["pruned"].value == got["climb"].value == got["exhaustive"].value
    assert got["pruned"].text == got["exhaustive"].text
    assert got["pruned"].time == pytest.approx(got["exhaustive"].time)
    # the exhaustive search saw every count: none it did not reject beats the choice by NEAR
    timed = [v for v in got["exhaustive"].tried.values() if isinstance(v, float)]
    assert got["pruned"].time <= min(timed) * 1.006
    verify(got["pruned"].text, topology=topo, ranks=list(schedule.collective.group),
           nbytes=int(schedule.collective.size)).raise_if_failed()


def test_counts_whose_chunks_cannot_cut_the_size_are_skipped_unlowered(monkeypatch):
    _topo, schedule = _schedule("use dgx_a100_node()\n", "allreduce", "16MiB", 1)
    nbytes = 16 * 3 * 8 * 1000 + 16 * 8  # cuts into 8 chunks, not 16
    lowered = []
    import tacos.msccl.mscclpp_writer as writer

    real = writer.emit_mscclpp_json

    def counting(plan, *, options=None, **kw):
        lowered.append(options.instances)
        return real(plan, options=options, **kw)

    monkeypatch.setattr(writer, "emit_mscclpp_json", counting)
    got = choose_mscclpp(schedule, MscclOptions(inplace=True), nbytes=nbytes)
    assert got.value == 1
    assert lowered == [1]  # 2, 4 and 8 instances have 16, 32, 64 chunks
    assert all("do not cut" in str(got.tried[i]) for i in (2, 4, 8))
    lowered.clear()
    exhaustive = choose_mscclpp(schedule, MscclOptions(inplace=True), nbytes=nbytes,
                                search="exhaustive")
    assert exhaustive.value == got.value and lowered == [1, 2, 4, 8]
    assert not size_problems(json.loads(got.text), nbytes)


@pytest.mark.parametrize("instances", [1, 2, 4])
def test_the_predicted_chunks_are_the_ones_the_writer_declares(instances):
    _topo, schedule = _schedule("use dgx_a100_node()\n", "allgather", "16MiB", 1)
    opts = MscclOptions(inplace=True, instances=instances)
    doc = json.loads(emit_mscclpp_json(schedule, options=opts))
    for nbytes in (16 << 20, 16 * 8 * 8 * 3, 16 * 8 * 8 * 2 * 3):
        assert (_doomed(schedule, opts, nbytes) is not None) == bool(size_problems(doc, nbytes))


def test_unknown_search_is_a_user_error():
    _topo, schedule = _schedule("use dgx1()\n", "allreduce", "4MiB", 1)
    with pytest.raises(TacosError, match="unknown search"):
        choose_mscclpp(schedule, search="fastest")
