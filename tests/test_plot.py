"""Schedule plots: a valid PNG with one Gantt row per used link."""

from __future__ import annotations

import importlib
import struct

import pytest
from tacos.backends import plot as plot_mod
from tacos.backends.plot import link_utilization, plot_schedule

from tacos.check.verify import verify_schedule
from tacos.errors import TacosError
from tacos.model.patterns import build
from tacos.model.schedule import Schedule, Transfer
from tacos.model.topology import Link, Npu, Topology
from tacos.solvers.baselines.solver import baseline_schedule

pytest.importorskip("matplotlib")


def _line(n: int) -> Topology:
    links = []
    for i in range(n - 1):
        links += [Link(i, i + 1, 1e-6, 1e9), Link(i + 1, i, 1e-6, 1e9)]
    return Topology(tuple(Npu(i, f"g{i}") for i in range(n)), (), tuple(links), name="line")


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_png_has_one_row_per_used_link(tmp_path) -> None:
    topo = _line(4)
    sched = baseline_schedule("ring", topo, build("allreduce", range(4), size=4096))
    assert verify_schedule(sched).ok
    info = plot_schedule(sched, tmp_path / "plan.png")
    data = info.path.read_bytes()
    width, height = _png_size(data)
    assert 400 < width < 4000 and 150 < height < 6000
    assert 5_000 < len(data) < 5_000_000
    used = {t.link for t in sched.transfers}
    assert info.links_used == len(used) == len(info.rows)
    assert len(set(info.rows)) == len(info.rows)
    assert set(info.rows) == {f"g{topo.links[i].src}->g{topo.links[i].dst}" for i in used}
    assert info.transfers == len(sched.transfers)


def test_utilization_matches_busy_time() -> None:
    topo = _line(2)
    coll = build("allgather", range(2), size=2000)
    # link 0 busy 2 us of a 4 us schedule, link 1 busy 4 us
    transfers = (Transfer(0.0, 2e-6, 0, 1, (0,), (0,)), Transfer(0.0, 4e-6, 1, 0, (1,), (1,)))
    sched = Schedule(topo, coll, transfers)
    assert link_utilization(sched) == pytest.approx({0: 0.5, 1: 1.0})


def test_rows_are_capped_to_the_busiest_links(tmp_path) -> None:
    topo = _line(6)
    sched = baseline_schedule("direct", topo, build("allgather", range(6), size=6000))
    used = {t.link for t in sched.transfers}
    info = plot_schedule(sched, tmp_path / "cap.png", max_rows=3)
    assert len(info.rows) == 3 < len(used) == info.links_used
    util = link_utilization(sched)
    assert min(info.utilization) >= sorted(util.values())[-3] - 1e-12


def test_missing_matplotlib_names_the_install_command(monkeypatch, tmp_path) -> None:
    real = importlib.import_module

    def fake(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError("No module named 'matplotlib'")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(plot_mod.importlib, "import_module", fake)
    sched = baseline_schedule("ring", _line(3), build("allgather", range(3), size=3000))
    with pytest.raises(TacosError) as err:
        plot_schedule(sched, tmp_path / "x.png")
    assert "pip install matplotlib" in err.value.render()
    assert not (tmp_path / "x.png").exists()
