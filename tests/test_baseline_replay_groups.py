"""The baselines' lowering replays chunks that travel together once: the same copy/reduce/drop
decisions as replaying every chunk, so the same NCCL schedules."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

import tacos
from tacos.check.verify import verify_schedule
from tacos.solvers.lowering import program
from tacos.solvers.nccl.lower import GroupLowering, refine_allreduce
from tacos.solvers.nccl.system import system
from tacos.solvers.nccl.tree import tree_program, tree_schedule


def _spec(tmp_path: Path, text: str):
    path = tmp_path / "t.tdl"
    path.write_text(text, encoding="utf-8")
    return tacos.load(str(path))


@pytest.mark.parametrize("text, channels, slices", [
    ("mesh m[2, 4] 50GB/s 1us\ncollective allreduce size 1MiB\n", 2, 8),
    ("use dgx_a100(nodes=2)\ncollective allreduce size 4MiB\n", 8, 4),
])
def test_grouped_replay_decides_as_replaying_every_chunk(tmp_path: Path, text: str,
                                                         channels: int, slices: int) -> None:
    spec = _spec(tmp_path, text)
    sys_ = system(spec.topology, spec.collective.group)
    coll, pieces = refine_allreduce(spec.collective, channels * slices)
    low = GroupLowering(spec.topology, coll, sys_.graph)
    low.run(tree_program(sys_, pieces, channels, slices))
    rows = low._rows
    by_chunk: dict[int, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        for c in r[5]:
            if coll.chunks[c].reduce:
                by_chunk[c].append(i)
    tol = 1e-12 * max(r[1] for r in rows)
    plain: dict[tuple[int, int], str] = {}
    for c, idxs in by_chunk.items():
        plain.update(program._replay(coll.chunks[c].pre, c, rows, idxs, tol))
    grouped = program._decisions(coll, rows, by_chunk, tol)
    assert {k: v for k, v in plain.items() if v != "copy"} == grouped
    assert any(v != "copy" for v in grouped.values())  # reductions were decided
    assert max(len(set(map(tuple, (by_chunk[c] for c in p)))) for p in pieces) == 1
    sched = tree_schedule(sys_, spec.collective, channels, slices)
    assert verify_schedule(sched).ok
