"""The runtime model's compiled event loop (:mod:`tacos.runtime.msccl_sim`) gives the Python
loop's result: the same event times, per-tb work, port loads and spans, bit for bit, and the
same estimate, on Microsoft's production programs and on lowered tacos plans."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from msccl_programs import node, verified

import tacos
from tacos.model import patterns
from tacos.msccl.lower import MscclOptions, lower
from tacos.msccl.ranks import resolve_ranks
from tacos.msccl.shape import Shape
from tacos.msccl.xml_reader import load_xml
from tacos.runtime import estimate_program, msccl_exec, msccl_sim
from tacos.runtime.hardware import resolve
from tacos.solvers.allpairs import allpairs_schedule
from tacos.synthesize import synthesize

pytestmark = pytest.mark.skipif(not msccl_sim.available(), reason="numba is not installed")

FIXTURES = Path(__file__).parent / "fixtures" / "msccl"
EXAMPLES = Path(tacos.__file__).parent.parent / "examples"


def _programs():
    """(label, program, topology) of programs of different shapes: Microsoft's all-pairs and
    ring plans of an NDv4 node, a greedy plan of a 4x4 mesh at two instances (fused
    receive-send relays), and an all-pairs all-reduce at four instances."""
    a100 = node()
    out = [(name, verified(load_xml(FIXTURES / name)), a100)
           for name in ("executor_ndv4_ap2ll.xml", "executor_ndv4_r48ll128.xml")]
    mesh = tacos.load(EXAMPLES / "mesh4x4.tdl")
    sch = synthesize(mesh.topology, mesh.collective, solver="greedy", trials=1, workers=1)
    out.append(("mesh greedy x2", verified(lower(sch, options=MscclOptions(instances=2))),
                mesh.topology))
    coll = patterns.build("allreduce", a100.live_npus, size=1 << 20, chunks_per_npu=1)
    out.append(("allpairs x4", verified(lower(allpairs_schedule(a100, coll), options=Shape(
        4).options(MscclOptions(inplace=True)))), a100))
    return out


PROGRAMS = _programs()


@pytest.mark.parametrize("label,program,topo", PROGRAMS, ids=[p[0] for p in PROGRAMS])
@pytest.mark.parametrize("proto", ["Simple", "LL", "LL128"])
def test_compiled_iteration_is_the_python_iteration(label, program, topo, proto):
    program = replace(program, proto=proto)
    hw = resolve(topo, None)
    ranks, _ = resolve_ranks(topo, program.ngpus)
    model, hb = msccl_exec._analysed(program)
    assert len(model.txs) > 0
    for nbytes in (1 << 16, 1 << 26):
        chunk = nbytes / program.nchunksperloop
        per_call = hw.chunk_payload(proto)
        first = min(chunk, per_call)
        calls = max(1, min(71, int(per_call // max(first, 1.0))))
        conns = msccl_exec._connections(model, topo, ranks, hw, proto, chunk)
        py = msccl_exec.time_iteration(model, conns, hw, proto, first, calls, hb=hb,
                                       compiled=False)
        jit = msccl_exec.time_iteration(model, conns, hw, proto, first, calls, hb=hb,
                                        compiled=True)
        assert py.makespan > 0
        assert jit.makespan == py.makespan
        assert list(jit.tb_busy.items()) == list(py.tb_busy.items())
        assert list(jit.tb_sync.items()) == list(py.tb_sync.items())
        assert jit.tb_limit == py.tb_limit
        assert list(jit.link_load.items()) == list(py.link_load.items())
        assert list(jit.spans.items()) == list(py.spans.items())


@pytest.mark.parametrize("label,program,topo", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_estimates_agree_with_the_python_loop(label, program, topo, monkeypatch):
    """Whole estimates (several iterations included) with the compiled loop forced on and
    off."""
    for nbytes in (1 << 20, 1 << 30):
        monkeypatch.setattr(msccl_sim, "MIN_WORK", 0)
        jit = estimate_program(program, topo, nbytes)
        monkeypatch.setenv("TACOS_JIT", "0")
        py = estimate_program(program, topo, nbytes)
        monkeypatch.delenv("TACOS_JIT")
        assert math.isclose(jit.time, py.time, rel_tol=1e-9)
        assert jit.bound == py.bound
        assert jit.to_json() == py.to_json()


@pytest.mark.parametrize("label,program,topo", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_two_iterations_derived_are_the_folded_two_iterations(label, program, topo):
    """The arrays of two loop iterations derived from one iteration's are those of the
    doubled program folded; Microsoft's all-pairs plan, whose ``re`` steps fuse, is folded."""
    model, hb = msccl_exec._analysed(program)
    derived = msccl_sim.twice_arrays(model, hb)
    if label == "executor_ndv4_ap2ll.xml":
        assert derived is None
        return
    assert derived is not None
    model2, hb2 = msccl_exec._analysed(program, twice=True)
    folded = msccl_sim.model_arrays(model2, hb2)
    assert len(folded.kind) == 2 * len(model.txs)
    for name in ("kind", "cnt", "mult", "reducing", "src", "tb", "pred_ptr", "hb_order",
                 "fifo_send", "fifo_k", "fifo_cnt", "fifo_base", "fifo_recvs"):
        assert np.array_equal(getattr(derived, name), getattr(folded, name)), name
    assert derived.send_key == folded.send_key and derived.recv_key == folded.recv_key
    for v in range(len(folded.kind)):
        lo, hi = folded.pred_ptr[v], folded.pred_ptr[v + 1]
        assert sorted(derived.pred_idx[lo:hi]) == sorted(folded.pred_idx[lo:hi])


def test_compiled_topological_order_is_kahns():
    from tacos.msccl.verify_deps import topological_order

    for preds in ([[2], [0], [1], [], [3, 3]], [[], [0], [0, 1], [2], []], [[1], [0]]):
        assert msccl_sim.topological_order(preds) == topological_order(preds)
