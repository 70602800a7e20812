"""Message-size sweeps like nccl-tests, and one MSCCL plan per size range.

:func:`sweep` synthesizes a collective at every size of a range (``"1KiB:4GiB:x4"``) with the
``auto`` portfolio (:mod:`tacos.solvers.auto`) and the NCCL models, and returns a
:class:`Sweep`: per size the runtime-model time (:mod:`tacos.runtime`), algbw and busbw of
tacos's plan and of each NCCL algorithm as NCCL runs it
(nccl-tests conventions: ``algbw = size / time``, ``busbw = algbw ×`` the collective's factor,
:func:`tacos.simulate.busbw_factor`), and the speedup over the best NCCL model.

:func:`tacos.msccl.sweep_xml.write_windows` writes one MSCCL XML per size range into a directory
the runtime loads as a set (``MSCCL_ALGO_DIR`` for msccl-executor-nccl, or the files listed in
``MSCCL_XML_FILES``): the windows ``[minBytes, maxBytes]`` are disjoint and cover the requested
range, the boundary between two measured sizes is their geometric mean, and adjacent sizes whose
plans lower to the same program share one window.  A plan that uses in-switch operations (NVLS,
SHARP) cannot be written as MSCCL XML; for those sizes the fastest plan without them is written
and the row says so.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tacos.check.simulate import busbw_factor
from tacos.errors import UsageError
from tacos.model import patterns
from tacos.model.schedule import Schedule
from tacos.model.topology import Topology
from tacos.model.units import parse_quantity

SIZES_HINT = ("give FROM:TO:xFACTOR (e.g. 1KiB:4GiB:x4), FROM:TO:+STEP, or a list "
              "(1MiB,64MiB)")
MAX_SIZES = 64


def parse_size(text: str | int, what: str = "size") -> int:
    """Bytes from ``4096``, ``'64MiB'`` or ``'1.5KB'`` (a whole number of bytes, >= 0)."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = float(text)
    else:
        try:
            value = parse_quantity(str(text), "size", default_unit="B")
        except ValueError as exc:
            raise UsageError(f"{what}: {exc}", hint="e.g. 64MiB, 1KiB, 4096") from None
    if not math.isfinite(value) or value < 0 or not float(value).is_integer():
        raise UsageError(f"{what}: {text!r} is not a whole number of bytes")
    return int(value)


def parse_sizes(text: str | Sequence[int | str]) -> list[int]:
    """The sizes of ``'FROM:TO:xF'`` (multiply by F, nccl-tests ``-f``), ``'FROM:TO:+S'``
    (add S, ``-i``), ``'FROM:TO'`` (x2) or a comma list; sorted, without repeats.

    >>> parse_sizes("1KiB:16KiB:x4")
    [1024, 4096, 16384]
    """
    if not isinstance(text, str):
        sizes = [parse_size(s) for s in text]
    elif ":" in text:
        parts = text.split(":")
        if len(parts) not in (2, 3):
            raise UsageError(f"--sizes {text!r}: expected FROM:TO[:STEP]", hint=SIZES_HINT)
        lo, hi = parse_size(parts[0], "--sizes FROM"), parse_size(parts[1], "--sizes TO")
        step = parts[2].strip() if len(parts) == 3 else "x2"
        if lo < 1 or hi < lo:
            raise UsageError(f"--sizes {text!r}: need 1 <= FROM <= TO", hint=SIZES_HINT)
        sizes = []
        if re.fullmatch(r"x\d+(\.\d+)?", step):
            factor = float(step[1:])
            if factor <= 1:
                raise UsageError(f"--sizes {text!r}: the factor must be above 1")
            x = float(lo)
            while x <= hi * (1 + 1e-12) and len(sizes) <= MAX_SIZES:
                sizes.append(int(round(x)))
                x *= factor
        elif step.startswith("+"):
            inc = parse_size(step[1:], "--sizes STEP")
            if inc < 1:
                raise UsageError(f"--sizes {text!r}: the step must be at least 1 byte")
            sizes = list(range(lo, hi + 1, inc)[:MAX_SIZES + 1])  # never more than that
        else:
            raise UsageError(f"--sizes {text!r}: unknown step {step!r}", hint=SIZES_HINT)
    else:
        sizes = [parse_size(s.strip(), "--sizes") for s in text.split(",") if s.strip()]
    sizes = sorted(set(sizes))
    if not sizes or sizes[0] < 1:
        raise UsageError("--sizes needs sizes of at least 1 byte", hint=SIZES_HINT)
    if len(sizes) > MAX_SIZES:
        raise UsageError(f"--sizes gives more than {MAX_SIZES} sizes", hint="use a larger "
                         "factor or step")
    return sizes


