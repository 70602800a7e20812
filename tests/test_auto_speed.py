"""The default compile's speed mechanisms give the same answers as the plain computation:
NCCL's ring search reading hops once, the runtime floor that skips plans which cannot win, the
per-process lowering/timing memo and the MSCCL++ thread-block search's compact candidates."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

import tacos
from tacos.check.verify import verify_schedule
from tacos.solvers.lowering.hops import hamiltonian_path
from tacos.solvers.nccl import rings
from tacos.solvers.nccl.system import system

ROOT = Path(__file__).resolve().parent.parent


def _reference_search(nodes, start, succ, rng: random.Random, budget, *, end=None,
                      cycle=False, weight=None):
    """The ring search as first written: every hop list and weight read at every step."""
    n = len(nodes)
    allowed = set(nodes)

    def options(path, on):
        v, last = path[-1], len(path) == n - 1
        cand = [w for w in succ(v) if w in allowed and w not in on
                and (end is None or (w == end) == last)]
        rng.shuffle(cand)
        return sorted(cand, key=lambda w: (-(weight(v, w) if weight else 0),
                                           sum(1 for x in succ(w) if x not in on)))

    return hamiltonian_path(n, start, options,
                            lambda path: not cycle or start in succ(path[-1]), budget)


@pytest.mark.parametrize("tdl", [
    'torus t[3, 3, 3] 50GiB/s 0.5us\n',
    'mesh m[4, 4] 50GB/s 1us\n',
    'use dgx1\n',
])
def test_ring_search_finds_the_rings_of_the_plain_search(tdl: str, tmp_path: Path,
                                                          monkeypatch) -> None:
    monkeypatch.setenv("TACOS_CACHE_DIR", "")  # both searched, not read back
    path = tmp_path / "t.tdl"
    path.write_text(tdl)
    topo = tacos.load(str(path)).topology
    fast = rings._intra_rings(system(topo, topo.live_npus), sorted(topo.live_npus))
    chan = rings.channel_rings(system(topo, topo.live_npus), 3, seed=2)
    monkeypatch.setattr(rings, "_search", _reference_search)
    assert rings._intra_rings(system(topo, topo.live_npus), sorted(topo.live_npus)) == fast
    assert rings.channel_rings(system(topo, topo.live_npus), 3, seed=2) == chan
    assert len(fast) >= 2


def _portfolio(example: str):
    from tacos.solvers.auto import run_portfolio

    spec = tacos.load(str(ROOT / "examples" / f"{example}.tdl"))
    _, _, facts = run_portfolio(spec.topology, spec.collective, greedy_chunks=True,
                                relays="members", seed=0, keep_plans=True)
    return spec, facts


@pytest.mark.parametrize("example", ["ring8", "switches", "ring_by_hand", "failures"])
def test_the_runtime_floor_is_a_lower_bound_and_pruning_keeps_the_winner(example: str
                                                                         ) -> None:
    from tacos.runtime.plans import lowering_of, runtime_of
    from tacos.solvers.auto import _runtime_times
    from tacos.solvers.auto_floor import runtime_floor

    spec, facts = _portfolio(example)
    plans = facts["plans"]
    link = {k: plans[k].makespan for k in plans if verify_schedule(plans[k]).ok}
    full, _, _ = _runtime_times(spec.topology, spec.collective, plans, link, {}, prune=False)
    skipped: dict[str, str] = {}
    floors: dict[str, float] = {}
    pruned, _, _ = _runtime_times(spec.topology, spec.collective, plans, link, skipped,
                                  prune=True, floors=floors)
    win = min(full, key=lambda k: (full[k], k))
    assert min(pruned, key=lambda k: (pruned[k], k)) == win
    assert all(pruned[k] == full[k] for k in pruned)
    assert set(pruned) | set(floors) == set(full)
    assert floors or example == "failures"  # NCCL's ring wins the others by far
    for label, floor in floors.items():
        assert floor <= full[label] * (1 + 1e-12) and floor > full[win]
        assert skipped[label].startswith("cannot win")
    for label, plan in plans.items():  # sound on every plan the model times, not only these
        if label.startswith("nccl-") or any(t.group is not None for t in plan.transfers):
            continue
        coll = plan.collective
        est, _ = runtime_of(plan, spec.topology)
        if est is not None:
            floor = runtime_floor(lowering_of(plan), spec.topology, int(coll.size), coll.group)
            assert floor <= est.time * (1 + 1e-12)


def test_a_plan_is_lowered_and_timed_once_per_process() -> None:
    from tacos.model.schedule import Schedule
    from tacos.msccl.lower import lower
    from tacos.runtime.msccl_exec import estimate_program
    from tacos.runtime.plans import lowering_of, runtime_of

    spec = tacos.load(str(ROOT / "examples" / "ring8.tdl"))
    plan = tacos.synthesize(spec.topology, spec.collective, solver="greedy")
    first = runtime_of(plan, spec.topology)
    # the report's copy of the winner shares its transfers: the same program and time
    twin = Schedule(plan.topology, plan.collective, plan.transfers, dict(plan.meta))
    assert runtime_of(twin, spec.topology) is first
    assert lowering_of(twin) is lowering_of(plan)
    coll = plan.collective
    again = estimate_program(lower(plan), spec.topology, coll.size, ranks=coll.group)
    assert first[0].time == again.time
    # a plan with other transfers is another program
    other = tacos.synthesize(spec.topology, spec.collective, solver="forest")
    assert runtime_of(other, spec.topology) is not first


def test_mscclpp_choice_writes_the_bytes_and_time_of_the_plain_writer() -> None:
    from dataclasses import replace

    from tacos.msccl.lower import MscclOptions
    from tacos.msccl.mscclpp_choose import choose_mscclpp
    from tacos.msccl.mscclpp_reader import read_plan_text
    from tacos.msccl.mscclpp_writer import emit_mscclpp_json
    from tacos.runtime.mscclpp_exec import estimate_mscclpp

    spec = tacos.load(str(ROOT / "examples" / "ring8.tdl"))
    coll = spec.collective
    plan = tacos.synthesize(spec.topology, coll, solver="greedy")
    base = MscclOptions(inplace=True)
    choice = choose_mscclpp(plan, base)
    text = emit_mscclpp_json(plan, options=replace(base, instances=choice.value))
    assert choice.text == text
    again = estimate_mscclpp(read_plan_text(text)[0], spec.topology, coll.size,
                             ranks=coll.group)
    assert choice.estimate.time == again.time == choice.time
    assert json.loads(choice.text)["gpus"]


def test_the_window_line_is_set_as_a_rewrite_would() -> None:
    from tacos.cli_mscclpp import _with_min_message_size

    doc = {"name": "x", "gpus": [{"min_message_size": 3}], "min_message_size": 16,
           "max_message_size": 99}
    text = json.dumps(doc, indent=2) + "\n"
    assert _with_min_message_size(text, doc, 4096) == \
        json.dumps({**doc, "min_message_size": 4096}, indent=2) + "\n"
    last = {"name": "x", "min_message_size": 16}  # last field: no comma, rewritten
    assert _with_min_message_size(json.dumps(last, indent=2) + "\n", last, 32) == \
        json.dumps({"name": "x", "min_message_size": 32}, indent=2) + "\n"


def test_a_pruned_runner_up_is_named_with_its_floor() -> None:
    from tacos.report import auto_json
    from tacos.solvers.auto import describe, run_portfolio

    spec = tacos.load(str(ROOT / "examples" / "ring8.tdl"))
    winner, _, facts = run_portfolio(spec.topology, spec.collective, greedy_chunks=True,
                                     relays="members", seed=0)
    assert winner == "nccl-ring" and facts["runner_up"] not in facts["times"]
    assert facts["skipped"][facts["runner_up"]].startswith("cannot win")
    assert facts["margin_at_least"] and facts["margin"] > 1
    assert "at least" in describe(facts) and auto_json(facts)["margin_at_least"] is True
