"""Pick, for one message size, the plan and shape whose lowered program runs fastest.

Every candidate schedule is lowered once per ``(instances, port order)``; the protocol only
changes the program's header, so each lowered program is timed under every protocol.  A
program that does not fit the runtime's limits (:func:`tacos.msccl.shape.shape_problems`), or
whose ``nchunksperloop`` does not divide the message, is rejected with its reason.  The time
comes from an *estimator* ``(program, topology, nbytes) -> seconds``; by default the runtime
model's :func:`tacos.runtime.estimate_program`.

The lowered programs do not depend on the message size, only on the schedule's transfers and
their order, so a :class:`ShapeCache` shared over the sizes of a sweep lowers each of them
once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tacos.errors import TacosError
from tacos.model.schedule import Schedule
from tacos.model.topology import Topology
from tacos.msccl.busiest_memo import busiest_pair_once
from tacos.msccl.channel_floor import (
    PairLanes,
    busiest_pair,
    channels_refusal,
    split_applies,
)
from tacos.msccl.fifo_calls import widest_size
from tacos.msccl.lower import MscclOptions, lower
from tacos.msccl.lower_instances import failure_at_instances
from tacos.msccl.program import DEFAULT_MAX_STEPS, DEFAULT_SMS, Program
from tacos.msccl.shape import RuntimeLimits, Shape, describe, shape_problems, shapes
from tacos.msccl.shape_refuse import (
    Receipts,
    chunks_refusal,
    instances_refusal,
    kept_receipts,
    refusal,
)
from tacos.msccl.verify_fifo import split_deadlocks

Estimator = Callable[[Program, Topology, int], float]
ELEMENT_BYTES = 4  #: element size assumed when checking that ``nchunksperloop`` divides
#: A shape within this fraction of the fastest that runs fewer thread blocks wins: the runtime
#: model is not that precise, and CTAs left idle serve the computation around the collective.
NEAR = 0.005
#: A plan whose one-instance program has more steps than this is searched narrowly (the
#: ``quick`` search: no port-order variant, the second pairing timed once): each lowering of
#: it costs tens of seconds and gigabytes (512 ranks: about a million steps).
LARGE_PROGRAM_STEPS = 250_000


def limits_for(topology: Topology, max_steps: int = DEFAULT_MAX_STEPS) -> RuntimeLimits:
    """The runtime limits on ``topology``'s GPUs: their SM count from the runtime model's
    hardware data (:func:`tacos.runtime.hardware.hardware_for`), else an A100's."""
    sms = DEFAULT_SMS
    try:
        from tacos.runtime.hardware import hardware_for

        sms = int(hardware_for(topology).sms) or DEFAULT_SMS
    except (ImportError, TacosError, AttributeError):
        pass
    return RuntimeLimits(sms=sms, max_steps=max_steps)


def runtime_estimator(ranks: Sequence[int] | None = None) -> Estimator:
    """The runtime model's time of a program (:func:`tacos.runtime.estimate_program`), with
    rank r on NPU ``ranks[r]``."""
    try:
        from tacos.runtime import estimate_program
    except ImportError as exc:  # pragma: no cover - the runtime model ships with tacos
        raise TacosError("the runtime model (tacos.runtime) is not available",
                         hint="pass an estimator") from exc
    group = list(ranks) if ranks is not None else None

    def estimate(program: Program, topology: Topology, nbytes: int) -> float:
        return float(estimate_program(program, topology, nbytes, ranks=group).time)

    return estimate


@dataclass
class Candidate:
    """One plan under one shape: its time (None when rejected) and why it was rejected."""

    plan: str
    shape: Shape
    time: float | None
    problems: list[str] = field(default_factory=list)


