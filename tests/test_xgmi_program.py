"""The xGMI ring multi-node MSCCL programs (tacos/msccl/xgmi_program.py, xgmi_rings.py) on 2x
MI250: rings found on direct links only, programs verified (FIFO execution included), faster
than NCCL's modelled best in the runtime model, and offered where the multi-node families
are."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the benchmarks folder is run from the checkout, not installed

import tacos  # noqa: E402
from tacos.model import patterns  # noqa: E402
from tacos.msccl.lower import MscclOptions  # noqa: E402
from tacos.msccl.multinode_program import NIC_TAGS, node_groups  # noqa: E402
from tacos.msccl.shape import Shape  # noqa: E402
from tacos.msccl.verify import verify_program  # noqa: E402
from tacos.msccl.xgmi_program import (  # noqa: E402
    FAMILY,
    parts_for_size,
    ring_layout,
    xgmi_candidates,
)
from tacos.msccl.xgmi_rings import disjoint_cycles, lane_matrix  # noqa: E402
from tacos.runtime import estimate_nccl, estimate_program  # noqa: E402


def _mi250_2node():
    return tacos.load(ROOT / "examples" / "mi250_2node.tdl").topology


def _coll(topo, kind, size):
    return patterns.build(kind, list(topo.live_npus), size=size, chunks_per_npu=1)


def _family(topo, kind, size):
    return xgmi_candidates(topo, _coll(topo, kind, size))[FAMILY]


def _verified(program):
    """Every rule ``tacosc verify`` applies, the FIFO execution with one call per chunk (the
    plan has no upper size bound) included."""
    report = verify_program(program, sms=104, source="<xgmi>")
    assert report.ok, report.text(warnings=False)
    return program


def _nccl(topo, kind, nbytes):
    algos = ("ring", "tree") if kind == "allreduce" else ("ring",)
    return min(estimate_nccl(topo, kind, nbytes, group=list(topo.live_npus),
                             algorithm=a).time for a in algos)


def test_three_lane_disjoint_rings_on_the_mi250_xgmi_links():
    """A GCD has 7 xGMI lanes: three Hamiltonian cycles take 6 of them, none twice."""
    topo = _mi250_2node()
    group = list(topo.live_npus)
    nodes = node_groups(topo, group)
    lanes = lane_matrix(topo, [group[r] for r in nodes[0]])
    assert all(sum(row) == 7 for row in lanes)
    cycles = disjoint_cycles(lanes)
    assert len(cycles) == 3
    used = [[0] * 16 for _ in range(16)]
    for cyc in cycles:
        assert sorted(cyc) == list(range(16))
        for a, b in zip(cyc, cyc[1:] + cyc[:1], strict=True):
            used[a][b] += 1
            used[b][a] += 1
    assert all(used[a][b] <= lanes[a][b] for a in range(16) for b in range(16))


def test_every_same_node_connection_is_one_direct_xgmi_link():
    """The programs' node phases never cross the NIC switch (the model's routes send 184 of
    the 240 ordered same-node pairs through it)."""
    topo = _mi250_2node()
    prog = _family(topo, "allreduce", 1 << 20).lower(Shape(4, "LL"), MscclOptions(inplace=True))
    group = list(topo.live_npus)
    nodes = node_groups(topo, group)
    node_of = {r: n for n, rs in enumerate(nodes) for r in rs}
    pairs = {(g.id, tb.send) for g in prog.gpus for tb in g.tbs if tb.send >= 0}
    inside = [(a, b) for a, b in pairs if node_of[a] == node_of[b]]
    assert inside and len(pairs) > len(inside)  # rails too
    for a, b in inside:
        route = topo.routing.best(group[a], group[b], 1.0)
        links = [topo.links[i] for i in route.links]
        assert len(links) == 1 and not str(links[0].tag).startswith(NIC_TAGS)


@pytest.mark.parametrize("kind", ["allreduce", "allgather"])
def test_small_message_programs_verify_and_beat_nccl(kind):
    """At 1 MiB (8 parts per block, LL) the program verifies and is faster than NCCL's
    modelled best (ring LL)."""
    topo = _mi250_2node()
    fam = _family(topo, kind, 1 << 20)
    assert fam.parts == parts_for_size(1 << 20, 16 if kind == "allreduce" else 32) == 8
    prog = _verified(fam.lower(Shape(4, "LL"), MscclOptions(inplace=True)))
    assert prog.nchunksperloop & (prog.nchunksperloop - 1) == 0  # divides power-of-two sizes
    t = estimate_program(prog, topo, 1 << 20).time
    assert t < _nccl(topo, kind, 1 << 20)


def test_out_of_place_all_gather_verifies():
    topo = _mi250_2node()
    _verified(_family(topo, "allgather", 1 << 20).lower(Shape(2, "Simple"), MscclOptions()))


@pytest.mark.slow
def test_large_all_reduce_is_faster_than_nccl_by_the_issue_margin():
    """256 MiB (128 parts per block, so 8 channels per ring at one instance): at least 1.2x
    NCCL's modelled best (ring Simple, 16 channels at a CTA's rate each)."""
    topo = _mi250_2node()
    fam = _family(topo, "allreduce", 256 << 20)
    assert fam.channels_per_ring(1) == 8
    prog = _verified(fam.lower(Shape(1, "Simple"), MscclOptions(inplace=True)))
    assert max(len(g.tbs) for g in prog.gpus) <= 104  # MI250: 104 CUs per GCD
    assert _nccl(topo, "allreduce", 256 << 20) / estimate_program(
        prog, topo, 256 << 20).time >= 1.2


def test_offered_only_on_nodes_of_directly_linked_gpus():
    """Not on DGX nodes (every GPU behind NVSwitch), not for an all-reduce over three MI250
    boxes (the rail exchange is written for two), not on a single box."""
    dgx = tacos.load(ROOT / "examples" / "dgx_a100_2node.tdl").topology
    assert xgmi_candidates(dgx, _coll(dgx, "allreduce", 1 << 20)) == {}
    three = tacos.parse("use mi250(nodes=3)\n").topology
    assert ring_layout(three, _coll(three, "allreduce", 3 << 20)) is None
    assert ring_layout(three, _coll(three, "allgather", 3 << 20)) is not None
    one = tacos.parse("use mi250\n").topology
    assert xgmi_candidates(one, _coll(one, "allreduce", 1 << 20)) == {}


@pytest.mark.slow
def test_shaped_file_takes_the_family(tmp_path, capsys):
    """``tacosc examples/mi250_2node.tdl -c allreduce --size 1MiB --solver nccl-ring -o
    plan.xml`` chooses the ring program (NCCL's ring lowered is 2x slower in the model), and
    the file verifies."""
    from tacos.cli import main

    out = tmp_path / "plan.xml"
    code = main([str(ROOT / "examples" / "mi250_2node.tdl"), "-c", "allreduce", "--size",
                 "1MiB", "--solver", "nccl-ring", "-o", str(out), "--report"])
    assert code == 0
    assert f"msccl shape   {FAMILY}:" in capsys.readouterr().out
    assert tacos.verify(out, topology=_mi250_2node()).ok


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["allreduce", "allgather"])
def test_model_agrees_with_the_replay_at_1mib(kind):
    """The runtime model and the independent stream replay (one stream per thread block,
    ports shared fluidly) agree within 10 % (measured: 0.999 and 1.000)."""
    from benchmarks.replay_streams import replay

    topo = _mi250_2node()
    prog = _verified(_family(topo, kind, 1 << 20).lower(Shape(4, "LL"),
                                                       MscclOptions(inplace=True)))
    model = estimate_program(prog, topo, 1 << 20).time
    assert abs(model / replay(prog, topo, 1 << 20) - 1) <= 0.10
