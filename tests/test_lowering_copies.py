"""The baselines' lowering assigns ops without replaying anything when no chunk reduces
(tacos/solvers/lowering/program.py): the rows are the replay's."""

from __future__ import annotations

import tacos
from tacos.model.patterns import build
from tacos.solvers.baselines import algos
from tacos.solvers.lowering import program
from tacos.solvers.lowering.hops import NpuGraph


def test_copies_only_get_the_rows_the_replay_gives(monkeypatch) -> None:
    topo = tacos.parse('topology "mesh"\nmesh m[3, 3] x 200GB/s 0.5us y 25GB/s 2us\n',
                       source="test").topology
    members = list(topo.live_npus)
    coll = build("allgather", members, size=9 * 2 * 4096, chunks_per_npu=2)
    blocks = {m: tuple(c.id for c in coll.chunks if m in c.pre) for m in members}
    low = program.Lowering(topo, coll, NpuGraph(topo))
    low.run(algos.ring_allgather(members, blocks) + algos.direct_allgather(members, blocks))
    quick = low._assign_ops()
    assert len(quick) == len(low._rows) > 2 * len(members)
    monkeypatch.setattr(program, "COPIES_AT_ONCE", False)
    assert quick == low._assign_ops()
    assert {r[6] for r in quick} == {"copy"}
