"""Runtime-shaped MSCCL plans for every size window of a sweep.

For each size of a :class:`~tacos.sweep.Sweep`, every plan the portfolio found without
in-switch operations (``SweepRow.plain``), the all-pairs plan
(:mod:`tacos.solvers.allpairs`, for all-reduce and all-gather) and, for an all-reduce, the
programs written directly (:mod:`tacos.msccl.allpairs_program`,
:mod:`tacos.msccl.ring_program`) are lowered under every shape
(:mod:`tacos.msccl.shape`: instances, protocol, port order, paired peers) and the one the
runtime model times fastest at that size is kept (:func:`tacos.msccl.shape_choose.
choose_shape`).  :func:`tacos.msccl.sweep_xml.write_windows` writes the choices as one file per
window.

The runtime model keeps its analysis (folded model and happens-before graph) of the last few
programs it timed (:mod:`tacos.runtime.msccl_exec`); a window's search times about forty, and
the program families and the all-pairs plans recur at every size, so on groups of at most
:data:`SMALL_GROUP` ranks the sweep keeps :data:`KEPT_ANALYSES` of them while it runs: the
same times, each recurring program analysed once instead of once per window.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from tacos.errors import TacosError
from tacos.model.schedule import Schedule
from tacos.msccl.lower import MscclOptions
from tacos.msccl.shape import INSTANCES, PROTOCOLS, RuntimeLimits, shapes
from tacos.msccl.shape_choose import Choice, Estimator, ShapeCache, choose_shape

if TYPE_CHECKING:
    from tacos.model.topology import Topology
    from tacos.sweep import Sweep, SweepRow

ALLPAIRS = "allpairs"
STAGED = "allpairs-staged"
#: groups of at most this many ranks keep :data:`KEPT_ANALYSES` runtime-model analyses (on
#: 2x MI250, 32 ranks, keeping them saved no CPU and cost 0.8 GiB: docs/benchmarks/window-sets.md)
SMALL_GROUP = 16
KEPT_ANALYSES = 64


def candidate_plans(row: SweepRow, allpairs: Callable[[], Schedule | None],
                    topology: Topology | None = None) -> dict[str, Any]:
    """The plans a window chooses from: the row's plans without in-switch operations, the
    all-pairs plan when there is one, and for an all-reduce the staged all-pairs program
    (:mod:`tacos.msccl.allpairs_program`) and, on ``topology`` when it is given, the
    several-rings programs (:func:`tacos.msccl.ring_program.ring_families`)."""
    from tacos.msccl.allpairs_program import AllPairsAllReduce
    from tacos.msccl.ring_program import ring_families

    out: dict[str, Any] = dict(row.plain)
    if not out and row.xml_schedule is not None:
        out[row.xml_plan or "plan"] = row.xml_schedule
    extra = allpairs()
    if extra is not None:
        out[ALLPAIRS] = extra
        if extra.collective.kind == "allreduce":
            out[STAGED] = AllPairsAllReduce(extra.collective)
            if topology is not None:
                out.update(ring_families(topology, extra.collective))
    return out


def choose_windows(result: Sweep, *, base: MscclOptions | None = None,
                   protos: Sequence[str] = PROTOCOLS, instances: Sequence[int] = INSTANCES,
                   limits: RuntimeLimits | None = None, estimator: Estimator | None = None,
                   progress: Callable[[int, int], None] | None = None) -> list[Choice]:
    """Per row of ``result`` (in size order), the fastest plan and shape in the runtime model
    (or ``estimator``); ``protos`` and ``instances`` restrict the shapes tried."""
    from tacos.model import patterns
    from tacos.msccl.multinode_program import multinode_candidates
    from tacos.msccl.xgmi_program import xgmi_candidates
    from tacos.solvers.allpairs import KINDS, allpairs_schedule

    rows = sorted(result.rows, key=lambda r: r.size)
    if not rows:
        raise TacosError("the sweep has no sizes")
    base = base or MscclOptions()
    cands = shapes(protos=tuple(protos), instances=tuple(instances))
    cache = ShapeCache()
    coll = rows[0].schedule.collective
    built: dict[str, Schedule | None] = {}

    def allpairs() -> Schedule | None:
        # its lowered program does not depend on the size: built once, at the first size
        if "s" not in built:
            built["s"] = None
            if coll.kind in KINDS:
                c = patterns.build(coll.kind, coll.group, size=rows[0].size,
                                   chunks_per_npu=1)
                built["s"] = allpairs_schedule(result.topology, c)
        return built["s"]

    from tacos.runtime import msccl_exec

    out = []
    with msccl_exec.analyses_kept(KEPT_ANALYSES if len(coll.group) <= SMALL_GROUP else 0):
        for n, row in enumerate(rows, 1):
            plans = candidate_plans(row, allpairs, result.topology)
            plans.update(multinode_candidates(result.topology, coll))
            plans.update(xgmi_candidates(result.topology, coll, row.size))
            out.append(choose_shape(plans, result.topology, row.size, base=base,
                                    candidates=cands, limits=limits, estimator=estimator,
                                    cache=cache))
            if progress is not None:
                progress(n, len(rows))
    return out


def window_table(rows: Sequence[SweepRow], choices: Sequence[Choice],
                 nccl: Callable[[int], float | None] | None = None) -> str:
    """Per size: the chosen plan and shape, its runtime-model time and busbw, and (when
    ``nccl`` gives NCCL's modelled time for a size) the speedup over NCCL."""
    head = (f"{'size':>10} {'time(us)':>10} {'busbw':>8}  {'plan':<10} {'proto':<6} "
            f"{'inst':>4} {'chan':>4} {'tbs':>4} {'order':<6}" + (f" {'nccl(us)':>9} "
                                                                   f"{'speedup':>8}"
                                                                   if nccl else ""))
    from tacos.check.simulate import busbw_factor
    from tacos.model.units import format_size

    lines = ["# runtime-shaped MSCCL plans (runtime-model times)", head]
    for row, ch in zip(rows, choices, strict=True):
        f = ch.facts()
        coll = row.schedule.collective
        bus = row.size / ch.time * busbw_factor(coll.kind, len(coll.group)) / 1e9
        cells = ""
        if nccl:
            t = nccl(row.size)
            cells = (f" {t * 1e6:>9.2f} {t / ch.time:>7.2f}x" if t else f" {'-':>9} {'-':>8}")
        lines.append(f"{format_size(row.size):>10} {ch.time * 1e6:>10.2f} {bus:>8.2f}  "
                     f"{ch.plan:<10} {ch.shape.proto:<6} {ch.shape.instances:>4} "
                     f"{f['nchannels']:>4} {f['tbs_per_gpu']:>4} "
                     f"{'kept' if ch.shape.port_order else 'free':<6}{cells}")
    return "\n".join(lines)


def named(choice: Choice, name: str, lo: int, hi: int) -> Choice:
    """``choice`` with its program renamed and given the window ``[lo, hi]``."""
    return replace(choice, program=replace(choice.program, name=name, minBytes=lo,
                                           maxBytes=hi))
