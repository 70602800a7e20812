"""The runtime model's arrays (:func:`tacos.runtime.msccl_sim._model_arrays`), filled as lists
and converted once, hold what a transmission-by-transmission reading of the folded model gives,
with the same dtypes, on production programs and a lowered tacos plan."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from msccl_programs import node, verified

from tacos.model import patterns
from tacos.msccl.lower import MscclOptions, lower
from tacos.msccl.program import REDUCING_TYPES
from tacos.msccl.verify_deps import build_hb
from tacos.msccl.verify_model import build_model
from tacos.msccl.xml_reader import load_xml
from tacos.runtime import msccl_sim
from tacos.solvers.allpairs import allpairs_schedule

FIXTURES = Path(__file__).parent / "fixtures" / "msccl"


def _reference(model) -> dict[str, np.ndarray]:
    """Per transmission kind, count, sources, reducing flag, tb index, and the matched
    sends' columns, read one transmission at a time."""
    n = len(model.txs)
    tb_of = {key: k for k, key in enumerate(model.tbs)}
    kind = np.array([0 if tx.steps[0].cnt == 0 else msccl_sim._KINDS.get(tx.type, 4)
                     for tx in model.txs], np.int8)
    src = np.full(n, -1, np.int64)
    cnts = []
    for conn, ss in model.sends.items():
        for s, r in zip(ss, model.recvs.get(conn, []), strict=False):
            src[r.gid] = s.gid
            cnts.append(s.steps[0].cnt)
    return {"kind": kind,
            "cnt": np.array([tx.steps[0].cnt for tx in model.txs], np.float64),
            "mult": np.array([len(tx.steps) if tx.type == "re" else 1 for tx in model.txs],
                             np.float64),
            "reducing": np.array([tx.type in REDUCING_TYPES for tx in model.txs], np.bool_),
            "tb": np.array([tb_of[tx.key] for tx in model.txs], np.int64),
            "src": src, "cnts": np.array(cnts, np.float64)}


def _programs():
    """Microsoft's all-pairs (LL) and ring (LL128, fused relays) programs of an NDv4 node, and
    tacos's lowering of an all-pairs all-reduce at two instances."""
    a100 = node()
    coll = patterns.build("allreduce", a100.live_npus, size=1 << 20, chunks_per_npu=1)
    return [*((name, verified(load_xml(FIXTURES / name)))
              for name in ("executor_ndv4_ap2ll.xml", "executor_ndv4_r48ll128.xml")),
            ("allpairs x2", verified(lower(allpairs_schedule(a100, coll),
                                           options=MscclOptions(instances=2))))]


@pytest.mark.parametrize("label,program", _programs(), ids=lambda p: p if isinstance(p, str)
                         else "")
def test_model_arrays_match_a_per_transmission_reading(label, program):
    model = build_model(program)
    arrays = msccl_sim._model_arrays(model, build_hb(model))
    want = _reference(model)
    assert len(model.txs) > 0
    for name, field in (("kind", "kind"), ("cnt", "cnt"), ("mult", "mult"),
                        ("reducing", "reducing"), ("tb", "tb"), ("src", "src"),
                        ("cnts", "fifo_cnt")):
        got = getattr(arrays, field)
        assert got.dtype == want[name].dtype, name
        assert np.array_equal(got, want[name]), name
    for tx in model.txs:
        sends = msccl_sim._KINDS.get(tx.type, 4) in (2, 3)
        assert (arrays.send_key[tx.gid] is not None) == sends
        if sends:
            assert arrays.send_key[tx.gid] == model.send_conn(tx)
        fused = msccl_sim._KINDS.get(tx.type, 4) == 3
        assert arrays.recv_key[tx.gid] == (model.recv_conn(tx) if fused else None)
    if "r48" in label:  # the ring relays with fused receive-sends
        assert any(k == 3 for k in arrays.kind)
