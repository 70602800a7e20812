"""A lowering that fails is not run again for the other pairing of the single peers when
pairing changed nothing in the rounds it ran: the remembered failure must be exactly the one a
fresh lowering raises, and a lowering that succeeds is unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest
from msccl_programs import forget_lowerings, lowering_outcome
from tacos.frontends.json_schedule import load

import tacos.msccl.lower as lower_mod
import tacos.msccl.lower_flow as flow_mod
from tacos.errors import TacosError
from tacos.msccl.lower import MscclOptions, lower

FIXTURES = Path(__file__).parent / "fixtures" / "lowering"




@pytest.mark.parametrize("name,max_steps,max_channels,skips,instances", [
    pytest.param("mesh4x4_allreduce_greedy", 2, 8, True,  # fails before pairing matters
                 1, marks=pytest.mark.slow),
    ("mesh4x4_allreduce_greedy", 8, 4, True, 1),
    pytest.param("mesh4x4_allreduce_greedy", 8, 8, False, 1, marks=pytest.mark.slow),  # fits
    ("mesh4x4_allreduce_greedy", 8, 8, True, 2),  # 2 x 7 channels
    pytest.param("mesh4x4_allreduce_greedy", 8, 16, False, 2, marks=pytest.mark.slow),
    pytest.param("dgx_a100_group4_allreduce_greedy", 2, 1, False, 1,  # pairing mattered
                 marks=pytest.mark.slow),
    ("dgx_a100_group4_allreduce_greedy", 2, 4, False, 1),  # unpaired fits, paired cannot
    ("group_noncontiguous_allgather_forest", 2, 1, False, 1),
])
def test_a_remembered_failure_is_the_fresh_one(name, max_steps, max_channels, skips,
                                               instances, monkeypatch):
    schedule = load(FIXTURES / f"{name}.json")
    single, paired = (MscclOptions(max_steps_per_tb=max_steps, max_channels=max_channels,
                                   instances=instances, fit_fifo=False, pair_peers=p)
                      for p in (False, True))
    fresh = {}
    for opts in (single, paired):
        forget_lowerings()
        fresh[opts] = lowering_outcome(schedule, opts)
    skipped = []
    for first, second in ((single, paired), (paired, single)):
        forget_lowerings()
        assert lowering_outcome(schedule, first) == fresh[first]
        failed = fresh[first].startswith("error")
        kept = len(lower_mod._FAILED)
        assert kept in ((1, 2) if failed else (0,))
        calls = []
        body = lower_mod._lower_body
        monkeypatch.setattr(lower_mod, "_lower_body",
                            lambda *a, _c=calls, _b=body, **k: _c.append(1) or _b(*a, **k))
        assert lowering_outcome(schedule, second) == fresh[second]
        monkeypatch.setattr(lower_mod, "_lower_body", body)
        # lowered again unless the first one's failure stands for both pairings
        assert calls == ([] if kept == 2 else [1])
        skipped.append(not calls)
    assert skipped[0] == skips


def test_a_failure_is_kept_only_while_its_schedule_lives() -> None:
    forget_lowerings()
    schedule = load(FIXTURES / "mesh4x4_allreduce_greedy.json")
    opts = MscclOptions(max_steps_per_tb=2, max_channels=4, fit_fifo=False)
    with pytest.raises(TacosError):
        lower(schedule, options=opts)
    assert lower_mod._FAILED
    key = next(iter(lower_mod._FAILED))
    del schedule
    flow_mod._FLOWS.clear()
    flow_mod._ORDERED.clear()
    import gc

    gc.collect()
    assert lower_mod._FAILED[key][0]() is None  # a weak reference: the plan is not held
