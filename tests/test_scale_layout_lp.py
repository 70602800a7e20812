"""The critical-path LP that proposes part sizes for symmetric plans."""

from __future__ import annotations

import pytest

from tacos.check.symmetric import verify_symmetric
from tacos.model.clos import clos_h100
from tacos.scale.layout_lp import affine, lp_layouts, lp_weights, stage_times
from tacos.scale.synthesize import synthesize_symmetric


@pytest.mark.parametrize("n", [1, 2, 5])
def test_two_equal_stages_without_alpha_take_equal_parts(n: int) -> None:
    # Johnson's two-machine flow shop: the end is 1 + the largest part, so equal parts
    end, w = lp_weights([(0.0, 1.0), (0.0, 1.0)], n)
    assert end == pytest.approx(1 + 1 / n)
    assert max(w) == pytest.approx(1 / n)


def test_alpha_per_part_limits_the_count_and_ramps_the_ends() -> None:
    stages = [(0.0, 0.39), (0.05, 1.0), (0.0, 0.39)]   # a fill, an α-paying middle, a drain
    ends = {n: lp_weights(stages, n)[0] for n in range(1, 12)}
    best = min(ends, key=ends.get)
    assert 2 < best < 11                                # more parts stop paying for their α
    _, w = lp_weights(stages, best)
    assert w[0] < w[best // 2] and w[-1] < w[best // 2]  # small first and last parts
    assert lp_layouts(stages, [best])[0] == tuple(max(1, round(x * 1000)) for x in w
                                                  if x * 1000 >= 0.5)


def test_affine_fit_recovers_alpha_and_rate() -> None:
    got = affine([3.0 + 10.0], [3.0 + 10.0 / 8], 8)
    assert got == [pytest.approx((3.0, 10.0))]


@pytest.mark.slow
def test_symmetric_synthesis_tries_the_lp_layouts() -> None:
    fabric = clos_h100(nodes=4, hosts_per_leaf=2)
    plan = synthesize_symmetric(fabric, "allreduce", 64 << 20, solvers=("direct",))
    assert verify_symmetric(plan).ok
    one = synthesize_symmetric(fabric, "allreduce", 64 << 20, solvers=("direct",), parts=1)
    assert len(stage_times(one)) == 3                   # NVSwitch, rails, NVSwitch
    tried = plan.meta["tried"]
    assert any(len(set(k.split(","))) > 2 and "1000" not in k and
               max(map(int, k.split(","))) > 64 for k in tried)   # an LP layout (x1000)
    assert plan.makespan == min(tried.values())
