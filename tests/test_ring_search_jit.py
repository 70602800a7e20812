"""NCCL's ring search compiled (tacos/solvers/nccl/ring_search_jit.py): the same paths and the
same random generator left behind as the Python search, on random lane graphs and on the rings
of a 4x4x4 torus.  Compiling the kernel on a fresh machine takes seconds, so these run with
-m slow."""

from __future__ import annotations

import random

import pytest

import tacos
from tacos.solvers.nccl import ring_search_jit, rings
from tacos.solvers.nccl.system import system

pytest.importorskip("numba")
pytestmark = pytest.mark.slow


def _graph(seed: int):
    """A random directed lane graph, a start, an end (or None) and whether to close a cycle."""
    r = random.Random(seed)
    n = r.choice([3, 5, 8, 12, 20, 33])
    nodes = sorted(r.sample(range(100), n))
    density = r.choice([0.15, 0.3, 0.6, 0.9])
    lanes = {(u, w): r.randint(0, 3) for u in nodes for w in nodes + [500, 501]
             if u != w and r.random() < density}  # 500, 501: hops outside the search

    def succ(v: int) -> list[int]:
        return [w for w in nodes + [500, 501] if lanes.get((v, w), 0) > 0]

    weight = (lambda v, w: lanes.get((v, w), 0)) if seed % 3 else None
    end = nodes[-1] if seed % 5 == 1 else None
    return nodes, nodes[0], succ, weight, end, end is None and seed % 2 == 0


def test_same_paths_and_draws_as_python_on_random_graphs():
    found = failed = 0
    for seed in range(300):
        nodes, start, succ, weight, end, cycle = _graph(seed)
        budget = random.Random(seed).choice([10, 300, 20_000])
        py, jit = random.Random(seed), random.Random(seed)
        for _ in range(seed % 4):  # a generator already used, mid-block
            py.random(), jit.random()
        want = rings._search_python(nodes, start, succ, py, budget, end=end, cycle=cycle,
                                    weight=weight)
        got = ring_search_jit.search(nodes, start, succ, jit, budget, end=end, cycle=cycle,
                                     weight=weight)
        assert got == want, seed
        assert jit.getstate() == py.getstate(), seed
        found += want is not None
        failed += want is None
    assert found > 50 and failed > 50  # both outcomes are compared


def test_generator_twists_inside_the_kernel():
    """A long search draws past the 624 words of one Mersenne Twister block."""
    nodes = list(range(40))
    succ = lambda v: [w for w in nodes if w != v]  # noqa: E731 - complete: many draws
    py, jit = random.Random(7), random.Random(7)
    want = rings._search_python(nodes, 0, succ, py, 5000, cycle=True)
    got = ring_search_jit.search(nodes, 0, succ, jit, 5000, cycle=True)
    assert got == want and got is not None
    assert jit.getstate() == py.getstate()


def test_kernel_declines_what_it_does_not_take():
    rng = random.Random(1)
    state = rng.getstate()
    assert ring_search_jit.search([1, 1, 2], 1, lambda v: [2], rng, 10) is False
    assert ring_search_jit.search([1, 2], 3, lambda v: [2], rng, 10) is False
    assert rng.getstate() == state


def test_torus_rings_are_the_python_search_s(monkeypatch):
    monkeypatch.setenv("TACOS_CACHE_DIR", "")  # search, do not read an answer kept on disk
    topo = tacos.parse('topology "t"\ntorus t[4, 4, 4] 50GiB/s 0.5us\n').topology
    group = list(range(64))
    out = {}
    for jit in ("1", "0"):
        monkeypatch.setenv("TACOS_JIT", jit)
        assert ring_search_jit.usable(group) == (jit == "1")
        out[jit] = rings.intra_rings(system(topo, group), group)
    assert out["1"] == out["0"]
    assert len(out["1"]) >= 2 and all(sorted(r) == group for r in out["1"])


@pytest.mark.parametrize("loaded", [False, True])
def test_search_answers_as_python_with_or_without_the_kernel_loaded(monkeypatch, loaded):
    """Not loaded: a short Python search first, then the compiled one from the start."""
    monkeypatch.setattr(ring_search_jit, "MIN_NODES", 1)
    monkeypatch.setattr(ring_search_jit, "PYTHON_STEPS", 40)
    monkeypatch.setattr(ring_search_jit, "loaded", lambda: loaded)
    kernel_runs = []
    real = ring_search_jit.search
    monkeypatch.setattr(ring_search_jit, "search",
                        lambda *a, **k: kernel_runs.append(1) or real(*a, **k))
    for seed in range(120):
        nodes, start, succ, weight, end, cycle = _graph(seed)
        budget = random.Random(seed).choice([10, 40, 300, 20_000])
        py, mixed = random.Random(seed), random.Random(seed)
        want = rings._search_python(nodes, start, succ, py, budget, end=end, cycle=cycle,
                                    weight=weight)
        got = rings._search(nodes, start, succ, mixed, budget, end=end, cycle=cycle,
                            weight=weight)
        assert got == want, seed
        assert mixed.getstate() == py.getstate(), seed
    assert 0 < len(kernel_runs) < 120 if not loaded else len(kernel_runs) == 120
