"""The compiled greedy trial gives the same schedules as the pure-Python trial, seed for seed."""

from __future__ import annotations

import random
import sys

import numpy as np
import pytest

import tacos
from tacos.builders import mesh, ring, torus
from tacos.model.patterns import build
from tacos.model.topology import Link, Npu, Topology
from tacos.solvers.greedy import jit as greedy_jit
from tacos.solvers.greedy.core import Stuck
from tacos.solvers.greedy.instance import build_instance
from tacos.solvers.greedy.solver import GreedySolver
from tacos.solvers.greedy.trial import run_trial
from tacos.solvers.registry import Problem

pytestmark = pytest.mark.skipif(not greedy_jit.available(), reason="numba not available")


@pytest.fixture(autouse=True)
def _loaded():
    """Load the kernels first: small trials use them only once they are loaded."""
    greedy_jit.kernels()

MiB = 1 << 20
GiB = 1 << 30


def _hetero_mesh():
    # dimension 0 half as fast as dimension 1 (not slow enough to make islands)
    return mesh(4, 3, bandwidth=[25 * GiB, 50 * GiB], latency=0.5e-6)


TOPOLOGIES = {
    "ring8": lambda: ring(8, bandwidth=50 * GiB, latency=0.5e-6),
    "mesh4x4": lambda: mesh(4, 4, bandwidth=50 * GiB, latency=0.5e-6),
    "torus3x3x3": lambda: torus(3, 3, 3, bandwidth=50 * GiB, latency=0.5e-6),
    "hetero_mesh4x3": _hetero_mesh,
}


def _solve(topo, coll, **opts):
    opts.update(workers=1, seed=7)
    res = GreedySolver().solve(Problem(topo, coll, opts))
    assert res.status == "feasible"
    report = tacos.verify(res.schedule).raise_if_failed()
    assert report.ok, report.text(5)
    res.schedule.meta.pop("synthesis_time")
    return res.schedule


@pytest.mark.parametrize("name", sorted(TOPOLOGIES))
@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("max_merge", [1, 4])
@pytest.mark.parametrize("speculate", [True, False])
def test_same_schedule_bytes(name, k, max_merge, speculate, monkeypatch):
    topo = TOPOLOGIES[name]()
    n = topo.n_npus
    coll = build("allgather", range(n), size=64 * MiB // (n * k) * (n * k), chunks_per_npu=k)
    calls = []
    real = greedy_jit.run_trial_compiled
    monkeypatch.setattr(greedy_jit, "run_trial_compiled",
                        lambda *a: calls.append(a) or real(*a))
    opts = {"max_merge": max_merge, "trials": 3, "speculate": speculate}
    compiled = _solve(topo, coll, jit=True, **opts)
    assert len(calls) == 3
    python = _solve(topo, coll, jit=False, **opts)
    assert len(calls) == 3
    assert tacos.emit(compiled, "json") == tacos.emit(python, "json")
    if max_merge > 1 and k > 1:
        assert max(len(t.chunks) for t in compiled.transfers) > 1


def test_speculation_is_exercised():
    """The heterogeneous mesh with merged trials resends and replaces chunks, identically."""
    inst = build_instance(_hetero_mesh(), build("allgather", range(12), size=12 * 3 * MiB,
                                                chunks_per_npu=3))
    seen = {"speculative": 0, "replaced": 0, "dropped": 0}
    for trial in range(6):
        a = run_trial(inst, 1, trial, 4, jit=True)
        b = run_trial(inst, 1, trial, 4, jit=False)
        assert a.chunk_ptr is not None and b.chunk_ptr is None
        assert a.stats == b.stats
        assert (a.makespan, a.start.tolist(), a.end.tolist(), a.link.tolist(),
                list(a.chunk_tuples())) == (b.makespan, b.start, b.end, b.link,
                                            list(b.chunk_tuples()))
        for key in seen:
            seen[key] += a.stats[key]
    assert seen["speculative"] > 0 and seen["replaced"] + seen["dropped"] > 0


def test_env_var_turns_it_off(monkeypatch):
    topo = TOPOLOGIES["mesh4x4"]()
    inst = build_instance(topo, build("allgather", range(16), size=16 * MiB))
    monkeypatch.setenv(greedy_jit.ENV, "0")
    assert not greedy_jit.available()
    assert run_trial(inst, 0, 0, 1).chunk_ptr is None
    monkeypatch.setenv(greedy_jit.ENV, "1")
    assert run_trial(inst, 0, 0, 1).chunk_ptr is not None
    monkeypatch.setattr(greedy_jit, "_has_numba", lambda: False)  # as without numba
    assert run_trial(inst, 0, 0, 1).chunk_ptr is None


def test_unsupported_trials_stay_in_python():
    # relay chunks (an all-to-all over a ring: chunks pass through other members)
    inst = build_instance(TOPOLOGIES["ring8"](), build("alltoall", range(8), size=64 * 64))
    assert inst.relay_mask
    assert not greedy_jit.supported(inst)
    assert run_trial(inst, 0, 0, 1).chunk_ptr is None


def test_random_stream_matches_cpython():
    rng = random.Random("tacos-greedy:3:5")
    state = rng.getstate()[1]
    mt = np.asarray(state[:624], dtype=np.int64)
    pos = np.asarray([state[624]], dtype=np.int64)
    ref = random.Random()
    ref.setstate(rng.getstate())
    for i in range(1500):  # past two twists of the state
        if i % 3:
            assert greedy_jit.kernels().random01(mt, pos) == ref.random()
        else:
            n = 2 + i % 37
            assert greedy_jit.kernels().randbelow(n, mt, pos) == ref._randbelow(n)


def test_stuck_is_reported_by_both_paths():
    # NPU 1 can send to 0 but nothing reaches 1: 0's chunk cannot be served
    topo = Topology((Npu(0, "a"), Npu(1, "b")), (), (Link(1, 0, 1e-6, 1e9),))
    inst = build_instance(topo, build("allgather", range(2), size=2 * MiB))
    msgs = []
    for jit in (True, False):
        with pytest.raises(Stuck) as exc:
            run_trial(inst, 0, 0, 1, jit=jit)
        msgs.append(str(exc.value))
    assert msgs[0] == msgs[1]


def test_small_trials_do_not_load_numba(monkeypatch):
    inst = build_instance(TOPOLOGIES["mesh4x4"](), build("allgather", range(16), size=16 * MiB))
    assert greedy_jit.worth_it(inst)  # loaded by the fixture
    monkeypatch.delitem(sys.modules, "tacos.solvers.greedy.jit_kernel")
    assert inst.total_need < greedy_jit.MIN_WORK
    assert not greedy_jit.worth_it(inst)
    assert run_trial(inst, 0, 0, 1).chunk_ptr is None


def test_times_beyond_64_bit_ticks_fall_back_to_python():
    # a 1e5 s link latency is 1e20 ticks: past the kernel's int64 times
    topo = mesh(4, 4, bandwidth=[50 * GiB, 25 * GiB], latency=[0.5e-6, 1e5])
    inst = build_instance(topo, build("allgather", range(16), size=16 * MiB))
    assert greedy_jit.supported(inst)
    res = run_trial(inst, 0, 0, 1, jit=True)
    assert res.chunk_ptr is None and res.makespan > 10**20  # the pure-Python trial ran
    ref = run_trial(inst, 0, 0, 1, jit=False)
    assert (res.makespan, res.start, res.end, res.bits) == (ref.makespan, ref.start, ref.end,
                                                            ref.bits)