@dataclass
class Choice:
    """The fastest plan and shape for ``nbytes``, its lowered program and what was compared."""

    plan: str
    shape: Shape
    program: Program
    schedule: Schedule
    time: float
    nbytes: int
    considered: list[Candidate]
    bound: str = ""
    #: the runtime-model time of the default plan in the fixed lowering's shape (None: it
    #: did not fit or there was no default plan)
    default: float | None = None
    #: the runtime model's estimate of the chosen program (a
    #: :class:`tacos.runtime.RuntimeEstimate`; None with another estimator)
    estimate: Any = None
    #: the program as written to a file (renamed, with its size window), once written
    written: Program | None = None

    def xml(self, *, max_steps: int = DEFAULT_MAX_STEPS, sms: int = DEFAULT_SMS) -> str:
        """The chosen program's XML, verified first (every rule ``tacosc verify`` applies);
        raises :class:`~tacos.errors.VerificationError` on a violation."""
        from tacos.errors import VerificationError
        from tacos.msccl.ranks import ranks_comment
        from tacos.msccl.verify import verify_program
        from tacos.msccl.xml_writer import emit_xml

        report = verify_program(self.program, max_steps=max_steps, sms=sms,
                                source="<shaped plan>")
        if not report.ok:
            raise VerificationError(
                "the shaped MSCCL program fails verification:\n" + report.text(warnings=False),
                hint="this is a bug in the lowering; please report it with the schedule")
        return ranks_comment(self.schedule.collective.group) + emit_xml(self.program)

    def facts(self) -> dict[str, Any]:
        """The chosen shape's facts (:func:`tacos.msccl.shape.describe`)."""
        return describe(self.program, self.nbytes)

    def lines(self) -> list[str]:
        """Report lines: the chosen shape, what it beat and what was rejected."""
        f = self.facts()
        out = [f"msccl shape   {self.plan}: {self.shape.label()} -> {f['nchannels']} channels, "
               f"{f['tbs_per_gpu']} thread blocks/GPU, {f['nchunksperloop']} chunks per loop, "
               f"busiest tb {f['max_tb_bytes'] / 1024:.1f} KiB, balance "
               f"{f['balance']:.2f} (max/mean); runtime model {self.time * 1e6:.2f} us"]
        if self.bound:
            out.append(f"bound         {self.bound}")
        if self.default is not None:
            out.append(f"fixed shape   {self.default * 1e6:.2f} us in the runtime model "
                       f"({self.default / self.time:.2f}x the chosen shape's time)")
        timed = sorted((c for c in self.considered if c.time is not None),
                       key=lambda c: (c.time, c.plan))
        others = [c for c in timed if (c.plan, c.shape) != (self.plan, self.shape)]
        best_other = {}
        for c in others:
            key = ("protocol" if c.shape.proto != self.shape.proto
                   else "instances" if c.shape.instances != self.shape.instances
                   else "plan" if c.plan != self.plan else "port order or pairing")
            best_other.setdefault(key, c)
        why = [f"{c.plan} {c.shape.label()} {c.time / self.time:.2f}x slower"
               for c in list(best_other.values())[:4] if c.time]
        if why:
            out.append("why           " + "; ".join(why))
        rejected = [c for c in self.considered
                    if c.time is None and not c.problems[0].startswith(("same program",
                                                                         "pruned", "skipped"))]
        skipped = [c for c in self.considered
                   if c.time is None and c.problems[0].startswith("skipped")]
        if skipped:
            out.append(f"skipped       {len(skipped)} shapes not lowered, e.g. "
                       f"{skipped[0].plan} {skipped[0].shape.label()}: {skipped[0].problems[0]}")
        pruned = sum(c.time is None and c.problems[0].startswith("pruned")
                     for c in self.considered)
        if pruned:
            out.append(f"pruned        {pruned} shapes whose lower bound was no faster than "
                       f"the best found")
        if rejected:
            out.append(f"rejected      {len(rejected)} shapes, e.g. {rejected[0].plan} "
                       f"{rejected[0].shape.label()}: {rejected[0].problems[0]}")
        return out

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready summary."""
        return {"plan": self.plan, "instances": self.shape.instances, "proto": self.shape.proto,
                "port_order": self.shape.port_order, "paired": self.shape.paired,
                "time": self.time, "nbytes": self.nbytes, "bound": self.bound,
                "default_time": self.default,
                **self.facts(),
                "considered": [{"plan": c.plan, "instances": c.shape.instances,
                                "proto": c.shape.proto, "port_order": c.shape.port_order,
                                "paired": c.shape.paired, "time": c.time, "problems": c.problems}
                               for c in self.considered]}


class ShapeCache:
    """Lowered programs per ``(schedule structure, instances, port order)``; failures are
    remembered as their message.  With ``max_programs``, the oldest programs are dropped
    beyond that many.  :meth:`time` remembers the runtime model's time of each program per
    protocol, topology, ranks and size, and :meth:`runtime` its whole estimate."""

    def __init__(self, max_programs: int | None = None, max_steps: int | None = None) -> None:
        self._programs: dict[tuple, Program | str] = {}
        self._structures: dict[int, tuple[Any, tuple]] = {}
        self._times: dict[tuple, float] = {}
        self._runs: dict[tuple, Any] = {}
        self._same: dict[tuple, bool] = {}  # whether pairing single peers changes a program
        self._topologies: dict[int, Topology] = {}
        self.max_programs = max_programs
        #: with ``max_steps``, the oldest programs are dropped while the programs kept hold
        #: more steps than that in all (the newest is always kept)
        self.max_steps = max_steps
        self._steps = 0

    def time(self, program: Program, topology: Topology, group: Sequence[int], nbytes: int,
             estimate: Estimator) -> float:
        """``estimate(program, topology, nbytes)``, remembered for a program of this cache
        (the same object) under its protocol."""
        key = (id(program.gpus), program.proto, id(topology), tuple(group), nbytes)
        got = self._times.get(key)
        if got is None:
            got = self._times[key] = estimate(program, topology, nbytes)
            self._topologies[id(topology)] = topology  # its id stays its own while cached
        return got

    def runtime(self, program: Program, topology: Topology, group: Sequence[int],
                nbytes: int) -> Any:
        """The runtime model's estimate (:func:`tacos.runtime.estimate_program`) of a program
        of this cache (the same object) under its protocol, remembered: the shape search
        times it, then names what bounds the winner, and the report times the file written."""
        key = (id(program.gpus), program.proto, id(topology), tuple(group), nbytes)
        got = self._runs.get(key)
        if got is None:
            from tacos.runtime import estimate_program

            got = self._runs[key] = estimate_program(program, topology, nbytes,
                                                     ranks=list(group))
            self._topologies[id(topology)] = topology  # its id stays its own while cached
        return got

    def structure(self, schedule: Schedule | Any) -> tuple:
        """What the lowered program depends on: the transfers in time order (a program
        family, e.g. :class:`tacos.msccl.allpairs_program.AllPairsAllReduce`: itself)."""
        if not isinstance(schedule, Schedule):
            return ("family", schedule)
        got = self._structures.get(id(schedule))
        if got is not None and got[0] is schedule:
            return got[1]
        out = self._structure(schedule)
        self._structures[id(schedule)] = (schedule, out)
        return out

    @staticmethod
    def _structure(schedule: Schedule) -> tuple:
        ts = sorted(range(len(schedule.transfers)),
                    key=lambda i: (schedule.transfers[i].start, schedule.transfers[i].end, i))
        coll = schedule.collective
        return (coll.kind, tuple(coll.group), len(coll.chunks), coll.chunks_per_npu, coll.root,
                tuple((t.src, t.dst, t.chunks, t.op, t.route)
                      for t in (schedule.transfers[i] for i in ts)))

    def same_as(self, schedule: Schedule, shape: Shape, base: MscclOptions) -> str | None:
        """The label of a simpler shape that lowers ``schedule`` to the same program as
        ``shape`` (kept port order without serialized ports; single peers that the pairing
        leaves unchanged at one instance), or None."""
        if not isinstance(schedule, Schedule):  # a family: one program per instance count
            if shape.port_order or not shape.paired:
                return replace(shape, port_order=False, paired=True).label()
            return None
        if shape.port_order:
            key = ("ports", self.structure(schedule))
            ordered = self._programs.get(key)
            if ordered is None:
                from tacos.msccl.lower_ports import port_order

                ordered = self._programs[key] = port_order(schedule).ordered  # type: ignore
            if not ordered:
                return replace(shape, port_order=False).label()
        if not shape.paired:
            key = ("pairs", self.structure(schedule), shape.port_order, _lowering_base(base))
            same = self._same.get(key)
            if same is None:  # two lowerings compared step by step: once per plan and base
                a = self.program(schedule, Shape(1, "Simple", shape.port_order, True), base)
                b = self.program(schedule, Shape(1, "Simple", shape.port_order, False), base)
                same = self._same[key] = not isinstance(a, str) and a == b
            if same:
                return replace(shape, paired=True).label()
        return None

    def program(self, schedule: Schedule, shape: Shape, base: MscclOptions) -> Program | str:
        """The lowered program (protocol ``Simple``), or why it could not be lowered."""
        key = (self.structure(schedule), shape.instances, shape.port_order, shape.paired,
               _lowering_base(base))
        got = self._programs.get(key)
        if got is None:
            # steps stay merged: evaluate() rejects programs whose calls overflow the FIFO
            base = replace(base, fit_fifo=False)
            opts = replace(shape, proto="Simple").options(base)
            try:
                got = (lower(schedule, options=opts) if isinstance(schedule, Schedule)
                       else schedule.lower(replace(shape, proto="Simple"), base))
            except TacosError as exc:
                got = str(exc.args[0] if exc.args else exc)
            if self.max_programs is not None and len(self._programs) >= self.max_programs:
                self._drop_oldest()
            self._programs[key] = got
            self._steps += _program_steps(got)
            while (self.max_steps is not None and self._steps > self.max_steps
                   and len(self._programs) > 1):
                self._drop_oldest()
        return got

    def forget(self, schedule: Schedule | Any) -> None:
        """Drop every program lowered from ``schedule`` (and the times taken of them): a plan
        that lost the ranking does not keep its programs in memory."""
        struct = self.structure(schedule)
        for key in [k for k in self._programs if k[0] == struct or k == ("ports", struct)]:
            self._release(self._programs.pop(key))
        self._same = {k: v for k, v in self._same.items() if k[1] != struct}
        self._structures.pop(id(schedule), None)

    def _release(self, old: Program | str | Any) -> None:
        """Forget a dropped program's steps, its times and the runtime model's analysis of it
        (:mod:`tacos.runtime.msccl_exec` keeps the last few: at 512 ranks each holds
        gigabytes)."""
        if not isinstance(old, Program):
            return
        self._steps -= _program_steps(old)
        gone = id(old.gpus)
        self._times = {k: v for k, v in self._times.items() if k[0] != gone}
        self._runs = {k: v for k, v in self._runs.items() if k[0] != gone}
        try:
            from tacos.runtime.msccl_exec import forget_analysis
        except ImportError:  # pragma: no cover - the runtime model ships with tacos
            return
        forget_analysis(old)

    def _drop_oldest(self) -> None:
        """Forget the oldest entry (a program, a failure or a port order) and every time
        taken of a program dropped, and the topologies no time refers to any more."""
        old = self._programs.pop(next(iter(self._programs)))
        if isinstance(old, Program):
            self._release(old)
            used = {k[2] for k in self._times} | {k[2] for k in self._runs}
            self._topologies = {i: t for i, t in self._topologies.items() if i in used}


#: The cache :func:`choose_shape` uses when given none: a plan ranked by its shaped program
#: (``auto``) and then written is lowered and timed once.
SHARED_CACHE = ShapeCache(max_programs=96, max_steps=2_500_000)


class ShapesPruned(TacosError):
    """Every shape of the plans was pruned by a bound no faster than ``incumbent``
    (:func:`choose_shape`): none of them can beat it."""


class _Pruned(float):
    """A pruned shape's marker: compares as an infinite time."""

    def __new__(cls, what: str) -> _Pruned:
        out = super().__new__(cls, float("inf"))
        out.what = what  # type: ignore[attr-defined]
        return out


