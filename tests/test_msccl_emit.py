"""MSCCL XML emitter (format, golden bytes, round trips, self-verification) and MSCCL++ JSON.

Golden files: ``tests/golden/msccl/*.xml``.  After an intended change of the output, rewrite
them with ``TACOS_UPDATE_GOLDEN=1 pytest tests/test_msccl_emit.py`` and review the diff.
"""

from __future__ import annotations

import json
import os
import random
import re
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from tacos import builders
from tacos.check.verify import verify_schedule
from tacos.errors import TacosError, VerificationError
from tacos.model import patterns
from tacos.model.schedule import Schedule, Transfer
from tacos.model.topology import Link, Npu, Topology
from tacos.msccl import xml_writer as msccl_xml
from tacos.msccl.lower import MscclOptions, lower
from tacos.msccl.mscclpp_writer import emit_mscclpp_json, program_to_mscclpp
from tacos.msccl.program import STEP_ATTRS, inplace_alias
from tacos.msccl.verify import verify_xml
from tacos.msccl.xml_reader import load_xml, parse_xml
from tacos.msccl.xml_writer import emit_xml, schedule_to_xml
from tacos.synthesize import synthesize

HERE = Path(__file__).parent
FIXTURES = HERE / "fixtures" / "msccl"
GOLDEN = HERE / "golden" / "msccl"
BW, ALPHA = 1e9, 1e-6


def ring_schedule(kind: str, n: int = 4) -> Schedule:
    """Textbook unidirectional ring allgather / allreduce (reduce-scatter then allgather)."""
    t = Topology(tuple(Npu(i, f"gpu{i}") for i in range(n)), (),
                 tuple(Link(i, (i + 1) % n, ALPHA, BW) for i in range(n)))
    coll = patterns.build(kind, range(n), size=n * 1024)
    d = ALPHA + 1024 / BW
    ts = []
    if kind == "allreduce":
        for s in range(n - 1):
            ts += [Transfer(s * d, (s + 1) * d, r, (r + 1) % n, (r,), ((r - s) % n,), "reduce")
                   for r in range(n)]
    base = n - 1 if kind == "allreduce" else 0
    first = 1 if kind == "allreduce" else 0
    for s in range(n - 1):
        ts += [Transfer((base + s) * d, (base + s + 1) * d, r, (r + 1) % n, (r,),
                        ((r + first - s) % n,)) for r in range(n)]
    sched = Schedule(t, coll, tuple(ts))
    assert verify_schedule(sched).ok
    return sched


GOLDEN_CASES = {
    "ring4_allgather_outofplace.xml": (lambda: ring_schedule("allgather"),
                                       MscclOptions(name="ring4_allgather")),
    "ring4_allreduce_inplace.xml": (lambda: ring_schedule("allreduce"),
                                    MscclOptions(name="ring4_allreduce", inplace=True,
                                                 min_bytes=4096, max_bytes=1 << 20)),
}