REDUCING = ("allreduce", "reducescatter", "reduce")
PER_RANK = ("allgather", "reducescatter", "alltoall", "scatter", "gather")


def nccl_tests_count(kind: str, size: int, npus: int, elem: int = 4) -> int:
    """The ``count`` column of nccl-tests for a ``size``-byte collective of ``elem``-byte
    elements: per rank for the collectives that split the buffer by rank, else the whole."""
    count = size // elem
    return count // npus if kind in PER_RANK and npus else count


@dataclass
class SweepRow:
    """One size: tacos's plan (``schedule``, its label ``plan``), every NCCL model's time, and
    the plan written to MSCCL XML for this size (``xml_plan``: the fastest without in-switch
    operations, None when there is none; ``plain``: every candidate's plan without them, for the
    runtime-shaped windows of :mod:`tacos.sweep_shaped`)."""

    size: int
    plan: str
    schedule: Schedule
    nccl: dict[str, float]
    nccl_best: str | None
    xml_plan: str | None
    xml_schedule: Schedule | None
    times: dict[str, float] = field(default_factory=dict)
    #: runtime-model time of the MSCCL XML written for this size (None: none written)
    xml_time: float | None = None
    #: every verified candidate's link-model time (what the solvers optimize)
    link_times: dict[str, float] = field(default_factory=dict)
    #: every verified plan without in-switch operations (what MSCCL XML can express)
    plain: dict[str, Schedule] = field(default_factory=dict, repr=False)

    @property
    def time(self) -> float:
        """tacos's collective time (s): the runtime model's time of the plan (the link
        model's when the portfolio could time no plan in the runtime model)."""
        return self.times.get(self.plan, self.schedule.makespan)

    def algbw(self, time: float | None = None) -> float:
        """size / time (B/s), of tacos's plan or of ``time``."""
        t = self.time if time is None else time
        return self.size / t if t > 0 else math.inf

    def busbw(self, time: float | None = None) -> float:
        """algbw × the nccl-tests bus factor."""
        coll = self.schedule.collective
        return self.algbw(time) * busbw_factor(coll.kind, len(coll.group))

    @property
    def speedup(self) -> float | None:
        """Best NCCL model's time over tacos's."""
        if self.nccl_best is None or self.time <= 0:
            return None
        return self.nccl[self.nccl_best] / self.time


