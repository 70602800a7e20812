"""The size-window set ``tacosc TOPO -c COLL -o DIR/`` writes on a multi-node system: the
windows cover every size from 0 to no limit without gaps or overlaps, every file verifies,
``tacosc verify DIR`` accepts the folder as a set, and what the benchmark reads back
(benchmarks/bench_window_sets.py) is the window the runtime would pick."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tacos.cli import main
from tacos.msccl.sweep_xml import check_set
from tacos.msccl.verify import verify_xml_file

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the benchmarks folder is run from the checkout, not installed

from benchmarks.bench_window_sets import read_set, window_at  # noqa: E402

#: two NVSwitch islands of four GPUs, GPU i of each on rail switch i (a reduced 2x DGX-A100)
MINI = """topology "2x4"
hardware "a100"
npu gpu[8]
switch nvs[2]
switch rail[4] unwind ring
for n in 0..1, i in 0..3 {
  link gpu[4*n+i] <-> nvs[n] 300GB/s 0.7us tag nvlink
  link gpu[4*n+i] <-> rail[i] 25GB/s 2us tag nic
}
"""


@pytest.mark.slow
def test_two_node_window_set_covers_every_size_and_verifies(tmp_path, capsys):
    """A 2-node all-reduce set at two sizes (NCCL's schedules and the program families as
    candidates): disjoint, contiguous windows from 0 bytes to no limit, each file verified,
    ``tacosc verify DIR`` exit 0 (about 11 s of CPU)."""
    topo = tmp_path / "mini.tdl"
    topo.write_text(MINI, encoding="utf-8")
    out = tmp_path / "plans"
    assert main([str(topo), "-c", "allreduce", "--sizes", "4KiB,16MiB", "--solver", "nccl-ring",
                 "--workers", "1", "-o", f"{out}/"]) == 0
    files = sorted(out.glob("*.xml"))
    assert files
    assert check_set(files) == []
    for f in files:
        report = verify_xml_file(f)
        assert report.ok, report.text()
    sets = read_set(out)
    lows = sorted(w.lo for w in sets)
    assert lows[0] == 0  # the first window starts at 0 bytes
    assert sum(w.hi == 0 for w in sets) == 1  # exactly one window has no upper limit
    for n in (1024, 4096, 1 << 20, 16 << 20, 1 << 32):
        w = window_at(sets, n)
        assert w is not None and w.program.ngpus == 8
    capsys.readouterr()
    assert main(["verify", str(out)]) == 0
    assert "disjoint and contiguous" in capsys.readouterr().out


@pytest.mark.slow
def test_kept_analyses_change_no_choice_and_spare_recurring_programs(tmp_path, monkeypatch):
    """The window sweep keeps more runtime-model analyses on a small group: every window's
    plan, shape, time and XML are those of a sweep that keeps the runtime model's own few,
    with fewer programs analysed; the runtime model's limit is back afterwards."""
    import tacos
    from tacos import sweep_shaped
    from tacos.msccl.lower import MscclOptions
    from tacos.runtime import msccl_exec
    from tacos.sweep import sweep

    topo = tacos.parse(MINI).topology
    res = sweep(topo, "allreduce", "4KiB,1MiB,16MiB", candidates=("nccl-ring", "nccl"),
                trials=1, workers=1)
    built = [0]
    real = msccl_exec.build_model

    def counted(program):
        built[0] += 1
        return real(program)

    monkeypatch.setattr(msccl_exec, "build_model", counted)
    runs = {}
    for kept in (0, sweep_shaped.KEPT_ANALYSES):
        monkeypatch.setattr(sweep_shaped, "KEPT_ANALYSES", kept)
        msccl_exec._ANALYSED.clear()
        built[0] = 0
        choices = sweep_shaped.choose_windows(res, base=MscclOptions(inplace=True),
                                              instances=(1, 4))
        runs[kept] = (built[0], [(c.plan, c.shape, c.time, c.xml()) for c in choices])
        assert len(msccl_exec._ANALYSED) <= msccl_exec._ANALYSED_MAX
    (few, plain), (many, kept_) = runs.values()
    assert kept_ == plain
    assert many < few
