"""Switch capabilities (``multicast``, ``reduce``) declared in TDL, carried into the IR, the JSON
schedule and ``tacosc info``; declared by the presets only where the hardware has them."""

from __future__ import annotations

import json

import pytest
from tacos.backends.json_schedule import dumps
from tacos.frontends.json_schedule import loads

import tacos
from tacos.cli import main
from tacos.errors import TacosError

CAPS = """topology "caps"
npu g[4]
switch nvs with multicast, reduce attach g[*] 450GB/s 0.5us
star s[4] 100GB/s 1us with reduce
fattree h[8] leaves=2 spines=1 down 50GB/s 1us up 100GB/s 1us with multicast
dims d Ring(2)_Switch(4) 100GB/s 1us, 50GB/s 1us unwind ring with reduce
switch plain attach g[0..1] 10GB/s 1us
"""


def caps_of(spec) -> dict[str, frozenset[str]]:
    return {s.name: s.capabilities for s in spec.topology.switches}


def test_switch_statement_and_generators_declare_capabilities():
    caps = caps_of(tacos.parse(CAPS))
    assert caps["nvs"] == {"multicast", "reduce"}
    assert caps["s_switch[0]"] == {"reduce"}
    assert caps["h_leaf[0]"] == caps["h_leaf[1]"] == caps["h_spine[0]"] == {"multicast"}
    assert caps["d_d1_switch[0]"] == {"reduce"}
    assert caps["plain"] == frozenset()
    # the unwinding policy and the capabilities do not disturb each other
    spec = tacos.parse(CAPS)
    dim_sw = next(s for s in spec.topology.switches if s.name == "d_d1_switch[0]")
    assert dim_sw.policy == "ring"


@pytest.mark.parametrize("text, message", [
    ('npu g[2]\nswitch s with multicst attach g[*] 1GB/s', "did you mean 'multicast'"),
    ('npu g[2]\nswitch s with reduce, reduce attach g[*] 1GB/s', "given twice"),
    ('ring r[4] 1GB/s 1us with reduce', "creates no switch"),
    ('dims d Ring(2)_Ring(2) 1GB/s 1us, 1GB/s 1us with reduce', "create no switch"),
])
def test_bad_capabilities_are_clear_errors(text, message):
    with pytest.raises(TacosError) as err:
        tacos.parse(text)
    assert message in err.value.render()


def test_capabilities_reach_the_json_schedule_and_info(tmp_path, capsys):
    spec = tacos.parse(CAPS + 'collective allgather group g[*] size 64KiB\n')
    sched = tacos.synthesize(spec.topology, spec.collective, solver="ring")
    back = loads(dumps(sched))
    assert {s.name: s.capabilities for s in back.topology.switches} == caps_of(spec)
    path = tmp_path / "caps.tdl"
    path.write_text(CAPS)
    assert main(["info", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    by_name = {s["name"]: s["capabilities"] for s in data["switches"]}
    assert by_name["nvs"] == ["multicast", "reduce"] and by_name["plain"] == []
    assert main(["info", str(path)]) == 0
    assert "nvs: 4 ports, unwind full, multicast + reduce" in capsys.readouterr().out


def test_presets_declare_capabilities_only_where_the_hardware_has_them():
    h100 = caps_of(tacos.parse("use dgx_h100(nodes=2)"))
    assert h100["node[0].nvswitch"] == {"multicast", "reduce"}  # NVLS
    assert h100["rail[0]"] == frozenset()  # SHARP is opt-in
    sharp = caps_of(tacos.parse("use dgx_h100(nodes=2, sharp=1)"))
    assert sharp["rail[3]"] == {"multicast", "reduce"}
    a100 = caps_of(tacos.parse("use dgx_a100(nodes=2)"))
    assert a100["node[0].nvswitch"] == frozenset()  # NVSwitch gen 2: no NVLS
    assert caps_of(tacos.parse("use dgx_a100(nodes=2, sharp=1)"))["rail[0]"] == {
        "multicast", "reduce"}
