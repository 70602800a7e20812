"""``--format nccl-tuner``: the CSV NCCL's example tuner plugin reads (``plugin.c`` rules),
its choices the NCCL model's best per window."""

from __future__ import annotations

from pathlib import Path

import pytest

import tacos
from tacos.cli import main
from tacos.errors import TacosError
from tacos.runtime.tuner_csv import (
    LARGEST,
    SIZE_MAX,
    SMALLEST,
    best_nccl,
    parse_tuner_csv,
    tuner_csv,
)

PRESETS = Path(tacos.__file__).parent / "presets"


def _first_match(rows, kind: str, nbytes: int):
    """The plugin applies the first rule whose collective and byte range match."""
    return next(r for r in rows if r.collective == kind and r.min_bytes <= nbytes <= r.max_bytes)


@pytest.mark.parametrize("preset", [  # two-node systems other than the DGX A100: -m slow
    "dgx1()", "dgx2_node()", pytest.param("dgx2(nodes=2)", marks=pytest.mark.slow),
    "dgx_a100_node()", "dgx_a100(nodes=2)", "dgx_h100_node()",
    pytest.param("dgx_h100(nodes=2)", marks=pytest.mark.slow),
    "mi250_node()", pytest.param("mi250(nodes=2)", marks=pytest.mark.slow), "ndv2()",
    pytest.param("ndv2(nodes=2)", marks=pytest.mark.slow), "ndv4()",
    pytest.param("ndv4(nodes=2)", marks=pytest.mark.slow), "p3_8xlarge_node()",
    pytest.param("p3_8xlarge(nodes=2)", marks=pytest.mark.slow), "tpu_v4()"])
def test_rules_parse_cover_all_sizes_and_agree_with_the_model(preset):
    topo = tacos.parse(f"use {preset}\n").topology
    kinds = ["allreduce", "allgather", "reducescatter"]
    rows = parse_tuner_csv(tuner_csv(topo, kinds))
    for kind in kinds:
        mine = [r for r in rows if r.collective == kind]
        assert mine[0].min_bytes == 0 and mine[-1].max_bytes == SIZE_MAX
        for a, b in zip(mine, mine[1:], strict=False):
            assert b.min_bytes == a.max_bytes + 1  # contiguous, disjoint windows
        for k in range(SMALLEST, LARGEST + 1):
            algo, proto, channels, _ = best_nccl(topo, kind, 1 << k)
            row = _first_match(rows, kind, 1 << k)
            assert (row.algorithm, row.protocol, row.channels) == (
                {"collnet": "collnet_direct"}.get(algo, algo), proto.lower(), channels)
        assert {r.nranks for r in mine} == {len(topo.npus)}


def test_best_choice_is_no_slower_than_nccls_own():
    from tacos.runtime.nccl_model import estimate_nccl

    topo = tacos.parse("use dgx_h100(nodes=2)\n").topology
    for k in (12, 20, 28):
        *_, best = best_nccl(topo, "allreduce", 1 << k)
        assert best <= estimate_nccl(topo, "allreduce", 1 << k).time + 1e-15


@pytest.mark.parametrize("line, words", [
    ("allreduce,0,100,ring,simple,4,1", "fields"),
    ("allreduce,0,100,ring,ll64,4,1,8", "unknown"),
    ("alltoall,0,100,ring,simple,4,1,8", "unknown"),
    ("allreduce,0,1e3,ring,simple,4,1,8", "integer"),
    ("allreduce,100,0,ring,simple,4,1,8", "range"),
])
def test_parser_refuses_what_the_plugin_drops(line, words):
    with pytest.raises(TacosError, match=words):
        parse_tuner_csv(line + "\n")


def test_parser_follows_strtok_and_comments():
    rows = parse_tuner_csv("# comment\n\nallreduce, 0 ,\t65536,tree,simple,2,1,-1,-1,1\n")
    assert len(rows) == 1 and rows[0].max_bytes == 65536 and rows[0].nranks == -1


def test_alltoall_is_refused():
    topo = tacos.parse("use dgx1()\n").topology
    with pytest.raises(TacosError, match="tuner plugin has no"):
        tuner_csv(topo, ["alltoall"])


def test_cli_writes_the_csv_and_prints_the_recipe(tmp_path, capsys):
    out = tmp_path / "tuner.csv"
    assert main([str(PRESETS / "dgx_h100_node.tdl"), "-c", "allreduce", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"NCCL_TUNER_CONFIG_FILE={out.resolve()}" in err
    assert "NCCL_TUNER_PLUGIN=" in err
    rows = parse_tuner_csv(out.read_text())
    assert rows[0].collective == "allreduce"
    assert {r.collective for r in rows} == {"allreduce", "allgather", "reducescatter",
                                            "broadcast", "reduce"}
