"""Routes of the physical machine model: candidates, ECMP, validity checks."""

from __future__ import annotations

import pytest

from tacos import load
from tacos.builders import ring, star
from tacos.model.routes import RouteError, link_name


def fat_tree(tmp_path, *, hosts=16, leaves=4, spines=2):
    path = tmp_path / "ft.tdl"
    path.write_text(f'topology "ft"\nfattree h[{hosts}] leaves={leaves} spines={spines} '
                    "down 50GB/s 1us up 100GB/s 1us\n")
    return load(str(path)).topology


def test_star_routes_are_up_port_then_down_port():
    topo = star(4, bandwidth=100e9, latency=1e-6)
    sw = topo.switches[0].id
    (route,) = topo.routing.routes(0, 2)
    up, down = (topo.links[i] for i in route.links)
    assert (up.src, up.dst, down.src, down.dst) == (0, sw, sw, 2)
    assert route.alpha == pytest.approx(2e-6)  # cut-through: α of both links, paid once
    assert route.time(1e6) == pytest.approx(2e-6 + 1e6 / 100e9)
    assert topo.routing.neighbours(0) == [1, 2, 3]


def test_no_route_passes_through_an_npu():
    topo = ring(4, bandwidth=10e9, latency=1e-6)
    assert topo.routing.routes(0, 2) == ()  # two hops away: store-and-forward, not a route
    assert len(topo.routing.routes(0, 1)) == 1
    first, second = topo.routing.routes(0, 1)[0].links[0], topo.routing.routes(1, 2)[0].links[0]
    with pytest.raises(RouteError, match="passes through NPU"):
        topo.routing.make((first, second))


def test_leaf_spine_has_one_route_per_spine_across_leaves(tmp_path):
    topo = fat_tree(tmp_path)
    same_leaf = topo.routing.routes(0, 1)
    assert [len(r.links) for r in same_leaf] == [2]
    across = topo.routing.routes(0, 15)
    assert len(across) == 2 and all(len(r.links) == 4 for r in across)
    spines = {topo.links[r.links[1]].dst for r in across}
    assert len(spines) == 2 and all(topo.is_switch(s) for s in spines)
    # the narrowest link sets the bandwidth, every link's α adds up
    assert across[0].bandwidth == 50e9 and across[0].alpha == pytest.approx(4e-6)


def test_ecmp_is_capped_deterministically(tmp_path):
    topo = fat_tree(tmp_path, hosts=8, leaves=2, spines=6)
    from tacos.model.routes import Routing

    narrow = Routing(topo, max_ecmp=3)
    got = narrow.routes(0, 7)
    assert len(got) == 3
    assert got == Routing(topo, max_ecmp=3).routes(0, 7)
    assert set(got) <= set(topo.routing.routes(0, 7))


def test_make_rejects_what_is_not_a_route(tmp_path):
    topo = fat_tree(tmp_path, hosts=4, leaves=2, spines=1)
    good = topo.routing.routes(0, 3)[0]
    assert topo.routing.make(good.links) == good
    with pytest.raises(RouteError, match="no link"):
        topo.routing.make(())
    with pytest.raises(RouteError, match="does not exist"):
        topo.routing.make((len(topo.links),))
    with pytest.raises(RouteError, match="does not start where it ends"):
        topo.routing.make((good.links[0], good.links[2]))
    with pytest.raises(RouteError, match="ends at switch"):
        topo.routing.make(good.links[:2])
    back = next(i for i, lk in enumerate(topo.links)
                if lk.src == topo.links[good.links[0]].dst and lk.dst == 0)
    with pytest.raises(RouteError, match="twice"):
        topo.routing.make((good.links[0], back))


def test_failed_npus_have_no_routes():
    topo = star(3, bandwidth=1e9, latency=0.0)
    from dataclasses import replace

    broken = replace(topo, npus=(topo.npus[0], replace(topo.npus[1], failed=True), topo.npus[2]))
    assert broken.routing.routes(0, 1) == ()
    assert broken.routing.neighbours(0) == [2]


def test_link_names_say_which_port():
    topo = star(2, bandwidth=1e9, latency=0.0)
    up = topo.routing.routes(0, 1)[0].links[0]
    assert link_name(topo, up).endswith(f"(port of {topo.npus[0].name})")
