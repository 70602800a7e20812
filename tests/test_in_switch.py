"""In-switch collectives in the IR: transfer groups, verifier rules, simulator, JSON, MSCCL."""

from __future__ import annotations

import pytest
from tacos.backends.json_schedule import dumps
from tacos.frontends.json_schedule import loads

from tacos.builders import star
from tacos.check.in_switch import GroupError, group_shape
from tacos.check.simulate import simulate
from tacos.check.verify import verify_schedule
from tacos.errors import TacosError
from tacos.model.patterns import build
from tacos.model.schedule import Schedule, Transfer
from tacos.passes.inversion import invert_transfers

BW, ALPHA = 100e9, 1e-6
SIZE = 4 * 1024 * 1024


def switch4(caps=("multicast", "reduce")):
    topo = star(4, bandwidth=BW, latency=ALPHA)
    return topo.with_capabilities({topo.switches[0].name: caps}) if caps else topo


def route(topo, u, v):
    return topo.routing.best(u, v).links


def broadcast_multicast(topo, start=0.0, group=7):
    """Broadcast from NPU 0 as one multicast to NPUs 1..3."""
    coll = build("broadcast", range(4), size=SIZE, root=0)
    dur = 2 * ALPHA + SIZE / BW
    ts = tuple(Transfer(start, start + dur, 0, v, route(topo, 0, v), (0,), "copy", group)
               for v in (1, 2, 3))
    return Schedule(topo, coll, ts)


def test_multicast_group_verifies_and_holds_the_up_port_once():
    s = broadcast_multicast(switch4())
    assert verify_schedule(s).ok
    # without the group the three transfers share NPU 0's up-port at once
    plain = Schedule(s.topology, s.collective,
                     tuple(Transfer(t.start, t.end, t.src, t.dst, t.route, t.chunks)
                           for t in s.transfers))
    assert "overlap" in verify_schedule(plain).rules()
    shape = group_shape(s.topology, s.transfers)
    assert shape.kind == "multicast" and shape.switches == (4,)
    assert len(shape.links) == 4  # one up-port, three down-ports


def test_multicast_needs_a_switch_that_declares_it():
    s = broadcast_multicast(switch4(caps=("reduce",)))
    rep = verify_schedule(s)
    assert rep.rules() == {"group"}
    assert "does not declare 'multicast'" in rep.violations[0].message


def test_group_members_move_together():
    s = broadcast_multicast(switch4())
    t0 = s.transfers[0]
    moved = (Transfer(t0.start + 1e-6, t0.end + 1e-6, t0.src, t0.dst, t0.route, t0.chunks,
                      "copy", t0.group),) + s.transfers[1:]
    rep = verify_schedule(Schedule(s.topology, s.collective, moved))
    assert "group" in rep.rules() and "start and end together" in rep.text()


def reduce_into_root(topo, group=3):
    """Reduce to NPU 0: NPUs 1..3 send their contributions as one in-switch reduction."""
    coll = build("reduce", range(4), size=SIZE, root=0)
    dur = 2 * ALPHA + SIZE / BW
    ts = tuple(Transfer(0.0, dur, u, 0, route(topo, u, 0), (0,), "reduce", group)
               for u in (1, 2, 3))
    return Schedule(topo, coll, ts)


def test_fan_in_reduction_counts_each_contribution_once():
    s = reduce_into_root(switch4())
    assert verify_schedule(s).ok
    assert group_shape(s.topology, s.transfers).kind == "reduce"
    rep = verify_schedule(reduce_into_root(switch4(caps=("multicast",))))
    assert rep.rules() == {"group"} and "does not declare 'reduce'" in rep.text()
    # copies instead of reduces: the group rule says why
    s2 = Schedule(s.topology, s.collective,
                  tuple(Transfer(t.start, t.end, t.src, t.dst, t.route, t.chunks, "copy",
                                 t.group) for t in s.transfers))
    assert "op 'reduce'" in verify_schedule(s2).text()


def test_mixed_group_is_rejected():
    topo = switch4()
    a = Transfer(0, 1, 0, 1, route(topo, 0, 1), (0,), "copy", 1)
    b = Transfer(0, 1, 2, 3, route(topo, 2, 3), (0,), "copy", 1)
    with pytest.raises(GroupError, match="neither"):
        group_shape(topo, [a, b])


def test_simulator_moves_a_group_as_one():
    s = broadcast_multicast(switch4(), start=5e-6)
    sim = simulate(s)
    starts = {t.start for t in sim.schedule.transfers}
    ends = {t.end for t in sim.schedule.transfers}
    assert starts == {0.0} and len(ends) == 1
    assert sim.time == pytest.approx(2 * ALPHA + SIZE / BW)
    assert verify_schedule(sim.schedule).ok
    assert all(t.group == 7 for t in sim.schedule.transfers)
    # the up-port is busy once, for the whole group
    up = s.transfers[0].route[0]
    assert sim.link_utilization[up] == pytest.approx(1.0)


def test_json_round_trip_keeps_groups():
    s = broadcast_multicast(switch4())
    text = dumps(s)
    assert '"group": 7' in text
    back = loads(text)
    assert [t.group for t in back.transfers] == [7, 7, 7]
    assert verify_schedule(back).ok
    assert back.topology.switches[0].capabilities == frozenset({"multicast", "reduce"})


def test_msccl_xml_refuses_in_switch_plans():
    from tacos.msccl.xml_writer import schedule_to_xml

    with pytest.raises(TacosError, match="MSCCL XML cannot express"):
        schedule_to_xml(broadcast_multicast(switch4()))


def test_inverting_a_multicast_gives_an_in_switch_reduction():
    topo = switch4()
    dual = broadcast_multicast(topo.reversed())  # the copy dual, on the reversed topology
    inverted = invert_transfers(dual, (0,))
    red = Schedule(topo, build("reduce", range(4), size=SIZE, root=0), tuple(inverted))
    assert {t.op for t in inverted} == {"reduce"}
    assert group_shape(red.topology, red.transfers).kind == "reduce"
    assert verify_schedule(red).ok


def test_capabilities_helper_names_unknown_things():
    topo = star(3, bandwidth=BW)
    with pytest.raises(ValueError, match="unknown switch capability"):
        topo.with_capabilities({"*": {"teleport"}})
    with pytest.raises(ValueError, match="no switch matches"):
        topo.with_capabilities({"nvswitch": {"reduce"}})
