"""The error of an I-instance lowering derived from its failed one-instance lowering
(tacos/msccl/lower_instances.py) is exactly the error the I-instance lowering raises when run,
and the shape search refuses that shape with it instead of lowering it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from msccl_programs import forget_lowerings, synthesized
from tacos.frontends.json_schedule import load

from tacos.errors import TacosError
from tacos.msccl import shape_choose
from tacos.msccl.lower import MscclOptions, lower, remembered_failure
from tacos.msccl.lower_instances import failure_at_instances
from tacos.msccl.shape import shapes
from tacos.msccl.shape_choose import ShapeCache, choose_shape

RING = 'topology "r"\nbiring r[6] 100GB/s 1us\n'
TORUS = 'topology "t"\ntorus t[3, 2] 50GiB/s 0.5us\n'
TORUS44 = 'topology "t"\ntorus t[4, 4] 50GiB/s 0.5us\n'
MESH = 'topology "m"\nmesh m[4] 50GiB/s 0.5us\n'
FIXTURES = Path(__file__).parent / "fixtures" / "lowering"



def _error(schedule, opts: MscclOptions) -> str | None:
    """The message of the error lowering ``schedule`` with ``opts`` raises (None: it fits)."""
    try:
        lower(schedule, options=opts)
    except TacosError as exc:
        return exc.message
    return None


def _check(schedule, inplace: bool, steps: tuple[int, ...], caps: tuple[int, ...],
           orders: tuple[bool, ...] = (False,)) -> dict[str, int]:
    """Lower ``schedule`` at one instance under every step limit, channel cap, pairing and
    port order given; where that fails, every derived I-instance error (I = 2, 3) must be the
    one the I-instance lowering raises.  Counts what was derived."""
    seen = {"derived": 0, "later_round": 0, "earlier_round": 0}
    for max_steps in steps:
        for cap in caps:
            for pair in (False, True):
                for order in orders:
                    forget_lowerings()
                    one = MscclOptions(inplace=inplace, outofplace=not inplace,
                                       max_steps_per_tb=max_steps, max_channels=cap,
                                       pair_peers=pair, port_order=order, fit_fifo=False)
                    if _error(schedule, one) is None:
                        continue
                    rounds = remembered_failure(schedule, one)
                    for instances in (2, 3):
                        derived = failure_at_instances(schedule, one, instances)
                        if not derived:
                            continue
                        assert rounds is not None
                        seen["derived"] += 1
                        counts = rounds[1].channels
                        seen["later_round"] += len(counts) > 1
                        seen["earlier_round"] += any(instances * k > cap
                                                     for k in counts[:-1])
                        assert _error(schedule, replace(one, instances=instances)) == derived
    return seen


def test_the_derived_error_is_the_real_one_on_a_ring() -> None:
    _, _, sched = synthesized(RING, "allreduce", "nccl-ring", 1)
    seen = _check(sched, True, (3, 6), (2, 4, 8))
    # failures after cuts (round 2 on), and some where I instances fail at an earlier round
    assert seen["derived"] and seen["later_round"] and seen["earlier_round"]


@pytest.mark.slow
@pytest.mark.parametrize("text,kind,solver,chunks", [
    (RING, "allreduce", "greedy", 1),
    (TORUS, "allreduce", "greedy", 1),
    (TORUS, "reducescatter", "nccl-ring", 1),
    (TORUS44, "allreduce", "hierarchical", 1),
    (MESH, "allgather", "greedy", 2),
])
def test_the_derived_error_is_the_real_one(text, kind, solver, chunks) -> None:
    _, _, sched = synthesized(text, kind, solver, chunks)
    inplace = kind in ("allreduce", "allgather")
    seen = _check(sched, inplace, (2, 4, 8), (1, 3, 6, 12), orders=(False, True))
    assert seen["derived"] or kind == "allgather"  # its transfers' chunks join into runs


def test_nothing_is_derived_from_a_success_or_another_failure() -> None:
    _, _, sched = synthesized(RING, "allreduce", "nccl-ring", 1)
    forget_lowerings()
    fits = MscclOptions(inplace=True, fit_fifo=False)
    assert _error(sched, fits) is None
    assert failure_at_instances(sched, fits, 2) == ""
    fails = replace(fits, max_steps_per_tb=4, max_channels=4)
    assert _error(sched, fails) == "the plan needs 7 channels but at most 4 are allowed"
    assert failure_at_instances(sched, fails, 2) == (
        "the plan needs 14 channels but at most 4 are allowed")
    assert failure_at_instances(sched, fails, 33) == ""  # over 32 the options are refused
    forget_lowerings()  # nothing remembered: nothing derived
    assert failure_at_instances(sched, fails, 2) == ""
    # a plan whose transfers' chunks join into runs at one instance: the proof does not cover
    # it (from two instances on they cannot join)
    multi = load(FIXTURES / "mesh4x4_allreduce_greedy.json")
    one = MscclOptions(max_steps_per_tb=4, max_channels=4, fit_fifo=False)
    assert _error(multi, one) == "the plan needs 10 channels but at most 4 are allowed"
    got = remembered_failure(multi, one)
    assert got is not None and not got[1].single_runs
    assert failure_at_instances(multi, one, 2) == ""


def test_the_shape_search_refuses_the_instances_without_lowering_them(monkeypatch) -> None:
    topo, _, ring = synthesized(RING, "allreduce", "nccl-ring", 1)
    greedy = synthesized(RING, "allreduce", "greedy", 1)[2]
    plans = {"greedy": greedy, "ring": ring}  # the ring needs 7 channels > 6, the greedy 3
    base = MscclOptions(inplace=True, max_steps_per_tb=4, max_channels=6)
    cands = shapes(protos=("Simple",), instances=(1, 2, 3), port_orders=(False,))
    nbytes = int(ring.collective.size)
    derived: list[str] = []
    real = shape_choose.failure_at_instances

    def recording(*a, **k):
        got = real(*a, **k)
        if got:
            derived.append(got)
        return got

    def search():
        forget_lowerings()
        choice = choose_shape(plans, topo, nbytes, base=base, candidates=cands,
                              cache=ShapeCache())
        return (choice.plan, choice.shape, choice.time, [
            (c.plan, c.shape, c.time, c.problems) for c in choice.considered])

    monkeypatch.setattr(shape_choose, "failure_at_instances", recording)
    got = search()
    # the ring's two instances (14 channels: the channel floor allows 6) were refused from
    # its one-instance failure
    assert derived == ["the plan needs 14 channels but at most 6 are allowed"] * 2
    monkeypatch.setattr(shape_choose, "failure_at_instances", lambda *a, **k: "")
    assert search() == got  # the same choice, and the same reasons, as lowering them
