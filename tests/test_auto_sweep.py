"""The auto portfolio, in-switch fusion, the all-to-all synthesizer and its bound, and sweeps."""

from __future__ import annotations

import json

import pytest

import tacos
from tacos.check.bounds import lower_bound
from tacos.check.verify import verify_schedule
from tacos.cli import main
from tacos.errors import UsageError
from tacos.model.patterns import build
from tacos.model.topology import Link, Npu, Topology
from tacos.msccl.sweep_xml import check_set, windows, write_windows
from tacos.msccl.verify import verify_xml_file
from tacos.passes.in_switch import fuse_in_switch
from tacos.solvers.alltoall import alltoall_schedule
from tacos.solvers.auto import run_portfolio
from tacos.solvers.nccl.solver import nccl_schedule
from tacos.sweep import parse_sizes, sweep

MiB = 1 << 20


def preset(name: str, **params):
    args = ", ".join(f"{k}={v}" for k, v in params.items())
    return tacos.parse(f"use {name}" + (f"({args})" if args else "")).topology


@pytest.mark.slow
def test_auto_keeps_the_fastest_verified_plan_and_never_loses_to_nccl():
    topo = preset("dgx_a100", nodes=2)
    for size in (64 * 1024, 64 * MiB):
        coll = build("allgather", topo.live_npus, size=size)
        s = tacos.synthesize(topo, coll, trials=2, workers=1)
        assert verify_schedule(s).ok
        facts = s.meta["auto"]
        assert s.meta["solver"] == "auto"
        # ranked by the runtime model (docs/runtime-model.md); the link model beside it
        assert facts["ranked_by"] == "runtime model"
        best = facts["times"][facts["winner"]]
        assert best == min(facts["times"].values())
        assert facts["link_times"][facts["winner"]] == s.makespan
        assert best <= facts["nccl_time"]
        assert facts["speedup_vs_nccl"] == pytest.approx(facts["nccl_time"] / best)
        assert "nccl-ring" in facts["times"]
        # the greedy is timed, or left out by a runtime floor above the best time
        assert ("greedy" in facts["times"]
                or facts["skipped"]["greedy"].startswith("cannot win"))
        assert facts["runtime"]["nccl-ring"]["model"] == "nccl-ring/a100"


def test_auto_says_why_a_candidate_was_skipped():
    links = tuple(Link(u, v, 1e-6, 25e9) for u in range(4) for v in range(4) if u != v)
    topo = Topology(tuple(Npu(i, f"g{i}") for i in range(4)), (), links)  # no dimensions
    coll = build("allreduce", range(4), size=MiB)
    winner, sched, facts = run_portfolio(topo, coll, trials=1, workers=1,
                                         candidates=("greedy", "hierarchical", "nccl"))
    assert "hierarchical" in facts["skipped"]  # links carry no dimension
    assert verify_schedule(sched).ok and winner in facts["times"]


@pytest.mark.slow
def test_auto_without_in_switch_plans_for_msccl_xml(tmp_path, capsys):
    topo = preset("dgx_h100_node")
    coll = build("allreduce", topo.live_npus, size=64 * MiB)
    s = tacos.synthesize(topo, coll, trials=1, workers=1)
    assert verify_schedule(s).ok
    # forest's in-switch star beats NVLS only in the link model: no runtime format tacos
    # writes expresses its groups, so it leaves the runtime ranking (and says why)
    facts = s.meta["auto"]
    assert "link model" in facts["skipped"].get("forest+in-switch", "") or \
        "link model" in facts["skipped"].get("forest", "")
    assert facts["winner"] == "nccl-nvls" and any(t.group is not None for t in s.transfers)
    assert facts["nccl_best"] == "nccl-nvls" and facts["speedup_vs_nccl"] == pytest.approx(1)
    plain = tacos.synthesize(topo, coll, trials=1, workers=1, in_switch=False)
    assert verify_schedule(plain).ok
    assert all(t.group is None for t in plain.transfers)
    facts = plain.meta["auto"]
    assert "nccl-nvls" in facts["skipped"] and facts["nccl_best"] == "nccl-nvls"
    assert facts["speedup_vs_nccl"] < 1  # NVLS stays the reference the plain plan is held to
    # tacosc -o plan.xml picks among the plans MSCCL XML can express and says so
    tdl = tmp_path / "h100.tdl"
    tdl.write_text('topology "h100"\nuse dgx_h100_node\n')
    out = tmp_path / "plan.xml"
    assert main([str(tdl), "--collective", "allreduce", "--size", "64MiB", "--trials", "1",
                 "-o", str(out), "--report"]) == 0
    assert "slower than nccl-nvls (not a candidate" in capsys.readouterr().out
    assert verify_xml_file(out, topology=topo).ok


