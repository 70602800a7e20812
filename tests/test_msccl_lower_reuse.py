"""Lowerings of one plan share work (its flow, and whole programs whose body is the same): the
result must be what a fresh lowering gives, in any order of requests."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from tacos.frontends.json_schedule import load

import tacos.msccl.lower as lower_mod
import tacos.msccl.lower_flow as flow_mod
from tacos.msccl.lower import MscclOptions, lower
from tacos.msccl.xml_writer import emit_xml

FIXTURES = Path(__file__).parent / "fixtures" / "lowering"

#: the shapes a search and a writer ask for, in an order where later ones can reuse earlier ones
ORDER = [
    MscclOptions(instances=2, fit_fifo=False, pair_peers=True),
    MscclOptions(instances=2, fit_fifo=False),
    MscclOptions(instances=2, fit_fifo=False, port_order=True),
    MscclOptions(instances=2, proto="LL128", fit_fifo=False, name="shaped"),
    MscclOptions(instances=2, proto="LL", max_bytes=1 << 20, inplace=True),
    MscclOptions(instances=1, fit_fifo=False, pair_peers=True),
    MscclOptions(instances=1, fit_fifo=False),
]


def _forget() -> None:
    lower_mod._KEPT.clear()
    flow_mod._FLOWS.clear()
    flow_mod._ORDERED.clear()


@pytest.mark.parametrize("name", ["mesh4x4_allreduce_greedy",
                                  pytest.param("hypercube_alltoall_greedy",  # ~0.6 s
                                               marks=pytest.mark.slow),
                                  "group_noncontiguous_allgather_forest"])
def test_shared_lowerings_equal_fresh_ones_in_any_order(name: str) -> None:
    schedule = load(FIXTURES / f"{name}.json")
    fresh = {}
    for opts in ORDER:
        _forget()
        fresh[opts] = emit_xml(lower(schedule, options=opts))
    _forget()
    for opts in ORDER + ORDER[::-1]:
        assert emit_xml(lower(schedule, options=opts)) == fresh[opts], opts


def test_a_header_change_reuses_the_body_and_pairing_that_changes_nothing_is_shared() -> None:
    schedule = load(FIXTURES / "mesh4x4_allreduce_greedy.json")
    _forget()
    simple = lower(schedule, options=MscclOptions(instances=2, fit_fifo=False))
    ll128 = lower(schedule, options=MscclOptions(instances=2, fit_fifo=False, proto="LL128",
                                                 name="other"))
    assert ll128.gpus is simple.gpus  # the same body, another header
    assert (ll128.proto, ll128.name, simple.proto) == ("LL128", "other", "Simple")
    paired = lower(schedule, options=MscclOptions(instances=2, fit_fifo=False, pair_peers=True))
    _forget()
    fresh_paired = lower(schedule, options=MscclOptions(instances=2, fit_fifo=False,
                                                        pair_peers=True))
    assert paired == fresh_paired
    assert paired.gpus is simple.gpus  # every rank's peers pair up: pairing changes nothing
    _forget()
    schedule = load(FIXTURES / "dgx_a100_group4_allreduce_greedy.json")
    unpaired = lower(schedule, options=MscclOptions(fit_fifo=False))
    paired = lower(schedule, options=MscclOptions(fit_fifo=False, pair_peers=True))
    assert paired.gpus != unpaired.gpus  # here pairing matters: lowered on its own


def test_kept_programs_and_flows_stay_within_their_budgets(monkeypatch) -> None:
    schedule = load(FIXTURES / "hypercube_alltoall_greedy.json")
    _forget()
    monkeypatch.setattr(lower_mod, "_KEPT_MAX_STEPS", 1)
    monkeypatch.setattr(flow_mod, "_FLOWS_MAX_RUNS", 1)
    first = lower(schedule, options=MscclOptions())
    assert not lower_mod._KEPT and not flow_mod._FLOWS  # too large to keep
    again = lower(schedule, options=replace(MscclOptions(), proto="LL"))
    assert again.gpus is not first.gpus and again.gpus == first.gpus
