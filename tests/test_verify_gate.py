"""``tacosc verify`` is a real gate: JSON schedules are checked against the collective they
declare and their own top-level time; MSCCL XML without the attributes the runtime needs fails
unless ``--lenient``; hostile numbers and nesting fail fast with a located error."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import pytest
from tacos.backends.json_schedule import to_document
from tacos.frontends.json_schedule import loads

import tacos
from tacos.cli import main
from tacos.errors import TacosError

FIXTURES = Path(__file__).parent / "fixtures" / "msccl"
EXAMPLES = Path(__file__).parent.parent / "examples"
RING = "ring r[4] 25GB/s 1us\n"


@pytest.fixture(scope="module")
def docs() -> dict[str, dict]:
    """All-reduce and all-gather schedules on a 4-NPU ring, as JSON documents."""
    topo = tacos.parse(RING).topology
    out = {}
    for kind in ("allreduce", "allgather"):
        coll = tacos.collective(kind, range(4), size=4096)
        sched = tacos.synthesize(topo, coll, solver="greedy", trials=1, workers=1,
                                 bound=False)
        out[kind] = to_document(sched, bound=False)
    return out


def _cut_post(d: dict) -> None:
    for c in d["collective"]["chunks"]:
        c["post"] = [c["post"][0]]


def _drop_chunk(d: dict) -> None:
    d["collective"]["chunks"].pop()
    d["transfers"] = [t for t in d["transfers"]
                      if len(d["collective"]["chunks"]) not in t["chunks"]]


def _shrink_group(d: dict) -> None:
    d["collective"]["group"] = d["collective"]["group"][:-1]


def _kind(d: dict) -> None:
    d["collective"]["kind"] = "allfoo"


def _size(d: dict) -> None:
    d["collective"]["size"] *= 2


def _time(d: dict) -> None:
    d["time"] *= 1.5


def _custom_size(d: dict) -> None:
    d["collective"]["kind"] = "custom"  # the allgather's chunks make a valid custom collective
    d["collective"]["size"] += 1  # ... whose size is the sum of its chunks


MUTANTS = {
    "post cut to one NPU": ("allreduce", _cut_post, "chunks[0].post"),
    "chunk dropped": ("allreduce", _drop_chunk, "$.collective.chunks: 3 chunks"),
    "group lacks an NPU the chunks use": ("allgather", _shrink_group, "$.collective"),
    "unknown kind": ("allreduce", _kind, "$.collective.kind: unknown collective kind"),
    "wrong size": ("allgather", _size, "$.collective"),
    "time is not the makespan": ("allgather", _time, "$.time:"),
    "custom with a wrong size": ("allgather", _custom_size, "$.collective.size"),
}


@pytest.mark.parametrize("name", list(MUTANTS))
def test_tampered_json_schedule_is_rejected(name: str, docs: dict, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    kind, mutate, where = MUTANTS[name]
    doc = copy.deepcopy(docs[kind])
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc))
    assert main(["verify", str(path)]) == 0  # the untouched file passes
    mutate(doc)
    path.write_text(json.dumps(doc))
    topo = tmp_path / "ring.tdl"
    topo.write_text(RING)
    for extra in ([], ["--topology", str(topo)]):
        assert main(["verify", str(path), *extra]) == 1
        err = capsys.readouterr().err
        assert where in err and "schedule verified" not in err, err


def test_declared_collectives_of_every_kind_round_trip(tmp_path: Path) -> None:
    """Files tacos writes pass the check: rooted, multi-tenant and custom collectives."""
    spec = tacos.load(EXAMPLES / "multitenant.tdl")
    sched = tacos.synthesize(spec.topology, spec.collective, trials=1, workers=1, bound=False)
    assert loads(tacos.emit(sched, "json")).collective == sched.collective
    topo = tacos.parse(RING).topology
    for coll in (tacos.collective("broadcast", range(4), size=4096, root=2),
                 tacos.custom_collective([([0], [2, 3], False, 100), ([1, 2], [0], True, 7)])):
        s = tacos.synthesize(topo, coll, trials=1, workers=1, bound=False)
        assert loads(tacos.emit(s, "json")).collective == coll


def test_deep_and_huge_json(tmp_path: Path) -> None:
    deep = '{"schema": "tacos.schedule/2", "meta": ' + "[" * 100000 + "]" * 100000 + "}"
    t0 = time.perf_counter()
    with pytest.raises(TacosError) as info:
        loads(deep, source="deep.json")
    assert time.perf_counter() - t0 < 5
    assert info.value.span is not None and "(nesting)" in info.value.message
    nested = '{"schema": "tacos.schedule/2", "meta": ' + "[" * 500 + "]" * 500 + "}"
    with pytest.raises(TacosError, match=r"\$\.meta.*nested deeper than 100"):
        loads(nested, source="n.json")
    doc = to_document(tacos.synthesize(tacos.parse(RING).topology,
                                       tacos.collective("allgather", range(4), size=4096),
                                       trials=1, workers=1, bound=False), bound=False)
    for path, literal in ((("collective", "size"), "1" + "0" * 30), (("time",), "1e400"),
                          (("topology", "links", 0, "bandwidth"), "1e-300"),
                          (("collective", "chunks", 0, "pre", 0), str(2**70))):
        d = copy.deepcopy(doc)
        target = d
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = "@@"
        with pytest.raises(TacosError) as info:
            loads(json.dumps(d).replace('"@@"', literal), source="x.json")
        assert "x.json: $." in info.value.message, info.value.message


def test_missing_runtime_attributes_fail_unless_lenient(capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    tools = FIXTURES / "mscclang_allgather_ring_4gpu_1ch.xml"
    assert main(["verify", str(tools)]) == 1
    err = capsys.readouterr().out
    assert "minBytes" in err and "--lenient" in err
    assert main(["verify", str(tools), "--lenient"]) == 0
    assert main(["verify", str(FIXTURES / "executor_ndv5_ar-1m.xml")]) == 0


@pytest.mark.parametrize("old, new, rule", [
    ('ngpus="4"', 'ngpus="100000000000000000000000"', "number-range"),
    ('nchunksperloop="4"', 'nchunksperloop="4000000000"', "number-range"),
    ('nchunksperloop="4"', 'nchunksperloop="400000000"', "chunk-geometry"),
    ('ngpus="4"', 'ngpus="1000000"', "gpu-ids"),
])
def test_huge_xml_values_are_rejected_quickly(old: str, new: str, rule: str) -> None:
    from tacos.msccl.verify import verify_xml

    text = (FIXTURES / "mscclang_allgather_ring_4gpu_1ch.xml").read_text().replace(old, new)
    t0 = time.perf_counter()
    report = verify_xml(text, strict=False)
    assert time.perf_counter() - t0 < 5
    assert not report.ok and rule in {v.rule for v in report.violations}
    assert len(report.violations) < 100
