"""The MSCCL++ plan tacosc writes: thread blocks per peer chosen by the runtime model, and a
plan used at the size it was made for (chunk counts re-chosen, window starting where the
chunks divide)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

import tacos
from tacos.cli import main
from tacos.cli_mscclpp import rechunk_candidates, smallest_loading_size
from tacos.msccl.lower import MscclOptions
from tacos.msccl.mscclpp_choose import choose_mscclpp
from tacos.msccl.mscclpp_loader import loader_problems, size_problems
from tacos.msccl.mscclpp_reader import read_plan_text
from tacos.msccl.mscclpp_writer import emit_mscclpp_json
from tacos.runtime.mscclpp_exec import estimate_mscclpp
from tacos.verify_plan import verify

PRESETS = Path(tacos.__file__).parent / "presets"


@pytest.fixture(scope="module")
def a100_allgather():
    topo = tacos.parse("use dgx_a100_node()\n").topology
    coll = tacos.collective("allgather", range(8), size="16MiB")
    return topo, tacos.synthesize(topo, coll, solver="greedy", workers=1)


def test_instances_chosen_are_the_runtime_models_fastest(a100_allgather):
    topo, schedule = a100_allgather
    choice = choose_mscclpp(schedule, instances=(1, 2, 4))
    times = {}
    for i in (1, 2, 4):
        text = emit_mscclpp_json(schedule, options=replace(MscclOptions(), instances=i))
        times[i] = estimate_mscclpp(read_plan_text(text)[0], topo, 16 << 20).time
    for i, value in choice.tried.items():  # larger counts stop once one is slower
        assert value == pytest.approx(times[i])
    fastest = min(times.values())  # over every count, tried or not
    assert times[choice.value] <= fastest * 1.005
    assert all(times[i] > fastest * 1.005 for i in times if i < choice.value)
    doc = json.loads(choice.text)
    assert loader_problems(doc) == [] and verify(choice.text, topology=topo).ok
    assert any("instances" in line for line in choice.lines())


def test_a_candidate_the_executor_would_refuse_is_rejected_with_its_reason(a100_allgather):
    _topo, schedule = a100_allgather
    odd = (16 << 20) + 16 * 8 * 3  # cuts into 8 chunks of 16-byte units, not into 16 or 32
    choice = choose_mscclpp(schedule, nbytes=odd, instances=(1, 2, 4))
    assert choice.value == 1 and isinstance(choice.tried[1], float)
    assert all("not multiples" in choice.tried[i] for i in (2, 4))
    with pytest.raises(tacos.TacosError, match="no MSCCL.. plan of this schedule loads"):
        choose_mscclpp(schedule, nbytes=odd + 16, instances=(1, 2))


def test_smallest_loading_size_is_where_the_chunks_start_to_divide():
    doc = {"collective": "allgather", "buffer_alignment": 16,
           "gpus": [{"input_chunks": 2, "output_chunks": 16}] * 8}
    low = smallest_loading_size(doc)
    assert size_problems(doc, low) == [] and low == 16 * 16
    assert size_problems(doc, low // 2) != []
    doc["collective"] = "allreduce"
    doc["gpus"] = [{"input_chunks": 12, "output_chunks": 12}] * 4
    assert smallest_loading_size(doc) == 16 * 12 and size_problems(doc, 16 * 12) == []


def test_rechunk_candidates_are_powers_of_two():
    assert [o["trees"] for _, o in rechunk_candidates("forest")] == [1, 2, 4, 8]
    assert [k for k, _ in rechunk_candidates("greedy")] == [1, 2, 4, 8, 16]


@pytest.mark.slow
def test_plan_whose_chunks_do_not_cut_its_size_is_rechunked(tmp_path, capsys):
    """DGX-1's forest packs 6 trees per root: 48 chunks never cut a power-of-two size into
    16-byte units, so MSCCL++ would refuse the plan at its own size."""
    out = tmp_path / "ag.json"
    assert main([str(PRESETS / "dgx1.tdl"), "-c", "allgather", "--size", "1MiB", "--solver",
                 "forest", "--format", "mscclpp", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "48 chunks do not cut" in err and "re-synthesized with" in err
    assert "warning" not in err
    doc = json.loads(out.read_text())
    assert size_problems(doc, 1 << 20) == []
    assert doc["min_message_size"] == smallest_loading_size(doc) > 0
    assert main(["verify", str(out), "--topology", str(PRESETS / "dgx1.tdl"),
                 "--size", "1MiB"]) == 0


def test_all_reduce_on_six_ranks_says_which_sizes_it_serves(tmp_path, capsys):
    """Every all-reduce layout on 6 ranks has 6 x 2^k chunks: no 2^m size cuts into them, so
    the plan is shaped at the nearest size it loads at and the note names those sizes."""
    topo = tmp_path / "six.tdl"
    topo.write_text("use dgx_a100_node()\ncollective allreduce group gpu[0..5] size 1MiB\n")
    out = tmp_path / "six.json"
    assert main([str(topo), "--format", "mscclpp", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "multiple of 6 ranks" in err and "the plan loads at multiples of" in err
    doc = json.loads(out.read_text())
    unit = smallest_loading_size(doc)
    assert unit % (16 * 6) == 0 and doc["min_message_size"] == unit
    near = (1 << 20) // unit * unit
    assert f"nearest: {near} and {near + unit}" in err
    assert size_problems(doc, near) == [] and size_problems(doc, 1 << 20) != []
    assert verify(out.read_text(), nbytes=near).ok


def test_auto_winner_without_an_mscclpp_form_gives_way_to_its_runner_up(a100_allgather):
    import contextlib

    from tacos.cli_mscclpp import _runner_up

    _topo, schedule = a100_allgather
    facts = {"winner": "nccl-ring", "times": {"nccl-ring": 1.0, "greedy+in-switch": 1.5,
                                              "forest": 2.0, "greedy": 3.0}}
    won = replace(schedule, meta={**schedule.meta, "auto": facts})
    asked = []

    def synth(coll, solver=None, **extra):
        assert coll is None  # the user's collective, not the winner's refinement
        asked.append(solver)
        if solver == "forest":
            raise tacos.TacosError("no MSCCL++ form either")
        return schedule

    class Quiet:
        def phase(self, *_a, **_k):
            return contextlib.nullcontext()

    got = _runner_up(won, None, 16 << 20, synth, Quiet(), tacos.TacosError("33 channels"))
    assert got is not None and asked == ["forest", "greedy"]
    choice, cand, note = got
    assert cand is schedule and "wrote greedy" in note and "33 channels" in note
    assert loader_problems(json.loads(choice.text)) == []
    assert _runner_up(schedule, None, 16 << 20, synth, Quiet(), tacos.TacosError("x")) is None
