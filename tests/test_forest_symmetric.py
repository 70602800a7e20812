"""The forest solver's symmetric packing: translations found and verified on tori and rings,
refused where they are not automorphisms, loads within the capacities, the general path's rate,
and verified schedules."""

from __future__ import annotations

import numpy as np
import pytest
from forest_topologies import slower as _slower
from forest_topologies import tdl_torus as _tdl_torus

import tacos
from tacos.builders import mesh, ring, torus
from tacos.check.verify import verify_schedule
from tacos.model.patterns import build
from tacos.model.topology import Link, Npu, Topology
from tacos.solvers.forest.pack import check_packing
from tacos.solvers.forest.rate import choose_rate, link_capacities
from tacos.solvers.forest.solver import group_topology, plan_forest
from tacos.solvers.forest.split import hop_distances, split_switches, successors
from tacos.solvers.forest.symmetric import _parents, find_symmetry, pack_symmetric

GB = 1e9
US = 1e-6


def _symmetry(topo: Topology, k: int | str = "auto"):
    group = tuple(topo.live_npus)
    topo = group_topology(topo, group)
    graph = link_capacities(topo, group, group)
    rate = choose_rate(topo, graph, k)
    split = split_switches(graph.n_nodes, group, group, rate.caps, rate.k)
    return find_symmetry(topo, group, split, graph.n_nodes), split, rate, group


# -- detection ------------------------------------------------------------------------------
@pytest.mark.parametrize("make, dims", [
    (lambda: torus(3, 3, bandwidth=GB, latency=US), (3, 3)),
    (lambda: torus(3, 4, bandwidth=[GB, 2 * GB], latency=US), (3, 4)),  # ids in mixed radix
    (lambda: torus(2, 3, 2, bandwidth=GB, latency=US), (2, 3, 2)),
    (lambda: ring(5, bandwidth=GB, latency=US), (5,)),
    (lambda: ring(4, bandwidth=GB, latency=US, bidirectional=False), (4,)),
    (lambda: _tdl_torus(4, 4), (4, 4)),  # coordinates from the names
    (lambda: _tdl_torus(3, 2, 4), (3, 2, 4)),
])
def test_translations_of_tori_and_rings_are_found(make, dims):
    sym, split, _, group = _symmetry(make())
    assert sym is not None and sorted(sym.dims) == sorted(dims)
    n = len(group)
    assert sym.perms.shape[0] == n
    for i, v in enumerate(sym.members):
        p = sym.perms[i]
        assert p[sym.members[0]] == v
        assert sorted(p[list(group)].tolist()) == sorted(group)  # a bijection of the NPUs
        for (a, b), c in split.caps.items():  # and an automorphism of the capacities
            assert split.caps.get((int(p[a]), int(p[b]))) == c


@pytest.mark.parametrize("make", [
    lambda: mesh(3, 3, bandwidth=GB, latency=US),  # no wrap-around
    lambda: mesh(4, bandwidth=GB, latency=US),
    lambda: _slower(torus(3, 3, bandwidth=GB, latency=US), 0, 1),  # one slower link
    lambda: _slower(_tdl_torus(4, 4), 5, 6),
])
def test_no_symmetry_is_claimed_where_translations_are_not_automorphisms(make):
    topo = make()
    sym, *_ = _symmetry(topo)
    assert sym is None
    group = topo.live_npus
    f = plan_forest(topo, group, group, "copy", False)
    assert f.packing == "lovasz"  # the general packing takes over
    check_packing(group, group, f.trees, f.rate.k, f.rate.caps)


def test_ids_that_are_no_grid_fall_back():
    # a 3x3 torus whose NPU ids are shuffled: neither names nor the ids' mixed radix give
    # translations, so nothing is claimed
    base = torus(3, 3, bandwidth=GB, latency=US)
    perm = [4, 0, 8, 2, 6, 1, 3, 7, 5]
    links = tuple(Link(perm[lk.src], perm[lk.dst], lk.alpha, lk.bandwidth, lk.multiplicity,
                       lk.dim, lk.tag) for lk in base.links)
    topo = Topology(tuple(Npu(i, f"n{i}") for i in range(9)), (), links)
    sym, *_ = _symmetry(topo)
    assert sym is None


# -- packing --------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [
    lambda: torus(3, 3, bandwidth=GB, latency=US),
    lambda: torus(4, 4, bandwidth=GB, latency=US),
    lambda: torus(3, 4, bandwidth=[GB, 2 * GB], latency=US),
    lambda: _tdl_torus(2, 3, 4),
    lambda: ring(6, bandwidth=GB, latency=US),
    lambda: ring(5, bandwidth=GB, latency=US, bidirectional=False),
])
@pytest.mark.parametrize("k", ["auto", 1])
def test_symmetric_packing_respects_capacities_at_the_general_rate(make, k):
    topo = make()
    group = topo.live_npus
    sym_f = plan_forest(topo, group, group, "copy", False, k)
    gen_f = plan_forest(topo, group, group, "copy", False, k, symmetric=False)
    assert sym_f.packing == "symmetric" and gen_f.packing == "lovasz"
    assert (sym_f.rate.k, sym_f.rate.u) == (gen_f.rate.k, gen_f.rate.u)
    load = check_packing(group, group, sym_f.trees, sym_f.rate.k, sym_f.rate.caps)
    # the binding cut's links carry what the optimum needs: the full rate, not less
    cut = sym_f.rate.cut
    if cut:
        out = [e for e in sym_f.rate.caps if e[0] in cut and e[1] not in cut]
        assert sum(load.get(e, 0) for e in out) >= sym_f.rate.k * sum(v in cut for v in group)
    # shortest-path trees: no deeper than the farthest NPU
    ecc = max(hop_distances(successors(sym_f.split.caps), group[0]).values())
    assert max(t.depth() for t in sym_f.trees) == ecc
    # translated: every root's trees are the first root's, moved
    assert len({len(t.edges) for t in sym_f.trees}) == 1


