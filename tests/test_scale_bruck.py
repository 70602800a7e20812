"""Bruck's all-gather and reduce-scatter on the switched group templates of a Clos."""

from __future__ import annotations

import math

import pytest

from tacos.check.verify import verify_schedule
from tacos.model.clos import clos_h100
from tacos.model.torus_axes import TorusAxes
from tacos.scale.bruck import bruck
from tacos.scale.synthesize import layouts


@pytest.mark.parametrize("kind", ["allgather", "reducescatter"])
@pytest.mark.parametrize("r", [2, 3, 5, 7, 8])
def test_bruck_is_verified_in_log_rounds(kind: str, r: int) -> None:
    if r == 8:   # a DGX node's GPUs on their NVSwitch
        topo = clos_h100(nodes=2, hosts_per_leaf=2).template(0)
    else:        # r nodes on a rail's leaf
        topo = clos_h100(nodes=max(r, 2) * 2, hosts_per_leaf=r).template(1)
    assert topo.n_npus == r
    size = r * 1000
    s = bruck(topo, kind, size)
    assert s is not None
    rep = verify_schedule(s)
    assert rep.ok, rep.text(5)
    rounds = sorted({t.start for t in s.transfers})
    assert len(rounds) == math.ceil(math.log2(r))
    # every member sends each block once: (r - 1) blocks, in ceil(log2 r) route alphas
    link = topo.links[0]   # every route is member -> switch -> member
    want = len(rounds) * 2 * link.alpha + (r - 1) * (size / r) / link.bandwidth
    assert s.makespan == pytest.approx(want, rel=1e-9)
    per_src = {}
    for t in s.transfers:
        per_src[t.src] = per_src.get(t.src, 0) + len(t.chunks)
    assert set(per_src.values()) == {r - 1}


def test_bruck_needs_switches_between_members() -> None:
    ring = TorusAxes((5, 3)).template(0)       # neighbours joined NPU to NPU: no route
    assert bruck(ring, "allgather", 5000) is None
    node = clos_h100(nodes=2, hosts_per_leaf=2).template(0)
    assert bruck(node, "allreduce", 8000) is None


def test_layouts_include_steeper_ramps_once() -> None:
    got = layouts("allreduce", 3, (1, 2, 4))
    assert len(got) == len(set(got))
    assert (2, 5, 12, 5, 2) in got and (1, 2, 4, 2, 1) in got and (1, 1, 1, 1) in got
    assert all(w == w[::-1] for w in got)
