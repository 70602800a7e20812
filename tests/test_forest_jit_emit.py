"""forest's compiled list schedule (``forest/jit_emit.py``) gives the transfers of the Python one.

Every schedule a solve times is built both ways and compared transfer by transfer (times,
endpoints, routes, chunks, order), for merged and unmerged rounds and for slices striped over
parallel lanes; the plan's bytes are those of the pure-Python solve and two compiled solves give
the same bytes.  The kernel compiles on its first call (seconds on a fresh machine, cached on
disk afterwards), so these run with ``-m slow``; the switch that keeps small solves in Python is
checked in the default run."""

from __future__ import annotations

import pytest
from forest_topologies import mini_dgx
from tacos.backends.json_schedule import dumps
from test_forest_timed import BOXES

import tacos
from tacos.check.verify import verify_schedule
from tacos.model.patterns import build
from tacos.solvers.forest import memo, pipeline
from tacos.solvers.forest import solver as forest_solver
from tacos.synthesize import solve


def test_small_schedules_stay_in_python_until_the_kernel_is_loaded(monkeypatch):
    import sys

    monkeypatch.delitem(sys.modules, "tacos.solvers.forest.jit_emit", raising=False)
    monkeypatch.setenv("TACOS_JIT", "1")
    assert not pipeline.compiled(pipeline.JIT_MIN_WORK - 1)
    assert not pipeline.compiled(10 * pipeline.JIT_MIN_WORK, pipeline.JIT_MIN_NODES - 1)
    monkeypatch.setenv("TACOS_JIT", "0")
    assert not pipeline.compiled(10 * pipeline.JIT_MIN_WORK)  # switched off


def _both_ways(monkeypatch, seen: list) -> None:
    """Every emit of the solver runs compiled and in Python; the two must agree."""
    from tacos.solvers.forest import jit_emit

    plain_run = jit_emit.run
    ran = []

    def counted(*args, **kw):
        ran.append(1)
        return plain_run(*args, **kw)

    monkeypatch.setattr(jit_emit, "run", counted)
    monkeypatch.setattr(pipeline, "JIT_MIN_WORK", 0)

    def twice(*args, **kw):
        before = len(ran)
        fast = pipeline.emit(*args, **kw)
        compiled = len(ran) > before
        monkeypatch.setenv("TACOS_JIT", "0")
        try:
            slow = pipeline.emit(*args, **kw)
        finally:
            monkeypatch.setenv("TACOS_JIT", "1")
        assert tuple(fast) == tuple(slow)
        # two transfers leaving together on one route: parallel lanes (stripes or trees)
        lanes = len({(t.start, t.src, t.dst, t.route) for t in fast}) < len(fast)
        seen.append((kw.get("batch"), compiled, lanes))
        return fast

    monkeypatch.setenv("TACOS_JIT", "1")
    monkeypatch.setattr(forest_solver, "emit", twice)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["boxes allgather", "mini-dgx allreduce"])
def test_compiled_list_schedule_gives_the_same_transfers_and_plan_bytes(monkeypatch, case):
    pytest.importorskip("numba")
    name, kind = case.split()
    topo = (tacos.parse(BOXES, source="boxes").topology if name == "boxes" else mini_dgx(2))
    coll = build(kind, topo.live_npus, size=4 << 20)
    opts = {"timed": False, "shallow": False}  # (their integer programs are not under test)
    memo.clear()
    monkeypatch.setenv("TACOS_JIT", "0")
    plain = dumps(solve(topo, coll, solver="forest", bound=False, **opts).schedule)
    seen: list = []
    with monkeypatch.context() as m:
        _both_ways(m, seen)
        res = solve(topo, coll, solver="forest", bound=False, **opts)
    assert any(c for _, c, _ in seen), "the compiled list schedule never ran"
    assert {b for b, c, _ in seen if c} >= {False, True}  # unmerged and merged rounds
    if name == "boxes":  # four lanes inside a package
        assert any(lanes for _, c, lanes in seen if c)
    assert verify_schedule(res.schedule).ok
    assert dumps(res.schedule) == plain
    monkeypatch.setenv("TACOS_JIT", "1")
    monkeypatch.setattr(pipeline, "JIT_MIN_WORK", 0)
    again = dumps(solve(topo, coll, solver="forest", bound=False, **opts).schedule)
    assert again == plain  # same input, same bytes
