"""Engines (tacos.engines): the same seed gives the same bytes in one process, on a local
process pool and on a Dask cluster; a cluster that cannot run the work is a one-line error."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import tacos
from tacos import engines
from tacos.builders import mesh
from tacos.check.verify import verify_schedule
from tacos.cli import main
from tacos.errors import ClusterError
from tacos.model.patterns import build
from tacos.solvers.greedy import solver as greedy_mod
from tacos.synthesize import synthesize

MiB = 1 << 20
MESH = str(Path(__file__).resolve().parents[1] / "examples" / "mesh4x4.tdl")


def _problem():
    topo = mesh(4, 4, bandwidth=50e9, latency=0.5e-6)
    return topo, build("allgather", range(16), size=64 * MiB, chunks_per_npu=2)


def _greedy(topo, coll, **where):
    seen: list[int] = []
    s = synthesize(topo, coll, solver="greedy", seed=5, trials=6, bound=False,
                   progress=lambda done, total: seen.append(done), **where)
    assert verify_schedule(s).ok
    assert seen and seen[-1] >= s.meta["trials_run"] >= 6 and seen == sorted(seen)
    return s


def test_engine_for_picks_serial_pool_or_cluster():
    assert isinstance(engines.engine_for(1), engines.SerialEngine)
    assert isinstance(engines.engine_for(4, tasks=1), engines.SerialEngine)
    pool = engines.engine_for(2, tasks=8)
    assert isinstance(pool, engines.PoolEngine) and pool.slots == 2
    pairs = sorted(pool.imap(_square_plus, 10, [1, 2, 3, 4]))
    assert pairs == list(engines.SerialEngine().imap(_square_plus, 10, [1, 2, 3, 4]))
    assert pairs == [(0, 11), (1, 14), (2, 19), (3, 26)]


def _square_plus(shared: int, item: int) -> int:
    return shared + item * item


def _nap(shared: float, item: int) -> int:
    import time

    time.sleep(shared)
    return item


@pytest.mark.parametrize("engine", [engines.SerialEngine(), engines.PoolEngine(2)])
def test_past_the_deadline_one_result_is_still_waited_for(engine):
    import time

    got = list(engine.imap(_nap, 0.05, list(range(8)), deadline=time.perf_counter()))
    assert 1 <= len(got) < 8
    assert all(i == item for i, item in got)


def test_dask_engine_stops_at_the_deadline_and_cancels_the_rest():
    import time

    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(processes=False, n_workers=1, threads_per_worker=1,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster, set_as_default=False) as client:
        engine = engines.engine_for(cluster=client)
        assert isinstance(engine, engines.DaskEngine) and engine.slots == 1
        got = list(engine.imap(_nap, 0.2, list(range(6)), deadline=time.perf_counter()))
        assert 1 <= len(got) < 6 and all(i == item for i, item in got)
        end = time.perf_counter() + 2.0  # the unfinished tasks were cancelled, not left to run
        while cluster.scheduler.tasks and time.perf_counter() < end:
            time.sleep(0.05)
        assert not cluster.scheduler.tasks
        full = sorted(engine.imap(_square_plus, 1, [3, 1, 2]))
        assert full == [(0, 10), (1, 2), (2, 5)]


def test_trials_give_the_same_bytes_in_process_on_a_pool_and_on_dask(monkeypatch):
    distributed = pytest.importorskip("distributed")
    monkeypatch.setattr(greedy_mod, "IN_PROCESS_WORK", 0)  # a pool even for this problem
    topo, coll = _problem()
    one = _greedy(topo, coll, workers=1)
    pool = _greedy(topo, coll, workers=2)
    # threads in this process: quick to start, and the same task code path as remote workers
    with distributed.LocalCluster(processes=False, n_workers=2, threads_per_worker=1,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster, set_as_default=False) as client:
        dask = _greedy(topo, coll, cluster=client)
    assert tacos.emit(one, "json") == tacos.emit(pool, "json") == tacos.emit(dask, "json")
    assert one.meta["best_trial"] == dask.meta["best_trial"]


@pytest.mark.parametrize("address,words", [
    ("ray://head:10001", "Ray clusters are not supported"),
    ("tcp://host-without-port", "is not a scheduler address"),
    ("foo://x:1", "unknown scheme foo://"),
])
def test_a_bad_cluster_address_is_a_one_line_error(address, words):
    pytest.importorskip("distributed")
    with pytest.raises(ClusterError, match=words) as info:
        engines.connect(address)
    assert "\n" not in info.value.message and info.value.hint


def test_an_unreachable_scheduler_is_an_error_not_a_skipped_candidate(monkeypatch):
    pytest.importorskip("distributed")
    monkeypatch.setattr(engines, "CONNECT_TIMEOUT", 0.5)
    topo, coll = _problem()
    with pytest.raises(ClusterError, match="cannot reach a Dask scheduler") as info:
        synthesize(topo, coll, cluster="tcp://127.0.0.1:9", trials=2)  # auto: greedy in it
    assert "dask scheduler" in info.value.hint


def test_cluster_without_dask_installed_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import fails as if missing
    with pytest.raises(ClusterError, match="not installed") as info:
        engines.connect("tcp://127.0.0.1:8786")
    assert "tacos[cluster]" in info.value.hint


def test_tacosc_reads_the_cluster_from_the_environment(monkeypatch, capsys):
    monkeypatch.setenv("TACOS_CLUSTER", "ray://head:10001")
    code = main([MESH, "-c", "allgather", "--trials", "2", "-q"])
    err = capsys.readouterr().err
    assert code == 2 and "Ray clusters are not supported" in err
    assert "Traceback" not in err


@pytest.fixture(scope="module")
def process_cluster():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(processes=True, n_workers=2, threads_per_worker=1,
                                  dashboard_address=None) as cluster:
        yield cluster.scheduler_address
        engines.close_clients()


@pytest.mark.slow
def test_worker_processes_give_the_same_schedule_and_xml(process_cluster, monkeypatch):
    monkeypatch.setattr(greedy_mod, "IN_PROCESS_WORK", 0)
    topo, coll = _problem()
    one = _greedy(topo, coll, workers=1)
    pool = _greedy(topo, coll, workers=2)
    dask = _greedy(topo, coll, cluster=process_cluster)
    assert tacos.emit(one, "json") == tacos.emit(pool, "json") == tacos.emit(dask, "json")
    assert tacos.emit(one, "xml") == tacos.emit(pool, "xml") == tacos.emit(dask, "xml")


@pytest.mark.slow
def test_sweep_sizes_give_the_same_xml_on_every_engine(process_cluster, tmp_path):
    from tacos.msccl.sweep_xml import write_windows
    from tacos.sweep import sweep

    topo, _ = _problem()
    runs = {}
    for name, where in (("serial", {"workers": 1}), ("pool", {"workers": 2}),
                        ("dask", {"cluster": process_cluster})):
        seen: list[int] = []
        result = sweep(topo, "allgather", "4KiB:4MiB:x32", trials=2, seed=1,
                       progress=lambda done, total, seen=seen: seen.append(done), **where)
        assert seen == [1, 2, 3]
        assert [r.size for r in result.rows] == [4096, 131072, 4194304]
        for row in result.rows:
            assert verify_schedule(row.schedule).ok
        paths = write_windows(result, tmp_path / name)
        runs[name] = ([tacos.emit(r.schedule, "json") for r in result.rows],
                      {p.name: p.read_bytes() for p in paths})
    assert runs["serial"] == runs["pool"] == runs["dask"]


@pytest.mark.slow
def test_tacosc_cluster_sweep_writes_the_same_files(process_cluster, tmp_path):
    from tacos.msccl.sweep_xml import check_set

    args = [MESH, "-c", "allgather", "--sizes", "64KiB:4MiB:x8",
            "--trials", "2", "-q"]
    assert main([*args, "--workers", "1", "-o", str(tmp_path / "here")]) == 0
    assert main([*args, "--cluster", process_cluster, "-o", str(tmp_path / "there")]) == 0
    here = {p.name: p.read_bytes() for p in (tmp_path / "here").glob("*.xml")}
    there = {p.name: p.read_bytes() for p in (tmp_path / "there").glob("*.xml")}
    assert here and here == there
    assert check_set(sorted((tmp_path / "there").glob("*.xml"))) == []


def test_connect_checks_the_workers_tacos_and_keeps_the_connection(monkeypatch):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(processes=False, n_workers=1, threads_per_worker=1,
                                  dashboard_address=None) as cluster:
        address = cluster.scheduler_address
        try:
            client = engines.connect(address)
            assert engines.connect(address) is client  # kept for the next run
            engines.close_clients()
            monkeypatch.setattr(distributed.Client, "run",
                                lambda self, fn, *a, **k: {"tcp://10.0.0.9:1": "0.0.0"})
            with pytest.raises(ClusterError, match="runs tacos 0.0.0") as info:
                engines.connect(address)
            assert "same tacos" in info.value.hint
        finally:
            engines.close_clients()