@dataclass
class Sweep:
    """A sweep's rows, in size order, and how long it took."""

    kind: str
    topology: Topology
    rows: list[SweepRow]
    seconds: float

    @property
    def models(self) -> list[str]:
        """NCCL model names that appear in any row."""
        return sorted({m for r in self.rows for m in r.nccl})

    def geomean_speedup(self, lo: int = 0, hi: int | None = None) -> float | None:
        """Geometric mean of the speedup over the best NCCL model for sizes in [lo, hi]."""
        vals = [r.speedup for r in self.rows if r.size >= lo and (hi is None or r.size <= hi)
                and r.speedup]
        if not vals:
            return None
        return math.exp(sum(math.log(v) for v in vals) / len(vals))

    def table(self) -> str:
        """nccl-tests-shaped text: size (B), count (elements), type, redop, root, then the
        out-of-place and in-place time (us), algbw and busbw (GB/s) of tacos's plan, the plan,
        each NCCL model's algbw, and the speedup over the best NCCL model."""
        models = self.models
        elem, type_name = 4, "float"
        redop = "sum" if self.kind in REDUCING else "none"
        grp = (f"{'out-of-place':>30} {'in-place':>29}")
        head = (f"#{'size':>11} {'count':>13} {'type':>6} {'redop':>6} {'root':>5} "
                f"{'time':>9} {'algbw':>7} {'busbw':>7}  {'time':>9} {'algbw':>7} "
                f"{'busbw':>7}  {'plan':<28}" + "".join(f" {m[:12]:>12}" for m in models)
                + f" {'speedup':>8}")
        units = (f"#{'(B)':>11} {'(elements)':>13} {'':>6} {'':>6} {'':>5} "
                 f"{'(us)':>9} {'(GB/s)':>7} {'(GB/s)':>7}  {'(us)':>9} {'(GB/s)':>7} "
                 f"{'(GB/s)':>7}")
        lines = [f"# {self.kind} on {self.topology.name or 'topology'}: tacos plan vs NCCL, "
                 "runtime-model times (docs/runtime-model.md); NCCL columns: algbw (GB/s); "
                 "in-place runs the same plan (the model times both alike)",
                 f"#{'':>50}{grp}", head, units]
        for r in self.rows:
            coll = r.schedule.collective
            count = nccl_tests_count(self.kind, r.size, len(coll.group), elem)
            root = coll.root if coll.root is not None else -1
            cells = "".join(f" {r.algbw(r.nccl[m]) / 1e9:>12.2f}" if m in r.nccl
                            else f" {'-':>12}" for m in models)
            sp = f"{r.speedup:.2f}x" if r.speedup else "-"
            plan = r.plan + ("" if r.xml_plan == r.plan else " *")
            timed = (f"{r.time * 1e6:>9.2f} {r.algbw() / 1e9:>7.2f} {r.busbw() / 1e9:>7.2f}")
            lines.append(f" {r.size:>11} {count:>13} {type_name:>6} {redop:>6} {root:>5} "
                         f"{timed}  {timed}  {plan:<28}{cells} {sp:>8}")
        g = self.geomean_speedup()
        if g:
            lines.append(f"# geometric-mean speedup over the best NCCL model: {g:.2f}x "
                         f"({len(self.rows)} sizes)")
        if any(r.xml_plan != r.plan for r in self.rows):
            lines.append("# * the XML written for that size is another plan: the fastest in "
                         "the runtime model as MSCCL XML (NCCL's algorithms run by NCCL, and "
                         "in-switch plans, have no XML of the same speed)")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        """JSON-safe summary."""
        from tacos.report import json_safe

        return json_safe({
            "collective": self.kind, "topology": self.topology.name, "seconds": self.seconds,
            "geomean_speedup": self.geomean_speedup(),
            "rows": [{"size": r.size, "count": nccl_tests_count(
                          self.kind, r.size, len(r.schedule.collective.group)),
                      "type": "float", "redop": "sum" if self.kind in REDUCING else "none",
                      "plan": r.plan, "time": r.time, "algbw": r.algbw(),
                      "busbw": r.busbw(), "nccl": r.nccl, "nccl_best": r.nccl_best,
                      "speedup": r.speedup, "xml_plan": r.xml_plan, "xml_time": r.xml_time,
                      "candidates": r.times}
                     for r in self.rows]})