def test_in_switch_fusion_turns_repeated_sends_into_one_multicast():
    topo = preset("dgx_h100").with_capabilities({"*nvswitch": {"multicast", "reduce"}})
    coll = build("allgather", topo.live_npus, size=64 * MiB)
    plain = tacos.synthesize(topo, coll, solver="direct")  # every shard sent to each peer
    fused = fuse_in_switch(plain)
    assert fused is not None and verify_schedule(fused).ok
    assert fused.meta["in_switch_groups"] >= 1

    def up_port_bytes(s):  # bytes sent into the NVSwitch, a group's up-port counted once
        seen, total = set(), 0
        for t in s.transfers:
            if (t.src, t.group) not in seen or t.group is None:
                seen.add((t.src, t.group))
                total += s.transfer_bytes(t)
        return total

    assert up_port_bytes(fused) < up_port_bytes(plain) / 2  # one send reaches every peer
    bare = preset("dgx_h100").with_capabilities({"*nvswitch": ()})
    assert fuse_in_switch(tacos.synthesize(bare, coll, solver="direct")) is None


def test_alltoall_bound_sees_the_nodes_nics():
    topo = preset("dgx_a100", nodes=2)
    coll = build("alltoall", topo.live_npus, size=1 << 30)
    b = lower_bound(topo, coll)
    # node cut: 8 GPUs send 8 chunks each to the other node through 8 NICs of 25 GB/s
    chunk = coll.chunks[0].size
    assert b.parts["cut"] == pytest.approx(64 * chunk / (8 * 25e9), rel=1e-6)
    assert b.parts["cut"] > 5 * b.parts["ingress_egress"]
    p2p = nccl_schedule("p2p", topo, coll)
    assert verify_schedule(p2p).ok
    assert b.value <= p2p.makespan < 1.1 * b.value


def test_dimension_ordered_alltoall_aggregates_and_beats_send_recv_on_small_messages():
    topo = preset("dgx_h100", nodes=4)
    coll = build("alltoall", topo.live_npus, size=64 * 1024)
    s = alltoall_schedule(topo, coll)
    assert verify_schedule(s).ok
    sends = {}
    for t in s.transfers:
        sends.setdefault(t.src, set()).add(t.dst)
    assert max(len(v) for v in sends.values()) == 7 + 3  # node peers, then rail peers
    assert s.makespan < nccl_schedule("p2p", topo, coll).makespan / 3


def test_sizes_and_windows():
    assert parse_sizes("1KiB:4GiB:x4")[:3] == [1024, 4096, 16384]
    assert len(parse_sizes("1KiB:4GiB:x4")) == 12
    assert parse_sizes("1MiB,64MiB,1MiB") == [MiB, 64 * MiB]
    assert parse_sizes("1KiB:4KiB:+1KiB") == [1024, 2048, 3072, 4096]
    with pytest.raises(UsageError):
        parse_sizes("4KiB:1KiB")
    spans = windows([1024, 4096, 16384])
    assert spans == [(0, 2048), (2049, 8192), (8193, 0)]
    with pytest.raises(UsageError, match="outside"):
        windows([1024], min_bytes=2048)


@pytest.mark.slow  # 6 s; the CLI sweep test below writes and verifies a folder too
def test_sweep_writes_a_set_of_verified_xml_windows(tmp_path):
    topo = preset("dgx1")
    res = sweep(topo, "allreduce", "16KiB:16MiB:x8", trials=1, workers=1)
    assert [r.size for r in res.rows] == [16 << 10, 128 << 10, 1 << 20, 8 << 20]
    for r in res.rows:
        assert verify_schedule(r.schedule).ok
        assert r.time <= min(r.nccl.values())
        assert r.busbw() == pytest.approx(r.algbw() * 2 * 7 / 8)
    text = res.table()
    assert "nccl-ring" in text and "speedup" in text
    paths = write_windows(res, tmp_path / "plans", min_bytes=1024)
    assert check_set(paths) == []
    assert all(verify_xml_file(p).ok for p in paths)
    assert 1 <= len(paths) <= 4
    with pytest.raises(UsageError, match="already holds XML"):
        write_windows(res, tmp_path / "plans")


@pytest.mark.slow  # 4 s on 2 cores
def test_sweep_lets_the_greedy_choose_its_chunks_unless_told():
    topo = preset("dgx1")
    free = sweep(topo, "allgather", "64MiB", trials=1, workers=1).rows[0]
    fixed = sweep(topo, "allgather", "64MiB", trials=1, workers=1, chunks_per_npu=1).rows[0]
    for r in (free, fixed):
        assert verify_schedule(r.schedule).ok
    # one chunk per NPU cannot pipeline over DGX-1's relays; the chosen count does (in the
    # link model the greedy optimizes)
    assert free.link_times["greedy"] < 0.8 * fixed.link_times["greedy"]
    assert free.time <= fixed.time


