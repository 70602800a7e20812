"""The compiled first-fit placement of the baselines' lowering
(tacos/solvers/lowering/place_jit.py): the same transfers as the Python loop, and the same
state left behind for whatever is placed next.  Compiling the kernel on a fresh machine takes
seconds, so these run with -m slow."""

from __future__ import annotations

from pathlib import Path

import pytest

import tacos
from tacos.check.verify import verify_schedule
from tacos.model.patterns import build
from tacos.solvers.baselines.solver import baseline_schedule
from tacos.solvers.lowering import place_jit
from tacos.solvers.lowering.program import Lowering

pytest.importorskip("numba")
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
MiB = 1 << 20

TOPOLOGIES = {
    "biring": 'topology "ring"\nbiring r[8] 100GB/s 1us\n',
    "mesh": 'topology "mesh"\nmesh m[3, 3] x 200GB/s 0.5us y 25GB/s 2us\n',  # relays
    "fattree": (ROOT / "examples" / "fattree.tdl").read_text(),  # routes through switches
    "dgx": "use dgx_a100(nodes=2)\n",
}


def _problem(name: str, kind: str, chunks: int = 2):
    topo = tacos.parse(TOPOLOGIES[name], source="test").topology
    npus = topo.live_npus
    n = len(npus) * chunks
    return topo, build(kind, npus, size=(64 * MiB) // n * n, chunks_per_npu=chunks)


def _both(monkeypatch, make):
    monkeypatch.setattr(place_jit, "MIN_SENDS", 10 ** 12)
    python = make()
    monkeypatch.setattr(place_jit, "MIN_SENDS", 0)
    compiled = make()
    return python, compiled


@pytest.mark.parametrize("topo_name", sorted(TOPOLOGIES))
@pytest.mark.parametrize("algo", ["ring", "rhd", "direct", "dbtree"])
@pytest.mark.parametrize("kind", ["allgather", "allreduce"])
def test_baselines_place_the_same_transfers(topo_name: str, algo: str, kind: str,
                                            monkeypatch) -> None:
    topo, coll = _problem(topo_name, kind)
    python, compiled = _both(monkeypatch, lambda: baseline_schedule(algo, topo, coll))
    assert compiled.transfers == python.transfers
    assert compiled.makespan == python.makespan
    assert verify_schedule(compiled).ok


def test_nccl_rings_place_the_same_transfers(monkeypatch) -> None:
    from tacos.solvers.nccl.rings import ring_schedule
    from tacos.solvers.nccl.system import system

    topo, coll = _problem("dgx", "allgather", chunks=1)
    sys_ = system(topo, coll.group)
    for channels in (1, 4):
        python, compiled = _both(monkeypatch, lambda c=channels: ring_schedule(sys_, coll, c))
        assert compiled.transfers == python.transfers
        assert verify_schedule(compiled).ok


def test_the_calendar_left_behind_is_the_python_one(monkeypatch) -> None:
    # a second program placed after a compiled one (by the Python loop: the lowering is no
    # longer fresh) lands where it lands after the Python loop placed the first
    from tacos.solvers.baselines import algos
    from tacos.solvers.lowering.hops import NpuGraph

    topo, coll = _problem("fattree", "allgather")
    members = list(coll.group)
    blocks = {m: tuple(c.id for c in coll.chunks if m in c.pre) for m in members}

    def make():
        low = Lowering(topo, coll, NpuGraph(topo))
        low.run(algos.ring_allgather(members, blocks))
        fresh = place_jit.usable(low, [([0, 1], (0,))] * 10)
        low.run(algos.direct_allgather(members, blocks))  # the same chunks again
        return low, fresh

    (py, fresh_py), (jit, fresh_jit) = _both(monkeypatch, make)
    assert not fresh_py and not fresh_jit  # the second program ran in Python both times
    assert jit._rows == py._rows
    assert jit._avail == py._avail
    booked = {li for li, r in py.calendar._res.items() if r.busy}
    assert booked == {li for li, r in jit.calendar._res.items() if r.busy}
    for li in booked:
        a, b = py.calendar.lanes(li), jit.calendar.lanes(li)
        assert a.busy == b.busy
        assert [(s.starts, s.ends) for s in a.servers] == [(s.starts, s.ends)
                                                           for s in b.servers]
