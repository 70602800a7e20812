"""Column-backed schedules (tacos.model.columns): the same transfers, bytes and reports."""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest

import tacos
from tacos.builders import mesh, ring, star, torus
from tacos.check import tables as verify_bulk
from tacos.check.simulate import simulate
from tacos.check.verify import verify_schedule
from tacos.model.columns import TransferColumns, concat
from tacos.model.patterns import build
from tacos.model.schedule import Schedule, Transfer
from tacos.solvers.greedy.solver import GreedySolver
from tacos.solvers.registry import Problem

MiB, GiB = 1 << 20, 1 << 30


def _greedy(topo, k=1, **opts):
    n = topo.n_npus
    coll = build("allgather", range(n), size=64 * MiB // (n * k) * (n * k), chunks_per_npu=k)
    opts = {"workers": 1, "seed": 3, "trials": 2, **opts}
    res = GreedySolver().solve(Problem(topo, coll, opts))
    assert res.status == "feasible"
    res.schedule.meta.pop("synthesis_time")
    return res.schedule


def _as_tuple(s: Schedule) -> Schedule:
    return Schedule(s.topology, s.collective, tuple(s.transfers), dict(s.meta))


def _as_columns(s: Schedule) -> Schedule:
    return Schedule(s.topology, s.collective, TransferColumns.from_transfers(s.transfers),
                    dict(s.meta))


def _mixed() -> tuple[Transfer, ...]:
    """Transfers with multi-link routes, several chunks, reduces and groups."""
    return (Transfer(0.0, 1.5, 0, 1, (0,), (0,)),
            Transfer(0.5, 2.0, 1, 2, (3, 4, 5), (1, 2), "reduce", 7),
            Transfer(1.0, 2.0, 2, 0, (2,), (0, 5, 3), "copy", 0),
            Transfer(2.0, 3.25, 0, 3, (), (4,), "reduce"),
            Transfer(3.0, 4.0, 3, 1, (1, 6), (), "copy", 7))


def test_round_trip_and_on_demand_transfers_equal_and_hash_alike():
    ts = _mixed()
    cols = TransferColumns.from_transfers(ts)
    assert len(cols) == len(ts) and tuple(cols) == ts
    for a, b in zip(cols, ts, strict=True):
        assert a == b and hash(a) == hash(b) and type(a) is Transfer
        assert all(type(getattr(a, f)) is type(getattr(b, f))
                   for f in ("start", "end", "src", "dst", "route", "chunks", "op", "group"))
    assert cols == ts and ts == cols and not (cols != ts)
    assert hash(cols) == hash(ts)
    assert cols != ts[:-1] and cols != ts[::-1]
    assert not cols.single_link and not cols.single_chunk
    assert cols.has_groups and cols.has_reduce
    assert cols.group.tolist() == [-1, 7, 0, -1, 7]
    assert cols.route_ptr.tolist() == [0, 1, 4, 5, 5, 7]


def test_indexing_slicing_and_errors():
    ts = _mixed()
    cols = TransferColumns.from_transfers(ts)
    for i in range(-len(ts), len(ts)):
        assert cols[i] == ts[i]
    assert cols[np.int64(2)] == ts[2]
    for sl in (slice(1, 4), slice(None, None, -1), slice(0, 5, 2), slice(4, 1, -2),
               slice(3, 3), slice(-2, None)):
        part = cols[sl]
        assert isinstance(part, TransferColumns) and part == ts[sl]
    with pytest.raises(IndexError):
        cols[len(ts)]
    with pytest.raises(IndexError):
        cols[-len(ts) - 1]
    with pytest.raises(TypeError):
        cols["a"]  # type: ignore[index]
    assert ts[2] in cols and cols.index(ts[3]) == 3 and cols.count(ts[0]) == 1
    assert list(reversed(cols)) == list(reversed(ts))


def test_concatenation_sorting_and_empty():
    ts = _mixed()
    cols = TransferColumns.from_transfers(ts)
    assert cols[:2] + cols[2:] == ts
    assert cols[:2] + ts[2:] == ts and ts[:2] + cols[2:] == ts
    assert isinstance(ts[:2] + cols[2:], TransferColumns)
    assert concat([cols[:1], cols[1:3], cols[3:]]) == ts
    assert sorted(cols) == sorted(ts)
    empty = TransferColumns.from_transfers(())
    assert len(empty) == 0 and empty == () and not empty and list(empty) == []


def test_pickling_is_compact_and_exact():
    s = _greedy(torus(3, 3, 3, bandwidth=50 * GiB, latency=0.5e-6))
    assert isinstance(s.transfers, TransferColumns)
    back = pickle.loads(pickle.dumps(s.transfers))
    assert back == s.transfers and tuple(back) == tuple(s.transfers)
    as_objects = len(pickle.dumps(tuple(s.transfers)))
    assert len(pickle.dumps(s.transfers)) < as_objects
    mixed = TransferColumns.from_transfers(_mixed())
    assert pickle.loads(pickle.dumps(mixed)) == _mixed()
    whole = pickle.loads(pickle.dumps(s))
    assert whole == s and tacos.emit(whole, "json") == tacos.emit(s, "json")


def test_raw_columns_are_checked():
    z = np.zeros(2)
    with pytest.raises(ValueError, match="route_ptr"):
        TransferColumns(z, z, [0, 1], [1, 0], [0, 1, 3], [0, 1], None, [0, 0])
    with pytest.raises(ValueError, match="not 2"):
        TransferColumns(z, z, [0, 1], [1, 0], None, [0], None, [0, 0])
    with pytest.raises(ValueError, match="op"):
        TransferColumns(z, z, [0, 1], [1, 0], None, [0, 1], None, [0, 0], op=[0, 5])
    with pytest.raises(ValueError, match="fit"):
        TransferColumns(z, z, [0, 1 << 40], [1, 0], None, [0, 1], None, [0, 0])
    with pytest.raises(TypeError):
        TransferColumns.from_transfers([Transfer(0.0, 1.0, 0, 1, [0], (0,))])
    with pytest.raises(ValueError):
        TransferColumns.from_transfers([Transfer(0.0, 1.0, 0, 1, (0,), (0,), "copy", -2)])
    cols = TransferColumns(z, z, [0, 1], [1, 0], None, [0, 1], None, [0, 0])
    with pytest.raises(ValueError):
        cols.start[0] = 1.0  # read-only


def test_schedule_equality_and_columns_cache():
    s = _greedy(ring(5, bandwidth=50 * GiB, latency=0.5e-6))
    t = _as_tuple(s)
    assert s.columnar and not t.columnar
    assert s == t and t == s and hash(s) == hash(t)
    assert t.columns == s.columns and t.columns is t.columns  # built once
    assert "_columns" not in pickle.loads(pickle.dumps(t)).__dict__
    other = dataclasses.replace(s, transfers=s.transfers[1:])
    assert other != s and other != t
    assert s.makespan == t.makespan == max(x.end for x in t.transfers)


TOPOLOGIES = {
    "ring6": lambda: ring(6, bandwidth=50 * GiB, latency=0.5e-6),
    "mesh4x4": lambda: mesh(4, 4, bandwidth=50 * GiB, latency=0.5e-6),
    "torus3x3x3": lambda: torus(3, 3, 3, bandwidth=50 * GiB, latency=0.5e-6),
    "star5": lambda: star(5, bandwidth=50 * GiB, latency=0.5e-6),
}


@pytest.mark.parametrize("name", sorted(TOPOLOGIES))
@pytest.mark.parametrize("k,max_merge", [(1, 1), (3, 4)])
def test_greedy_bytes_and_reports_agree(name, k, max_merge):
    s = _greedy(TOPOLOGIES[name](), k=k, max_merge=max_merge)
    assert s.columnar
    t = _as_tuple(s)
    assert tacos.emit(s, "json") == tacos.emit(t, "json")
    a, b = verify_schedule(s), verify_schedule(t)
    assert a.ok and a == b
    if name == "star5":
        assert not s.transfers.single_link  # up-port and down-port routes
    if k > 1 and name != "star5":  # merged sends (the star's port matcher sends one each)
        assert not s.transfers.single_chunk
    assert simulate(s).time == simulate(t).time


def test_msccl_xml_is_the_same():
    s = _greedy(mesh(3, 3, bandwidth=50 * GiB, latency=0.5e-6))
    assert s.columnar
    assert tacos.emit(s, "xml", name="cols") == tacos.emit(_as_tuple(s), "xml", name="cols")


def _broken(ts: tuple[Transfer, ...]) -> list[tuple[Transfer, ...]]:
    """Broken variants: a transfer dropped, one started early, one with a wrong chunk, one
    twice, one moved onto another's link time, one too short."""
    a = ts[len(ts) // 2]
    early = dataclasses.replace(a, start=0.0, end=a.end - a.start)
    wrong = dataclasses.replace(ts[-1], chunks=(ts[0].chunks[0],))
    j = next(j for j in range(len(ts) - 2, -1, -1) if ts[j].route == ts[-1].route)
    clash = dataclasses.replace(ts[-1], start=ts[j].start, end=ts[j].end)  # same link, same time
    return [ts[1:], ts[:3] + (early,) + ts[3:], ts[:-1] + (wrong,),
            ts[:5] + (ts[5],) + ts[5:], ts[:-1] + (clash,),
            ts[:2] + (dataclasses.replace(ts[2], end=(ts[2].start + ts[2].end) / 2),) + ts[3:]]


@pytest.mark.parametrize("mode", ["default", "blocks", "sparse"])
def test_broken_schedules_get_the_same_reports(mode, monkeypatch):
    if mode == "blocks":  # the large-schedule paths: screens a block at a time
        monkeypatch.setattr(verify_bulk, "SCREEN_BLOCK", 7)
    if mode == "sparse":  # copies screened by sorting and binary search, not dense tables
        monkeypatch.setattr(verify_bulk, "DENSE_PER_ROW", 0)
        monkeypatch.setattr(verify_bulk, "DENSE_SLACK", 0)
    s = _greedy(mesh(3, 3, bandwidth=50 * GiB, latency=0.5e-6), k=2)
    rules: set[str] = set()
    for ts in _broken(tuple(s.transfers)):
        t = Schedule(s.topology, s.collective, ts)
        c = _as_columns(t)
        a, b = verify_schedule(c), verify_schedule(t)
        assert not b.ok and a == b, (a.text(5), b.text(5))
        rules |= b.rules()
    assert {"overlap", "causality", "postcondition", "duration"} <= rules


def test_groups_and_reduce_ops_survive():
    from tests.test_in_switch import broadcast_multicast, reduce_into_root, switch4

    for s in (broadcast_multicast(switch4()), reduce_into_root(switch4())):
        c = _as_columns(s)
        assert c.columnar and c == s and tacos.emit(c, "json") == tacos.emit(s, "json")
        assert verify_schedule(c).ok and verify_schedule(c) == verify_schedule(s)
        assert simulate(c).schedule == simulate(s).schedule
        assert c.groups() == s.groups()
    # an all-reduce: the reduce phase's transfers reduce
    topo = mesh(3, 3, bandwidth=50 * GiB, latency=0.5e-6)
    coll = tacos.collective("allreduce", list(range(9)), size=9 * 4096)
    s = tacos.synthesize(topo, coll, solver="greedy", seed=1, workers=1, bound=False)
    assert any(t.op == "reduce" for t in s.transfers)
    c = _as_columns(s)
    assert c.transfers.has_reduce and c == s and tacos.emit(c, "json") == tacos.emit(s, "json")
    assert verify_schedule(c).ok and verify_schedule(c) == verify_schedule(s)
    assert tacos.emit(c, "xml") == tacos.emit(s, "xml")


def test_streaming_tuple_hash_matches_python():
    from tacos.model.columns import tuple_hash

    samples = [(), (-1,), (1, 2, 3), ("a", (1, 2), None, 2.5), tuple(range(-50, 50)),
               _mixed()]
    for t in samples:
        assert tuple_hash(iter(t), len(t)) == hash(t)
