"""The forest solver's in-switch star: all-reduce through a switch that multicasts and reduces,
against its analytic time, NCCL's NVLS and the in-switch optimum; every schedule verified."""

from __future__ import annotations

import pytest

import tacos
from tacos.builders import star
from tacos.check.simulate import simulate
from tacos.check.verify import verify_schedule
from tacos.model.patterns import build
from tacos.solvers.forest.in_switch import (
    in_switch_allreduce,
    in_switch_hub,
    star_allreduce,
    star_optimum,
)

BW, ALPHA = 100e9, 1e-6


def switch(n=6, caps=("multicast", "reduce")):
    topo = star(n, bandwidth=BW, latency=ALPHA)
    return topo.with_capabilities({topo.switches[0].name: caps}) if caps else topo


def test_star_pipeline_fills_once_analytic_time():
    topo = switch()
    size = 6 * 2**24
    coll = build("allreduce", topo.live_npus, size=size)
    hub = in_switch_hub(topo, coll.group)
    assert hub is not None and hub[1] == topo.switches[0].id
    for slices in (1, 4, 16):
        s = star_allreduce(topo, coll, slices, 0, hub)
        rep = verify_schedule(s)
        assert rep.ok, rep.text(5)
        # reduce of slice j+1 overlaps multicast of slice j: (S + 1) slots of α + M/(S·B)
        assert s.makespan == pytest.approx((slices + 1) * (2 * ALPHA + size / slices / BW),
                                           rel=1e-9)
        assert simulate(s).time == pytest.approx(s.makespan, rel=1e-9)
        groups = {t.group for t in s.transfers}
        assert len(groups) == 2 * slices  # one reduce and one multicast group per slice
        assert {t.dst for t in s.transfers if t.op == "reduce"} == {0}
        assert {t.src for t in s.transfers if t.op == "copy"} == {0}


def test_needs_a_switch_that_multicasts_and_reduces():
    coll = build("allreduce", range(6), size=6 * 2**20)
    assert in_switch_allreduce(switch(caps=None), coll) is None
    assert in_switch_allreduce(switch(caps=("multicast",)), coll) is None
    ag = build("allgather", range(6), size=6 * 2**20)
    assert in_switch_allreduce(switch(), ag) is None


def test_forest_uses_the_star_on_an_nvls_switch_and_beats_nccl_nvls():
    from importlib import resources

    from tacos.solvers.nccl.solver import nccl_schedule

    topo = tacos.load(str(resources.files("tacos") / "presets" / "dgx_h100_node.tdl")).topology
    coll = build("allreduce", topo.live_npus, size=2**30)
    s = tacos.synthesize(topo, coll, solver="forest")
    rep = verify_schedule(s)
    assert rep.ok, rep.text(5)
    facts = s.meta["forest"]["in_switch"]
    assert facts["makespan"] == s.makespan  # the star won over the plain trees
    opt = star_optimum(topo, coll, facts["switch"])
    assert opt == pytest.approx(2**30 / 450e9)
    assert s.makespan / opt < 1.05  # within 5% of the in-switch optimum at 1 GiB
    nvls = nccl_schedule("nvls", topo, coll)
    assert s.makespan < nvls.makespan
    plain = tacos.synthesize(topo, coll, solver="forest", in_switch=False)
    assert verify_schedule(plain).ok
    assert all(t.group is None for t in plain.transfers)
    assert plain.makespan > s.makespan
