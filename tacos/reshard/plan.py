"""Plan a resharding: pieces per tile, synthesis, verification, bound and baselines.

:func:`plan_reshard` is the entry point behind ``tacosc`` for files with ``reshard``
statements and the Python API::

    from tacos.reshard import DeviceMesh, Reshard, plan_reshard
    r = Reshard.of((1024, 1024, 512), DeviceMesh.of(range(8), (2, 4)), "RS0R",
                   DeviceMesh.of(range(8, 16), (2, 4)), "S0RR")
    result = plan_reshard(topology, [r])
    print(result.text())

Tile splitting: unless ``pieces`` is given, every count in :data:`PIECE_CANDIDATES` whose
pieces stay at least :data:`MIN_PIECE_BYTES` (and whose chunk total stays under
:data:`MAX_CHUNKS`) is planned, and the fastest plan wins.  The baselines get the same choice,
each its own best.  Times are each plan's own verified timing (its makespan), so a baseline's
runtime semantics (one operation at a time per device, hosts busy per broadcast) count.  The
bound (:func:`tacos.check.bounds.lower_bound`, whose group cut sees host interfaces) is computed
once for tiles in 256 pieces, so it holds for every plan compared (none splits tiles finer).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tacos.check.bounds import Bound, lower_bound
from tacos.check.bounds_groups import describe, group_cut
from tacos.check.verify import verify_schedule
from tacos.errors import TacosError
from tacos.model.schedule import Schedule
from tacos.model.topology import Topology
from tacos.model.units import format_size, format_time
from tacos.reshard import baselines as base
from tacos.reshard.tasks import Reshard, piece_sizes, reshard_collective

PIECE_CANDIDATES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
MIN_PIECE_BYTES = 256 << 10
MAX_CHUNKS = 4096
BASELINES = {
    "sendrecv": "send/recv",
    "alpa": "Alpa (send/recv + local all-gather)",
    "broadcast": "seed broadcast (load-balanced)",
}


@dataclass
class Candidate:
    """One plan: its schedule, time (its makespan) and pieces per tile."""

    name: str
    schedule: Schedule
    pieces: int

    @property
    def time(self) -> float:
        """The plan's time in seconds."""
        return self.schedule.makespan


@dataclass
class ReshardResult:
    """The chosen plan, the bound, the baselines and what was tried."""

    topology: Topology
    reshards: tuple[Reshard, ...]
    plan: Candidate
    bound: Bound
    baselines: dict[str, Candidate] = field(default_factory=dict)
    tried: dict[int, float] = field(default_factory=dict)
    synthesis_time: float = 0.0

    @property
    def schedule(self) -> Schedule:
        """The chosen plan's schedule."""
        return self.plan.schedule

    def report(self) -> dict[str, Any]:
        """Facts as a JSON-safe dict: reshards, bound, plan, baselines (time, speedup)."""
        from tacos.report import json_safe

        b = self.bound.value
        cut = group_cut(self.topology, self.schedule.collective)
        out: dict[str, Any] = {
            "reshards": [_describe_reshard(self.topology, r) for r in self.reshards],
            "bound": {"value": b, "kind": self.bound.kind, "parts": self.bound.parts,
                      "binding_group": describe(self.topology, cut) if cut else None},
            "plan": {"solver": self.plan.name, "time": self.plan.time,
                     "gap": self.plan.time / b if b > 0 else None,
                     "pieces": self.plan.pieces, "transfers": len(self.schedule.transfers),
                     "synthesis_time": self.synthesis_time},
            "pieces_tried": {str(k): v for k, v in sorted(self.tried.items())},
            "baselines": {
                name: {"label": BASELINES.get(name, name), "time": c.time, "pieces": c.pieces,
                       "gap": c.time / b if b > 0 else None,
                       "speedup": c.time / self.plan.time if self.plan.time > 0 else None}
                for name, c in self.baselines.items()},
        }
        return json_safe(out)

    def text(self) -> str:
        """The report as aligned lines (what ``tacosc`` prints)."""
        r = self.report()
        lines = []
        for info in r["reshards"]:
            lines.append(("reshard", info["summary"]))
            lines.append(("unit tasks", info["tasks_summary"]))
        bound = r["bound"]
        why = f" ({bound['kind'].replace('_', ' ')}"
        why += f": {bound['binding_group']})" if bound["binding_group"] and \
            bound["kind"] == "group_cut" else ")"
        lines.append(("bound", _t(bound["value"]) + why))
        p = r["plan"]
        gap = f"{p['gap']:.3g}x bound" if p["gap"] else "no bound"
        lines.append(("tacos", f"{_t(p['time'])}  ({gap})  {p['solver']}, {p['pieces']} "
                               f"piece(s) per tile, {p['transfers']} transfers"))
        for name, c in r["baselines"].items():
            gap = f", {c['gap']:.3g}x bound" if c["gap"] else ""
            faster = f"tacos is {c['speedup']:.3g}x faster" if c["speedup"] else "nothing to move"
            lines.append((name, f"{_t(c['time'])}  ({faster}{gap})  {c['label']}, "
                                f"{c['pieces']} piece(s)"))
        width = max(len(k) for k, _ in lines)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in lines)


def _t(x: float | None) -> str:
    return format_time(x) if x is not None else "n/a"


