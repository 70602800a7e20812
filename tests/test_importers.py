"""Importers (NCCL topology XML, nvidia-smi topo -m, TACCL, TE-CCL, networkx) and the
ASTRA-sim exporter."""

from __future__ import annotations

import json
from pathlib import Path

import networkx as nx
import pytest

import tacos
from tacos.check.bounds import lower_bound
from tacos.cli import main
from tacos.errors import TacosError
from tacos.importers import import_topology, sniff_format, to_tdl

NCCL = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "nccl-topo"
if not NCCL.is_dir():  # a worktree sits one level deeper than the main checkout
    NCCL = Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "nccl-topo"
EXAMPLES = Path(__file__).parent.parent / "examples"


def _bound(topo: tacos.Topology) -> float:
    coll = tacos.collective("allgather", topo.live_npus, size="64MiB")
    return lower_bound(topo, coll).value


@pytest.mark.parametrize("file, node, preset, nic, alpha", [
    ("ndv4-topo.xml", "dgx_a100_node", "ndv4", "25GB/s", "2us"),
    ("ndv2-topo.xml", "dgx1", "ndv2", "12.5GB/s", "1.3us"),
])
@pytest.mark.parametrize("nodes", [1, 2])
def test_real_nccl_files_match_their_presets(file, node, preset, nic, alpha, nodes) -> None:
    path = NCCL / file
    if not path.is_file():
        pytest.skip("shared NCCL topology fixtures are not beside the repository")
    imported = import_topology(path, node=node, nodes=nodes, nic=nic, nic_alpha=alpha)
    reference = tacos.parse(f"use {preset}(nodes={nodes})\n").topology
    assert imported.n_npus == reference.n_npus
    assert _bound(imported) == pytest.approx(_bound(reference), rel=1e-12)


def test_nccl_errors_are_located(tmp_path: Path) -> None:
    path = NCCL / "ndv4-topo.xml"
    if not path.is_file():
        pytest.skip("shared NCCL topology fixtures are not beside the repository")
    with pytest.raises(TacosError, match="carries no NVLink information") as info:
        import_topology(path)
    assert str(info.value).startswith(f"{path}:12:7: error:")
    with pytest.raises(TacosError, match="has 16 NPUs but"):
        import_topology(path, node="dgx2_node")
    bad = tmp_path / "bad.xml"
    bad.write_text('<system version="1">\n  <cpu numaid="0">\n  </gpu>\n</system>\n')
    with pytest.raises(TacosError) as info:
        import_topology(bad, format="nccl-topo", node="dgx1")
    assert str(info.value).startswith(f"{bad}:3:") and "not well-formed" in str(info.value)
    with pytest.raises(TacosError, match="give the NIC bandwidth|no NIC speed"):
        import_topology(path, node="dgx_a100_node", nodes=2)


def _smi_matrix(topo: tacos.Topology) -> str:
    """An nvidia-smi topo -m matrix for an NVLink topology (NV# = link multiplicity)."""
    n = topo.n_npus
    nv = [[0] * n for _ in range(n)]
    for lk in topo.links:
        nv[lk.src][lk.dst] = lk.multiplicity
    head = "\t" + "\t".join(f"GPU{i}" for i in range(n)) + "\tNIC0\tCPU Affinity\tNUMA Affinity"
    rows = [head]
    for i in range(n):
        cells = ["X" if i == j else (f"NV{nv[i][j]}" if nv[i][j] else "SYS") for j in range(n)]
        rows.append(f"GPU{i}\t" + "\t".join(cells) + ("\tNODE" if i < 4 else "\tSYS")
                    + "\t0-19\t0")
    rows.append("NIC0\t" + "\t".join("NODE" if i < 4 else "SYS" for i in range(n)) + "\t X ")
    return "\n".join(rows) + "\n\nLegend:\n  X    = Self\n"