def test_orbit_budgets_too_small_give_no_packing():
    sym, split, rate, group = _symmetry(ring(6, bandwidth=GB, latency=US), 1)
    assert pack_symmetric(sym, split.caps, rate.k) is not None
    tight = {e: max(0, c - 1) for e, c in split.caps.items()}
    assert pack_symmetric(sym, tight, rate.k) is None


# -- schedules ------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["allgather", "allreduce", "reducescatter"])
@pytest.mark.parametrize("make", [
    lambda: torus(3, 3, bandwidth=10 * GB, latency=US),
    pytest.param(lambda: _tdl_torus(3, 2, 2), marks=pytest.mark.slow),  # 0.5-1 s each
])
def test_symmetric_schedules_verify(make, kind):
    topo = make()
    n = len(topo.live_npus)
    coll = build(kind, topo.live_npus, size=n * 2**20)
    s = tacos.synthesize(topo, coll, solver="forest", dims=False)
    rep = verify_schedule(s)
    assert rep.ok, rep.text(5)
    f = s.meta["forest"]
    assert {p["packing"] for p in f["phases"]} == {"symmetric"}
    assert s.makespan >= f["optimal_time"] * (1 - 1e-9)
    assert f["optimal_time"] / s.makespan > 0.8


def test_packing_general_option_uses_the_lovasz_construction():
    topo = torus(3, 3, bandwidth=10 * GB, latency=US)
    coll = build("allgather", topo.live_npus, size=9 * 2**20)
    s = tacos.synthesize(topo, coll, solver="forest", packing="general")
    assert verify_schedule(s).ok
    assert s.meta["forest"]["phases"][0]["packing"] == "lovasz"


@pytest.mark.slow
@pytest.mark.parametrize("k", ["auto", 1])
def test_4x4x4_torus_symmetric_packing_matches_the_general_rate(k):
    test_symmetric_packing_respects_capacities_at_the_general_rate(lambda: _tdl_torus(4, 4, 4), k)


@pytest.mark.slow
def test_512_npu_torus_packs_by_symmetry():
    topo = _tdl_torus(8, 8, 8)
    group = topo.live_npus
    f = plan_forest(topo, group, group, "copy", False, 1)
    assert f.packing == "symmetric" and f.tests == 0
    load = check_packing(group, group, f.trees, 1, f.rate.caps)
    assert max(load.values()) <= 86  # ⌈511 / 6⌉ tree arcs per direction class
    assert np.isclose(f.rate.slowdown, 86 * 6 / 511)


def test_arcs_inside_a_layer_help_when_shortest_arcs_do_not_fit():
    # 5-ring, one tree per root, 3 units clockwise and 1 counter-clockwise per arc: NPUs 3 and
    # 4 both need the counter-clockwise arcs along shortest paths, but 3 may hang below 2
    sym, split, _, group = _symmetry(ring(5, bandwidth=GB, latency=US), 1)
    r0 = sym.members[0]
    cw = int(sym.perms[1][r0])  # the neighbour the first translation moves r0 to
    caps = {}
    for (a, b) in split.caps:
        i = sym.members.index(a)
        caps[(a, b)] = 3 if int(sym.perms[i][cw]) == b else 1
    assert _parents(sym, caps, 1, same_layer=False) is None  # shortest arcs: too few
    trees = pack_symmetric(sym, caps, 1)
    assert trees is not None
    check_packing(group, group, trees, 1, caps)
    assert max(t.depth() for t in trees) == 3  # one deeper than the shortest-path depth 2


@pytest.mark.slow
def test_512_npu_torus_allgather_schedule_verifies():
    topo = _tdl_torus(8, 8, 8)
    coll = build("allgather", topo.live_npus, size=512 * 2**21)
    s = tacos.synthesize(topo, coll, solver="forest", dims=False)  # not the torus's own trees
    assert verify_schedule(s).ok
    f = s.meta["forest"]
    assert f["phases"][0]["packing"] == "symmetric" and f["trees"] == 512
    assert f["optimal_time"] / s.makespan > 0.9


def test_symmetric_schedule_lowers_to_verified_xml():
    from tacos.msccl.xml_writer import schedule_to_xml

    topo = torus(3, 3, bandwidth=10 * GB, latency=US)
    coll = build("allgather", topo.live_npus, size=9 * 2**20)
    s = tacos.synthesize(topo, coll, solver="forest", dims=False)
    assert s.meta["forest"]["phases"][0]["packing"] == "symmetric"
    assert verify_schedule(s).ok
    xml = schedule_to_xml(s)  # lowered, parsed back and verified
    assert xml.count("<gpu ") == 9


def test_symmetric_synthesis_is_deterministic():
    topo = _tdl_torus(3, 2, 2)
    coll = build("allreduce", topo.live_npus, size=12 * 2**20)
    a = tacos.synthesize(topo, coll, solver="forest", trees=1)
    b = tacos.synthesize(topo, coll, solver="forest", trees=1)
    assert tacos.emit(a, "json") == tacos.emit(b, "json")
    assert verify_schedule(a).ok
