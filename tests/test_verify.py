"""Verifier: hand-built correct ring schedules and mutations rejected with the right rule."""

from __future__ import annotations

import importlib
from dataclasses import replace
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tacos
from tacos.check.verify import RULES, verify_schedule
from tacos.errors import VerificationError
from tacos.model.patterns import build
from tacos.model.schedule import Schedule, Transfer
from tacos.model.topology import Link, Npu, Switch, Topology

ALPHA = 1e-6
BW = 1e9
SIZE = 4 * 1024 * 1024


def ring(n: int, *, bidirectional: bool = False, multiplicity: int = 1) -> Topology:
    """Unidirectional (or two-way) ring i -> i+1 built from the IR."""
    links = [Link(i, (i + 1) % n, ALPHA, BW, multiplicity) for i in range(n)]
    if bidirectional:
        links += [Link((i + 1) % n, i, ALPHA, BW, multiplicity) for i in range(n)]
    return Topology(tuple(Npu(i, f"n{i}") for i in range(n)), (), tuple(links), name=f"ring{n}")


def ring_allgather(n: int = 4) -> Schedule:
    """Textbook ring all-gather: at step s NPU i forwards chunk (i - s) mod n to i+1."""
    topo = ring(n)
    coll = build("allgather", range(n), size=SIZE // n * n)
    step = topo.links[0].time(coll.chunks[0].size)
    transfers = []
    for s in range(n - 1):
        for i in range(n):
            transfers.append(Transfer(s * step, (s + 1) * step, i, (i + 1) % n, (i,),
                                      ((i - s) % n,)))
    return Schedule(topo, coll, tuple(transfers))


def _ring_reduce_phase(n: int, step: float, t0: float = 0.0) -> list[Transfer]:
    """Ring reduce-scatter: at step s NPU i reduces chunk (i - s - 1) mod n into i+1.

    After n-1 steps NPU j holds the full reduction of chunk j.
    """
    out = []
    for s in range(n - 1):
        for i in range(n):
            out.append(Transfer(t0 + s * step, t0 + (s + 1) * step, i, (i + 1) % n, (i,),
                                ((i - s - 1) % n,), "reduce"))
    return out


def ring_reducescatter(n: int = 4) -> Schedule:
    topo = ring(n)
    coll = build("reducescatter", range(n), size=SIZE // n * n)
    step = topo.links[0].time(coll.chunks[0].size)
    return Schedule(topo, coll, tuple(_ring_reduce_phase(n, step)))


def ring_allreduce(n: int = 4) -> Schedule:
    topo = ring(n)
    coll = build("allreduce", range(n), size=SIZE // n * n)
    step = topo.links[0].time(coll.chunks[0].size)
    transfers = _ring_reduce_phase(n, step)
    t0 = (n - 1) * step
    for s in range(n - 1):
        for i in range(n):
            transfers.append(Transfer(t0 + s * step, t0 + (s + 1) * step, i, (i + 1) % n, (i,),
                                      ((i - s) % n,)))
    return Schedule(topo, coll, tuple(transfers))


def _with(s: Schedule, transfers) -> Schedule:
    return Schedule(s.topology, s.collective, tuple(transfers), dict(s.meta))


@pytest.mark.parametrize("make", [ring_allgather, ring_reducescatter, ring_allreduce])
@pytest.mark.parametrize("n", [2, 4, 5])
def test_correct_ring_schedules_verify(make, n):
    s = make(n)
    rep = verify_schedule(s)
    assert rep.ok, rep.text()
    assert rep.violations == ()
    assert tacos.verify(s).raise_if_failed() is not None


def test_dropped_transfer_breaks_postcondition():
    s = ring_allgather(4)
    dropped = s.transfers[-1]
    rep = verify_schedule(_with(s, s.transfers[:-1]))
    assert not rep.ok
    assert rep.rules() == {"postcondition"}
    (v,) = rep.violations
    assert v.npu == dropped.dst and v.chunk == dropped.chunks[0]


def test_dropped_reduce_transfer_breaks_contribution():
    s = ring_allreduce(4)
    victim = 0  # first reduce of step 0: NPU 0 reduces chunk 3 into NPU 1
    rep = verify_schedule(_with(s, s.transfers[:victim] + s.transfers[victim + 1:]))
    assert "contribution" in rep.rules()
    assert all(v.chunk == 3 for v in rep.violations if v.rule == "contribution")
    assert any("missing contribution(s) of NPU 0" in v.message for v in rep.violations)


def test_overlap_on_link_detected():
    s = ring_allgather(4)
    ts = list(s.transfers)
    # move NPU 0's step-1 transfer onto step 0: two transfers share link 0 at once
    k = next(i for i, t in enumerate(ts) if t.src == 0 and t.start > 0)
    ts[k] = replace(ts[k], start=ts[0].start, end=ts[0].end)
    rep = verify_schedule(_with(s, ts))
    assert "overlap" in rep.rules()
    assert any(v.rule == "overlap" and v.transfer in (0, k) for v in rep.violations)


def test_multiplicity_allows_parallel_transfers():
    s = ring_allgather(4)
    topo = ring(4, multiplicity=2)
    extra = replace(s.transfers[0])  # the same chunk again on the same link at the same time
    ok = verify_schedule(Schedule(topo, s.collective, s.transfers + (extra,)))
    assert ok.ok, ok.text()
    three = Schedule(topo, s.collective, s.transfers + (extra, extra))
    assert verify_schedule(three).rules() == {"overlap"}


def test_back_to_back_transfers_do_not_overlap():
    s = ring_allgather(4)  # consecutive steps share an instant on each link: half-open
    assert "overlap" not in verify_schedule(s).rules()


def test_contribution_counted_twice():
    s = ring_reducescatter(4)
    ts = list(s.transfers)
    # repeat the last reduce of the last step one step later: its partial sum is added twice
    last = ts[-1]
    ts.append(replace(last, start=last.end, end=2 * last.end - last.start))
    rep = verify_schedule(_with(s, ts))
    assert rep.rules() == {"contribution"}
    (v,) = rep.violations
    assert v.npu == last.dst and v.chunk == last.chunks[0]
    assert "more than once" in v.message


def test_send_before_arrival_is_causality():
    s = ring_allgather(4)
    ts = list(s.transfers)
    # NPU 1 forwards chunk 0 (received at the end of step 0) already during step 0
    k = next(i for i, t in enumerate(ts) if t.src == 1 and t.chunks == (0,))
    ts[k] = replace(ts[k], start=0.0, end=ts[k].end - ts[k].start)
    rep = verify_schedule(_with(s, ts))
    assert "causality" in rep.rules()
    v = next(v for v in rep.violations if v.rule == "causality")
    assert (v.transfer, v.npu, v.chunk) == (k, 1, 0)


def test_send_at_arrival_instant_is_allowed():
    s = ring_allgather(3)
    # store-and-forward: step s+1 starts exactly when step s ends (same float)
    assert verify_schedule(s).ok


def test_too_short_duration():
    s = ring_allgather(4)
    ts = list(s.transfers)
    ts[2] = replace(ts[2], end=ts[2].start + 0.5 * (ts[2].end - ts[2].start))
    rep = verify_schedule(_with(s, ts))
    assert rep.rules() == {"duration"}
    assert rep.violations[0].transfer == 2


def test_reduce_op_on_copy_chunk_rejected():
    s = ring_allgather(4)
    ts = list(s.transfers)
    ts[0] = replace(ts[0], op="reduce")
    assert "duration" in verify_schedule(_with(s, ts)).rules()


def test_wrong_link_endpoint():
    s = ring_allgather(4)
    ts = list(s.transfers)
    ts[0] = replace(ts[0], route=(1,))  # link 1 is 1->2, the transfer says 0->1
    ts[1] = replace(ts[1], route=(99,))
    rep = verify_schedule(_with(s, ts))
    assert {v.transfer for v in rep.violations if v.rule == "link"} == {0, 1}


def test_via_must_be_a_switch():
    topo = ring(2)
    bad = topo.with_links([replace(lk, via=1) for lk in topo.links])  # node 1 is an NPU
    s = ring_allgather(2)
    rep = verify_schedule(Schedule(bad, s.collective, s.transfers))
    assert rep.rules() == {"link"}
    sw_topo = Topology(topo.npus, (Switch(2, "sw"),),
                       tuple(replace(lk, via=2) for lk in topo.links))
    assert verify_schedule(Schedule(sw_topo, s.collective, s.transfers)).ok


def test_raise_if_failed_lists_violations():
    s = ring_allgather(4)
    with pytest.raises(VerificationError) as err:
        tacos.verify(_with(s, s.transfers[:-1])).raise_if_failed()
    assert "postcondition" in str(err.value)
    rep = verify_schedule(_with(s, s.transfers[:-1]))
    d = rep.as_dict()
    assert d["ok"] is False and d["violations"][0]["rule"] == "postcondition"
    assert all(v.rule in RULES for v in rep.violations)


# -- the bulk screens agree with the exact per-transfer / per-chunk checks -----------------
def _exact(schedule: Schedule):
    """Verify with every bulk screen disabled (everything goes through the exact checks)."""
    v = importlib.import_module("tacos.check.verify")  # the module, not the tacos.verify function

    def no_table(_s):
        raise TypeError("bulk screens disabled")

    with mock.patch.object(v, "hop_table", no_table), \
            mock.patch.object(v, "overlap_suspects",
                              lambda s, u: set(range(len(s.topology.links)))):
        return verify_schedule(schedule)


def _key(rep):
    return sorted(repr((x.rule, x.transfer, x.chunk, x.npu, x.message)) for x in rep.violations)


_MUTATIONS = ("drop", "shift", "chunk", "link", "op", "stretch")


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([ring_allgather, ring_reducescatter, ring_allreduce]),
       st.integers(3, 5),
       st.lists(st.tuples(st.sampled_from(_MUTATIONS), st.integers(0, 10**6),
                          st.floats(-2.0, 2.0)), max_size=3))
def test_bulk_screens_match_exact_checks(make, n, mutations):
    s = make(n)
    ts = list(s.transfers)
    step = ts[0].end - ts[0].start
    for what, k, x in mutations:
        if not ts:
            break
        i = k % len(ts)
        t = ts[i]
        if what == "drop":
            del ts[i]
        elif what == "shift":
            ts[i] = replace(t, start=max(0.0, t.start + x * step), end=max(0.0, t.start
                                                                         + x * step) + step)
        elif what == "chunk":
            ts[i] = replace(t, chunks=((t.chunks[0] + 1) % s.collective.n_chunks,))
        elif what == "link":
            ts[i] = replace(t, route=((t.link + 1) % len(s.topology.links),))
        elif what == "op":
            ts[i] = replace(t, op="copy" if t.op == "reduce" else "reduce")
        else:
            ts[i] = replace(t, end=t.start + abs(x) * step)
    m = _with(s, ts)
    assert _key(verify_schedule(m)) == _key(_exact(m))
