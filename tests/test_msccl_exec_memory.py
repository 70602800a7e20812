"""The runtime model keeps its analyses (folded model, happens-before graph) of programs only
within a step budget (tacos/runtime/msccl_exec.py): what it drops it recomputes to the same
time."""

from __future__ import annotations

from dataclasses import replace

import tacos
from tacos.model.patterns import build
from tacos.msccl.lower import MscclOptions, lower
from tacos.runtime import estimate_program, msccl_exec


def _programs():
    topo = tacos.parse('topology "t"\ntorus t[3, 3] 50GiB/s 0.5us\n', source="test").topology
    coll = build("allreduce", topo.live_npus, size=9 * 2 * 65536, chunks_per_npu=2)
    sched = tacos.synthesize(topo, coll, solver="greedy", trials=1, workers=1)
    return topo, coll, [lower(sched, options=MscclOptions(instances=i, fit_fifo=False))
                        for i in (1, 2, 3)]


def _steps(program) -> int:
    return sum(len(tb.steps) for g in program.gpus for tb in g.tbs)


def test_analyses_stay_within_the_step_budget_and_time_the_same(monkeypatch):
    topo, coll, programs = _programs()
    msccl_exec._ANALYSED.clear()
    free = [[estimate_program(replace(p, proto=proto), topo, coll.size).time
             for proto in ("Simple", "LL")] for p in programs]
    assert len(msccl_exec._ANALYSED) >= len(programs)  # small programs: all kept
    budget = max(_steps(p) for p in programs)
    monkeypatch.setattr(msccl_exec, "ANALYSED_MAX_STEPS", budget)
    msccl_exec._ANALYSED.clear()
    for p, want in zip(programs, free, strict=True):
        for proto, t in zip(("Simple", "LL"), want, strict=True):
            assert estimate_program(replace(p, proto=proto), topo, coll.size).time == t
            newest = next(reversed(msccl_exec._ANALYSED.values()))
            assert newest[0] is p.gpus
            assert msccl_exec.analysed_steps() <= max(budget, newest[3])
    # the first program's analysis was dropped to make room: it is rebuilt, same time
    assert all(v[0] is not programs[0].gpus for v in msccl_exec._ANALYSED.values())
    assert estimate_program(programs[0], topo, coll.size).time == free[0][0]
