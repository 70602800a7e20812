"""Fused digits: an all-reduce plan ends its reduce-scatters with all-reduce exchanges of binary
groups (tacos.scale.exchange) instead of a reduce-scatter and an all-gather each."""

from __future__ import annotations

from dataclasses import replace

import pytest

import tacos
from tacos.check.bounds import lower_bound
from tacos.check.symmetric import verify_symmetric
from tacos.check.verify import verify_schedule
from tacos.model.clos import ClosFabric, clos_h100
from tacos.model.symmetric_plan import expand
from tacos.scale.exchange import exchange_allreduce
from tacos.scale.synthesize import fusable, part_steps, synthesize_symmetric

CLOS2 = ClosFabric(4, 2, hosts_per_leaf=2)
CLOS3 = ClosFabric(8, 3, hosts_per_leaf=2, leaves_per_pod=2)


@pytest.mark.parametrize("axis", [1, 2])
def test_exchange_is_one_route_alpha_for_the_bytes_of_two(axis: int) -> None:
    topo = CLOS2.template(axis)
    size = 2**20
    s = exchange_allreduce(topo, size)
    assert s is not None and verify_schedule(s).ok
    assert len(s.transfers) == 2 and {t.start for t in s.transfers} == {0.0}
    route = s.transfers[0].route
    alpha = sum(topo.links[li].alpha for li in route)
    assert s.makespan == pytest.approx(alpha + size / topo.links[route[0]].bandwidth, rel=1e-12)
    # the reduce-scatter then all-gather it replaces: the same bytes, two route alphas
    assert exchange_allreduce(CLOS2.template(0), size) is None   # 8 GPUs: not a pair


def test_steps_fuse_the_innermost_digits() -> None:
    assert fusable(CLOS3, "allreduce") == 3 and fusable(CLOS3, "allgather") == 0
    assert part_steps(CLOS3, "allreduce", 0, 2) == [
        (0, "reducescatter"), (1, "reducescatter"), (2, "allreduce"), (3, "allreduce"),
        (1, "allgather"), (0, "allgather")]


@pytest.mark.parametrize("system", [pytest.param(CLOS2, id="clos2"),
                                    pytest.param(CLOS3, id="clos3", marks=pytest.mark.slow)])
@pytest.mark.parametrize("per_npu", [64, pytest.param(2**16, marks=pytest.mark.slow)])  # ~0.7 s
def test_fused_plan_equals_full_synthesis_and_both_verifiers(system, per_npu: int) -> None:
    size = per_npu * system.n_npus * 2
    sym = synthesize_symmetric(system, "allreduce", size, parts=2, solvers=("greedy", "direct"))
    full = synthesize_symmetric(system, "allreduce", size, parts=2,
                                solvers=("greedy", "direct"), symmetric=False)
    plain = synthesize_symmetric(system, "allreduce", size, parts=2,
                                 solvers=("greedy", "direct"), fuse=False)
    assert any(p.kind == "allreduce" for p in sym.phases)
    assert not any(p.kind == "allreduce" for p in plain.phases)
    assert sym.makespan == full.makespan and sym.makespan < plain.makespan
    assert verify_symmetric(sym).ok
    written = expand(sym)
    report = verify_schedule(written)
    assert report.ok, report.text(5)
    assert written.makespan == pytest.approx(sym.makespan, rel=1e-12)
    ref = tacos.collective("allreduce", range(system.n_npus), size=sym.size)
    assert sym.makespan >= lower_bound(written.topology, ref).value


def test_rejects_a_digit_reduced_twice() -> None:
    plan = synthesize_symmetric(CLOS2, "allreduce", 64 * 32, parts=1, solvers=("direct",))
    fused = [p for p in plan.phases if p.kind == "allreduce"]
    assert fused
    # an all-reduce along an axis the part was already reduced over counts contributions twice
    twice = replace(fused[0], start=plan.makespan)
    bad = replace(plan, phases=plan.phases + (twice,))
    assert "data" in verify_symmetric(bad).rules()
    assert not verify_schedule(expand(bad)).ok
    # a fused digit in a reduce-scatter plan is not a phase that plan may have
    rs_plan = synthesize_symmetric(CLOS2, "reducescatter", 64 * 32, parts=1,
                                   solvers=("direct",))
    odd = replace(rs_plan, phases=rs_plan.phases + (replace(fused[0], start=rs_plan.makespan),))
    assert "data" in verify_symmetric(odd).rules()


def test_large_parts_fuse_fewer_digits_than_small_ones() -> None:
    fabric = clos_h100(nodes=64, tiers=2, hosts_per_leaf=8)
    small = synthesize_symmetric(fabric, "allreduce", 2**20 // 512 * 512, parts=1,
                                 solvers=("direct",))
    large = synthesize_symmetric(fabric, "allreduce", 2**31, parts=1, solvers=("direct",))
    n_small = sum(p.kind == "allreduce" for p in small.phases)
    n_large = sum(p.kind == "allreduce" for p in large.phases)
    assert n_small > n_large >= 1
    assert verify_symmetric(small).ok and verify_symmetric(large).ok
