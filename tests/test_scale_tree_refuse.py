"""NCCL's tree refused as runtime-shaped MSCCL XML before it is built
(tacos/solvers/nccl/tree_refuse.py): the ceiling bounds every setting's built makespan and
counts, and the refusal is made exactly where, and in the words in which, the full path
(build the tuned tree, then the shape search's refusals) makes it."""

from __future__ import annotations

import pytest

import tacos
from tacos.check.verify import verify_schedule
from tacos.model.patterns import build
from tacos.msccl.lower import MscclOptions
from tacos.msccl.shape_choose import ELEMENT_BYTES, limits_for
from tacos.msccl.shape_refuse import busiest_steps, chunks_refusal, peer_counts, refusal
from tacos.solvers.nccl import tree as tree_mod
from tacos.solvers.nccl.system import system
from tacos.solvers.nccl.tree import nccl_tree, tree_schedule, tree_settings
from tacos.solvers.nccl.tree_refuse import makespan_ceiling, refused_unbuilt, tree_chunks

KiB = 1 << 10
TOPOLOGIES = {
    "torus-4x4": 'topology "t"\ntorus t[4, 4] 50GiB/s 0.5us\n',
    "ring-16": 'topology "r"\nbiring r[16] 100GB/s 1us\n',
    "mesh-2x8": 'topology "m"\nmesh m[2, 8] x 200GB/s 0.5us y 25GB/s 2us\n',
}


def _problem(text: str, size: int):
    topo = tacos.parse(text, source="test").topology
    coll = build("allreduce", topo.live_npus, size=size, chunks_per_npu=1)
    return topo, coll, system(topo, coll.group)


@pytest.mark.parametrize("name", sorted(TOPOLOGIES))
@pytest.mark.parametrize("budget", [200, 330])  # a cap of 3 or 5 slices on 16 NPUs
def test_the_ceiling_bounds_every_settings_build(name, budget, monkeypatch):
    monkeypatch.setattr(tree_mod, "MAX_TRANSFERS", budget)
    topo, coll, sys_ = _problem(TOPOLOGIES[name], 256 * KiB)
    settings = tree_settings(sys_, coll)
    assert any(s["slices"] > 1 for s in settings)
    for s in settings:
        sched = tree_schedule(sys_, coll, s["channels"], s["slices"])
        assert verify_schedule(sched).ok
        got = makespan_ceiling(sys_, coll, s["channels"], s["slices"])
        assert got is not None
        assert sched.makespan <= got.makespan
        assert got.chunks == len(sched.collective.chunks) \
            == tree_chunks(coll, s["channels"], s["slices"])
        _, out, into = peer_counts(sched)
        assert max(out, into) <= got.peers
        _, nodes, steps = busiest_steps(sched)
        assert steps <= got.transfers and nodes <= got.nodes


@pytest.mark.parametrize("name", sorted(TOPOLOGIES))
@pytest.mark.parametrize("budget,size", [(200, 256 * KiB), (330, 256 * KiB),
                                         (200, 96 * KiB), (10_000, 256 * KiB)])
def test_the_tree_is_refused_unbuilt_exactly_where_the_full_path_refuses(
        name, budget, size, monkeypatch):
    monkeypatch.setattr(tree_mod, "MAX_TRANSFERS", budget)
    topo, coll, sys_ = _problem(TOPOLOGIES[name], size)
    elements = size // ELEMENT_BYTES
    lim = limits_for(topo, MscclOptions().max_steps_per_tb)
    got = refused_unbuilt(sys_, coll, elements, lim)
    tuned = nccl_tree(sys_, coll)  # the full path: the tuned tree, then the refusals
    assert verify_schedule(tuned).ok
    full = refusal(tuned, lim) or chunks_refusal(tuned, elements)
    if got is not None:
        assert got[0] == full
        assert "not built" in got[1]
    elif budget == 200 and size == 256 * KiB and name != "mesh-2x8":
        # 3 slices win by far on the torus and the ring: proved there (on the mesh the
        # ceiling of 3 slices is above the makespan of 2, and the tree is built)
        pytest.fail(f"not proved: {full!r}")
    if budget == 10_000:  # powers of two only: every count divides, nothing is claimed
        assert got is None and not full
