"""Every shipped example and preset parses, and ``tacosc info`` reports the right counts.

Expected numbers are derived here from the topologies' definitions, not from the code.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import tacos
from tacos.cli import main

EXAMPLES = Path(__file__).parent.parent / "examples"
PRESETS = Path(tacos.__file__).parent / "presets"


def mesh_links(*dims: int) -> int:
    """Directed links of a mesh: 2 per neighbour pair."""
    total = 0
    for axis, n in enumerate(dims):
        others = 1
        for k, m in enumerate(dims):
            if k != axis:
                others *= m
        total += 2 * (n - 1) * others
    return total


MI250 = [
    [0, 4, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0],
    [4, 0, 0, 0, 0, 1, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0],
    [0, 0, 0, 4, 0, 0, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0],
    [0, 0, 4, 0, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0],
    [2, 0, 0, 0, 0, 4, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    [0, 1, 0, 0, 4, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0],
    [0, 0, 1, 0, 1, 1, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0],
    [0, 0, 0, 2, 0, 1, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    [1, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 2, 0, 0, 0],
    [0, 1, 1, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 1, 0, 0],
    [0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 1, 0],
    [0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 2],
    [0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 4, 1, 0],
    [0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 4, 0, 1, 1],
    [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 1, 0, 4],
    [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 1, 4, 0],
]
MI250_PAIRS = sum(1 for i in range(16) for j in range(16) if MI250[i][j])  # directed

# file: (npus, switches, directed links, diameter or None to skip, collectives)
EXPECTED = {
    "mesh4x4": (16, 0, mesh_links(4, 4), 6, 1),
    "ring8": (8, 0, 16, 4, 1),
    "ring_by_hand": (6, 0, 6, 5, 1),
    "torus3d": (64, 0, 64 * 6, 6, 1),
    "hetero_mesh": (16, 0, mesh_links(4, 4), 6, 1),
    "hypercube": (20, 0, 16 * 4 + 4 * 3 + 2, 6, 2),
    "dragonfly": (20, 0, 5 * 6 * 2 + 10 * 2, 3, 1),
    "fattree": (16, 6, 16 * 2 + 4 * 2 * 2, 4, 1),
    "multidim": (64, 8, 32 * 2 + 16 * 6 * 2 + 64 * 2, 4, 1),
    "switches": (12, 2, 16 + 8 + 2, 5, 1),
    "dgx1_broadcast": (8, 0, 32, 2, 2),
    "dgx_a100_2node": (16, 10, 16 * 2 + 16 * 2, 4, 1),
    "dgx_h100_4node": (32, 12, 32 * 2 * 2, 4, 1),
    "mi250_2node": (32, 1, 2 * MI250_PAIRS + 32 * 2, 2, 1),
    "ndv2_2node": (16, 1, 2 * 32 + 2 * 2, 6, 1),
    "dgx2_2node": (32, 3, 32 * 2 + 16 * 2, 6, 1),
    "tpu_v4": (64, 0, 384, 6, 1),
    "failures": (16, 0, mesh_links(4, 4) - 6 - 8 - 2, None, 1),
    "node": (4, 0, 12, 1, 0),
    "composition": (16, 1, 4 * 12 + 4 * 2 + 4, None, 1),
    "custom": (8, 0, 2 * (8 + 4), None, 1),
    "multitenant": (36, 0, mesh_links(6, 6), 10, 3),
    "leafspine": (16, 6, 16 * 2 + 4 * 2 * 2, 4, 1),
    "leafspine_4to1": (16, 6, 16 * 2 + 4 * 2 * 2, 4, 1),
    "multijob_fattree": (16, 6, 16 * 2 + 4 * 2 * 2, 4, 2),
    "dgx_a100_group4": (8, 1, 16, 2, 1),
    "group_noncontiguous": (16, 10, 16 * 2 + 16 * 2, 4, 1),
    "reshard_p3": (16, 5, 4 * (12 + 8 + 2), 4, 0),
    "jobs_fattree": (16, 6, 16 * 2 + 4 * 2 * 2, 4, 0),
}


def test_every_example_has_an_expectation() -> None:
    assert {p.stem for p in EXAMPLES.glob("*.tdl")} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_counts(name: str) -> None:
    npus, switches, links, diameter, colls = EXPECTED[name]
    spec = tacos.load(EXAMPLES / f"{name}.tdl")
    t = spec.topology
    assert t.n_npus == npus
    assert len(t.switches) == switches
    assert len(t.links) == links
    if diameter is not None:
        assert t.diameter() == diameter
    assert len(spec.collectives) == colls


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_info_prints_the_counts(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    npus, switches, links, diameter, colls = EXPECTED[name]
    assert main(["info", str(EXAMPLES / f"{name}.tdl")]) == 0
    out = capsys.readouterr().out
    assert re.search(rf"^npus: {npus}\b", out, re.M)
    assert re.search(rf"^switches: {switches}$", out, re.M)
    assert re.search(rf"^links: {links} directed", out, re.M)
    if diameter is not None:
        assert re.search(rf"^diameter: {diameter} hops$", out, re.M)
    assert re.search(rf"^collectives: {colls}$", out, re.M)


def test_failures_example() -> None:
    t = tacos.load(EXAMPLES / "failures.tdl").topology
    assert [n.id for n in t.npus if n.failed] == [7, 9]
    assert all(7 not in (lk.src, lk.dst) and 9 not in (lk.src, lk.dst) for lk in t.links)
    assert len(t.failed_links) == 16
    assert t.link_index(0, 1) is None and t.link_index(1, 0) is None
    coll = tacos.load(EXAMPLES / "failures.tdl").collectives[0]
    assert sorted(coll.group) == [v for v in range(16) if v not in (7, 9)]


def test_dgx1_multiplicity_matrix() -> None:
    expected = [
        [0, 2, 1, 1, 2, 0, 0, 0],
        [2, 0, 1, 2, 0, 1, 0, 0],
        [1, 1, 0, 2, 0, 0, 2, 0],
        [1, 2, 2, 0, 0, 0, 0, 1],
        [2, 0, 0, 0, 0, 2, 1, 1],
        [0, 1, 0, 0, 2, 0, 1, 2],
        [0, 0, 2, 0, 1, 1, 0, 2],
        [0, 0, 0, 1, 1, 2, 2, 0],
    ]
    t = tacos.parse("use dgx1\n").topology
    got = [[0] * 8 for _ in range(8)]
    for lk in t.links:
        got[lk.src][lk.dst] += lk.multiplicity
        assert lk.bandwidth == 25e9
    assert got == expected
    assert all(t.out_degree(v) == 6 for v in range(8))


def test_multidim_links_per_dimension() -> None:
    spec = tacos.parse(
        "dims n Ring(2)_FullyConnected(4)_Switch(8) 200GB/s 1us, 100GB/s 1us, 50GB/s 1us\n")
    t = spec.topology
    assert t.n_npus == 64
    per_dim = {0: 0, 1: 0, 2: 0}
    for lk in t.links:
        per_dim[lk.dim] += 1
    # ring of 2: one pair per line (32 lines); FC(4): 6 pairs per group (16 groups);
    # Switch(8): every NPU up and down to its group's switch
    assert per_dim == {0: 32 * 2, 1: 16 * 6 * 2, 2: 64 * 2}
    bw = {lk.dim: lk.bandwidth for lk in t.links}
    assert bw == {0: 200e9, 1: 100e9, 2: 50e9}
    # NPU i's coordinates: first dimension fastest
    assert t.link_index(0, 1) is not None and t.links[t.link_index(0, 1)].dim == 0
    assert t.links[t.link_index(0, 2)].dim == 1
    sw = t.links[t.out_links[0][-1]].dst
    members = sorted(lk.dst for lk in (t.links[i] for i in t.out_links[sw]))
    assert members == list(range(0, 64, 8))


def test_mi250_and_a100_bandwidths() -> None:
    mi = tacos.parse("use mi250\n").topology
    assert all(mi.ingress_bandwidth(v) == 7 * 50e9 for v in range(16))
    a100 = tacos.parse("use dgx_a100(nodes=2)\n").topology
    assert all(a100.ingress_bandwidth(v) == 300e9 + 25e9 for v in range(16))


@pytest.mark.parametrize("preset", [  # clos_h100 at its default size: ~1 s
    pytest.param(p, marks=pytest.mark.slow) if p == "clos_h100" else p
    for p in sorted(p.stem for p in PRESETS.glob("*.tdl"))])
def test_every_preset_parses(preset: str) -> None:
    spec = tacos.parse(f"use {preset}\n")
    t = spec.topology
    assert t.n_npus >= 4  # p3_8xlarge_node has 4 GPUs
    assert t.diameter() is not None
    for lk in t.links:
        assert lk.bandwidth > 0 and lk.alpha >= 0


@pytest.mark.parametrize("preset,nodes,npus", [("ndv2", 3, 24), ("dgx_a100", 4, 32),
                                               ("dgx_h100", 2, 16), ("mi250", 2, 32),
                                               ("dgx2", 2, 32), ("ndv4", 2, 16)])
def test_multi_node_presets(preset: str, nodes: int, npus: int) -> None:
    t = tacos.parse(f"use {preset}(nodes={nodes})\n").topology
    assert t.n_npus == npus
    assert t.diameter() is not None
    names = {n.name for n in t.npus}
    assert any(name.startswith(f"node[{nodes - 1}].") for name in names)


def test_params_override_from_api() -> None:
    t = tacos.load(EXAMPLES / "composition.tdl").topology
    nv = [lk for lk in t.links if lk.tag == "nvlink"]
    assert nv and all(lk.bandwidth == 150e9 for lk in nv)
    t3 = tacos.parse("use tpu_v4(x=2, y=2, z=8)\n").topology
    assert t3.n_npus == 32