def test_nvidia_smi_matrix_reproduces_the_dgx1_preset(tmp_path: Path) -> None:
    dgx1 = tacos.parse("use dgx1\n").topology
    text = _smi_matrix(dgx1)
    assert sniff_format(text) == "nvidia-smi"
    imported = import_topology(text, format="nvidia-smi")
    assert {(lk.src, lk.dst, lk.multiplicity, lk.bandwidth) for lk in imported.links} == \
        {(lk.src, lk.dst, lk.multiplicity, lk.bandwidth) for lk in dgx1.links}
    two = import_topology(text, format="nvidia-smi", nodes=2, nic="12.5GB/s",
                          nic_alpha="1.3us")
    assert _bound(two) == pytest.approx(_bound(tacos.parse("use ndv2(nodes=2)\n").topology))
    nccl = NCCL / "ndv2-topo.xml"
    if nccl.is_file():  # the NVLink part of an NCCL file from the matrix instead of a preset
        f = tmp_path / "smi.txt"
        f.write_text(text)
        via = import_topology(nccl, nvlink_matrix=str(f))
        assert _bound(via) == pytest.approx(_bound(dgx1))


def test_nvidia_smi_errors_are_located() -> None:
    text = "\tGPU0\tGPU1\nGPU0\t X \tNV2\nGPU1\tNV2\t Y \n"
    with pytest.raises(TacosError) as info:
        import_topology(text, format="nvidia-smi")
    assert "'Y' is not a connection type" in str(info.value) and ":3:" in str(info.value)
    switch = import_topology("\tGPU0\tGPU1\tGPU2\nGPU0\t X \tNV12\tNV12\n"
                             "GPU1\tNV12\t X \tNV12\nGPU2\tNV12\tNV12\t X \n",
                             format="nvidia-smi")
    assert len(switch.switches) == 1  # same NV# everywhere: an NVSwitch, not 3 fat links


def test_taccl_profile(tmp_path: Path) -> None:
    profile = {"name": "NDv2_1MB", "gpus_per_node": 8, "nics_per_node": 1, "alpha": 0.3,
               "node_betas_list": [23, 46], "node_invbws_list": [23, 46], "remote_invbw": 107,
               "remote_alpha": 2.6, "remote_beta": 105}
    f = tmp_path / "topo-ndv2-1MB.json"
    f.write_text(json.dumps(profile, indent=2))
    topo = import_topology(f, nodes=2)
    assert topo.n_npus == 16
    fast = max(lk.bandwidth for lk in topo.links)
    assert fast == pytest.approx(1e6 / 23e-6)
    del profile["name"]
    f.write_text(json.dumps(profile, indent=2))
    with pytest.raises(TacosError, match="kind"):
        import_topology(f, format="taccl", size="1MB")
    profile["links"] = "oops"
    f.write_text(json.dumps(profile, indent=2))
    with pytest.raises(TacosError) as info:
        import_topology(f, format="taccl", size="1MB")
    assert str(info.value).startswith(f"{f}:")


@pytest.mark.parametrize("name, chassis, npus", [
    ("DGX1", 1, 8), ("NDv2", 2, 16),
    pytest.param("Mesh", 1, 16, marks=pytest.mark.slow),  # ~0.7 s; the 16-NPU NDv2 stays
    # the 32-NPU imports run the whole auto portfolio for 5-20 s each: slow run only
    pytest.param("DGX2", 2, 32, marks=pytest.mark.slow),
    pytest.param("AMD", 2, 32, marks=pytest.mark.slow)])
def test_teccl_inputs(name: str, chassis: int, npus: int) -> None:
    doc = {"TopologyParams": {"name": name, "chassis": chassis, "chunk_size": 0.0625,
                              "alpha": [0.7e-6, 1e-6], "side_length": 4},
           "GurobiParams": {}, "InstanceParams": {}}
    topo = import_topology(json.dumps(doc))
    assert topo.n_npus == npus
    coll = tacos.collective("allgather", topo.live_npus, size=npus * 1024)
    assert tacos.verify(tacos.synthesize(topo, coll, workers=1, trials=1)).ok


def test_teccl_bad_name_is_located() -> None:
    text = '{\n  "TopologyParams": {"name": "DGX9", "chassis": 1}\n}\n'
    with pytest.raises(TacosError) as info:
        to_tdl(text)
    assert ":2:" in str(info.value) and "DGX9" in str(info.value)


