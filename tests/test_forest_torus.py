"""The forest solver's dimension-ordered trees of tori: spanning trees with 2d per root, loads
equal to the capacities on cubic tori, step labels one per (phase, step), verified schedules near
the min-cut optimum, and no such trees where the topology is not a uniform torus."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest
from forest_topologies import slower as _slower
from forest_topologies import tdl_torus as _tdl_torus

import tacos
from tacos.builders import mesh, ring, torus
from tacos.check.verify import verify_schedule
from tacos.model.patterns import build
from tacos.model.topology import Topology
from tacos.solvers.forest.candidates import _dims
from tacos.solvers.forest.pack import check_packing
from tacos.solvers.forest.rate import choose_rate, link_capacities
from tacos.solvers.forest.solver import plan_forest
from tacos.solvers.forest.split import split_switches
from tacos.solvers.forest.symmetric import find_symmetry
from tacos.solvers.forest.torus import applies, dimension_trees

GB = 1e9
US = 1e-6


def _trees(topo: Topology):
    """The dimension-ordered trees of ``topo`` with their rate, the optimum rate and the
    symmetry (or None where they do not apply)."""
    group = tuple(topo.live_npus)
    graph = link_capacities(topo, group, group)
    best = choose_rate(topo, graph, "exact")
    split = split_switches(graph.n_nodes, group, group, best.caps, best.k)
    sym = find_symmetry(topo, group, split, graph.n_nodes)
    bws = set(graph.bw.values())
    if sym is None or len(bws) != 1:
        return None, best, sym
    return dimension_trees(sym, graph.bw, best.x, bws.pop()), best, sym


# -- the trees ------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [
    lambda: torus(3, 3, 3, bandwidth=GB, latency=US),
    lambda: _tdl_torus(4, 4),
    lambda: ring(5, bandwidth=GB, latency=US),
])
def test_cubic_torus_trees_fill_every_arc_to_the_optimal_capacity(make):
    topo = make()
    (trees, rate), best, sym = _trees(topo)
    group = tuple(topo.live_npus)
    n, d = len(group), len(sym.dims)
    assert rate.k == 2 * d and len(trees) == 2 * d * n
    assert Counter(t.root for t in trees) == dict.fromkeys(group, 2 * d)
    load = check_packing(group, group, trees, rate.k, rate.caps)  # spanning, within caps
    assert set(load) == {e for e, c in best.caps.items() if c > 0}  # every arc used
    assert set(load.values()) == {n - 1} == set(rate.caps.values())  # loads = capacities
    assert rate.exact and rate.slowdown == 1.0
    assert rate.u / rate.k == best.x  # the claimed rate is the min-cut optimum


@pytest.mark.parametrize("make", [
    lambda: torus(3, 3, 3, bandwidth=GB, latency=US),
    lambda: torus(4, 3, bandwidth=GB, latency=US),
])
def test_step_labels_follow_the_phases_of_each_part(make):
    topo = make()
    (trees, _), _, sym = _trees(topo)
    dims, d = sym.dims, len(sym.dims)
    coords = sym.coords
    for tree in trees:
        assert tree.steps is not None and len(tree.steps) == len(tree.edges)
        label_of = {y: lab for (_, y), lab in zip(tree.edges, tree.steps, strict=True)}
        by_label = defaultdict(list)
        for (x, y), lab in zip(tree.edges, tree.steps, strict=True):
            if x != tree.root:  # labels grow along every root-to-leaf path
                assert label_of[x][0] + label_of[x][1] < lab[0] + lab[1]
            moved = [a for a in range(d) if coords[x][a] != coords[y][a]]
            assert len(moved) == 1  # one hop along one dimension
            by_label[lab].append(moved[0])
        # phases in the part's cyclic order; step t of phase φ: one edge per node reached
        # in the earlier phases (the product of their ring sizes)
        first = by_label[(0, 1)][0]
        offset, reached = 0, 1
        for phi in range(d):
            a = (first + phi) % d
            for t in range(1, dims[a]):
                assert by_label[(offset, t)] == [a] * reached
            offset += dims[a] - 1
            reached *= dims[a]
        assert len(by_label) == offset


def test_non_cubic_torus_trees_claim_their_busiest_arc():
    topo = torus(4, 3, bandwidth=GB, latency=US)
    (trees, rate), best, _ = _trees(topo)
    group = tuple(topo.live_npus)
    load = check_packing(group, group, trees, rate.k, rate.caps)
    assert max(load.values()) == max(rate.caps.values())
    assert min(load.values()) < max(load.values())  # the dimensions are not balanced
    assert rate.slowdown > 1 and not rate.exact
    assert rate.slowdown == pytest.approx(float(rate.u / (rate.k * best.x)))


@pytest.mark.parametrize("make", [
    pytest.param(lambda: mesh(3, 3, bandwidth=GB, latency=US),  # no wrap-around (~1 s)
                 marks=pytest.mark.slow),
    pytest.param(lambda: _slower(torus(3, 3, bandwidth=GB, latency=US), 0, 1),  # one slower link
                 marks=pytest.mark.slow),
    lambda: torus(3, 3, bandwidth=[GB, 2 * GB], latency=US),  # dimensions of two speeds
    lambda: torus(4, 2, bandwidth=GB, latency=US),  # a ring of two: + and - coincide
    lambda: ring(4, bandwidth=GB, latency=US, bidirectional=False),  # one direction only
])
def test_no_dimension_trees_where_they_do_not_apply(make):
    topo = make()
    built, best, sym = _trees(topo)
    assert built is None
    if sym is not None:
        group = tuple(topo.live_npus)
        caps = link_capacities(topo, group, group).bw
        assert not applies(sym, caps)
    group = tuple(topo.live_npus)
    forest = plan_forest(topo, group, group, "copy", False, "auto")
    assert _dims([forest], topo, group) is None
    coll = build("allgather", group, size=len(group) * 2**20)
    s = tacos.synthesize(topo, coll, solver="forest")
    assert verify_schedule(s).ok
    assert all(t["packing"] != "dims" for t in s.meta["forest"]["tried"])


# -- schedules ------------------------------------------------------------------------------
def _near_optimum(kind: str, **opts):
    topo = torus(4, 4, bandwidth=50 * GB, latency=0.5 * US)
    coll = build(kind, topo.live_npus, size=2**30)
    s = tacos.synthesize(topo, coll, solver="forest", **opts)
    rep = verify_schedule(s)
    assert rep.ok, rep.text(5)
    f = s.meta["forest"]
    assert any(t["packing"] == "dims" for t in f["tried"])
    assert {p["packing"] for p in f["phases"]} == {"dims"}
    assert [p["k"] for p in f["phases"]] == [4] * len(f["phases"])
    assert s.meta["pipeline"]["batched"] == "steps"
    assert s.makespan >= f["optimal_time"] * (1 - 1e-9)
    assert f["optimal_time"] / s.makespan >= 0.99
    again = tacos.synthesize(topo, coll, solver="forest", **opts)
    assert tacos.emit(again, "json") == tacos.emit(s, "json")


@pytest.mark.parametrize("kind", ["allgather", "allreduce"])
def test_cubic_torus_one_round_schedule_is_verified_and_near_the_min_cut_optimum(kind):
    _near_optimum(kind, slices=1)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["allgather", "allreduce"])
def test_cubic_torus_searched_schedule_is_verified_and_near_the_min_cut_optimum(kind):
    _near_optimum(kind)


def test_dims_option_turns_the_candidate_off():
    topo = torus(3, 3, bandwidth=50 * GB, latency=0.5 * US)
    coll = build("allgather", topo.live_npus, size=9 * 2**20)
    s = tacos.synthesize(topo, coll, solver="forest", dims=False)
    assert verify_schedule(s).ok
    assert all(t["packing"] != "dims" for t in s.meta["forest"]["tried"])


def test_one_round_is_one_transfer_per_link_and_step():
    topo = torus(3, 3, 3, bandwidth=50 * GB, latency=0.5 * US)
    coll = build("allgather", topo.live_npus, size=27 * 2**20)
    s = tacos.synthesize(topo, coll, solver="forest", slices=1)
    assert verify_schedule(s).ok
    f = s.meta["forest"]
    assert f["phases"][0]["packing"] == "dims"
    arcs = 27 * 6
    assert len(s.transfers) == arcs * (3 * 2)  # Σ (n_a − 1) steps on every arc
    # every step moves the same volume on every arc: the phases take n^(φ-1) units per step
    assert s.makespan == pytest.approx(f["optimal_time"] + 6 * 0.5 * US, rel=1e-5)


@pytest.mark.slow  # 3 s; the solver tests cover the schedules
def test_dimension_tree_schedule_lowers_to_verified_xml():
    from tacos.msccl.xml_writer import schedule_to_xml

    topo = torus(4, 4, bandwidth=50 * GB, latency=0.5 * US)
    coll = build("allreduce", topo.live_npus, size=16 * 2**24)
    s = tacos.synthesize(topo, coll, solver="forest", in_switch=False)
    assert {p["packing"] for p in s.meta["forest"]["phases"]} == {"dims"}
    assert verify_schedule(s).ok
    xml = schedule_to_xml(s)  # lowered, parsed back and verified
    assert xml.count("<gpu ") == 16


@pytest.mark.slow
def test_512_npu_torus_dimension_trees_verify_within_the_targets():
    topo = _tdl_torus(8, 8, 8)
    coll = build("allgather", topo.live_npus, size=512 * 2**17)  # 64 MiB
    s = tacos.synthesize(topo, coll, solver="forest")
    assert verify_schedule(s).ok
    f = s.meta["forest"]
    assert f["phases"][0]["packing"] == "dims" and f["trees"] == 3072
    assert f["optimal_time"] / s.makespan >= 0.9


def test_step_merging_keeps_the_labels():
    # the labelled groups wait on each other without a cycle, so step_groups keeps them (its
    # fallback, depth steps, would count from 0): one group per arc and label, every member of
    # a group on the same arc with the same label
    from tacos.solvers.forest.pipeline import step_groups

    topo = torus(3, 3, 3, bandwidth=GB, latency=US)
    (trees, _), _, _ = _trees(topo)
    arcs: dict = {}
    hop_ids = [[arcs.setdefault(e, len(arcs)) for e in t.edges] for t in trees]
    npu_of = [list(range(topo.n_nodes))] * len(trees)
    group_of, members, step_of = step_groups(trees, npu_of, hop_ids, [1] * len(trees))
    assert min(step_of) == 1
    assert len(members) == len(arcs) * 3 * 2  # Σ (n_a − 1) labels on every arc
    for mem in members:
        assert len({(hop_ids[i][e], trees[i].steps[e]) for i, _, e in mem}) == 1
