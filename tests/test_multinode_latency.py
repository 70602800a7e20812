"""The latency-bound multi-node MSCCL programs (tacos/msccl/multinode_latency.py, and
tacos/msccl/multinode_leader.py where nodes have no rails): verified, LL, few thread blocks,
one NIC send per rail peer, and faster than NCCL's modelled best at small sizes on two
DGX-A100 (and NDv2) nodes."""

from __future__ import annotations

from pathlib import Path

import pytest

import tacos
from tacos.errors import TacosError
from tacos.model import patterns
from tacos.msccl.lower import MscclOptions
from tacos.msccl.multinode_latency import LATENCY, LATENCY_PIECES, latency_allreduce
from tacos.msccl.multinode_leader import LEADER, LEADER_STAGED, leader_layout
from tacos.msccl.multinode_program import _is_nic, multinode_candidates
from tacos.msccl.shape import Shape
from tacos.msccl.verify import verify_program
from tacos.runtime import estimate_nccl
from tacos.runtime.msccl_exec import estimate_program

ROOT = Path(__file__).resolve().parent.parent
KIB = 1 << 10


@pytest.fixture(scope="module")
def two_dgx():
    return tacos.load(ROOT / "examples" / "dgx_a100_2node.tdl").topology


def _family(topo, kind, name=LATENCY):
    coll = patterns.build(kind, list(topo.live_npus), size=KIB, chunks_per_npu=1)
    return multinode_candidates(topo, coll)[name]


def _verified(program):
    report = verify_program(program, sms=200, source="<latency>")  # FIFO check included
    assert report.ok, report.text(warnings=False)
    return program


def _nccl_best(topo, kind, nbytes):
    return min(estimate_nccl(topo, kind, nbytes, group=list(topo.live_npus),
                             algorithm=a).time for a in (("ring", "tree") if kind ==
                                                          "allreduce" else ("ring",)))


@pytest.mark.slow
@pytest.mark.parametrize("inplace", [True, False])
@pytest.mark.parametrize("kind,name", [("allreduce", LATENCY), ("allreduce", LATENCY_PIECES),
                                       ("allgather", LATENCY)])
def test_programs_verify_with_few_thread_blocks(two_dgx, kind, name, inplace):
    fam = _family(two_dgx, kind, name)
    for inst in (1, 2):
        prog = _verified(fam.lower(Shape(inst, "LL"), MscclOptions(inplace=inplace)))
        assert prog.proto == "LL" and prog.nchannels == inst and prog.ngpus == 16
        # a send and a receive thread block per peer (7 node peers, 1 rail peer) per instance
        tbs = {len(g.tbs) for g in prog.gpus}
        assert tbs == {16 * inst + (0 if inplace or kind == "allreduce" else 1)}


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["allreduce", "allgather"])
def test_one_nic_send_per_rail_peer_of_a_block_or_shard(two_dgx, kind):
    """The all-reduce sends a GPU's node-reduced block (1/G of the data) once across the NIC;
    the all-gather its shard once; nothing else crosses the network."""
    fam = _family(two_dgx, kind)
    prog = _verified(fam.lower(Shape(1, "LL"), MscclOptions(inplace=True)))
    node_of = {r: n for n, ranks in enumerate(fam.nodes) for r in ranks}
    for g in prog.gpus:
        nic = [(tb.send, st.cnt) for tb in g.tbs for st in tb.steps
               if st.type == "s" and node_of[tb.send] != node_of[g.id]]
        assert len(nic) == 1
        peer, cnt = nic[0]
        route = two_dgx.routing.best(g.id, peer, 1.0)
        assert any(_is_nic(two_dgx.links[i]) for i in route.links)
        share = prog.nchunksperloop // (8 if kind == "allreduce" else 16)
        assert cnt == share


def test_small_allreduce_is_ll_verified_and_faster_than_nccl(two_dgx):
    """One instance in LL: at 4 KiB, at least 1.5x NCCL's modelled best (tree or ring)."""
    size = 4 * KIB
    prog = _verified(_family(two_dgx, "allreduce").lower(Shape(1, "LL"),
                                                          MscclOptions(inplace=True)))
    assert prog.proto == "LL" and max(len(g.tbs) for g in prog.gpus) == 16
    ours = estimate_program(prog, two_dgx, size).time
    assert _nccl_best(two_dgx, "allreduce", size) / ours >= 1.5


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["allreduce", "allgather"])
def test_faster_than_nccl_and_the_pipelined_family_at_4_kib(two_dgx, kind):
    """One instance in LL: at 4 KiB, at least 1.5x NCCL's modelled best and faster than the
    pipelined hierarchical program in the same shape."""
    size = 4 * KIB
    prog = _verified(_family(two_dgx, kind).lower(Shape(1, "LL"),
                                                   MscclOptions(inplace=True)))
    ours = estimate_program(prog, two_dgx, size).time
    assert _nccl_best(two_dgx, kind, size) / ours >= 1.5
    piped = _family(two_dgx, kind, "hierarchical").lower(Shape(1, "LL"),
                                                          MscclOptions(inplace=True))
    assert ours < estimate_program(piped, two_dgx, size).time