def test_networkx_graphs_with_labels_units_and_mistakes() -> None:
    g = nx.Graph(name="pair+switch")
    g.add_edge("a", "b", bandwidth="25GB/s", latency="1us")
    g.add_node("sw", kind="switch", policy="ring")
    g.add_edge("a", "sw", bandwidth=10e9)
    t = tacos.from_networkx(g)
    assert [n.name for n in t.npus] == ["a", "b"] and t.switches[0].policy == "ring"
    assert len(t.links) == 4 and t.links[0].bandwidth == 25e9 and t.links[0].alpha == 1e-6
    g.add_edge("b", "c")
    with pytest.raises(TacosError, match="edge 'b' -> 'c' has no 'bandwidth'"):
        tacos.from_networkx(g)
    bad = nx.DiGraph()
    bad.add_node(0, kind="gpu")
    bad.add_edge(0, 1, bandwidth=1e9)
    with pytest.raises(TacosError, match="kind must be"):
        tacos.from_networkx(bad)


def test_cli_import_and_direct_use(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = NCCL / "ndv4-topo.xml"
    if not path.is_file():
        pytest.skip("shared NCCL topology fixtures are not beside the repository")
    out = tmp_path / "ndv4.tdl"
    assert main(["import", "nccl-topo", str(path), "--node", "dgx_a100_node", "--nodes", "2",
                 "--nic", "200Gb/s", "-o", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["npus"] == 16
    assert "use dgx_a100_node as node[2]" in out.read_text()
    assert main(["info", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["npus"] == 16
    smi = tmp_path / "smi.txt"
    smi.write_text(_smi_matrix(tacos.parse("use dgx1\n").topology))
    assert main(["info", str(smi)]) == 0  # foreign files work where TDL does
    assert "npus: 8" in capsys.readouterr().out


def test_astra_sim_network_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    yml = tmp_path / "net.yml"
    assert main(["info", str(EXAMPLES / "multidim.tdl"), "--astra-sim", str(yml)]) == 0
    text = yml.read_text()
    assert "topology: [ Ring, FullyConnected, Switch ]" in text
    assert "npus_count: [ 2, 4, 8 ]" in text and "latency: [ 500, 500, 1000 ]" in text
    assert main(["info", str(EXAMPLES / "mesh4x4.tdl"), "--astra-sim", str(yml)]) == 1
    assert "only multi-dimensional" in capsys.readouterr().err


def test_chakra_traces_pair_sends_with_receives(tmp_path: Path) -> None:
    pytest.importorskip("google.protobuf")
    from tacos.backends.chakra_et import COMM_RECV_NODE, COMM_SEND_NODE, decode_trace

    spec = tacos.load(EXAMPLES / "ring8.tdl")
    schedule = tacos.synthesize(spec.topology, tacos.collective("allreduce", range(8),
                                                                size="8KiB"),
                                workers=1, trials=2)
    prefix = tmp_path / "plan"
    assert main([str(EXAMPLES / "ring8.tdl"), "-c", "allreduce", "--size", "8KiB", "-q",
                 "--workers", "1", "--trials", "2", "-o", str(tmp_path / "p.json"),
                 "--chakra", str(prefix)]) == 0
    sends, recvs, waiting = {}, {}, 0
    for npu in range(8):
        meta, nodes = decode_trace((tmp_path / f"plan.{npu}.et").read_bytes())
        assert meta.version
        ids = {n.id for n in nodes}
        for n in nodes:
            attrs = {a.name: a for a in n.attr}
            key = (attrs["comm_src"].int32_val, attrs["comm_dst"].int32_val,
                   attrs["comm_tag"].int32_val)
            assert set(n.data_deps) <= ids and all(d < n.id for d in n.data_deps)
            if n.type == COMM_SEND_NODE:
                assert key[0] == npu
                sends[key] = attrs["comm_size"].int64_val
                waiting += bool(n.data_deps)
            else:
                assert n.type == COMM_RECV_NODE and key[1] == npu and not n.data_deps
                recvs[key] = attrs["comm_size"].int64_val
    assert sends == recvs and len(sends) == len(schedule.transfers)
    assert waiting > 0  # forwarded chunks and partial sums wait for their arrival


def test_tacos_load_reads_foreign_files_too(tmp_path: Path) -> None:
    path = NCCL / "ndv2-topo.xml"
    if not path.is_file():
        pytest.skip("shared NCCL topology fixtures are not beside the repository")
    spec = tacos.load(path, node="dgx1")
    assert spec.topology.n_npus == 8
    with pytest.raises(TacosError, match="import options"):
        tacos.load(EXAMPLES / "ring8.tdl", node="dgx1")