def default_shape(base: MscclOptions) -> Shape:
    """The shape the fixed lowering (``--shape fixed``) gives a plan with ``base``'s
    options."""
    return Shape(base.instances, base.proto, base.port_order, base.pair_peers)


def choose_shape(schedules: dict[str, Schedule | Any], topology: Topology, nbytes: int, *,
                 base: MscclOptions | None = None, candidates: Sequence[Shape] | None = None,
                 limits: RuntimeLimits | None = None, estimator: Estimator | None = None,
                 cache: ShapeCache | None = None, default_plan: str | None = None,
                 quick: bool = False, top: int | None = None,
                 incumbent: float = float("inf")) -> Choice:
    """The plan of ``schedules`` (label -> schedule, or a program family with a
    ``collective`` and ``lower(shape, base) -> Program``) and the shape of ``candidates`` (default
    :func:`tacos.msccl.shape.shapes`) whose lowered program the ``estimator`` times fastest
    for an ``nbytes`` message; among shapes within :data:`NEAR` (0.5 %) of the fastest and no
    slower than the default, the one with the fewest thread blocks (then the fastest, then the
    plan label).

    The *default* -- ``default_plan`` (default: the first schedule of ``schedules``) lowered
    as the fixed lowering would (:func:`default_shape` of ``base``) -- is always timed, so the
    choice is never slower than it.  With the runtime model as the estimator, shapes whose
    lower bound (:mod:`tacos.msccl.shape_bounds`) is no faster than the best found are not
    timed.  ``quick`` narrows the search (see :func:`_search`): for ranking many plans.
    ``top`` is the largest message the chosen program will serve, where a program whose steps
    the executor cuts into more FIFO calls than a connection holds is rejected (0: no limit;
    None: :func:`tacos.msccl.fifo_calls.widest_size`, the top of a sweep window).
    ``incumbent`` is a time already found elsewhere (another plan's): shapes whose bound is
    no faster are pruned as if a shape that fast had been timed, and the default is not
    timed first; :class:`ShapesPruned` when every shape was pruned so.
    Raises :class:`~tacos.errors.TacosError` when no combination fits."""
    from tacos.nogc import paused_gc

    # lowering and timing allocate much and make no cycles; what the search keeps (its cache's
    # programs) joins the oldest generation unwalked: at 512 ranks the first young collection
    # after the search walked it all (3.4 s of CPU)
    with paused_gc(aged=True):
        return _choose_shape(schedules, topology, nbytes, base=base, candidates=candidates,
                             limits=limits, estimator=estimator, cache=cache,
                             default_plan=default_plan, quick=quick, top=top,
                             incumbent=incumbent)