@pytest.mark.slow
def test_rotated_pieces_let_node_peers_add_side_by_side(two_dgx):
    """With a piece per node peer the G-1 receive thread blocks add into different pieces at
    every turn, so at 256 KiB the node reduce-scatter is faster than the chain of G-1
    additions into one block."""
    chain = _family(two_dgx, "allreduce").lower(Shape(1, "LL"), MscclOptions(inplace=True))
    rot = _verified(_family(two_dgx, "allreduce", LATENCY_PIECES).lower(
        Shape(1, "LL"), MscclOptions(inplace=True)))
    assert rot.nchunksperloop == 8 * chain.nchunksperloop
    size = 256 * KIB
    assert estimate_program(rot, two_dgx, size).time < estimate_program(chain, two_dgx,
                                                                          size).time


def test_bad_layouts_are_refused():
    with pytest.raises(TacosError, match="equal nodes"):
        latency_allreduce([[0, 1]], 1, MscclOptions(proto="LL"))
    with pytest.raises(TacosError, match="power of two"):
        latency_allreduce([[0, 1], [2, 3]], 1, MscclOptions(proto="LL"), pieces=3)


@pytest.fixture(scope="module")
def two_ndv2():
    return tacos.load(ROOT / "examples" / "ndv2_2node.tdl").topology


def test_leader_tree_follows_the_nvlink_cube_mesh_to_the_nic_gpu(two_ndv2):
    """NDv2: one NIC per node at GPU 0; GPUs 5, 6, 7 reach it through GPUs 1, 2, 3 (one
    child each, the fewest additions in turn), every tree edge a direct NVLink."""
    lay = leader_layout(two_ndv2, list(two_ndv2.live_npus))
    assert lay.leaders == (0, 8) and lay.depth() == 2
    assert lay.parent[:8] == (-1, 0, 0, 0, 0, 1, 2, 3)
    for r, up in enumerate(lay.parent):
        if up >= 0:
            route = two_ndv2.routing.best(r, up, 1.0)
            assert len(route.links) == 1 and not _is_nic(two_ndv2.links[route.links[0]])


@pytest.mark.slow
@pytest.mark.parametrize("inplace", [True, False])
def test_leader_allreduce_verifies_and_beats_nccl_at_1_kib(two_ndv2, inplace):
    coll = patterns.build("allreduce", list(two_ndv2.live_npus), size=KIB, chunks_per_npu=1)
    fams = multinode_candidates(two_ndv2, coll)
    for name, stages in ((LEADER_STAGED, 4), (LEADER, 1)):
        for inst in (1, 2):
            prog = _verified(fams[name].lower(Shape(inst, "LL"),
                                              MscclOptions(inplace=inplace)))
            assert prog.nchannels == inst and prog.nchunksperloop == stages * inst
            # one paired thread block per tree neighbour (and other leader) per instance
            assert len(prog.gpus[0].tbs) == 5 * inst and len(prog.gpus[5].tbs) == inst
    ours = estimate_program(prog, two_ndv2, KIB).time
    assert _nccl_best(two_ndv2, "allreduce", KIB) / ours >= 1.5


@pytest.mark.slow
@pytest.mark.parametrize("inplace", [True, False])
def test_leader_allgather_verifies_and_merges_steps_at_one_instance(two_ndv2, inplace):
    """Merged, a leader sends its node's eight shards to the other leader in one step (one
    send of eight chunks); one step per shard, in eight.  Both verify, and the merged one
    beats NCCL at 1 KiB."""
    coll = patterns.build("allgather", list(two_ndv2.live_npus), size=KIB, chunks_per_npu=1)
    fams = multinode_candidates(two_ndv2, coll)
    for name, nic_steps in ((LEADER_STAGED, 8), (LEADER, 1 + (not inplace))):
        for inst in (1, 2):
            prog = _verified(fams[name].lower(Shape(inst, "LL"),
                                              MscclOptions(inplace=inplace)))
            sends = [st.cnt for tb in prog.gpus[0].tbs if tb.send == 8 and tb.chan == 0
                     for st in tb.steps if st.type == "s"]
            assert sum(sends) == 8
            assert len(sends) == (nic_steps if inst == 1 else 8)
    ours = estimate_program(fams[LEADER].lower(Shape(1, "LL"), MscclOptions(inplace=True)),
                            two_ndv2, KIB).time
    assert _nccl_best(two_ndv2, "allgather", KIB) / ours >= 1.5
