"""The forest solver: optimal rate against hand-computed cuts, tree loads against capacities, and
verified pipelined schedules for every collective it handles."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

import tacos
from tacos.builders import TopologyBuilder, mesh, ring, star
from tacos.check.bounds import cut_bound, lower_bound
from tacos.check.simulate import simulate
from tacos.check.verify import verify_schedule
from tacos.cli import main
from tacos.errors import UsageError
from tacos.model.patterns import build
from tacos.model.topology import Link, Npu, Topology
from tacos.msccl.rounds import first_round
from tacos.msccl.xml_writer import schedule_to_xml
from tacos.solvers.forest.pack import Tree, check_packing
from tacos.solvers.forest.rate import choose_rate, fixed_k_rate, link_capacities, optimal_rate
from tacos.solvers.forest.solver import group_topology, plan_forest

GB = 1e9
US = 1e-6
EXAMPLES = Path(__file__).parent.parent / "examples"


def _topo(n: int, edges: list[tuple[int, int, float]]) -> Topology:
    """NPUs 0..n-1 with a two-way link per (u, v, bandwidth in GB/s), α = 1 µs."""
    links = []
    for u, v, bw in edges:
        links += [Link(u, v, US, bw * GB), Link(v, u, US, bw * GB)]
    return Topology(tuple(Npu(i, f"n{i}") for i in range(n)), (), tuple(links))


def _rate(topo: Topology, group=None, roots=()):
    group = tuple(group if group is not None else topo.live_npus)
    g = link_capacities(topo, group, tuple(roots))
    return g, optimal_rate(topo, g)


def _x_seconds_per_byte(topo: Topology, group=None) -> Fraction:
    g, r = _rate(topo, group)
    return r.x / Fraction(g.unit)


# -- optimal rate against cuts computed by hand ---------------------------------------------
def test_one_way_ring_rate_is_everything_but_one_node():
    # 4 NPUs, one 2 GB/s link each way round: S = all but v sends 3 shards over 1 link
    topo = Topology(tuple(Npu(i, f"n{i}") for i in range(4)), (),
                    tuple(Link(i, (i + 1) % 4, US, 2 * GB) for i in range(4)))
    g, r = _rate(topo)
    assert r.x / Fraction(g.unit) == Fraction(3, 2 * 10**9)
    assert (r.k, r.u) == (1, 3) and r.exact and r.slowdown == 1.0
    assert set(r.caps.values()) == {3}  # U·b_e with b normalized to 1


def test_two_way_ring_needs_two_trees_per_root():
    topo = _topo(4, [(i, (i + 1) % 4, 1) for i in range(4)])
    g, r = _rate(topo)
    assert r.x / Fraction(g.unit) == Fraction(3, 2 * 10**9)  # 3 shards through 2 links
    assert (r.k, r.u) == (2, 3)
    fixed = fixed_k_rate(g, r.x, 1)  # one tree per root: floor(U) per link, 2·U >= 3 → U = 2
    assert fixed.k == 1 and fixed.u == 2 and not fixed.exact
    assert fixed.slowdown == pytest.approx(4 / 3)
    assert choose_rate(topo, link_capacities(topo, (0, 1, 2, 3)), 1).u == 2


def test_line_with_a_slow_link_is_bound_by_the_slow_link():
    # 0 =10= 1 -1- 2: S = {0, 1} pushes two shards over the 1 GB/s link
    g, r = _rate(_topo(3, [(0, 1, 10), (1, 2, 1)]))
    assert r.x / Fraction(g.unit) == Fraction(2, 10**9)
    assert r.cut == frozenset({0, 1})
    assert (r.k, r.u) == (1, 2)
    assert r.caps[(1, 2)] == 2 and r.caps[(0, 1)] == 20


def test_binding_cut_can_be_a_pair_not_a_node():
    # two fat pairs joined by one thin link: the pair cut (2 shards / 1) beats any node (3/10)
    topo = _topo(4, [(0, 1, 10), (2, 3, 10), (1, 2, 1)])
    g, r = _rate(topo)
    assert r.x / Fraction(g.unit) == Fraction(2, 10**9)
    assert r.cut in (frozenset({0, 1}), frozenset({2, 3}))


def test_star_switch_rate_is_one_port():
    topo = star(4, bandwidth=5 * GB, latency=US)
    assert _x_seconds_per_byte(topo) == Fraction(3, 5 * 10**9)  # 3 shards into one port


def test_mesh_corner_binds():
    topo = mesh(4, 4, bandwidth=50 * GB, latency=0.5 * US)
    assert _x_seconds_per_byte(topo) == Fraction(15, 100 * 10**9)  # corner: 2 links in
    coll = build("allgather", topo.live_npus, size=2**30)
    assert float(_x_seconds_per_byte(topo)) * 2**30 / 16 == pytest.approx(cut_bound(topo, coll))


def test_broadcast_rate_is_the_root_max_flow():
    topo = _topo(4, [(0, 1, 1), (0, 2, 1), (1, 3, 1), (2, 3, 1)])
    g, r = _rate(topo, roots=(0,))
    assert r.x / Fraction(g.unit) == Fraction(1, 2 * 10**9)  # λ(0, v) = 2 links for every v


@pytest.mark.parametrize("preset,params,algbw", [
    ("dgx_a100", {"nodes": 2}, 346.67), ("dgx_a100", {"nodes": 4}, 266.67),
    ("mi250", {}, 342.86), ("mi250", {"nodes": 2}, 354.13),
])
def test_forestcoll_optima_on_the_presets(preset, params, algbw):
    topo = tacos.load(str(_preset(preset)), params).topology
    n = len(topo.live_npus)
    x = _x_seconds_per_byte(topo)
    assert round(n / float(x) / 1e9, 2) == algbw


def _preset(name: str):
    from importlib import resources
    return resources.files("tacos") / "presets" / f"{name}.tdl"


# -- tree loads against capacities ----------------------------------------------------------
@pytest.mark.parametrize("make", [
    lambda: _topo(4, [(i, (i + 1) % 4, 1) for i in range(4)]),
    lambda: mesh(3, 3, bandwidth=GB, latency=US),
    lambda: star(5, bandwidth=GB, latency=US),
    lambda: _topo(4, [(0, 1, 10), (2, 3, 10), (1, 2, 1)]),
])
def test_packed_trees_span_and_respect_capacities(make):
    topo = make()
    group = topo.live_npus
    f = plan_forest(topo, group, group, "copy", False)
    load = check_packing(group, group, f.trees, f.rate.k, f.rate.caps)
    for (u, v), units in load.items():
        assert units <= f.rate.caps[(u, v)]
    assert sum(t.mult for t in f.trees) == f.rate.k * len(group)
    # the binding cut's links are full: the packing reaches the optimum, not less
    cut = f.rate.cut
    out = [(u, v) for (u, v) in f.rate.caps if u in cut and v not in cut]
    assert sum(load.get(e, 0) for e in out) == f.rate.k * sum(1 for v in group if v in cut)


def test_check_packing_rejects_overload_and_non_spanning_trees():
    topo = _topo(3, [(0, 1, 1), (1, 2, 1)])
    caps = {(0, 1): 1, (1, 2): 1, (1, 0): 1, (2, 1): 1}
    good = [Tree(0, 1, [(0, 1), (1, 2)], [(0, 1), (1, 2)])]
    assert check_packing((0, 1, 2), (0,), good, 1, caps) == {(0, 1): 1, (1, 2): 1}
    with pytest.raises(RuntimeError, match="exceed"):
        check_packing((0, 1, 2), (0,), good * 2, 2, caps)
    with pytest.raises(RuntimeError, match="misses"):
        check_packing((0, 1, 2), (0,), [Tree(0, 1, [(0, 1)], [(0, 1)])], 1, caps)
    assert topo.n_npus == 3


def test_switch_paths_map_back_to_physical_ports():
    topo = star(4, bandwidth=GB, latency=US)
    group = topo.live_npus
    f = plan_forest(topo, group, group, "copy", False)
    sw = topo.n_npus
    for t in f.trees:
        for (x, y), path in zip(t.edges, t.paths, strict=True):
            assert path == (x, sw, y)  # every tree edge is a cut-through route via the switch


# -- schedules: every one verified, never below the bound, close to the optimum -------------
TOPOS = {
    "ring": lambda: ring(4, bandwidth=10 * GB, latency=US),
    "mesh": lambda: mesh(3, 3, bandwidth=10 * GB, latency=US),
    "star": lambda: star(4, bandwidth=10 * GB, latency=US),
}


@pytest.mark.parametrize("name,kind", [
    # the 3x3 mesh's all-gather and reduce take about 1 s each: -m slow (its others stay)
    pytest.param(name, kind, marks=pytest.mark.slow)
    if (name, kind) in (("mesh", "allgather"), ("mesh", "reduce")) else (name, kind)
    for name in sorted(TOPOS)
    for kind in ("allgather", "reducescatter", "allreduce", "broadcast", "reduce")])
def test_schedules_verify_and_approach_the_optimum(name, kind):
    topo = TOPOS[name]()
    root = 1 if kind in ("broadcast", "reduce") else None
    coll = build(kind, topo.live_npus, size=len(topo.live_npus) * 2**22, root=root)
    s = tacos.synthesize(topo, coll, solver="forest")
    rep = verify_schedule(s)
    assert rep.ok, rep.text(5)
    assert s.topology is topo
    assert s.collective.size == coll.size and s.collective.kind == kind
    bound = lower_bound(topo, coll)
    assert s.makespan >= bound.value * (1 - 1e-9)
    forest = s.meta["forest"]
    assert s.makespan >= forest["optimal_time"] * (1 - 1e-9)
    assert forest["optimal_time"] / s.makespan > 0.85
    assert simulate(s).time == pytest.approx(s.makespan, rel=1e-9)
    reduce_ops = {t.op for t in s.transfers}
    assert reduce_ops == ({"reduce"} if kind in ("reducescatter", "reduce") else
                          {"reduce", "copy"} if kind == "allreduce" else {"copy"})


def test_reduce_scatter_uses_the_reversed_topology_rate():
    # one-way ring: reversed graph has the same cut; RS optimum = AG optimum
    topo = Topology(tuple(Npu(i, f"n{i}") for i in range(4)), (),
                    tuple(Link(i, (i + 1) % 4, US, GB) for i in range(4)))
    ag = tacos.synthesize(topo, build("allgather", range(4), size=2**24), solver="forest")
    rs = tacos.synthesize(topo, build("reducescatter", range(4), size=2**24), solver="forest")
    assert rs.meta["forest"]["optimal_time"] == pytest.approx(ag.meta["forest"]["optimal_time"])
    assert verify_schedule(rs).ok


def test_process_group_uses_only_its_members():
    from tacos import load

    topo = load(str(_preset("dgx_a100_node"))).topology
    group = (1, 3, 4, 6)
    coll = build("allreduce", group, size=2**24)
    s = tacos.synthesize(topo, coll, solver="forest")
    assert verify_schedule(s).ok
    assert {t.src for t in s.transfers} | {t.dst for t in s.transfers} == set(group)
    assert group_topology(topo, group).links  # switch ports of members only
    # four GPUs on an NVSwitch: 3 shards into one full port, as if alone on the switch
    assert s.meta["forest"]["optimal_algbw"] == pytest.approx(300e9 * 4 / 3 / 2, rel=1e-9)


def test_relays_all_lets_trees_pass_through_other_npus():
    # 0 - 1 - 2 in a line: the group {0, 2} can only talk through NPU 1
    topo = _topo(3, [(0, 1, 1), (1, 2, 1)])
    coll = build("allgather", (0, 2), size=2**20)
    s = tacos.synthesize(topo, coll, solver="forest", relays="all")
    assert verify_schedule(s).ok
    assert {t.src for t in s.transfers} >= {0, 1, 2}


def test_fixed_k_option_and_determinism():
    topo = TOPOS["mesh"]()
    coll = build("allgather", topo.live_npus, size=9 * 2**21)
    a = tacos.synthesize(topo, coll, solver="forest", trees=1, slices=4)
    b = tacos.synthesize(topo, coll, solver="forest", trees=1, slices=4)
    assert tacos.emit(a, "json") == tacos.emit(b, "json")
    assert a.meta["forest"]["phases"][0]["k"] == 1
    assert a.meta["pipeline"]["slices"] == 4
    assert verify_schedule(a).ok


def test_unsupported_collective_is_a_clear_error():
    topo = TOPOS["ring"]()
    with pytest.raises(UsageError, match="forest"):
        tacos.synthesize(topo, build("alltoall", range(4), size=4096), solver="forest")


# -- MSCCL: one pipeline round per program --------------------------------------------------
def test_first_round_is_a_valid_schedule_of_the_base_chunks():
    topo = TOPOS["mesh"]()
    coll = build("allreduce", topo.live_npus, size=9 * 2**21)
    s = tacos.synthesize(topo, coll, solver="forest", slices=4)
    base = first_round(s)
    assert base.collective.chunks_per_npu * 4 == s.collective.chunks_per_npu
    assert verify_schedule(base).ok
    xml = schedule_to_xml(s)
    assert f'nchunksperloop="{base.collective.n_chunks}"' in xml


def test_tree_groups_get_their_own_channels():
    import re

    topo = tacos.load(str(_preset("dgx1"))).topology
    coll = build("allgather", topo.live_npus, size=2**24)
    s = tacos.synthesize(topo, coll, solver="forest", trees="exact", slices=2)
    assert s.meta["forest"]["phases"][0]["k"] == 6
    base = first_round(s)
    hints = base.meta["channel_of_transfer"]
    assert len(hints) == len(base.transfers) and len(set(hints)) > 1
    xml = schedule_to_xml(s)  # lowered and verified
    assert int(re.search(r'nchannels="(\d+)"', xml).group(1)) >= len(set(hints))


@pytest.mark.slow
def test_cli_writes_verified_xml(tmp_path, capsys):
    """The forest plan itself (``--shape fixed``), reported as the forest, verifies; the
    default (``--shape auto``) writes whichever plan and shape the runtime model times
    fastest, never slower than that fixed lowering."""
    import re

    out = tmp_path / "plan.xml"
    assert main([str(_preset("dgx1")), "--collective", "allgather", "--size", "64MiB",
                 "--solver", "forest", "-o", str(out), "--report", "-q",
                 "--shape", "fixed"]) == 0
    text = capsys.readouterr().out
    assert "forest" in text and "optimal algbw" in text and "physical" in text
    assert main(["verify", str(out), "--topology", str(_preset("dgx1"))]) == 0
    fixed = float(re.search(r"runtime +([\d.]+) ms", text).group(1))
    shaped = tmp_path / "shaped.xml"
    assert main([str(_preset("dgx1")), "--collective", "allgather", "--size", "64MiB",
                 "--solver", "forest", "-o", str(shaped), "--report", "-q"]) == 0
    text = capsys.readouterr().out
    assert "msccl shape" in text
    assert float(re.search(r"runtime +([\d.]+) ms", text).group(1)) <= fixed
    assert main(["verify", str(shaped), "--topology", str(_preset("dgx1"))]) == 0


def test_builder_topology_with_switch_and_relay():
    b = TopologyBuilder("two switches")
    npus = b.npus(4)
    s0, s1 = b.switch("s0"), b.switch("s1")
    for v in npus[:2]:
        b.link(v, s0, bandwidth=GB, latency=US)
        b.link(s0, v, bandwidth=GB, latency=US)
    for v in npus[2:]:
        b.link(v, s1, bandwidth=GB, latency=US)
        b.link(s1, v, bandwidth=GB, latency=US)
    b.link(s0, s1, bandwidth=GB, latency=US)
    b.link(s1, s0, bandwidth=GB, latency=US)
    topo = b.build()
    coll = build("allgather", topo.live_npus, size=2**22)
    s = tacos.synthesize(topo, coll, solver="forest")
    assert verify_schedule(s).ok
    # one port takes 3 shards (the inter-switch link only 2): x* = 3 shards per GB/s
    assert s.meta["forest"]["optimal_time"] == pytest.approx(3 * 2**22 / 4 / GB)
    assert any(len(t.route) == 3 for t in s.transfers)  # through both switches


def test_striped_slices_of_unequal_chunks_verify():
    # parallel lanes let a lone slice be striped; the size leaves chunks a byte apart, so each
    # stripe must carry its own chunks' bytes, not an even share
    links = []
    for i in range(4):
        j = (i + 1) % 4
        links += [Link(i, j, US, 10 * GB, multiplicity=3), Link(j, i, US, 10 * GB, multiplicity=3)]
    topo = Topology(tuple(Npu(i, f"n{i}") for i in range(4)), (), tuple(links))
    coll = build("allgather", topo.live_npus, size=4 * (6 * 2**18 + 1), chunks_per_npu=3)
    s = tacos.synthesize(topo, coll, solver="forest", slices=1)
    assert len({c.size for c in s.collective.chunks}) > 1
    lanes = {(t.start, t.src, t.dst) for t in s.transfers if len(t.chunks) == 1}
    assert len(lanes) < sum(len(t.chunks) == 1 for t in s.transfers)  # one slice, several lanes
    rep = verify_schedule(s)
    assert rep.ok, rep.text(5)


def test_island_order_keeps_trees_shallow_behind_nics():
    # 2x DGX-H100, two trees per root (the exact rate): a tree that crosses into the other
    # node once and spreads there over NVSwitch stays at depth <= 3; taking every GPU's NIC
    # arc uses up the NICs and leaves later trees detours up to depth 5
    topo = tacos.load(str(_preset("dgx_h100")), {"nodes": 2}).topology
    group = tuple(topo.live_npus)
    deep = {}
    for islands in (True, False):
        f = plan_forest(topo, group, group, "copy", False, 2, islands=islands)
        assert f.rate.exact and f.rate.k == 2
        check_packing(group, group, f.trees, f.rate.k, f.rate.caps)
        deep[islands] = max(t.depth() for t in f.trees)
    assert deep[True] <= 3 < deep[False]


@pytest.mark.slow  # 3-4 s on 2 cores
def test_allreduce_is_no_slower_than_its_two_phases():
    # 2x DGX-A100, shards a byte apart: all-reduce = reduce-scatter then all-gather, each
    # timed on its own chunk sizes, so it takes no longer than the two solved separately
    topo = tacos.load(str(_preset("dgx_a100")), {"nodes": 2}).topology
    size = 2**30
    times = {}
    for kind in ("allreduce", "reducescatter", "allgather"):
        s = tacos.synthesize(topo, build(kind, topo.live_npus, size=size), solver="forest",
                             trees=1)
        assert verify_schedule(s).ok
        times[kind] = s.makespan
    assert times["allreduce"] <= (times["reducescatter"] + times["allgather"]) * 1.001


@pytest.mark.slow  # 3-4 s on 2 cores
def test_relay_npus_hold_a_trees_data_once():
    """With relays='all', edge splitting can give one tree paths that pass the same relay NPU
    from different places, or loop through it (``2, 1, 5, 1, 0``).  The relay must receive the
    tree's data once: twice put a chunk twice on one link (all-gather) and, in the reversed
    trees of all-reduce, counted relayed contributions twice."""
    from tacos.solvers.forest.pipeline import _local, _simple

    assert _simple((2, 1, 5, 1, 0)) == (2, 1, 0)
    assert _simple((6, 5, 9, 5, 4)) == (6, 5, 4)
    tree = Tree(0, 1, [(0, 2), (0, 4)], [(0, 1, 2), (0, 1, 3, 1, 4)])
    local, npus = _local(tree, lambda v: False)
    assert sorted(npus) == [0, 1, 2, 4]  # NPU 1 holds the data once and forwards it twice
    topo = tacos.load(str(EXAMPLES / "mesh4x4.tdl")).topology
    half = topo.live_npus[::2]
    for kind in ("allgather", "allreduce"):
        coll = build(kind, half, size=len(half) * 64 * 1024)
        sched = tacos.synthesize(topo, coll, solver="forest", seed=1, relays="all", bound=False)
        assert verify_schedule(sched).ok, verify_schedule(sched).text(3)

