"""Process groups: a collective over a subset of NPUs uses only what it needs of a shared
switch, relays through group members only unless allowed otherwise, and its MSCCL XML is
written in the group's own rank numbering and mapped back by ``tacosc verify --topology``."""

from __future__ import annotations

from pathlib import Path

import pytest

import tacos
from tacos.check.verify import verify_schedule
from tacos.cli import main
from tacos.errors import InfeasibleError, UsageError
from tacos.model.patterns import build
from tacos.model.topology import Link, Npu, Topology
from tacos.msccl.ranks import declared_ranks, resolve_ranks
from tacos.msccl.verify import verify_xml
from tacos.msccl.xml_writer import schedule_to_xml
from tacos.passes.unwind import unwind

NODE = tacos.parse("use dgx_a100_node").topology


def line(n: int = 3) -> Topology:
    links = [Link(i, i + 1, 1e-6, 1e9) for i in range(n - 1)]
    links += [Link(i + 1, i, 1e-6, 1e9) for i in range(n - 1)]
    return Topology(tuple(Npu(i, f"n{i}") for i in range(n)), (), tuple(links))


def test_a_group_on_a_shared_switch_gets_full_ports_in_the_view():
    port = NODE.links[NODE.out_links[0][0]].bandwidth
    whole = unwind(NODE).topology
    group = unwind(NODE, [0, 2, 5, 7]).topology
    assert [lk.bandwidth for lk in whole.links] == pytest.approx([port / 7] * 56)
    assert [lk.bandwidth for lk in group.links] == pytest.approx([port / 3] * 12)
    assert {(lk.src, lk.dst) for lk in group.links} == {
        (u, v) for u in (0, 2, 5, 7) for v in (0, 2, 5, 7) if u != v}


def test_direct_links_of_non_members_are_left_out_of_the_view_unless_relays_are_allowed():
    topo = line(3)
    assert unwind(topo, [0, 2]).topology.links == ()
    assert len(unwind(topo, [0, 2], relays=True).topology.links) == 4
    assert unwind(topo).identity


@pytest.mark.parametrize("solver", ["greedy", "ring", "direct"])
def test_relays_through_non_members_are_off_by_default(solver):
    topo = line(3)
    coll = build("allgather", [0, 2], size=2 * 4096)
    with pytest.raises(InfeasibleError) as err:
        tacos.synthesize(topo, coll, solver=solver)
    text = err.value.render()
    assert "npu 2 cannot receive chunk 0" in text
    assert "outside the group" in text and "--relays all" in text
    sched = tacos.synthesize(topo, coll, solver=solver, relays="all")
    assert verify_schedule(sched).ok
    assert any(t.dst == 1 for t in sched.transfers)  # relayed at the non-member


def test_a_baseline_relays_inside_the_group():
    # a 4-ring 0-1-2-3; group {0, 1, 2}: 0 -> 2 goes through member 1, never non-member 3
    links = [Link(i, (i + 1) % 4, 1e-6, 1e9) for i in range(4)]
    links += [Link((i + 1) % 4, i, 1e-6, 1e9) for i in range(4)]
    topo = Topology(tuple(Npu(i, f"n{i}") for i in range(4)), (), tuple(links))
    coll = build("allgather", [0, 1, 2], size=3 * 4096)
    for relays in ("members", "all"):
        sched = tacos.synthesize(topo, coll, solver="direct", relays=relays)
        assert verify_schedule(sched).ok
        touched = {v for t in sched.transfers for v in (t.src, t.dst)}
        if relays == "members":
            assert 3 not in touched


def test_unknown_relays_mode_is_a_usage_error():
    with pytest.raises(UsageError):
        tacos.synthesize(line(3), build("allgather", [0, 1], size=8192), relays="some")


def test_xml_of_a_non_contiguous_group_uses_the_groups_ranks():
    group = (7, 2, 5, 0)
    coll = build("allgather", group, size=4 * 65536)
    sched = tacos.synthesize(NODE, coll, solver="ring")
    xml = schedule_to_xml(sched)
    assert xml.startswith("<!-- tacos ranks: 7 2 5 0 -->\n<algo ")
    assert declared_ranks(xml) == group
    rep = verify_xml(xml, topology=NODE)
    assert rep.ok, rep.text()
    assert rep.summary["ngpus"] == 4 and rep.timing["ranks"] == list(group)
    # without the comment nothing says where the ranks run
    bare = xml.split("\n", 1)[1]
    rep = verify_xml(bare, topology=NODE)
    assert [v.rule for v in rep.violations] == ["topology"]
    assert "--ranks" in rep.violations[0].hint
    assert verify_xml(bare, topology=NODE, ranks=group).ok
    assert verify_xml(bare, topology=NODE, groups=[group, (0, 1)]).ok
    # a contiguous group from NPU 0 needs no comment
    first = tacos.synthesize(NODE, build("allgather", range(4), size=4 * 65536), solver="ring")
    assert schedule_to_xml(first).startswith("<algo ")


def test_rank_mapping_is_checked():
    with pytest.raises(tacos.TacosError, match="names an NPU twice"):
        resolve_ranks(NODE, 2, explicit=(1, 1))
    with pytest.raises(tacos.TacosError, match="names 3 NPUs"):
        resolve_ranks(NODE, 2, embedded=(1, 2, 3))
    with pytest.raises(tacos.TacosError, match="does not have"):
        resolve_ranks(NODE, 2, explicit=(1, 99))
    assert resolve_ranks(NODE, 8) == (tuple(range(8)), "rank r = NPU r")


def test_cli_compiles_and_verifies_a_group_plan(tmp_path: Path, capsys):
    tdl = tmp_path / "group.tdl"
    tdl.write_text('topology "g"\nuse dgx_a100_node as n\n'
                   "collective allreduce group n.gpu[6], n.gpu[1], n.gpu[3], n.gpu[4] "
                   "size 1MiB\n")
    xml = tmp_path / "plan.xml"
    assert main([str(tdl), "--solver", "ring", "-q", "-o", str(xml)]) == 0
    assert main(["verify", str(xml), "--topology", str(tdl)]) == 0
    out = capsys.readouterr().out
    assert "ranks: on NPUs 6 1 3 4 (from the plan's 'tacos ranks' comment)" in out
    # the bare preset declares no group: the comment alone maps the ranks
    node = Path(tacos.__file__).parent / "presets" / "dgx_a100_node.tdl"
    assert main(["verify", str(xml), "--topology", str(node)]) == 0
    bare = tmp_path / "bare.xml"
    bare.write_text(xml.read_text().split("\n", 1)[1])
    assert main(["verify", str(bare), "--topology", str(node)]) == 1
    assert main(["verify", str(bare), "--topology", str(tdl)]) == 0  # the declared group
    assert main(["verify", str(bare), "--topology", str(node),
                 "--ranks", "gpu[6],gpu[1],3,gpu[4]"]) == 0
    capsys.readouterr()
    assert main(["verify", str(bare), "--topology", str(node), "--ranks", "gpu[9]"]) == 2
    assert "not an NPU" in capsys.readouterr().err