@pytest.mark.parametrize("fname", sorted(GOLDEN_CASES))
def test_golden_bytes(fname):
    make, opts = GOLDEN_CASES[fname]
    text = schedule_to_xml(make(), opts)
    path = GOLDEN / fname
    if os.environ.get("TACOS_UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode("ascii"))
    assert text.encode("ascii") == path.read_bytes()


# ------------------------------------------------------------------------------------------
# format rules (docs/msccl-xml.md §1.2, §6)
# ------------------------------------------------------------------------------------------

STEP_LINE = re.compile(r'      <step ' + " ".join(f'{a}="(-1|0|[1-9][0-9]*|[a-z]+)"'
                                                   for a in STEP_ATTRS) + r'/>')


@pytest.mark.parametrize("fname", sorted(GOLDEN_CASES))
def test_format_rules(fname):
    make, opts = GOLDEN_CASES[fname]
    text = schedule_to_xml(make(), opts)
    lines = text.split("\n")
    assert lines[0].startswith("<algo ") and text.endswith("</algo>\n")
    assert "<?xml" not in text and "\t" not in text and "\r" not in text and "<!--" not in text
    head = dict(re.findall(r'(\w+)="([^"]*)"', lines[0]))
    assert list(head)[:10] == ["name", "proto", "nchannels", "nchunksperloop", "ngpus", "coll",
                               "inplace", "outofplace", "minBytes", "maxBytes"]
    steps = [ln for ln in lines if "<step" in ln]
    assert steps and all(STEP_LINE.fullmatch(ln) for ln in steps)
    assert all(not re.search(r'="0[0-9]', ln) for ln in lines)  # no octal-looking numbers
    assert verify_xml(text, strict=True).ok


def test_runtime_spelling_of_reducescatter():
    t = builders.ring(4, bandwidth=BW, latency=ALPHA)
    s = synthesize(t, patterns.build("reducescatter", range(4), size=4 * 4096), seed=0,
                   solver="greedy")
    text = schedule_to_xml(s)
    assert 'coll="reducescatter"' in text and "reduce_scatter" not in text


def test_emission_is_idempotent_and_pure():
    program = lower(ring_schedule("allreduce"), options=MscclOptions(inplace=True))
    snapshot = replace(program)
    first = emit_xml(program)
    assert emit_xml(program) == first
    assert program == snapshot
    assert emit_xml(parse_xml(first)) == first  # emit -> parse -> emit is a fixed point


def test_reemits_msccl_tools_fixture_modulo_documented_conventions():
    src = (FIXTURES / "mscclang_allgather_ring_4gpu_1ch.xml").read_text()
    program = load_xml(FIXTURES / "mscclang_allgather_ring_4gpu_1ch.xml")
    fixed = replace(program, outofplace=0, minBytes=0, maxBytes=0)
    out = emit_xml(fixed)
    # conventions: production-style '"/>' (ElementTree wrote '" />') and the three attributes
    # msccl-tools omits although the runtime requires them
    want = src.replace('" />', '"/>').replace(
        'inplace="1">', 'inplace="1" outofplace="0" minBytes="0" maxBytes="0">', 1)
    assert out == want


@pytest.mark.parametrize("fname", ["executor_ndv5_ag-1m.xml", "executor_ndv4_ap2ll.xml"])
def test_reemits_production_files_byte_for_byte_without_comments(fname):
    src = (FIXTURES / fname).read_text()
    body = "".join(ln for ln in src.splitlines(keepends=True)
                   if not ln.lstrip().startswith("<!--"))
    # conventions: no comments, and the file always ends with a newline
    assert emit_xml(load_xml(FIXTURES / fname)) == body.rstrip("\n") + "\n"


def test_missing_required_attribute_or_bad_value_is_refused():
    program = load_xml(FIXTURES / "mscclang_allgather_ring_4gpu_1ch.xml")
    with pytest.raises(TacosError, match="outofplace, minBytes, maxBytes"):
        emit_xml(program)
    ok = replace(program, outofplace=0, minBytes=0, maxBytes=0)
    with pytest.raises(TacosError, match="name"):
        emit_xml(replace(ok, name="a&b"))
    with pytest.raises(TacosError, match="proto"):
        emit_xml(replace(ok, proto="simple"))
    with pytest.raises(TacosError, match="coll"):
        emit_xml(replace(ok, coll="reduce_scatter"))


def test_schedule_to_xml_refuses_to_return_a_failing_plan(monkeypatch):
    import tacos.msccl.lower as lower_mod

    real = lower_mod.lower

    def broken(schedule, *, options=None, progress=None):
        p = real(schedule, options=options, progress=progress)
        g0 = p.gpus[0]
        tb = g0.tbs[-1]
        cut = replace(tb, steps=tb.steps[:-1])  # drop rank 0's last step: pairing breaks
        return replace(p, gpus=(replace(g0, tbs=g0.tbs[:-1] + (cut,)),) + p.gpus[1:])

    monkeypatch.setattr(lower_mod, "lower", broken)
    with pytest.raises(VerificationError, match="pairing|never received|no matching") as exc:
        schedule_to_xml(ring_schedule("allgather"))
    assert "rank" in exc.value.message


def test_write_xml(tmp_path):
    program = lower(ring_schedule("allgather"))
    path = tmp_path / "plan.xml"
    msccl_xml.write_xml(program, path)
    assert path.read_bytes() == emit_xml(program).encode("ascii")


# ------------------------------------------------------------------------------------------
# MSCCL++ JSON
# ------------------------------------------------------------------------------------------

def test_mscclpp_matches_dsl_ring_allgather_plan():
    want = json.loads((FIXTURES / "mscclpp_ring_allgather_4.json").read_text())
    got = json.loads(emit_mscclpp_json(ring_schedule("allgather"),
                                       options=MscclOptions(inplace=True, max_bytes=1 << 30),
                                       name="ring_allgather_4"))
    assert got == want
    assert list(got) == list(want)


def _shape(obj):
    """Keys (recursively) of a plan, ignoring list lengths and values."""
    if isinstance(obj, dict):
        return {k: _shape(v) for k, v in obj.items()}
    if isinstance(obj, list):
        merged: dict = {}
        for item in obj:
            s = _shape(item)
            if isinstance(s, dict):
                merged.update(s)
        return [merged] if merged else []
    return None


def run_plan(plan, seed):
    """Execute an MSCCL++ plan symbolically with a random interleaving of thread blocks.

    Returns (finished, read(rank, buf, index)).  Values are multisets of (rank, input slot).
    """
    rng = random.Random(seed)
    gpus = plan["gpus"]
    n = len(gpus)
    c = max(gpus[0]["input_chunks"], gpus[0]["output_chunks"])

    def phys(r, buf, off):
        if plan["inplace"]:
            return inplace_alias(plan["collective"], n, c, r, buf, off)
        return buf, off

    mem = [{phys(g["id"], "i", x): Counter({(g["id"], x): 1})
            for x in range(g["input_chunks"])} for g in gpus]
    peers = {g["id"]: [p for ch in g["channels"] for p in ch["connected_to"]] for g in gpus}
    pair = {}
    for r, lst in peers.items():
        seen: Counter = Counter()
        for k, p in enumerate(lst):
            pair[(r, k)] = (p, [m for m, q in enumerate(peers[p]) if q == r][seen[p]])
            seen[p] += 1
    sem: Counter = Counter()
    tbs = {(g["id"], tb["id"]): tb for g in gpus for tb in g["threadblocks"]}
    pc = dict.fromkeys(tbs, 0)

    def load(r, ref):
        vals = [mem[r].get(phys(r, ref["type"], ref["index"] + j)) for j in range(ref["size"])]
        assert None not in vals, f"rank {r} reads unwritten {ref}"
        return vals

    def store(r, buf, off, vals):
        for j, v in enumerate(vals):
            mem[r][phys(r, buf, off + j)] = v

    def run_op(key):
        r, _ = key
        tb = tbs[key]
        op = tb["ops"][pc[key]]
        chans = [x for ch in tb["channels"] for x in ch["channel_ids"]]
        bufs = [x for ref in tb["remote_buffer_refs"] for x in ref["remote_buffer_ids"]]
        name = op["name"]
        if name in ("wait", "sem_acquire"):
            keys = ([("chan", r, chans[x]) for x in op["channel_ids"]] if name == "wait"
                    else [("dev", r, x) for x in op["semaphore_ids"]])
            if any(sem[k] <= 0 for k in keys):
                return False
            for k in keys:
                sem[k] -= 1
        elif name == "signal":
            for x in op["channel_ids"]:
                sem[("chan", *pair[(r, chans[x])])] += 1
        elif name == "sem_release":
            for x in op["semaphore_ids"]:
                sem[("dev", r, x)] += 1
        elif name in ("put", "copy"):
            src, dst = op["src_buff"][0], op["dst_buff"][0]
            if name == "put":
                rb = gpus[r]["remote_buffers"][bufs[dst["buffer_id"]]]
                store(rb["rank"], rb["type"], dst["index"], load(r, src))
            else:
                store(r, dst["type"], dst["index"], load(r, src))
        elif name == "re":
            parts = [load(r, s) for s in op["src_buff"]]
            dst = op["dst_buff"][0]
            store(r, dst["type"], dst["index"],
                  [sum((p[j] for p in parts), Counter()) for j in range(dst["size"])])
        else:
            assert name == "nop", name
        pc[key] += 1
        return True

    live = [k for k in tbs if tbs[k]["ops"]]
    while live:
        rng.shuffle(live)
        moved = False
        for k in list(live):
            while pc[k] < len(tbs[k]["ops"]) and run_op(k):
                moved = True
                if rng.random() < 0.5:
                    break
            if pc[k] == len(tbs[k]["ops"]):
                live.remove(k)
        if not moved:
            return False, None
    return True, lambda r, buf, off: mem[r].get(phys(r, buf, off))


def expected_outputs(kind, n, c, root):
    share = c // n
    rng = range(n)
    if kind == "allgather":
        return {r: {x: Counter({(x // share, x % share): 1}) for x in range(c)} for r in rng}
    if kind == "allreduce":
        return {r: {x: Counter({(q, x): 1 for q in rng}) for x in range(c)} for r in rng}
    if kind == "reducescatter":
        return {r: {x: Counter({(q, r * share + x): 1 for q in rng}) for x in range(share)}
                for r in rng}
    if kind == "alltoall":
        return {r: {x: Counter({(x // share, r * share + x % share): 1}) for x in range(c)}
                for r in rng}
    if kind == "broadcast":
        return {r: {x: Counter({(root, x): 1}) for x in range(c)} for r in rng}
    return {root: {x: Counter({(q, x): 1 for q in rng}) for x in range(c)}}


@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("kind", ["allgather", "reducescatter", "allreduce", "alltoall",
                                  "broadcast", "reduce"])
def test_mscclpp_plans_compute_the_collective(kind, inplace):
    t = builders.mesh(2, 2, bandwidth=BW, latency=ALPHA)
    root = 2 if kind in ("broadcast", "reduce") else None
    s = synthesize(t, patterns.build(kind, range(4), size=4 * 4 * 2 * 4096, chunks_per_npu=2,
                                     root=root), seed=0, solver="greedy")
    text = emit_mscclpp_json(s, options=MscclOptions(inplace=inplace))
    plan = json.loads(text)
    assert text == emit_mscclpp_json(s, options=MscclOptions(inplace=inplace))
    ref = json.loads((FIXTURES / "mscclpp_ring_allgather_4.json").read_text())
    assert set(_shape(plan)) == set(_shape(ref))
    assert set(_shape(plan)["gpus"][0]) == set(_shape(ref)["gpus"][0])
    for g in plan["gpus"]:
        assert [tb["id"] for tb in g["threadblocks"]] == list(range(len(g["threadblocks"])))
        assert all(len(tb["ops"]) <= 64 for tb in g["threadblocks"])
    c = max(plan["gpus"][0]["input_chunks"], plan["gpus"][0]["output_chunks"])
    want = expected_outputs(kind, 4, c, root)
    for seed in range(3):
        done, read = run_plan(plan, seed)
        assert done, "the plan deadlocks"
        for r, slots in want.items():
            for x, value in slots.items():
                assert read(r, "o", x) == value, (r, x)


def test_mscclpp_signal_and_wait_counts_match():
    s = synthesize(builders.ring(5, bandwidth=BW, latency=ALPHA),
                   patterns.build("allreduce", range(5), size=5 * 4096), seed=0, solver="greedy")
    plan = program_to_mscclpp(lower(s, options=MscclOptions(max_steps_per_tb=12)))
    counts: Counter = Counter()
    for g in plan["gpus"]:
        peers = [p for ch in g["channels"] for p in ch["connected_to"]]
        for tb in g["threadblocks"]:
            chans = [x for ch in tb["channels"] for x in ch["channel_ids"]]
            for op in tb["ops"]:
                for x in op.get("channel_ids", ()):
                    p = peers[chans[x]]
                    if op["name"] == "signal":
                        counts[(g["id"], p)] += 1
                    elif op["name"] == "wait":
                        counts[(p, g["id"])] -= 1
    assert counts and not +counts and not -counts


def test_mscclpp_refuses_a_tb_over_the_operation_limit():
    long = lower(ring_schedule("allgather", n=16))  # a tb of 15 steps: ~70 operations
    with pytest.raises(TacosError, match="operations"):
        program_to_mscclpp(long)
    plan = json.loads(emit_mscclpp_json(ring_schedule("allgather", n=16)))
    assert max(len(tb["ops"]) for g in plan["gpus"] for tb in g["threadblocks"]) <= 64
