"""``tacosc``: runtime-shaped MSCCL output (the default, ``--shape auto``), one file or a
folder of windows.

The plans are lowered in the shape the runtime model times fastest
(:mod:`tacos.msccl.shape_choose`; never slower than the fixed lowering): a folder
(``-o DIR``) gets one file per size window (:mod:`tacos.sweep_shaped`), a single file
(``-o plan.xml``) the window around the collective's size.  ``--shape fixed`` keeps the
fixed lowering.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tacos.model.schedule import Schedule
from tacos.model.topology import Topology
from tacos.msccl.lower import MscclOptions
from tacos.msccl.shape import INSTANCES, PROTOCOLS, shapes
from tacos.msccl.shape_choose import Choice, choose_shape


def _base(args: argparse.Namespace) -> MscclOptions:
    from tacos.cli_flags import msccl_values

    return MscclOptions(inplace=args.inplace, outofplace=not args.inplace,
                        max_steps_per_tb=msccl_values(args)["max_steps_per_tb"])


def _tried(args: argparse.Namespace) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The protocols and instance counts ``--proto``/``--instances`` restrict the search to."""
    protos = (args.proto,) if args.proto else PROTOCOLS
    instances = (args.instances,) if args.instances else INSTANCES
    return protos, instances


def nccl_time(topology: Topology, kind: str, group: Any) -> Callable[[int], float | None]:
    """NCCL's modelled best time per size without in-switch reduction (ring or tree: what an
    MSCCL XML plan competes with), from the runtime model; None when it cannot time it."""
    from tacos.errors import TacosError

    def at(nbytes: int) -> float | None:
        try:
            from tacos.runtime import estimate_nccl
        except ImportError:
            return None
        times = []
        for algo in ("ring", "tree"):
            try:
                times.append(float(estimate_nccl(topology, kind, nbytes, group=list(group),
                                                 algorithm=algo).time))
            except TacosError:
                continue
        return min(times) if times else None
    return at


def shaped_windows(result: Any, out: Path, args: argparse.Namespace, min_bytes: int,
                   max_bytes: int, progress: Callable[[int, int], None] | None = None
                   ) -> list[Path]:
    """Choose every window's plan and shape, print the table (unless ``--json``) and write
    the folder; returns the paths."""
    from tacos.sweep_shaped import choose_windows, window_table

    protos, instances = _tried(args)
    rows = sorted(result.rows, key=lambda r: r.size)
    choices = choose_windows(result, base=_base(args), protos=protos, instances=instances,
                             progress=progress)
    if not args.json:
        coll = rows[0].schedule.collective
        print(window_table(rows, choices, nccl_time(result.topology, coll.kind, coll.group)))
    from tacos.msccl.sweep_xml import write_windows

    return write_windows(result, Path(out), min_bytes=min_bytes, max_bytes=max_bytes,
                         inplace=args.inplace, choices=choices)


def shaped_file(schedule: Schedule, topology: Topology, args: argparse.Namespace) -> Choice:
    """Choose the plan (the solver's or the all-pairs plan) and shape for the collective's
    size, write it to ``args.output`` with the window around that size (or
    ``--min-bytes``/``--max-bytes``), and return the choice."""
    from tacos.cli import write_output
    from tacos.model import patterns
    from tacos.msccl.sweep_xml import windows
    from tacos.solvers.allpairs import KINDS, allpairs_schedule
    from tacos.sweep_shaped import named

    coll = schedule.collective
    nbytes = max(1, int(coll.size))
    plans: dict[str, Schedule] = {}
    if not any(t.group is not None for t in schedule.transfers):
        plans[str(schedule.meta.get("solver") or args.solver or "plan")] = schedule
    if coll.kind in KINDS:
        plans["allpairs"] = allpairs_schedule(
            topology, patterns.build(coll.kind, coll.group, size=nbytes, chunks_per_npu=1))
    if coll.kind == "allreduce":
        from tacos.msccl.allpairs_program import AllPairsAllReduce

        plans["allpairs-staged"] = AllPairsAllReduce(plans["allpairs"].collective)
        from tacos.msccl.ring_program import ring_families

        plans.update(ring_families(topology, plans["allpairs"].collective))
    from tacos.msccl.multinode_program import multinode_candidates

    plans.update(multinode_candidates(topology, coll))
    from tacos.msccl.xgmi_program import xgmi_candidates

    plans.update(xgmi_candidates(topology, coll, nbytes))
    from tacos.cli_flags import msccl_values

    values = msccl_values(args)
    lo, hi = values["min_bytes"], values["max_bytes"]
    if not lo and not hi:
        lo, hi = windows([max(1, nbytes // 4), nbytes, nbytes * 4])[1]
    protos, instances = _tried(args)
    choice = choose_shape(plans, topology, nbytes, base=_base(args), top=hi,
                          candidates=shapes(protos=protos, instances=instances))
    name = "tacos" if args.output == "-" else (Path(args.output).stem or "tacos")
    written = named(choice, name, lo, hi)
    write_output(args.output, written.xml(max_steps=values["max_steps_per_tb"]))
    choice.written = written.program  # its header is checked at the size, not read back
    return choice


def shaped_runtime(choice: Choice, schedule: Schedule) -> tuple[Any, str] | None:
    """What :func:`tacos.runtime.plans.runtime_of` gives for the program ``choice`` chose,
    on the topology :func:`shaped_file` was given, at ``schedule``'s size and ranks: the
    shape search's estimate of that program (it timed it already); None when it has none."""
    coll = schedule.collective
    if (choice.estimate is None or choice.nbytes != coll.size
            or tuple(choice.schedule.collective.group) != tuple(coll.group)):
        return None
    return choice.estimate, "its MSCCL XML lowering"