def sweep(topology: Topology, kind: str, sizes: str | Sequence[int | str], *,
          group: Sequence[int] | None = None, chunks_per_npu: int | None = None,
          root: int | None = None, candidates: Sequence[str] | None = None,
          progress: Callable[[int, int], None] | None = None, workers: int | None = None,
          cluster: Any = None, **options: Any) -> Sweep:
    """Synthesize ``kind`` at every size of ``sizes`` (see :func:`parse_sizes`) with the
    ``auto`` portfolio and the NCCL models; options go to the synthesizers (``seed``,
    ``trials`` ...).  Without ``chunks_per_npu`` the greedy chooses its chunks per
    NPU at every size (:mod:`tacos.solvers.greedy_chunks`; option ``greedy_chunks``), except
    for all-to-all (one delivery per chunk: more chunks only multiply synthesis time).

    Sizes are independent tasks (:mod:`tacos.engines`): on ``workers`` local processes
    (default: every core), or on the Dask cluster at ``cluster``; each size then runs its
    trials in one process.  A single size runs here, its trials on the workers or cluster.
    The rows are the same whatever runs them."""
    from tacos.engines import SerialEngine, engine_for
    from tacos.solvers.nccl.system import system

    t0 = time.perf_counter()
    if chunks_per_npu is None:  # all-to-all: one delivery per chunk, nothing to pipeline
        options.setdefault("greedy_chunks", kind != "alltoall")
        chunks_per_npu = 1
    values = parse_sizes(sizes)
    members = tuple(group) if group is not None else topology.live_npus
    colls = []
    for size in values:  # every size is checked before any work
        try:
            colls.append(patterns.build(kind, members, size=size,
                                        chunks_per_npu=chunks_per_npu, root=root))
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    nccl_sys = system(topology, members)
    cands = tuple(candidates or ()) or None
    if len(values) == 1:
        engine = SerialEngine()
    else:
        engine = engine_for(workers, cluster, tasks=len(values))
    if isinstance(engine, SerialEngine):  # the sizes here: their trials may fan out
        options.update((k, v) for k, v in (("workers", workers), ("cluster", cluster))
                       if v is not None)
    else:  # the sizes fan out: their trials run in the size's process
        options.update(workers=1, cluster=None)
    rows: list[SweepRow | None] = [None] * len(values)
    answers = engine.imap(_size_row, (topology, cands, nccl_sys, options),
                          list(zip(values, colls, strict=True)))
    try:
        for n, (i, row) in enumerate(answers, 1):
            rows[i] = row
            if progress is not None:
                progress(n, len(values))
    finally:
        answers.close()
    return Sweep(kind, topology, [r for r in rows if r is not None], time.perf_counter() - t0)


def _size_row(shared: tuple, job: tuple[int, Any]) -> SweepRow:
    """One size of a sweep: the portfolio's plan, the NCCL models and the plan for XML."""
    from tacos.solvers.auto import run_portfolio

    topology, candidates, nccl_sys, options = shared
    size, coll = job
    winner, sched, facts = run_portfolio(topology, coll, candidates=candidates,
                                         nccl_system=nccl_sys, keep_plans=True, **options)
    from tacos.runtime.plans import runtime_of

    plans = facts.pop("plans")
    times = facts["times"]
    nccl = {k: t for k, t in times.items() if k.startswith("nccl-")}
    best = facts.get("nccl_best")
    if best is not None and facts.get("nccl_time") is not None:
        nccl[best] = facts["nccl_time"]  # the fastest NCCL algorithm, as NCCL runs it
    else:
        best = min(nccl, key=nccl.__getitem__) if nccl else None
    # the XML written for this size is ranked by what that file does in the runtime model
    xml_times: dict[str, float] = {}
    for k in plans:
        if k in facts["link_times"] and not any(t.group is not None
                                               for t in plans[k].transfers):
            est, _ = runtime_of(plans[k], topology, as_xml=True)
            xml_times[k] = est.time if est is not None else facts["link_times"][k]
    xml = min(xml_times, key=lambda k: (xml_times[k], k)) if xml_times else None
    return SweepRow(size, winner, sched, nccl, best, xml, plans[xml] if xml else None,
                    dict(times), xml_times.get(xml) if xml else None,
                    dict(facts["link_times"]),
                    {k: s for k, s in plans.items() if not any(t.group is not None
                                                               for t in s.transfers)})


__all__ = ["Sweep", "SweepRow", "parse_size", "parse_sizes", "sweep"]

