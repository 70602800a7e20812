"""Lowering: :class:`~tacos.schedule.Schedule` -> MSCCL :class:`~tacos.msccl.program.Program`.

The pipeline (each stage in its own module):

1. :mod:`~tacos.msccl.lower_layout` checks the collective and computes the per-rank input,
   output and scratch layout and the chunk geometry (``nchunksperloop``, ``i_chunks`` ...).
2. :mod:`~tacos.msccl.lower_flow` puts every send, receive and local copy into one global order,
   tracks each chunk's versions on each rank, places them in buffers (output slot when the rank
   needs the chunk, scratch when it only passes through) and splits transfers into contiguous
   runs.
3. :mod:`~tacos.msccl.lower_channels` assigns channels and thread blocks (one tb per channel,
   direction and peer) and decides which receives fuse with the send they feed.
4. :mod:`~tacos.msccl.lower_steps` builds the steps with their cross-tb dependencies and nops.

If a tb would exceed the step limit, the FIFO lanes it owns are cut and the later part moves to
another channel; if a fused step could deadlock (see :mod:`~tacos.msccl.lower_steps`) the fusion
is dropped.  Both repeat until the program fits.  See ``docs/msccl.md``.

A plan whose transfers carry one chunk each (or an all-reduce whose transfers carry no two
chunks of adjacent slots), and whose channel floor is near the limit, first
runs the rounds before the first step build on runs without buffer locations
(:mod:`tacos.msccl.lower_skeleton`), so that their "N channels" error comes before the flow
is placed.  A failure is remembered with what its rounds saw, from which
:mod:`tacos.msccl.lower_instances` derives the error of the same plan at more instances.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, field, replace
from typing import Any

from tacos.errors import TacosError
from tacos.model.schedule import Schedule
from tacos.msccl.lower_channels import TbPlan, assign_channels, plan_tbs
from tacos.msccl.lower_flow import Flow, kept_flow, shared_flow
from tacos.msccl.lower_layout import Layout, build_layout
from tacos.msccl.lower_skeleton import (
    likely_over,
    one_chunk_transfers,
    skeleton_applies,
    skeleton_flow,
)
from tacos.msccl.lower_steps import build_steps, finish_program
from tacos.msccl.program import DEFAULT_MAX_STEPS, MAX_CHANNELS, MAX_STR_LEN, PROTOS, Program
from tacos.msccl.rounds import first_round
from tacos.nogc import paused_gc
from tacos.progress import Reporter, as_reporter

REDOPS = ("sum", "prod", "min", "max")
SIZE_FIELDS = ("min_bytes", "max_bytes")
MAX_ROUNDS = 200


#: the collectives frameworks call in place (PyTorch's all_reduce, all_gather_into_tensor and
#: reduce_scatter_tensor on one buffer): their plans are written in place unless asked otherwise
IN_PLACE_KINDS = frozenset({"allreduce", "allgather", "reducescatter"})


@dataclass(frozen=True)
class MscclOptions:
    """How to lower and label an MSCCL program.

    ``inplace`` chooses the buffer model the program is written for (input and output aliased);
    ``outofplace`` defaults to ``not inplace`` and must differ from it (one file cannot be right
    for both aliasings in general: emit two files).  ``min_bytes``/``max_bytes`` are the
    runtime's selection window in total bytes (``max_bytes=0``: unlimited).  ``instances``
    splits every chunk into that many pieces that travel on separate channels and tbs.
    ``max_steps_per_tb`` is the runtime's ``MSCCL_MAX_NUM_STEPS`` (steps per tb, nops included);
    ``max_channels`` caps ``nchannels``.  ``redop`` is written as a label only (the runtime
    takes the operator from the API call).  ``port_order`` makes the program keep the order in
    which the schedule sends one rank's transfers to different peers through a shared port
    (dependencies between their thread blocks, :mod:`tacos.msccl.lower_ports`).
    ``pair_peers`` also pairs the send and receive peers the fusion matching leaves single into
    shared tbs (fewer, evenly loaded tbs; :func:`tacos.msccl.lower_channels.plan_tbs`).
    ``fit_fifo`` caps each step's ``cnt`` so that the primitive calls the executor cuts it into
    fit a connection's FIFO slots at the top of the window (``max_bytes``; 0: at any size), so
    the program cannot hang however large the message (:mod:`tacos.msccl.fifo_calls`); the
    shape chooser, which rejects such programs itself, turns it off to keep steps merged.
    """

    name: str = ""
    proto: str = "Simple"
    inplace: bool = False
    outofplace: bool | None = None
    min_bytes: int = 0
    max_bytes: int = 0
    instances: int = 1
    max_steps_per_tb: int = DEFAULT_MAX_STEPS
    max_channels: int = MAX_CHANNELS
    redop: str = "sum"
    port_order: bool = False
    pair_peers: bool = False
    fit_fifo: bool = True

    @property
    def out_of_place(self) -> bool:
        """The effective ``outofplace`` flag."""
        return (not self.inplace) if self.outofplace is None else bool(self.outofplace)

    def validate(self) -> None:
        """Raise :class:`~tacos.errors.TacosError` for an impossible combination."""
        if self.proto not in PROTOS:
            raise TacosError(f"unknown MSCCL protocol {self.proto!r}",
                             hint=f"use one of {', '.join(PROTOS)}")
        if bool(self.inplace) == self.out_of_place:
            raise TacosError("an MSCCL program is lowered either in-place or out-of-place, "
                             f"not {'both' if self.inplace else 'neither'}",
                             hint="emit one file per mode")
        if self.min_bytes < 0 or self.max_bytes < 0:
            raise TacosError("min_bytes and max_bytes must be >= 0 (max_bytes=0: unlimited)")
        if self.max_bytes and self.max_bytes < self.min_bytes:
            raise TacosError(f"max_bytes={self.max_bytes} is below min_bytes={self.min_bytes}")
        if not 1 <= self.instances <= MAX_CHANNELS:  # each instance takes a channel
            raise TacosError(f"instances must be in 1..{MAX_CHANNELS}, not {self.instances}")
        if not 2 <= self.max_steps_per_tb <= 1024:
            raise TacosError(f"max_steps_per_tb must be in 2..1024, not "
                             f"{self.max_steps_per_tb}")
        if not 1 <= self.max_channels <= MAX_CHANNELS:
            raise TacosError(f"max_channels must be in 1..{MAX_CHANNELS}, "
                             f"not {self.max_channels}")
        if self.redop not in REDOPS:
            raise TacosError(f"unknown reduction operator {self.redop!r}",
                             hint=f"use one of {', '.join(REDOPS)}")
        check_name(self.name)


def check_name(name: str) -> None:
    """The runtime does not decode XML entities: names must be plain printable ASCII."""
    bad = [ch for ch in name if not (32 <= ord(ch) < 127) or ch in '"<>&']
    if bad or len(name) > MAX_STR_LEN:
        raise TacosError(f"MSCCL algorithm name {name!r} is not usable",
                         hint=f"use at most {MAX_STR_LEN} printable ASCII characters without "
                              "quotes, '<', '>' or '&'")


def lower(schedule: Schedule, *, options: MscclOptions | None = None,
          progress: Any = None, check: Any = None) -> Program:
    """Lower a (verified) schedule to an MSCCL program.

    The schedule must be one the runtime can run: a standard allgather, reducescatter,
    allreduce, alltoall, broadcast or reduce whose transfers only use ranks of the collective's
    group.  Raises :class:`~tacos.errors.TacosError` otherwise, or when the limits in
    ``options`` cannot be met.  Never mutates its input.  ``progress`` (a
    :class:`tacos.progress.Reporter`) is told each stage as a phase.  ``check(flow, chan,
    plan, tbs)`` is called once the runs, channels, thread blocks and steps are final, before
    the program is built; it may raise to stop the lowering (a program already kept is
    returned without it).
    """
    opts = options or MscclOptions()
    opts.validate()
    if any(t.group is not None for t in schedule.transfers):
        raise TacosError(
            "this plan uses in-switch multicast/reduce (transfer groups: NVLS or SHARP), which "
            "MSCCL XML cannot express (its steps are two-sided sends between ranks); tacos's "
            "MSCCL++ writer lowers through the same program and does not write NVLS switch "
            "channels yet",
            hint="write the JSON schedule (-o plan.json), or synthesize a plan without "
                 "in-switch operations for MSCCL (a solver other than nvls/collnet, or a "
                 "topology whose switches declare no capabilities)")
    schedule = first_round(schedule)  # a pipelined schedule: the runtime loops over slices
    with paused_gc():
        if not isinstance(schedule.transfers, tuple):  # columns: the lowering indexes objects
            schedule = Schedule(schedule.topology, schedule.collective,
                                tuple(schedule.transfers), schedule.meta)
        return _lower(schedule, opts, as_reporter(progress), check)


def _fifo_count(opts: MscclOptions, nchunksperloop: int) -> int:
    """The largest ``cnt`` whose primitive calls fit a connection's FIFO slots at the top of
    ``opts``'s window (``MAX_COUNT`` when ``opts.fit_fifo`` is off)."""
    from tacos.msccl.fifo_calls import NCCL_STEPS, slots_per_call, split_for
    from tacos.msccl.program import MAX_COUNT

    if not opts.fit_fifo:
        return MAX_COUNT
    per_call = split_for(opts.proto, nchunksperloop, opts.max_bytes or None).max_count
    return max(1, min(MAX_COUNT, per_call * (NCCL_STEPS // slots_per_call(opts.proto))))


#: Programs of the last few lowerings, by schedule identity and what shapes their body (the
#: options but the header's name, protocol, window and operator, and the largest run the
#: FIFO fit allows): a search times one body under every protocol, and writes the file with
#: the header it chose.  A lowering with ``pair_peers`` in which pairing the single peers
#: changed nothing (no rank and channel had single peers in both directions, in any round) is
#: also the body without it, and the other way round.  Programs are immutable; the most
#: recent are kept while their steps total at most :data:`_KEPT_MAX_STEPS`.
_KEPT: dict[tuple, tuple[Schedule, Program]] = {}
_KEPT_MAX_STEPS = 400_000


def _body_key(opts: MscclOptions, max_count: int) -> tuple:
    """What a lowering's program depends on besides the schedule and the header fields."""
    return (replace(opts, name="", proto="Simple", min_bytes=0, max_bytes=0, redop="sum",
                    fit_fifo=False, outofplace=None), max_count)


def _kept(schedule: Schedule, key: tuple) -> Program | None:
    got = _KEPT.get((id(schedule), key))
    return got[1] if got is not None and got[0] is schedule else None


def _keep(schedule: Schedule, key: tuple, program: Program, pairing_matters: bool) -> None:
    if program.num_steps > _KEPT_MAX_STEPS:
        return
    body, max_count = key
    keys = [key] if pairing_matters else [(replace(body, pair_peers=p), max_count)
                                          for p in (False, True)]
    for k in keys:
        _KEPT.pop((id(schedule), k), None)
        _KEPT[(id(schedule), k)] = (schedule, program)
    held: dict[int, int] = {}  # steps per distinct program kept
    for _, p in _KEPT.values():
        held[id(p)] = p.num_steps
    total = sum(held.values())
    while total > _KEPT_MAX_STEPS:
        _, p = _KEPT.pop(next(iter(_KEPT)))
        if not any(q is p for _, q in _KEPT.values()):
            total -= held[id(p)]


#: Failures of the last few lowerings, by schedule identity and body key (as :data:`_KEPT`):
#: ``(weak reference to the schedule, message, hint, what its rounds saw)``.  A lowering
#: that failed while pairing the single peers changed nothing in any round it ran fails the
#: same way with the other pairing (every round takes the same path), so the shape search's
#: second variant of a plan that cannot fit (e.g. "N channels > 32") is refused at once
#: instead of lowered again (:mod:`tacos.msccl.lower_instances` derives more from it).
_FAILED: dict[tuple, tuple[Any, str, str | None, _Rounds]] = {}
_FAILED_MAX = 16


def _failed(schedule: Schedule, key: tuple) -> tuple[TacosError, _Rounds] | None:
    """The remembered failure of lowering ``schedule`` (this object) with body ``key``."""
    got = _FAILED.get((id(schedule), key))
    if got is None or got[0]() is not schedule:
        return None
    return TacosError(got[1], hint=got[2]), got[3]


def _remember_failure(schedule: Schedule, key: tuple, exc: TacosError,
                      seen: _Rounds) -> None:
    body, max_count = key
    keys = [key] if seen.pairing_matters else [(replace(body, pair_peers=p), max_count)
                                               for p in (False, True)]
    ref = weakref.ref(schedule)
    for k in keys:
        _FAILED.pop((id(schedule), k), None)
        _FAILED[(id(schedule), k)] = (ref, exc.message, exc.hint, seen)
    while len(_FAILED) > _FAILED_MAX:
        _FAILED.pop(next(iter(_FAILED)))


def _lower(schedule: Schedule, opts: MscclOptions, progress: Reporter,
           check: Any = None) -> Program:
    layout = build_layout(schedule.collective, inplace=opts.inplace, instances=opts.instances)
    max_count = _fifo_count(opts, layout.nchunksperloop)
    key = _body_key(opts, max_count)
    program = _kept(schedule, key)
    if program is None:
        known = _failed(schedule, key)
        if known is not None:
            raise known[0]
        seen = _Rounds()
        try:
            program, pairing_matters = _lower_body(schedule, layout, opts, max_count,
                                                   progress, check, seen)
        except TacosError as exc:
            if type(exc) is TacosError:  # a subclass is raised anew each time
                _remember_failure(schedule, key, exc, seen)
            raise
        _keep(schedule, key, program, pairing_matters)
    name = opts.name or f"tacos_{layout.coll}_{layout.ngpus}gpus"
    combining = layout.coll in ("allreduce", "reducescatter", "reduce")
    return replace(program, name=name, proto=opts.proto, inplace=int(opts.inplace),
                   outofplace=int(opts.out_of_place), minBytes=int(opts.min_bytes),
                   maxBytes=int(opts.max_bytes), redop=opts.redop if combining else None)


def remembered_failure(schedule: Schedule, options: MscclOptions
                       ) -> tuple[TacosError, _Rounds] | None:
    """The error the last lowering of ``schedule`` (the same object, not pipelined) with
    ``options`` raised and what its rounds saw, if it failed and is still remembered."""
    if (int((schedule.meta.get("pipeline") or {}).get("slices", 1)) > 1
            or not isinstance(schedule.transfers, tuple)):
        return None  # lowered as another object (its first round, or its transfers' tuple)
    layout = build_layout(schedule.collective, inplace=options.inplace,
                          instances=options.instances)
    return _failed(schedule, _body_key(options, _fifo_count(options, layout.nchunksperloop)))


@dataclass
class _Rounds:
    """What the rounds of one lowering have seen so far (kept when the lowering fails)."""

    #: some round's plan had single peers in both directions on a rank and channel
    pairing_matters: bool = False
    #: the distinct channel keys of each round numbered so far (the last one is over the
    #: limit when the lowering failed there)
    channels: list[int] = field(default_factory=list)
    #: some round built steps (what fails after that may depend on them)
    built: bool = False
    #: every run of the flow carries one chunk, though runs could hold two (the largest run
    #: allowed is 2 chunks or more) or every transfer carries one: no two chunks a transfer
    #: carries were contiguous
    single_runs: bool = False


def _lower_body(schedule: Schedule, layout: Layout, opts: MscclOptions, max_count: int,
                progress: Reporter, check: Any = None,
                seen: _Rounds | None = None) -> tuple[Program, bool]:
    """The program without its header, and whether pairing single peers mattered (also
    recorded in ``seen`` round by round, for a lowering that fails)."""
    seen = seen if seen is not None else _Rounds()
    hints = schedule.meta.get("channel_of_transfer")
    if not isinstance(hints, list) or len(hints) != len(schedule.transfers):
        hints = None
    one_chunk = one_chunk_transfers(schedule)
    if (kept_flow(schedule, layout, max_count) is None and skeleton_applies(schedule, layout)
            and likely_over(schedule, layout, opts.max_steps_per_tb, opts.max_channels)):
        # the rounds before the first build need no locations: their channel error, if any,
        # comes without placing the flow (tacos.msccl.lower_skeleton: the proof)
        with progress.phase("channels of the first rounds (runs without locations)"):
            skeleton = skeleton_flow(schedule, layout)
            if skeleton is not None:  # every run is one chunk
                seen.single_runs = max_count >= 2 or one_chunk
                _rounds_before_build(skeleton, opts, hints, seen)
                del skeleton
        seen.channels.clear()  # they fit: the full lowering runs them again
        seen.pairing_matters = False
    with progress.phase(f"ordering {len(schedule.transfers)} transfers"):
        flow = shared_flow(schedule, layout, max_count=max_count)
    seen.single_runs = (max_count >= 2 or one_chunk) and len(flow.runs) == (
        layout.instances * sum(len(t.chunks) for t in schedule.transfers))
    ports = _port_slots(schedule, flow) if opts.port_order else None
    cuts: dict[tuple[int, int, int, int], list[int]] = {}
    forbidden: set[tuple[int, int]] = set()
    plan = built = None
    for round_ in range(MAX_ROUNDS):
        plan = built = None  # free the last round's plan before building the next one
        with progress.phase(f"channels and thread blocks (round {round_ + 1})"):
            chan, plan, long = _tbs_round(flow, cuts, forbidden, opts, hints, seen)
        if _cut(flow, long, cuts, opts.max_steps_per_tb):
            continue  # cut lanes that certainly overflow before building any step
        seen.built = True
        with progress.phase(f"steps and dependencies (round {round_ + 1})"):
            built = build_steps(flow, chan, plan, max_steps=opts.max_steps_per_tb, ports=ports)
        if built.unsafe:
            forbidden |= built.unsafe
            continue
        if built.oversize:
            if not _cut(flow, built.oversize, cuts, opts.max_steps_per_tb):
                rank = built.oversize[0][0]
                raise TacosError(f"rank {rank}: a thread block needs {built.longest} steps, "
                                 f"more than the limit {opts.max_steps_per_tb}, and cannot be "
                                 "split further", hint="raise max_steps_per_tb")
            continue
        tbs, nchannels = built.tbs, max([1] + [c + 1 for c in chan])
        assert tbs is not None
        if check is not None:
            check(flow, chan, plan, tbs)
        del flow, plan, built, chan  # only the thread blocks are needed from here on
        with progress.phase("program"):
            return finish_program(layout, tbs, nchannels), seen.pairing_matters
    raise TacosError("could not fit the plan into the MSCCL limits",
                     hint="raise max_steps_per_tb or max_channels")


def _rounds_before_build(flow: Flow, opts: MscclOptions, hints: list[int] | None,
                         seen: _Rounds) -> None:
    """The rounds of :func:`_lower_body` up to its first step build, on ``flow``: numbering
    channels (raising when over the limit) and cutting the lanes of thread blocks too long
    for their events alone; returns when a round cuts nothing (the next would build)."""
    cuts: dict[tuple[int, int, int, int], list[int]] = {}
    for _ in range(MAX_ROUNDS):
        _chan, _plan, long = _tbs_round(flow, cuts, set(), opts, hints, seen)
        del _chan, _plan
        if not _cut(flow, long, cuts, opts.max_steps_per_tb):
            return


def _tbs_round(flow: Flow, cuts: dict[tuple[int, int, int, int], list[int]],
               forbidden: set[tuple[int, int]], opts: MscclOptions, hints: list[int] | None,
               seen: _Rounds) -> tuple[list[int], TbPlan, list]:
    """One round's channels (raising when over the limit), its thread blocks and the units of
    those too long for their events alone (:func:`_long_sequences`), recorded in ``seen``."""
    chan, _n = assign_channels(flow, cuts, opts.max_channels, hints, counts=seen.channels)
    plan = plan_tbs(flow, chan, forbidden, pair=opts.pair_peers)
    seen.pairing_matters = seen.pairing_matters or plan.pairing_matters
    return chan, plan, _long_sequences(plan, opts.max_steps_per_tb)


def _port_slots(schedule: Schedule, flow: Flow) -> dict[int, tuple[int, ...]]:
    """Per run, the pseudo slots of the port lanes its transfer is serialized on."""
    from tacos.msccl.lower_ports import port_order

    order = port_order(schedule)
    pieces = flow.layout.instances
    out = {}
    for r in flow.runs:
        slots = order.slots(r.transfer, r.piece, pieces)
        if slots:
            out[r.id] = slots
    return out


def _long_sequences(plan: TbPlan, max_steps: int) -> list:
    """Thread blocks whose events alone (a fused receive and send count once, nops not at
    all) exceed ``max_steps``, as ``(rank, units)`` like an oversized build reports."""
    out = []
    for (rank, _key), seq in plan.sequence.items():
        if len(seq) <= max_steps:
            continue
        units: list[tuple[tuple[int, ...], int]] = []
        for kind, idx in seq:
            if kind == "send" and idx in plan.absorbed:
                continue
            units.append(((idx, plan.fused[idx]) if idx in plan.fused else (idx,), 1))
        if len(units) > max_steps:
            out.append((rank, units))
    return out


def _cut(flow: Flow, oversize: list, cuts: dict[tuple[int, int, int, int], list[int]],
         max_steps: int) -> bool:
    """Cut the FIFO lanes of every oversized tb into as many even parts as its steps need
    (``ceil(steps / (0.9 * max_steps))``, one build instead of one per halving); False if
    nothing can be cut."""
    runs = flow.runs
    changed = False
    for _rank, tb in oversize:
        units = tb
        total = sum(n for _, n in units)
        parts = max(2, math.ceil(total / max(1.0, 0.9 * max_steps)))
        bounds, cum, j = [], 0, 1
        for k, (_, n) in enumerate(units):
            cum += n
            while j < parts and parts * cum >= j * total:
                bounds.append(k + 1)
                j += 1
        seen: dict[tuple[int, int, int, int], list[int]] = {}
        for ids, _ in units:
            for rid in ids:
                r = runs[rid]
                seen.setdefault(r.conn, []).append(r.conn_index)
        want: dict[tuple[int, int, int, int], set[int]] = {}
        b = 0
        opened: dict[tuple[int, int, int, int], int] = {}
        for k, (ids, _) in enumerate(units):
            while b < len(bounds) and k >= bounds[b]:
                b += 1
                opened.clear()
            if b == 0:
                continue
            for rid in ids:
                r = runs[rid]
                if r.conn not in opened:
                    opened[r.conn] = r.conn_index
                    if r.conn_index > seen[r.conn][0]:
                        want.setdefault(r.conn, set()).add(r.conn_index)
        if not want:  # the parts hold different lanes: halve every lane instead
            want = {conn: {idxs[len(idxs) // 2]} for conn, idxs in seen.items()
                    if len(idxs) > 1}
        for conn, idxs in want.items():
            have = cuts.get(conn, [])
            new = sorted(set(have) | idxs)
            if new != have:
                cuts[conn] = new
                changed = True
    return changed


def msccl_options(**options: object) -> MscclOptions:
    """:class:`MscclOptions` from keyword arguments, checked: an unknown name raises
    :class:`~tacos.errors.TacosError` with the closest field, ``min_bytes``/``max_bytes``
    accept sizes with units (``"1MiB"``), and impossible combinations are refused.

    >>> msccl_options(max_bytes="1MiB", instances=2).max_bytes
    1048576
    """
    import difflib
    from dataclasses import fields

    from tacos.model.units import parse_size

    known = [f.name for f in fields(MscclOptions)]
    for key in options:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            raise TacosError(f"unknown MSCCL option {key!r}",
                             hint=f"did you mean {close[0]!r}?" if close
                             else f"MSCCL options: {', '.join(known)}")
    values = dict(options)
    for key in SIZE_FIELDS:
        if key in values:
            values[key] = parse_size(values[key], key)  # type: ignore[arg-type]
    opts = MscclOptions(**values)  # type: ignore[arg-type]
    opts.validate()
    return opts

