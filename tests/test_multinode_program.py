"""The hierarchical multi-node MSCCL programs (tacos/msccl/multinode_program.py): nodes found
from the topology, programs verified, the NIC carrying only what must cross it, the runtime
model agreeing with the independent stream replay, and the shape chooser taking them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the benchmarks folder is run from the checkout, not installed

import tacos  # noqa: E402
from benchmarks.replay_streams import replay  # noqa: E402
from tacos.model import patterns  # noqa: E402
from tacos.msccl.lower import MscclOptions  # noqa: E402
from tacos.msccl.multinode_program import (  # noqa: E402
    HIERARCHICAL,
    multinode_candidates,
    node_groups,
    rail_layout,
)
from tacos.msccl.shape import Shape  # noqa: E402
from tacos.msccl.verify import verify_program  # noqa: E402


def _two_dgx():
    return tacos.load(ROOT / "examples" / "dgx_a100_2node.tdl").topology


def _family(topo, kind):
    coll = patterns.build(kind, list(topo.live_npus), size=1 << 20, chunks_per_npu=1)
    return multinode_candidates(topo, coll)[HIERARCHICAL]


def _verified(program):
    report = verify_program(program, sms=200, source="<hier>")
    assert report.ok, report.text(warnings=False)
    return program


def test_nodes_are_the_groups_joined_by_non_nic_links():
    topo = _two_dgx()
    nodes = node_groups(topo, list(topo.live_npus))
    assert [len(n) for n in nodes] == [8, 8]
    assert all(topo.node_name(topo.live_npus[r]).startswith("node[0]") for r in nodes[0])
    one = tacos.preset("dgx_a100", nodes=1).topology
    coll = patterns.build("allreduce", list(one.live_npus), size=1 << 20, chunks_per_npu=1)
    assert rail_layout(one, coll) is None  # a single node: no multi-node program


@pytest.mark.parametrize("example", ["ndv2_2node", "mi250_2node"])
def test_no_hierarchical_program_where_a_node_lacks_routes_between_its_gpus(example):
    """NDv2's cube mesh has no route between some GPUs of a node; MI250's partial xGMI mesh
    routes some pairs of a node through the network switch: the node phases would not stay
    inside the node (only the leader programs of tacos/msccl/multinode_leader.py apply)."""
    topo = tacos.load(ROOT / "examples" / f"{example}.tdl").topology
    for kind in ("allreduce", "allgather"):
        coll = patterns.build(kind, list(topo.live_npus), size=1 << 20, chunks_per_npu=1)
        assert rail_layout(topo, coll) is None
        assert set(multinode_candidates(topo, coll)) == {"latency-leader", "leader-staged"}


@pytest.mark.parametrize("inplace", [pytest.param(True, marks=pytest.mark.slow),  # ~0.5 s each
                                     False])
@pytest.mark.parametrize("kind", ["allreduce", "allgather"])
def test_programs_verify(kind, inplace):
    fam = _family(_two_dgx(), kind)
    for inst in (1, 2):
        prog = _verified(fam.lower(Shape(inst, "Simple"), MscclOptions(inplace=inplace)))
        assert prog.nchannels == inst
        assert prog.ngpus == 16


def test_allreduce_nic_carries_only_what_must_cross_it():
    """Each GPU sends 2 (M-1)/M of its block (S/G) through its NIC: the least an all-reduce
    over M nodes can; everything else stays inside the node."""
    topo = _two_dgx()
    fam = _family(topo, "allreduce")
    prog = _verified(fam.lower(Shape(2, "Simple"), MscclOptions(inplace=True)))
    node_of = {r: n for n, ranks in enumerate(fam.nodes) for r in ranks}
    nbytes = 64 << 20
    chunk = nbytes / prog.nchunksperloop
    for g in prog.gpus:
        out = sum(st.cnt * chunk for tb in g.tbs if tb.send >= 0
                  and node_of[tb.send] != node_of[g.id] for st in tb.steps if st.sends)
        m, size = len(fam.nodes), len(fam.nodes[0])
        assert out == pytest.approx(2 * (m - 1) / m * nbytes / size)


@pytest.mark.slow
def test_model_agrees_with_the_replay_on_the_hierarchical_allreduce():
    from tacos.runtime import estimate_program

    topo = _two_dgx()
    prog = _family(topo, "allreduce").lower(Shape(2, "Simple"), MscclOptions(inplace=True))
    model = estimate_program(prog, topo, 64 << 20).time
    assert abs(model / replay(prog, topo, 64 << 20) - 1) <= 0.10


@pytest.mark.slow  # about 3 s: the other tests here cover the families in the default run
def test_shape_chooser_takes_the_family_and_the_choice_verifies():
    from tacos.msccl.shape_choose import choose_shape

    topo = _two_dgx()
    fam = _family(topo, "allreduce")
    cands = [Shape(i, p) for i in (1, 2) for p in ("Simple", "LL128")]
    choice = choose_shape({HIERARCHICAL: fam}, topo, 64 << 20, base=MscclOptions(inplace=True),
                          candidates=cands)
    assert choice.plan == HIERARCHICAL
    assert choice.shape.instances == 2  # more channels win at 64 MiB
    assert "<algo" in choice.xml()  # verified on the way out


@pytest.mark.slow
def test_model_follows_the_replay_over_several_iterations():
    """Over several loop iterations the second trails the first by more than the busiest
    resource's work (dependency chains across thread blocks); the model times the second
    iteration behind the first and stays within 10 % of the replay, which plays every
    iteration out."""
    from tacos.runtime import estimate_program

    topo = _two_dgx()
    prog = _family(topo, "allreduce").lower(Shape(1, "LL128"), MscclOptions(inplace=True))
    nbytes = 512 << 20  # 4 iterations; the busiest resource alone: 0.86x the replay
    est = estimate_program(prog, topo, nbytes)
    assert est.detail["iterations"] >= 4
    assert abs(est.time / replay(prog, topo, nbytes) - 1) <= 0.10


def test_ll128_over_a_nic_is_refused_where_nccl_disables_it():
    """NCCL runs LL128 over the network only behind the GPU's own PCIe switch: NDv2's one
    NIC hangs off the CPU, DGX-A100 pairs every GPU with its NIC."""
    from tacos.errors import TacosError
    from tacos.runtime import estimate_program

    ndv2 = tacos.load(ROOT / "examples" / "ndv2_2node.tdl").topology
    coll = patterns.build("allgather", list(ndv2.live_npus), size=1 << 20, chunks_per_npu=1)
    sched = tacos.synthesize(ndv2, coll, solver="nccl-ring")
    from tacos.msccl.lower import lower

    prog = lower(sched, options=MscclOptions(proto="LL128"))
    with pytest.raises(TacosError, match="LL128 over the network"):
        estimate_program(prog, ndv2, 1 << 20)
    simple = lower(sched, options=MscclOptions(proto="Simple"))
    assert estimate_program(simple, ndv2, 1 << 20).time > 0
    dgx = _two_dgx()
    ll128 = _family(dgx, "allgather").lower(Shape(1, "LL128"), MscclOptions(inplace=True))
    assert estimate_program(ll128, dgx, 1 << 20).time > 0


@pytest.mark.slow  # ~2 s: a 4-instance ring on 16 GPUs and its replay
def test_port_shared_among_the_connections_active_on_average():
    """The lowered 2x DGX-A100 ring routes many connections through each NIC and NVSwitch
    port, not all active at once; splitting a port among the mean number active while it is
    busy times it within 3 % of the replay's fluid sharing (the most ever active together:
    1.07x)."""
    from tacos.msccl.lower import lower
    from tacos.runtime import estimate_program

    topo = _two_dgx()
    coll = patterns.build("allreduce", topo.live_npus, size=1 << 20, chunks_per_npu=1)
    prog = lower(tacos.synthesize(topo, coll, solver="nccl-ring"),
                 options=MscclOptions(instances=4))
    _verified(prog)
    model = estimate_program(prog, topo, 64 << 20).time
    assert abs(model / replay(prog, topo, 64 << 20) - 1) <= 0.03


@pytest.mark.slow
def test_size_window_on_two_dgx_takes_the_hierarchical_all_reduce():
    """``tacosc TOPO -c allreduce -o plans/``'s chooser, at 64 MiB on 2x DGX-A100: the
    hierarchical program beats every lowered schedule (about 25 s of shaping)."""
    from tacos.sweep import sweep
    from tacos.sweep_shaped import choose_windows

    topo = _two_dgx()
    res = sweep(topo, "allreduce", "64MiB", workers=1, trials=1)
    (choice,) = choose_windows(res, base=MscclOptions(inplace=True))
    assert choice.plan.startswith(HIERARCHICAL)  # four stages or eight
    assert "<algo" in choice.xml()


def _h100(nodes):
    return tacos.preset("dgx_h100", nodes=nodes).topology


@pytest.mark.slow
def test_rail_all_gather_follows_each_reduce_scatter_on_two_dgx_h100():
    """Where the NIC is fast against NVLink, the rail all-gathers each stage right after its
    reduce-scatter (and the reducers of a GPU's own sub-block work stage by stage), so the
    node's all-gather starts while it still reduce-scatters: faster in the model than every
    reduce-scatter first, and both verified."""
    from tacos.msccl.multinode_program import hierarchical_allreduce
    from tacos.runtime import estimate_program

    topo = _h100(2)
    fam = _family(topo, "allreduce")
    assert fam.lag == 0
    nodes = [list(n) for n in fam.nodes]
    opts = Shape(4, "Simple").options(MscclOptions(inplace=True))
    times = {}
    for lag in (0, None):
        prog = _verified(hierarchical_allreduce(nodes, 4, opts, lag=lag))
        times[lag] = estimate_program(prog, topo, 1 << 30).time
    assert times[0] < 0.9 * times[None]


def test_all_gather_sends_a_nodes_own_shards_before_the_rails():
    """The node's all-gather sends a GPU's own shard of every stage before the shards that
    cross the NIC: those steps wait for nothing."""
    fam = _family(_h100(2), "allgather")
    prog = _verified(fam.lower(Shape(2, "Simple"), MscclOptions(inplace=True)))
    node_of = {r: n for n, ranks in enumerate(fam.nodes) for r in ranks}
    for g in prog.gpus:
        for tb in g.tbs:
            if tb.send < 0 or node_of[tb.send] != node_of[g.id]:
                continue
            sends = [st for st in tb.steps if st.type == "s"]
            stages = len(sends) // len(fam.nodes)
            assert stages >= 2
            assert all(st.depid < 0 for st in sends[:stages])
            assert all(st.depid >= 0 for st in sends[stages:])


@pytest.mark.slow
def test_four_node_rail_program_verifies_and_deeper_pipelines_win():
    """On 4x DGX-A100 each rail all-reduces over four nodes (every NIC carries 2 (M-1)/M of
    the block); the family's program fits the SMs and the parser's nodes per rank, verifies,
    and its pipeline stages make it faster in the model than two stages."""
    from tacos.msccl.multinode_program import HIERARCHICAL_DEEP, hierarchical_allreduce
    from tacos.msccl.program import MAX_NODES
    from tacos.msccl.shape import shape_problems
    from tacos.runtime import estimate_program

    topo = tacos.preset("dgx_a100", nodes=4).topology
    coll = patterns.build("allreduce", list(topo.live_npus), size=1 << 20, chunks_per_npu=1)
    fams = multinode_candidates(topo, coll)
    deep = fams[HIERARCHICAL_DEEP]
    assert len(deep.nodes) == 4 and deep.lag == 1
    prog = _verified(deep.lower(Shape(4, "Simple"), MscclOptions(inplace=True)))
    assert shape_problems(prog) == []  # 108 SMs: fewer reducers at four instances
    assert all(1 + prog.ngpus + len(g.tbs) + sum(len(tb.steps) for tb in g.tbs) <= MAX_NODES
               for g in prog.gpus)
    nodes = [list(n) for n in deep.nodes]
    opts = Shape(4, "Simple").options(MscclOptions(inplace=True))
    two = _verified(hierarchical_allreduce(nodes, 4, opts, stages=2, lag=1, reducers=1))
    nbytes = 256 << 20
    assert estimate_program(prog, topo, nbytes).time < 0.9 * estimate_program(
        two, topo, nbytes).time


@pytest.mark.slow
def test_stages_shrink_to_fit_the_parsers_nodes_per_rank():
    """Asked for more stages than the runtime parser's 4096 nodes per rank hold (here with a
    build allowing 256 steps per thread block), the program takes fewer, still a power of
    two; it still verifies."""
    from tacos.msccl.multinode_program import hierarchical_allreduce
    from tacos.msccl.program import MAX_NODES

    topo = tacos.preset("dgx_a100", nodes=4).topology
    fam = _family(topo, "allreduce")
    nodes = [list(n) for n in fam.nodes]
    opts = Shape(2, "Simple").options(MscclOptions(inplace=True, max_steps_per_tb=256))
    prog = hierarchical_allreduce(nodes, 2, opts, stages=32, lag=1, reducers=4)
    assert verify_program(prog, sms=200, max_steps=256, source="<hier>").ok
    most = max(1 + prog.ngpus + len(g.tbs) + sum(len(tb.steps) for tb in g.tbs)
               for g in prog.gpus)
    assert most <= MAX_NODES
    stages = prog.nchunksperloop // (2 * 8 * 4 * 4)
    assert 1 < stages < 32 and stages & (stages - 1) == 0


@pytest.mark.slow
def test_rail_partials_folded_in_as_they_arrive_leave_room_for_eight_stages():
    """The rail receive thread blocks add the rail partials into a GPU's sub-block (``rrc``)
    instead of the reducers adding them from scratch: fewer steps per stage, so eight
    stages fit the 64-step limit on 2x DGX-A100 (seven unfolded, which does not divide
    power-of-two sizes: four), and the model times it faster at 1 GiB."""
    from tacos.msccl.multinode_program import hierarchical_allreduce
    from tacos.runtime import estimate_program

    topo = _two_dgx()
    nodes = [list(n) for n in _family(topo, "allreduce").nodes]
    opts = Shape(4, "Simple").options(MscclOptions(inplace=True))
    folded = _verified(hierarchical_allreduce(nodes, 4, opts, stages=8, lag=0))
    plain = _verified(hierarchical_allreduce(nodes, 4, opts, stages=8, lag=0, fold=False))
    assert folded.nchunksperloop == 2 * plain.nchunksperloop  # 8 stages against 4
    assert any(st.type == "rrc" for tb in folded.gpus[0].tbs for st in tb.steps)
    assert not any(st.type == "rrc" for tb in plain.gpus[0].tbs for st in tb.steps)
    assert estimate_program(folded, topo, 1 << 30).time < 0.97 * estimate_program(
        plain, topo, 1 << 30).time
