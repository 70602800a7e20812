"""JSON schedule backend and frontend: round trip, byte stability, schema, errors."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from tacos.backends.json_schedule import SCHEMA_ID, dump, dumps
from tacos.frontends.json_schedule import check_against_topology, load, loads, schema

import tacos
from tacos.check.verify import verify_schedule
from tacos.errors import TacosError
from tacos.model.collective import combine
from tacos.model.patterns import build
from tacos.model.schedule import Schedule, Transfer
from tacos.model.topology import Link, Npu, Switch, Topology
from tacos.passes.unwind import unwind_switches

ALPHA, BW = 1e-6, 25e9


def ring_allgather(n: int = 4) -> Schedule:
    topo = Topology(tuple(Npu(i, f"gpu{i}") for i in range(n)), (),
                    tuple(Link(i, (i + 1) % n, ALPHA, BW, 1, 0, "nvlink") for i in range(n)),
                    name="ring")
    coll = build("allgather", range(n), size=n * 1000)
    step = topo.links[0].time(1000)
    ts = tuple(Transfer(s * step, (s + 1) * step, i, (i + 1) % n, (i,), ((i - s) % n,))
               for s in range(n - 1) for i in range(n))
    return Schedule(topo, coll, ts, {"solver": "hand", "seed": 3, "trials": 1,
                                     "synthesis_time": 0.5, "owners": {0: 1},
                                     "tags": {"b", "a"}})


def switch_allreduce() -> Schedule:
    """A 3-NPU all-reduce through a switch (virtual links carry ``via``), reduce then copy."""
    npus = tuple(Npu(i, f"n{i}") for i in range(3))
    sw = Switch(3, "nvswitch", "ring")
    links = []
    for i in range(3):
        links += [Link(i, 3, 0.5e-6, 100e9), Link(3, i, 0.5e-6, 100e9)]
    topo = unwind_switches(Topology(npus, (sw,), tuple(links), name="box"))
    coll = build("allreduce", range(3), size=3 * 4096)
    step = topo.links[0].time(4096)
    ts = []
    for s in range(2):  # ring reduce-scatter over the unwound ring i -> i+1
        for lk_i, lk in enumerate(topo.links):
            ts.append(Transfer(s * step, (s + 1) * step, lk.src, lk.dst, (lk_i,),
                               ((lk.src - s - 1) % 3,), "reduce"))
    for s in range(2):
        for lk_i, lk in enumerate(topo.links):
            ts.append(Transfer((2 + s) * step, (3 + s) * step, lk.src, lk.dst, (lk_i,),
                               ((lk.src - s) % 3,)))
    return Schedule(topo, coll, tuple(ts))


def switch_physical() -> Schedule:
    """The same all-reduce on the physical topology: each transfer on the route i -> sw -> i+1."""
    view = switch_allreduce()
    topo = Topology(view.topology.npus, view.topology.switches,
                    tuple(lk for i in range(3) for lk in (Link(i, 3, 0.5e-6, 100e9),
                                                          Link(3, i, 0.5e-6, 100e9))),
                    name="box")
    ts = tuple(Transfer(t.start, t.end, t.src, t.dst, (2 * t.src, 2 * t.dst + 1), t.chunks, t.op)
               for t in view.transfers)
    return Schedule(topo, view.collective, ts)


@pytest.fixture(params=["ring", "switch", "multi", "physical"])
def schedule(request) -> Schedule:
    if request.param == "ring":
        return ring_allgather()
    if request.param == "switch":
        return switch_allreduce()
    if request.param == "physical":
        return switch_physical()
    s = ring_allgather(3)
    coll = combine([s.collective, build("broadcast", range(3), size=500, root=0)])
    step = s.topology.links[0].time(500)
    t0 = s.makespan
    extra = (Transfer(t0, t0 + step, 0, 1, (0,), (3,)),
             Transfer(t0 + step, t0 + 2 * step, 1, 2, (1,), (3,)))
    return Schedule(s.topology, coll, s.transfers + extra)


def test_fixture_schedules_are_valid(schedule):
    assert verify_schedule(schedule).ok, verify_schedule(schedule).text()


def test_round_trip_and_byte_stability(schedule, tmp_path):
    text = dumps(schedule)
    back = loads(text)
    assert back == schedule
    assert back.topology == schedule.topology and back.collective == schedule.collective
    assert dumps(back) == text  # byte-stable through a round trip
    assert dumps(schedule) == text  # and call to call
    path = tmp_path / "plan.json"
    dump(schedule, path)
    assert path.read_text(encoding="utf-8") == text
    assert load(path) == schedule
    assert verify_schedule(load(path)).ok
    assert tacos.emit(schedule, "json") == text


def test_document_contents(schedule):
    doc = json.loads(dumps(schedule))
    assert doc["schema"] == SCHEMA_ID
    assert len(doc["transfers"]) == len(schedule.transfers)
    assert doc["time"] == schedule.makespan
    assert doc["bound"]["value"] <= doc["time"]
    assert len(doc["topology"]["links"]) == len(schedule.topology.links)
    assert doc["collective"]["kind"] == schedule.collective.kind


def test_meta_is_json_safe_and_volatile_facts_are_dropped():
    doc = json.loads(dumps(ring_allgather()))
    assert doc["meta"] == {"solver": "hand", "seed": 3, "trials": 1, "owners": {"0": 1},
                           "tags": ["a", "b"]}
    assert "synthesis_time" not in doc["meta"]


def test_output_validates_against_the_schema(schedule):
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator.check_schema(schema())
    jsonschema.Draft202012Validator(schema()).validate(json.loads(dumps(schedule)))


def test_switch_links_keep_via_and_policy():
    doc = json.loads(dumps(switch_allreduce()))
    assert doc["topology"]["switches"] == [{"id": 3, "name": "nvswitch", "policy": "ring",
                                            "degree": None, "capabilities": []}]
    assert {lk["via"] for lk in doc["topology"]["links"]} == {3}


def test_physical_routes_round_trip():
    s = switch_physical()
    doc = json.loads(dumps(s))
    assert doc["schema"] == "tacos.schedule/2"
    assert doc["transfers"][0]["route"] == list(s.transfers[0].route)
    assert len(doc["transfers"][0]["route"]) == 2
    back = loads(dumps(s))
    assert back.transfers == s.transfers and back.topology == s.topology
    assert verify_schedule(back).ok


def test_version_1_files_still_load():
    """An older tacos.schedule/1 document (one ``link`` per transfer on the unwound topology)
    reads back as one-link routes and verifies."""
    s = switch_allreduce()
    doc = json.loads(dumps(s))
    doc["schema"] = "tacos.schedule/1"
    for sw in doc["topology"]["switches"]:
        del sw["capabilities"]
    for t in doc["transfers"]:
        (t["link"],) = t.pop("route")
    back = loads(json.dumps(doc), source="old.json")
    assert back.transfers == s.transfers
    assert verify_schedule(back).ok
    doc["transfers"][0]["route"] = [0]  # a v2 field in a v1 file
    with pytest.raises(TacosError, match=r"\$\.transfers\[0\]"):
        loads(json.dumps(doc), source="old.json")


def _broken(mutate) -> str:
    doc = json.loads(dumps(ring_allgather()))
    mutate(doc)
    return json.dumps(doc)


@pytest.mark.parametrize("mutate,path", [
    (lambda d: d["transfers"][2].__setitem__("start", "soon"), "$.transfers[2].start"),
    (lambda d: d["transfers"][1].pop("route"), "$.transfers[1]"),
    (lambda d: d["transfers"][1].__setitem__("route", []), "$.transfers[1].route"),
    (lambda d: d["transfers"][1].__setitem__("route", [0, "x"]), "$.transfers[1].route[1]"),
    (lambda d: d["transfers"][0].__setitem__("op", "sum"), "$.transfers[0].op"),
    (lambda d: d["topology"]["links"][1].__setitem__("bandwidth", -3), "$.topology.links[1]"),
    (lambda d: d["collective"]["chunks"][0].__setitem__("pre", [0, 9]),
     "$.collective.chunks[0].pre[1]"),
    (lambda d: d["topology"]["npus"][2].__setitem__("colour", "red"), "$.topology.npus[2]"),
])
@pytest.mark.parametrize("with_jsonschema", [True, False])
def test_malformed_field_is_named(mutate, path, with_jsonschema, monkeypatch):
    if not with_jsonschema:
        import tacos.frontends.json_schedule as fj

        monkeypatch.setattr(fj, "_validate_schema", lambda doc, source, version: None)
    with pytest.raises(TacosError) as err:
        loads(_broken(mutate), source="plan.json")
    msg = str(err.value)
    assert msg.startswith("error: plan.json: " + path), msg
    assert "Traceback" not in msg


def test_structural_checks_catch_semantic_ids_without_schema():
    with pytest.raises(TacosError, match=r"\$\.topology\.links\[0\]\.dst: node 77"):
        loads(_broken(lambda d: d["topology"]["links"][0].__setitem__("dst", 77)), source="p")


def test_not_json_and_wrong_schema(tmp_path):
    with pytest.raises(TacosError) as err:
        loads('{"schema": "tacos.schedule/2",\n "topology": [1, 2,,]}', source="x.json")
    assert err.value.span is not None and err.value.span.line == 2
    assert "x.json:2:" in str(err.value)
    with pytest.raises(TacosError, match=r"\$\.schema: expected 'tacos\.schedule/2'"):
        loads('{"schema": "tacos.schedule/9"}', source="x.json")
    with pytest.raises(TacosError, match="not valid JSON"):
        loads('{"schema": NaN}', source="x.json")
    with pytest.raises(TacosError, match="no such file"):
        load(tmp_path / "missing.json")


def test_check_against_topology():
    s = switch_allreduce()
    npus = tuple(Npu(i, f"n{i}") for i in range(3))
    links = []
    for i in range(3):
        links += [Link(i, 3, 0.5e-6, 100e9), Link(3, i, 0.5e-6, 100e9)]
    same = Topology(npus, (Switch(3, "nvswitch", "ring"),), tuple(reversed(links)))
    assert check_against_topology(loads(dumps(s)), same) == []
    slower = Topology(npus, (Switch(3, "nvswitch", "ring"),),
                      tuple(replace(lk, bandwidth=50e9) for lk in links))
    problems = check_against_topology(s, slower)
    assert problems and all("bandwidth" in p for p in problems)
    assert len(problems) == 3  # each of the 3 virtual ring links
    full = Topology(npus, (Switch(3, "nvswitch", "full"),), tuple(links))
    problems = check_against_topology(s, full)
    assert any("policies" in p for p in problems)
    assert any("of the topology is not in the plan" in p for p in problems)
    renamed = Topology(tuple(Npu(i, f"g{i}") for i in range(3)), same.switches, same.links)
    assert any("'n0' in the plan but 'g0'" in p for p in check_against_topology(s, renamed))


def test_documented_example_is_current():
    """The example in docs/schedule-json.md loads, verifies and is what dumps writes."""
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "schedule-json.md").read_text("utf-8")
    example = doc.split("```json\n", 1)[1].split("```", 1)[0]
    s = loads(example, source="schedule-json.md")
    assert verify_schedule(s).ok
    assert dumps(s) == example