def _describe_reshard(topology: Topology, r: Reshard) -> dict[str, Any]:
    def side(mesh, spec) -> str:
        shape = "x".join(map(str, mesh.shape))
        return f"{spec} on {len(mesh.devices)} NPUs ({shape})"

    sizes = sorted({t.nbytes for t in r.tasks})
    tiles = ", ".join(format_size(s) for s in sizes[:3]) + (", ..." if len(sizes) > 3 else "")
    senders = max((len(t.senders) for t in r.tasks), default=0)
    receivers = max((len(t.receivers) for t in r.tasks), default=0)
    return {
        "name": r.label, "tensor": list(r.shape), "bytes": r.nbytes,
        "element_bytes": r.element_bytes,
        "src": {"spec": str(r.src_spec), "shape": list(r.src.shape),
                "npus": [topology.node_name(v) for v in r.src.devices]},
        "dst": {"spec": str(r.dst_spec), "shape": list(r.dst.shape),
                "npus": [topology.node_name(v) for v in r.dst.devices]},
        "tasks": len(r.tasks),
        "summary": f"{r.label}: tensor {list(r.shape)} ({format_size(r.nbytes)}), "
                   f"{side(r.src, r.src_spec)} -> {side(r.dst, r.dst_spec)}",
        "tasks_summary": (f"{len(r.tasks)} (tiles of {tiles}; up to {senders} replica(s) "
                          f"and {receivers} receiver(s) each)" if r.tasks else
                          "none: every destination device already holds its tiles"),
    }


def piece_counts(reshards: Sequence[Reshard], pieces: int | None = None) -> list[int]:
    """The pieces-per-tile counts to try (``[pieces]`` when given)."""
    if pieces is not None:
        if pieces < 1:
            raise TacosError("pieces per tile must be at least 1")
        return [int(pieces)]
    smallest = min((t.nbytes for r in reshards for t in r.tasks), default=0)
    out = []
    for k in PIECE_CANDIDATES:
        chunks = sum(len(piece_sizes(t.nbytes, k)) for r in reshards for t in r.tasks)
        if k > 1 and (smallest // k < MIN_PIECE_BYTES or chunks > MAX_CHUNKS):
            break
        out.append(k)
    return out


def baseline_schedule(name: str, topology: Topology, reshards: Sequence[Reshard], pieces: int,
                      seed: int = 0) -> Schedule:
    """Baseline ``name`` (``sendrecv``, ``alpa``, ``broadcast``) for ``reshards``."""
    if name == "sendrecv":
        return base.send_recv(topology, reshards, pieces)
    if name == "alpa":
        return base.send_recv(topology, reshards, pieces, local_allgather=True)
    if name == "broadcast":
        return base.seed_broadcast(topology, reshards, pieces, seed=seed)
    raise TacosError(f"unknown resharding baseline {name!r}",
                     hint=f"use one of {', '.join(BASELINES)}")


def plan_reshard(topology: Topology, reshards: Reshard | Sequence[Reshard], *,
                 solver: str = "multicast", pieces: int | None = None, seed: int = 0,
                 baselines: bool | Sequence[str] = True, **options: Any) -> ReshardResult:
    """Plan ``reshards`` (together) on ``topology``; every plan is verified.

    ``solver``: ``multicast`` (default), any other tacos solver, or a baseline name
    (``sendrecv``, ``alpa``, ``broadcast``) to emit that baseline's plan.  ``pieces``: pieces
    per tile (default: the fastest of :func:`piece_counts`).  ``baselines``: compare with all
    (True), none (False) or the named ones.  ``options`` go to the solver.
    """
    from tacos.synthesize import synthesize

    t0 = time.perf_counter()
    rs = (reshards,) if isinstance(reshards, Reshard) else tuple(reshards)
    counts = piece_counts(rs, pieces)
    tried: dict[int, float] = {}
    best: Candidate | None = None
    for k in counts:
        coll = reshard_collective(rs, k)
        if solver in BASELINES:
            sched = baseline_schedule(solver, topology, rs, k, seed)
        else:
            sched = synthesize(topology, coll, solver=solver, seed=seed, bound=False,
                               **options)
        verify_schedule(sched).raise_if_failed()
        tried[k] = sched.makespan
        if best is None or sched.makespan < best.time * (1 - 1e-9):
            best = Candidate(solver, sched, k)
    assert best is not None
    # one bound for every plan: the tiles split as finely as any plan here splits them
    bound = lower_bound(topology, reshard_collective(rs, max(PIECE_CANDIDATES[-1], *counts)))
    best.schedule.meta.update(lower_bound=bound.value, pieces=best.pieces)
    if bound.value > 0:
        best.schedule.meta["gap"] = best.time / bound.value
    result = ReshardResult(topology, rs, best, bound, tried=tried)
    names = list(BASELINES) if baselines is True else list(baselines or ())
    for name in names:
        if name == solver:
            continue
        for k in counts:
            sched = baseline_schedule(name, topology, rs, k, seed)
            verify_schedule(sched).raise_if_failed()
            got = result.baselines.get(name)
            if got is None or sched.makespan < got.time * (1 - 1e-9):
                result.baselines[name] = Candidate(name, sched, k)
    result.synthesis_time = time.perf_counter() - t0
    return result


__all__ = ["BASELINES", "Candidate", "PIECE_CANDIDATES", "ReshardResult", "baseline_schedule",
           "piece_counts", "plan_reshard"]