@pytest.mark.slow
def test_cli_sweep_prints_table_writes_folder_and_verifies_it(tmp_path, capsys):
    tdl = tmp_path / "box.tdl"
    tdl.write_text('topology "box"\nuse dgx1\n')
    out = tmp_path / "xml"
    code = main([str(tdl), "--collective", "allgather", "--sizes", "64KiB:4MiB:x8",
                 "--trials", "1", "--workers", "1", "-o", str(out), "--plot",
                 str(tmp_path / "s.png"), "-q"])
    text = capsys.readouterr().out
    assert code == 0, text
    assert "algbw" in text and "MSCCL_ALGO_DIR" in text
    assert (tmp_path / "s.png").stat().st_size > 0
    assert main(["verify", str(out)]) == 0
    assert "load as one set" in capsys.readouterr().out
    assert main([str(tdl), "--collective", "allgather", "--sizes", "64KiB:1MiB:x4",
                 "--trials", "1", "--workers", "1", "--json", "-q"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["rows"]) == 3 and doc["rows"][0]["nccl"]
    assert main([str(tdl), "--collective", "allgather", "--sizes", "1KiB", "-o",
                 str(tmp_path / "x.xml")]) == 2


def test_auto_leaves_forest_out_of_large_groups_unless_named(monkeypatch):
    """Tree packing grows with N² max-flows: the default portfolio skips forest above
    FOREST_MAX_GROUP NPUs (a 16x16 mesh kept it busy for minutes) and says so; naming forest
    runs it at any size."""
    from tacos.solvers import auto

    monkeypatch.setattr(auto, "FOREST_MAX_GROUP", 4)
    topo = tacos.parse("ring r[8] 10GB/s 1us\n").topology
    coll = build("allgather", range(8), size=8 * 4096)
    _, sched, facts = run_portfolio(topo, coll, trials=1, workers=1)
    assert "more than 4" in facts["skipped"]["forest"] and "forest" not in facts["times"]
    assert verify_schedule(sched).ok
    _, sched, facts = run_portfolio(topo, coll, candidates=("forest",))
    assert "forest" in facts["times"] and verify_schedule(sched).ok


def test_auto_time_limit_keeps_the_best_plan_found_so_far(monkeypatch):
    """Once the time limit is spent no further candidate starts (NCCL's models included):
    the best verified plan so far is returned, with the reason for each skip."""
    import time

    from tacos.solvers import auto

    real = auto._synthesized
    started = []

    def slow(topology, collective, name, options, greedy_chunks=False):
        started.append((name, options.get("time_limit")))
        time.sleep(0.3)
        return real(topology, collective, name, options, greedy_chunks)

    monkeypatch.setattr(auto, "_synthesized", slow)
    topo = tacos.parse("ring r[8] 10GB/s 1us\n").topology
    coll = build("allgather", range(8), size=8 * 4096)
    winner, sched, facts = run_portfolio(topo, coll, trials=1, workers=1, time_limit=0.2)
    assert [n for n, _ in started] == ["greedy"]
    assert 0 < started[0][1] <= 0.2  # what is left of the limit, never more
    assert winner == "greedy" and verify_schedule(sched).ok
    for name in ("forest", "hierarchical", "a2a", "nccl"):
        assert "time limit" in facts["skipped"][name], facts["skipped"]


def test_greedy_chunk_search_shares_one_time_limit(monkeypatch):
    """The chunk-count search gives every count what is left of one time limit and stops
    when it is spent (it used to give each count the whole limit)."""
    import time

    from tacos.solvers.greedy import chunks as greedy_chunks

    real = tacos.synthesize
    limits_seen = []

    def slow(topology, collective, **options):
        limits_seen.append(options.get("time_limit"))
        time.sleep(0.3)
        return real(topology, collective, **options)

    import importlib

    monkeypatch.setattr(importlib.import_module("tacos.synthesize"), "synthesize", slow)
    monkeypatch.setattr(greedy_chunks, "CLOSE_TO_BOUND", 0.0)  # keep searching: only the
    monkeypatch.setattr(greedy_chunks, "PATIENCE", 100)        # time limit may stop it
    topo = tacos.parse("ring r[8] 10GB/s 1us\n").topology
    coll = build("allgather", range(8), size=8 * MiB)
    assert len(greedy_chunks.chunk_counts(coll)) > 2
    sched = greedy_chunks.synthesize_chunked(topo, coll, time_limit=0.5, trials=1, workers=1,
                                             bound=False)
    assert verify_schedule(sched).ok
    assert len(limits_seen) == 2 and limits_seen[0] == 0.5 and limits_seen[1] < 0.25
