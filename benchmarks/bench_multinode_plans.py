"""Runtime-shaped MSCCL plans on multi-node systems against NCCL, in the runtime model.

For each system (an ``examples/NAME.tdl`` or a preset ``NAME:nodes=4``), collective and
size, the plan and shape ``tacosc TOPO -c COLL -o plans/`` writes for that size's window
(:func:`tacos.sweep_shaped.choose_windows`, each program verified; the candidates include the
hierarchical multi-node programs of :mod:`tacos.msccl.multinode_program`, the latency-bound
ones for small sizes of :mod:`tacos.msccl.multinode_latency` and, on nodes of
directly linked GPUs such as MI250 boxes, the ring programs of
:mod:`tacos.msccl.xgmi_program`), NCCL's modelled
best without in-switch reduction (the fastest of ring and tree that NCCL has for the
collective), the CPU seconds of the sweep and of the shaping, and the independent stream
replay of the emitted program (:mod:`benchmarks.replay_streams`).

``python -m benchmarks.bench_multinode_plans [--systems a,b] [--collectives allreduce,allgather]
[--sizes 1MiB,64MiB,256MiB,1GiB] [--multinode-only]`` prints a markdown table and, per system
and collective, the geometric mean of the speedups over NCCL at 64 MiB-1 GiB.
``--multinode-only`` skips the sweep (the synthesized schedules) and shapes only the
multi-node program families, for the systems of 32 ranks where a full sweep costs too much
CPU on a small machine; the plan column then says which family won.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.__main__ import machine
from benchmarks.replay_streams import replay
from tacos import load, preset
from tacos.errors import TacosError
from tacos.model import patterns
from tacos.model.topology import Topology
from tacos.model.units import format_size, parse_size
from tacos.msccl.lower import MscclOptions
from tacos.msccl.multinode_program import multinode_candidates
from tacos.msccl.shape import INSTANCES, PROTOCOLS, shapes
from tacos.msccl.shape_choose import Choice, choose_shape
from tacos.msccl.xgmi_program import xgmi_candidates
from tacos.runtime import estimate_nccl
from tacos.sweep import sweep
from tacos.sweep_shaped import choose_windows

ROOT = Path(__file__).resolve().parent.parent


def topology_of(name: str) -> Topology:
    """``examples/NAME.tdl``, or the preset ``NAME:param=value,...``."""
    if ":" in name:
        base, _, params = name.partition(":")
        kw = {k: int(v) for k, v in (p.split("=") for p in params.split(";") if p)}
        return preset(base, **kw).topology
    return load(ROOT / "examples" / f"{name}.tdl").topology


def nccl_best(topo: Topology, kind: str, nbytes: int) -> float:
    """NCCL's modelled time with its fastest of ring and tree (those it has for ``kind``)."""
    times = []
    for algo in ("ring", "tree"):
        try:
            times.append(estimate_nccl(topo, kind, nbytes, group=list(topo.live_npus),
                                       algorithm=algo).time)
        except TacosError:
            pass
    return min(times)


def _cell(x: float, fmt: str) -> str:
    return "-" if math.isnan(x) else format(x, fmt)


LARGE = (64 << 20, 1 << 30)  #: the size range of the geometric-mean target


def multinode_choices(topo: Topology, kind: str, sizes: list[int]) -> list[Choice]:
    """Per size, the fastest multi-node program family and shape in the runtime model (the
    shapes ``choose_windows`` tries); an empty list when no family applies."""
    coll = patterns.build(kind, list(topo.live_npus), size=sizes[0], chunks_per_npu=1)
    fams: dict[str, object] = dict(multinode_candidates(topo, coll))
    per_size = [{**fams, **xgmi_candidates(topo, coll, n)} for n in sizes]  # MI250: rings
    if not all(per_size):
        return []
    cands = shapes(protos=PROTOCOLS, instances=INSTANCES)
    return [choose_shape(f, topo, n, base=MscclOptions(inplace=True), candidates=cands)
            for f, n in zip(per_size, sizes, strict=True)]


def run(systems: list[str], sizes: str, kinds: list[str], replay_ranks: int = 64,
        multinode_only: bool = False, emit: Callable[[str], None] | None = None) -> list[str]:
    """Table lines, then one geometric-mean line per system and collective; ``emit`` is
    given each table line as soon as it is measured."""
    lines: list[str] = []

    def add(line: str) -> None:
        lines.append(line)
        if emit is not None:
            emit(line)

    add("| system | coll | size | tacos µs | plan | proto | inst | chan | tbs "
        "| NCCL ring/tree µs | vs NCCL | replay µs | model/replay | sweep CPU s "
        "| shaping CPU s |")
    add("|" + "---|" * 15)
    means = []
    for name in systems:
        topo = topology_of(name)
        for kind in kinds:
            t0 = time.process_time()
            if multinode_only:
                nbytes = [parse_size(x) for x in sizes.split(",")]
                t1 = time.process_time()
                choices = multinode_choices(topo, kind, nbytes)
                if not choices:
                    add(f"| {name} | {kind} | - | no multi-node program applies "
                        + "| " * 11 + "|")
                    continue
            else:
                res = sweep(topo, kind, sizes, workers=1, trials=1)
                nbytes = sorted(r.size for r in res.rows)
                t1 = time.process_time()
                choices = choose_windows(res, base=MscclOptions(inplace=True))
            t2 = time.process_time()
            logs = []
            for size, ch in zip(nbytes, choices, strict=True):
                ch.xml()  # verified
                nccl = nccl_best(topo, kind, size)
                f = ch.facts()
                r = (replay(ch.program, topo, size)
                     if ch.program.ngpus <= replay_ranks else math.nan)
                if LARGE[0] <= size <= LARGE[1]:
                    logs.append(math.log(nccl / ch.time))
                add(
                    f"| {name} | {kind} | {format_size(size)} | {ch.time * 1e6:.1f} "
                    f"| {ch.plan} | {ch.shape.proto} | {ch.shape.instances} "
                    f"| {f['nchannels']} | {f['tbs_per_gpu']} | {nccl * 1e6:.1f} "
                    f"| {nccl / ch.time:.2f}x | {_cell(r * 1e6, '.1f')} "
                    f"| {_cell(ch.time / r, '.2f')} "
                    f"| {t1 - t0:.1f} | {t2 - t1:.1f} |")
            if logs:
                means.append(f"* {name} {kind}: geometric mean vs NCCL at 64 MiB-1 GiB "
                             f"{math.exp(sum(logs) / len(logs)):.2f}x")
    return lines + [""] + means


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--systems", default="dgx_a100_2node")
    ap.add_argument("--sizes", default="1MiB,64MiB,256MiB,1GiB")
    ap.add_argument("--collectives", default="allreduce,allgather")
    ap.add_argument("--replay-ranks", type=int, default=64,
                    help="replay only programs of at most this many ranks")
    ap.add_argument("--multinode-only", action="store_true",
                    help="shape only the multi-node program families (no sweep)")
    args = ap.parse_args()
    print(f"<!-- {dt.date.today().isoformat()}, {machine()} -->")
    lines = run(args.systems.split(","), args.sizes, args.collectives.split(","),
                args.replay_ranks, args.multinode_only,
                emit=lambda line: print(line, flush=True))
    print("\n".join(lines[lines.index(""):]), flush=True)


if __name__ == "__main__":
    main()