def _choose_shape(schedules: dict[str, Schedule | Any], topology: Topology, nbytes: int, *,
                  base: MscclOptions | None, candidates: Sequence[Shape] | None,
                  limits: RuntimeLimits | None, estimator: Estimator | None,
                  cache: ShapeCache | None, default_plan: str | None, quick: bool,
                  top: int | None, incumbent: float = float("inf")) -> Choice:
    if not schedules:
        raise TacosError("no candidate plan to shape")
    base = base or MscclOptions()
    cands = list(candidates) if candidates is not None else shapes()
    lim = limits or limits_for(topology, base.max_steps_per_tb)
    cache = cache or SHARED_CACHE
    group = next(iter(schedules.values())).collective.group
    model = estimator is None
    if estimator is None:
        estimator = runtime_estimator(group)
    considered: list[Candidate] = []
    max_channels = min(base.max_channels, lim.max_channels)
    busiest: dict[str, PairLanes | None] = {
        k: busiest_pair_once(v, base.max_steps_per_tb) if isinstance(v, Schedule) else None
        for k, v in schedules.items()}
    refused = {k: why for k, v in schedules.items()
               if (why := refusal(v, lim) or chunks_refusal(v, nbytes // ELEMENT_BYTES)
                   or channels_refusal(v, 1, base.max_steps_per_tb, max_channels,
                                       inplace=base.inplace, busiest=busiest[k]))}
    busiest_split: dict[str, PairLanes | None] = {}  # from two instances on
    for k, why in refused.items():  # no shape of it loads: none is lowered
        considered.extend(Candidate(k, sh, None, [why]) for sh in cands)
    full, schedules = schedules, {k: v for k, v in schedules.items() if k not in refused}
    timed: list[tuple] = []
    seen: dict[tuple[str, Shape], float | None] = {}
    best = [incumbent]
    loads: dict[str, dict[int, float] | str] = {}
    receipts: dict[str, Receipts | None] = {}

    def bounds(plan: str, program: Program, proto: str) -> tuple[float, float, float]:
        """The plan's port bound in ``proto``, the one-instance program's CTA bound and its
        synchronization bound (the port and sync bounds are the same at every instance
        count), all with the base latency (0 when unknown)."""
        from tacos.msccl.shape_bounds import link_bytes, program_bounds

        if plan not in loads:
            try:
                loads[plan] = link_bytes(program, topology, nbytes, group)
            except TacosError as exc:
                loads[plan] = str(exc.args[0] if exc.args else exc)
        got = loads[plan]
        if isinstance(got, str):
            return 0.0, 0.0, 0.0
        b = program_bounds(program, topology, nbytes, proto, ranks=group, loads=got)
        return b.base + b.link, b.base + b.cta, b.base + b.sync

    def evaluate(plan: str, shape: Shape, *, force: bool = False) -> float | None:
        """The shape's time (None: rejected or pruned, with the reason in ``considered``)."""
        if (plan, shape) in seen:
            return seen[(plan, shape)]
        seen[(plan, shape)] = None
        schedule = schedules[plan]
        got_loads = loads.get(plan)
        if model and not force and isinstance(got_loads, dict):
            from tacos.msccl.shape_bounds import port_bound

            # the plan's port bound holds for every shape of it: no lowering needed to prune
            if port_bound(got_loads, topology, shape.proto) >= best[0]:
                considered.append(Candidate(plan, shape, None, [
                    "pruned: its port bound is no faster than the best shape found"]))
                return PORT_BOUND
        same = None if force else cache.same_as(schedule, shape, base)
        if same is not None:  # lowers to the program of a simpler shape: not timed twice
            considered.append(Candidate(plan, shape, None, [f"same program as {same}"]))
            return None
        one = cache.program(schedule, replace(shape, instances=1), base)
        if not isinstance(one, str):  # instances multiply channels and tbs: skip early
            # a family builds each instance count anew (its reducers per block change), so
            # only a lowered schedule's count is refused from its one-instance program
            over = _over_limits(one, shape.instances, lim) if isinstance(schedule, Schedule) else ""
            if over:
                considered.append(Candidate(plan, shape, None, [over]))
                return None
            if model and not force:
                port, cta, sync = bounds(plan, one, shape.proto)
                if max(port, sync) >= best[0]:
                    what = "port" if port >= sync else "synchronization"
                    considered.append(Candidate(plan, shape, None, [
                        f"pruned: its {what} bound is no faster than the best shape found"]))
                    return PORT_BOUND
                if max(port, cta / shape.instances) >= best[0]:
                    considered.append(Candidate(plan, shape, None, [
                        "pruned: its CTA bound is no faster than the best shape found"]))
                    return CTA_BOUND
        if shape.instances > 1 and isinstance(schedule, Schedule):
            # chunks kept by the receiver cannot share a step from two instances on
            if plan not in receipts:
                receipts[plan] = kept_receipts(schedule, inplace=base.inplace)
            why = instances_refusal(schedule, shape.instances, lim, inplace=base.inplace,
                                    receipts=receipts[plan])
            if why:  # as a lowering over the limits would be rejected, without building it
                considered.append(Candidate(plan, shape, None, [why]))
                return None
        split = split_applies(schedule, shape.instances, inplace=base.inplace)
        if split and plan not in busiest_split:
            busiest_split[plan] = busiest_pair(schedule, base.max_steps_per_tb, kept_runs=True)
        why = channels_refusal(schedule, shape.instances, base.max_steps_per_tb,
                               max_channels, inplace=base.inplace,
                               busiest=busiest_split[plan] if split else busiest[plan])
        if why:  # the lowering would fail at "N channels > max_channels": not built
            considered.append(Candidate(plan, shape, None, [why]))
            return None
        if isinstance(one, str) and shape.instances > 1 and isinstance(schedule, Schedule):
            # the one-instance lowering failed: its error may fix this one's (the proof is in
            # tacos.msccl.lower_instances), which is then not lowered
            why = failure_at_instances(schedule, Shape(1, "Simple", shape.port_order,
                                                       shape.paired).options(
                replace(base, fit_fifo=False)), shape.instances)
            if why:
                considered.append(Candidate(plan, shape, None, [why]))
                return None
        got = cache.program(schedule, shape, base)
        if isinstance(got, str):
            considered.append(Candidate(plan, shape, None, [got]))
            return None
        problems = shape_problems(got, lim)
        total = nbytes // ELEMENT_BYTES  # nbytes is the whole message (§1.1)
        if total % got.nchunksperloop:
            problems.append(f"nchunksperloop {got.nchunksperloop} does not divide "
                            f"{total} elements")
        if problems:
            considered.append(Candidate(plan, shape, None, problems))
            return None
        program = _with_proto(got, shape.proto)
        judged = (widest_size(program, nbytes) if top is None
                  else None if top == 0 else max(top, nbytes))
        dead = split_deadlocks(program, judged)
        if dead:  # the runtime would hang on it (tacosc verify rejects it the same way)
            considered.append(Candidate(plan, shape, None, [
                f"deadlocks when its steps are cut into primitive calls: {dead[0].message}"]))
            return None
        if model and not force and plan in loads and not isinstance(loads[plan], str):
            from tacos.msccl.shape_bounds import program_bounds

            lower_bound = program_bounds(program, topology, nbytes, shape.proto, ranks=group,
                                         loads=loads[plan]).time  # type: ignore[arg-type]
            if lower_bound >= best[0]:
                considered.append(Candidate(plan, shape, None, [
                    "pruned: its CTA bound is no faster than the best shape found"]))
                return CTA_BOUND
        try:
            est = cache.runtime(program, topology, group, nbytes) if model else None
            t = float(est.time) if model else estimator(program, topology, nbytes)
        except TacosError as exc:  # e.g. a connection the topology cannot route
            considered.append(Candidate(plan, shape, None, [str(exc.args[0] if exc.args
                                                                else exc)]))
            return None
        considered.append(Candidate(plan, shape, t))
        timed.append((t, plan, shape, program, est))
        seen[(plan, shape)] = t
        best[0] = min(best[0], t)
        return t

    def _start_count(plan: str) -> int:
        """Where the plan's one-instance CTA bound meets its port bound (in Simple): the
        instance count below which its thread blocks, not its ports, limit it."""
        one = cache.program(schedules[plan], Shape(1, "Simple", False, True), base)
        if not model or isinstance(one, str):
            return 1
        port, cta, _ = bounds(plan, one, "Simple")
        if port <= 0:
            return 1
        return max(1, 2 ** round(math.log2(max(1.0, cta / port))))

    first = default_plan if default_plan in full else next(
        (k for k, v in full.items() if isinstance(v, Schedule)), None)
    if first in refused or incumbent < float("inf"):  # no floor: it cannot load, or the
        first = None                                   # plans are ranked against another
    fixed = default_shape(base)
    floor = evaluate(first, fixed, force=True) if first is not None else None
    for plan in _by_bound(schedules, first, topology, nbytes, base, cache, group, model):
        steps = _program_steps(cache.program(schedules[plan], Shape(1, "Simple", False, True),
                                             base))
        big = steps > LARGE_PROGRAM_STEPS and not quick
        _search(plan, cands, evaluate, _start_count(plan), quick=quick or big)
        if big:  # say which shapes the narrow search left out, and why
            considered.extend(Candidate(plan, sh, None, [
                f"skipped: its one-instance program has {steps} steps > "
                f"{LARGE_PROGRAM_STEPS}, so only the quick search ran"])
                for sh in cands if (plan, sh) not in seen)
    schedules = full
    if not timed:
        first_reason = next((c for c in considered
                             if not c.problems[0].startswith(("same program", "pruned"))), None)
        if first_reason is None:
            raise ShapesPruned(f"every shape's bound is no faster than {incumbent:.6g} s")
        raise TacosError(f"no plan fits the MSCCL limits for {nbytes} bytes "
                         f"({first_reason.plan} {first_reason.shape.label()}: "
                         f"{first_reason.problems[0]})",
                         hint="raise --max-steps, or give fewer chunks per NPU")
    fastest = min(x[0] for x in timed)
    cap = fastest * (1 + NEAR)
    if floor is not None:
        cap = min(cap, floor)  # never slower than the fixed lowering
    near = [x for x in timed if x[0] <= cap]
    t, plan, shape, program, estimate = min(near, key=lambda x: (
        max(len(g.tbs) for g in x[3].gpus), x[0], x[1], x[2].proto, x[2].port_order,
        not x[2].paired))
    # what limits the chosen program in the runtime model, for the report (timed above)
    bound = str(estimate.bound) if estimate is not None else ""
    return Choice(plan, shape, program, schedules[plan], t, nbytes, considered, bound,
                  default=floor, estimate=estimate)


def _by_bound(schedules: dict[str, Any], first: str | None, topology: Topology, nbytes: int,
              base: MscclOptions, cache: ShapeCache, group: Sequence[int], model: bool
              ) -> list[str]:
    """The plans in the order to search them: the default first, then (with the runtime
    model) by the port bound of their one-instance program in Simple, so that a good shape is
    found early and prunes the rest; else by label."""
    rest = sorted(k for k in schedules if k != first)
    if model:
        from tacos.msccl.shape_bounds import link_bytes, program_bounds

        def key(label: str) -> tuple[float, str]:
            one = cache.program(schedules[label], Shape(1, "Simple", False, True), base)
            if isinstance(one, str):
                return float("inf"), label
            try:
                loads = link_bytes(one, topology, nbytes, group)
            except TacosError:
                return float("inf"), label
            return program_bounds(one, topology, nbytes, "Simple", ranks=group,
                                  loads=loads).link, label

        rest.sort(key=key)
    return ([first] if first is not None else []) + rest


def _search(plan: str, cands: Sequence[Shape],
            evaluate: Callable[[str, Shape], float | None], hint: int = 1, *,
            quick: bool = False) -> None:
    """Time the shapes of ``cands`` worth timing for ``plan``.

    The time is taken as unimodal in the instance count: for every protocol and pairing
    (Simple first, paired peers first), the variant without port order starts at ``hint``
    (where the plan's CTA bound meets its port bound) and moves up, then down, while the time
    improves by more than :data:`NEAR`; the
    port-order variants of the combinations within 10 % of the best do the same from that
    combination's best count.  ``quick``: the second pairing of a protocol is timed once, at
    the count the first reached, and climbs only when faster there; no port-order variant."""
    groups: dict[tuple[str, bool, bool], list[Shape]] = {}
    for sh in cands:
        groups.setdefault((sh.proto, sh.port_order, sh.paired), []).append(sh)
    for g in groups.values():
        g.sort(key=lambda sh: sh.instances)
    plain = [k for k in groups if not k[1]] or list(groups)
    plain.sort(key=lambda k: (_PROTO_ORDER.get(k[0], 9), not k[2]))
    start: dict[tuple[str, bool], tuple[float, int]] = {}

    def nearest(group: list[Shape], at: int) -> int:
        return min(range(len(group)), key=lambda j: (abs(group[j].instances - at),
                                                     group[j].instances))

    for key in plain:
        at = hint
        if quick and (key[0], not key[2]) in start:  # one pairing per protocol: the faster
            other = start[(key[0], not key[2])]      # at the count the other one reached
            here = groups[key][nearest(groups[key], other[1])]
            t = evaluate(plan, here)
            if t is not None and t < other[0]:
                del start[(key[0], not key[2])]
            else:
                continue
        got = _climb(plan, groups[key], nearest(groups[key], at), evaluate, both=True)
        if got is not None:
            start[(key[0], key[2])] = got
    if not start or quick:
        return
    fastest = min(t for t, _ in start.values())
    for key, group in groups.items():
        at_key = (key[0], key[2])
        if key in plain or at_key not in start or start[at_key][0] > 1.1 * fastest:
            continue
        _climb(plan, group, nearest(group, start[at_key][1]), evaluate, both=True)


#: what :func:`choose_shape`'s evaluation returns for a shape pruned by its port bound (no
#: instance count of that protocol can win) or by its CTA bound (more instances might)
PORT_BOUND = _Pruned("port")
CTA_BOUND = _Pruned("cta")

#: the order the protocols are climbed in: Simple's full rate sets a bound early at large
#: sizes, LL's latency at small ones; either way the others are pruned against it
_PROTO_ORDER = {"Simple": 0, "LL": 1, "LL128": 2}


def _climb(plan: str, group: list[Shape], i: int,
           evaluate: Callable[[str, Shape], float | None], *, both: bool = False
           ) -> tuple[float, int] | None:
    """From ``group[i]`` (shapes by instance count), time the counts upwards (and downwards
    with ``both``) until one is no faster or two in a row gain less than :data:`NEAR`;
    ``(time, instances)`` of the best."""
    best: tuple[float, int] | None = None
    for step in ((1, -1) if both else (1,)):
        j = i if step == 1 else i - 1
        misses = 0
        while 0 <= j < len(group) and misses < 2:
            t = evaluate(plan, group[j])
            if t is PORT_BOUND:
                break  # no count can beat the best found: the ports bound them all
            if t is CTA_BOUND:  # more instances lower this bound: not a miss
                j += step
                continue
            if t is not None and (best is None or t < best[0] * (1 - NEAR)):
                best, misses = (t, group[j].instances), 0
            elif t is not None and t >= best[0] * (1 - 1e-9):  # type: ignore[index]
                if step == -1 and t <= best[0] * (1 + 1e-9):  # type: ignore[index]
                    best = (best[0], group[j].instances)  # as fast with fewer instances
                break  # no gain at all: more instances do not relieve what bounds it
            else:  # rejected, pruned, or a gain within NEAR (the fewer tbs win it anyway)
                misses += 1
            j += step
    return best


def _lowering_base(base: MscclOptions) -> MscclOptions:
    """The options a lowered program depends on besides its shape (every field of ``base``
    but those the shape sets): part of every cache key."""
    return replace(base, proto="Simple", instances=1, port_order=False, pair_peers=False,
                   fit_fifo=False)


def _program_steps(program: Program | str) -> int:
    """The steps of a lowered program (0 for a failure's message)."""
    if isinstance(program, str):
        return 0
    return sum(len(tb.steps) for g in program.gpus for tb in g.tbs)


def _over_limits(one: Program, instances: int, lim: RuntimeLimits) -> str:
    """Why ``instances`` copies of the one-instance program ``one`` cannot fit (or '')."""
    comm = max((sum(tb.send >= 0 or tb.recv >= 0 for tb in g.tbs) for g in one.gpus), default=0)
    if one.nchannels * instances > lim.max_channels:
        return f"{one.nchannels * instances} channels > {lim.max_channels}"
    if comm * instances > lim.sms:
        return f"{comm * instances} thread blocks per GPU > {lim.sms} SMs"
    # every instance repeats the rank's thread blocks and their steps
    head = 1 + len(one.gpus)
    most = max((len(g.tbs) + sum(len(tb.steps) for tb in g.tbs) for g in one.gpus), default=0)
    if head + most * instances > lim.max_nodes:
        return (f"{head + most * instances} parsed nodes per rank > {lim.max_nodes} "
                f"(the runtime parser's limit)")
    return ""


def _with_proto(program: Program, proto: str) -> Program:
    return program if program.proto == proto else replace(program, proto=proto)
