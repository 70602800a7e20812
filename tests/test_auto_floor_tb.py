"""The thread-block floor (tacos/solvers/auto_floor.py): a bound on the runtime model's time of
a lowered plan from its steps alone, never above the runtime floor nor the model's time, and
the portfolio's pruning with it keeps the winner."""

from __future__ import annotations

from pathlib import Path

import pytest

import tacos
from tacos.check.verify import verify_schedule
from tacos.msccl.lower import MscclOptions, lower
from tacos.runtime.msccl_exec import estimate_program
from tacos.solvers import auto_floor
from tacos.solvers.auto_floor import runtime_floor, thread_block_floor
from tacos.synthesize import solve

ROOT = Path(__file__).resolve().parent.parent
KiB, MiB = 1 << 10, 1 << 20


def _plan(example: str, solver: str = "greedy"):
    spec = tacos.load(str(ROOT / "examples" / f"{example}.tdl"))
    res = solve(spec.topology, spec.collective, solver=solver, seed=0, trials=1, workers=1,
                bound=False)
    assert res.schedule is not None and verify_schedule(res.schedule).ok
    return spec.topology, res.schedule


@pytest.mark.parametrize("example,instances", [
    ("ring8", (1,)), pytest.param("ring8", (2,), marks=pytest.mark.slow),
    pytest.param("switches", (1, 2), marks=pytest.mark.slow)])
def test_the_thread_block_floor_is_under_the_runtime_floor_and_the_model(
        example: str, instances: tuple[int, ...]) -> None:
    topo, plan = _plan(example)
    coll = plan.collective
    checked = 0
    for proto in ("LL", "LL128", "Simple"):
        for inst in instances:
            prog = lower(plan, options=MscclOptions(proto=proto, instances=inst))
            # one slice, a few and many iterations of the runtime's loop
            for nbytes in (64 * KiB, 4 * MiB, 256 * MiB):
                nbytes -= nbytes % prog.nchunksperloop
                quick = thread_block_floor(prog, topo, nbytes)
                floor = runtime_floor(prog, topo, nbytes, coll.group)
                est = estimate_program(prog, topo, nbytes, ranks=coll.group).time
                assert 0 < quick <= floor * (1 + 1e-12), (proto, inst, nbytes)
                assert floor <= est * (1 + 1e-12), (proto, inst, nbytes)
                checked += 1
    assert checked == 9 * len(instances)


def test_the_floor_takes_the_thread_block_bound_only_above_the_threshold() -> None:
    topo, plan = _plan("ring8")
    coll = plan.collective
    prog = lower(plan, options=MscclOptions(proto="Simple"))
    nbytes = 64 * MiB - (64 * MiB) % prog.nchunksperloop
    quick = thread_block_floor(prog, topo, nbytes)
    full = runtime_floor(prog, topo, nbytes, coll.group)
    assert quick < full  # the ring's blocks overlap: the timed floor is the sharper one
    assert runtime_floor(prog, topo, nbytes, coll.group, above=quick * 0.5) == quick
    assert runtime_floor(prog, topo, nbytes, coll.group, above=quick) == full
    assert runtime_floor(prog, topo, nbytes, coll.group, above=None) == full


def test_the_busiest_block_sets_the_thread_block_floor() -> None:
    # every rank of a ring all-gather sends and receives n - 1 chunks on one block pair, so
    # the bound is the base latency plus (n - 1) chunks in and out at the CTA rate
    from tacos.runtime.hardware import resolve

    topo, plan = _plan("ring8")
    prog = lower(plan, options=MscclOptions(proto="Simple"))
    hw = resolve(topo, None)
    nbytes = 8 * MiB
    moved = max(sum(st.cnt for st in tb.steps if st.type in auto_floor._MOVING)
                for g in prog.gpus for tb in g.tbs)
    # rank 0 receives every chunk it does not start with, over its receiving blocks
    need = sum(1 for c in plan.collective.chunks if 0 not in c.pre)
    receivers = sum(1 for tb in prog.gpus[0].tbs if tb.recv >= 0)
    assert 0 < receivers and moved * receivers >= need
    want = hw.base_latency("Simple") + moved * nbytes / prog.nchunksperloop \
        / max(hw.cta_rate["Simple"], hw.cta_reduce_rate("Simple"))
    assert thread_block_floor(prog, topo, nbytes) == pytest.approx(want, rel=1e-12)


@pytest.mark.slow
def test_pruning_by_the_thread_block_floor_keeps_the_winner(monkeypatch) -> None:
    from tacos.solvers.auto import run_portfolio

    spec = tacos.load(str(ROOT / "examples" / "ring8.tdl"))
    args = dict(greedy_chunks=True, seed=0, trials=1, workers=1)
    winner, plan, facts = run_portfolio(spec.topology, spec.collective, **args)
    _, _, full = run_portfolio(spec.topology, spec.collective, keep_plans=True, **args)
    monkeypatch.setattr(auto_floor, "thread_block_floor", lambda *a, **k: 0.0)  # never quick
    winner2, plan2, facts2 = run_portfolio(spec.topology, spec.collective, **args)
    assert winner == winner2 == min(full["times"], key=lambda k: (full["times"][k], k))
    assert facts["times"] == facts2["times"]
    assert plan.makespan == plan2.makespan
    left = {k for k, why in facts["skipped"].items() if why.startswith("cannot win")}
    assert left and left == {k for k, why in facts2["skipped"].items()
                             if why.startswith("cannot win")}
    for label in left:  # what the floors left out is slower in the full ranking
        assert full["times"][label] > facts["times"][winner]
