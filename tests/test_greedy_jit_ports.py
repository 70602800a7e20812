"""The compiled port trial gives the same schedules as the Python port trial, seed for seed."""

from __future__ import annotations

import pytest

import tacos
from tacos.model.patterns import build
from tacos.solvers.greedy import jit_ports
from tacos.solvers.greedy.solver import GreedySolver
from tacos.solvers.registry import Problem

pytestmark = pytest.mark.skipif(not jit_ports.available(), reason="numba not available")

MiB = 1 << 20

SYSTEMS = {
    "dgx2_2node": "use dgx2(nodes=2)",
    "dgx_a100_2node": "use dgx_a100(nodes=2)",
    "mi250_2node": "use mi250(nodes=2)",
    "fattree_ecmp": "fattree host[16] leaves=4 spines=2 down 50GB/s 1us up 100GB/s 1us",
    "leafspine_4to1": "fattree host[16] leaves=4 spines=2 down 64GB/s 1us up 32GB/s 1us",
    "dragonfly": "dragonfly d[4, 5] local 400GB/s 0.5us global 200GB/s 1us",
}


@pytest.fixture(autouse=True)
def _loaded():
    """Load the kernel first: small trials use it only once it is loaded."""
    jit_ports.prepare_kernel()


def _solve(topo, coll, seed, **opts):
    opts.update(workers=1, seed=seed)
    res = GreedySolver().solve(Problem(topo, coll, opts))
    assert res.status == "feasible"
    report = tacos.verify(res.schedule)
    assert report.ok, report.text(5)
    res.schedule.meta.pop("synthesis_time")
    return res.schedule


#: the 32-GPU systems take 0.5-1 s each: -m slow; the default run keeps the 16-20 NPU ones
BIG_SYSTEMS = ("dgx2_2node", "mi250_2node")


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in BIG_SYSTEMS
                                  else n for n in sorted(SYSTEMS)])
@pytest.mark.parametrize("k", [1, pytest.param(3, marks=pytest.mark.slow)])
def test_same_schedule_bytes(name, k, monkeypatch):
    topo = tacos.parse(SYSTEMS[name]).topology
    n = len(topo.live_npus)
    coll = build("allgather", topo.live_npus, size=64 * MiB // (n * k) * (n * k),
                 chunks_per_npu=k)
    calls = []
    real = jit_ports.run_port_trial_compiled
    monkeypatch.setattr(jit_ports, "run_port_trial_compiled",
                        lambda *a: calls.append(a) or real(*a))
    for seed in (0, 5):
        opts = {"trials": 4}  # max_merge 'auto': the ladder of caps, and cap 1
        compiled = _solve(topo, coll, seed, jit=True, **opts)
        assert len(calls) >= 4
        made = len(calls)
        python = _solve(topo, coll, seed, jit=False, **opts)
        assert len(calls) == made
        assert tacos.emit(compiled, "json") == tacos.emit(python, "json")


@pytest.mark.parametrize("name", ["dgx2_2node", "dragonfly"])
def test_unequal_chunk_sizes_match(name):
    """Chunks that differ by a byte (a buffer that does not split evenly) time by their sizes."""
    topo = tacos.parse(SYSTEMS[name]).topology
    n = len(topo.live_npus)
    coll = build("allgather", topo.live_npus, size=n * 1_000_003, chunks_per_npu=3)
    assert len({c.size for c in coll.chunks}) > 1
    a = _solve(topo, coll, 2, jit=True, trials=3)
    b = _solve(topo, coll, 2, jit=False, trials=3)
    assert tacos.emit(a, "json") == tacos.emit(b, "json")


def test_reduce_scatter_and_groups_match():
    """A reduction (inverted to its non-combining dual) and a sub-group on a two-node system."""
    spec = tacos.parse("use dgx_a100(nodes=2)")
    topo = spec.topology
    for kind, group in (("reducescatter", topo.live_npus),
                        ("allgather", topo.live_npus[::2])):
        coll = build(kind, group, size=48 * MiB, chunks_per_npu=2)
        a = tacos.synthesize(topo, coll, solver="greedy", seed=3, trials=3, workers=1, jit=True)
        b = tacos.synthesize(topo, coll, solver="greedy", seed=3, trials=3, workers=1,
                             jit=False)
        for s in (a, b):
            s.meta.pop("synthesis_time", None)
            assert tacos.verify(s).ok
        assert tacos.emit(a, "json") == tacos.emit(b, "json")


def test_relay_trials_stay_in_python():
    """Chunks that need relays (here: a broadcast from one NPU of a sub-group through
    non-members) are outside the compiled trial's cover."""
    from tacos.solvers.greedy.ports import build_port_instance
    from tacos.solvers.islands import find_islands

    topo = tacos.parse("use dgx_a100(nodes=2)").topology
    npus = topo.live_npus
    coll = build("broadcast", npus[:4], size=4 * MiB, root=npus[0])
    inst = build_port_instance(topo, coll, npus, find_islands(topo, npus))
    assert inst.relay_mask
    assert not jit_ports.supported(inst)
    full = build("allgather", npus, size=16 * MiB)
    inst = build_port_instance(topo, full, npus, find_islands(topo, npus))
    assert jit_ports.supported(inst)
