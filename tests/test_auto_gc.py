"""The ``auto`` portfolio pauses the cyclic garbage collector on small groups only, restores
it afterwards, and gives the answer of a run with the collector on."""

from __future__ import annotations

import gc
from types import SimpleNamespace

import tacos
from tacos.solvers import auto


def test_small_groups_run_with_the_collector_paused_and_restore_it(monkeypatch):
    seen = []
    monkeypatch.setattr(auto, "_run_portfolio",
                        lambda topology, collective, **kw: seen.append(gc.isenabled()))
    small = SimpleNamespace(group=tuple(range(auto.GC_PAUSE_MAX_GROUP)))
    large = SimpleNamespace(group=tuple(range(auto.GC_PAUSE_MAX_GROUP + 1)))
    assert gc.isenabled()
    auto.run_portfolio(None, small)
    auto.run_portfolio(None, large)
    assert seen == [False, True]
    assert gc.isenabled()


def test_the_collector_is_restored_after_an_error_and_the_answer_is_unchanged(monkeypatch):
    spec = tacos.parse("ring r[4] 50GB/s 1us\ncollective allgather size 1MiB\n")
    opts = dict(candidates=("hierarchical", "nccl"), seed=0)
    paused = auto.run_portfolio(spec.topology, spec.collective, **opts)
    monkeypatch.setattr(auto, "GC_PAUSE_MAX_GROUP", 0)  # the same run, collector on
    plain = auto.run_portfolio(spec.topology, spec.collective, **opts)
    assert paused[0] == plain[0] and paused[2]["times"] == plain[2]["times"]
    assert paused[1].transfers == plain[1].transfers
    monkeypatch.setattr(auto, "GC_PAUSE_MAX_GROUP", 64)

    def boom(*args, **kwargs):
        raise tacos.TacosError("no")

    monkeypatch.setattr(auto, "_run_portfolio", boom)
    try:
        auto.run_portfolio(spec.topology, spec.collective)
    except tacos.TacosError:
        pass
    assert gc.isenabled()
