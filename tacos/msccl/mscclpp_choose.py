"""Choose the shape of an MSCCL++ plan with the runtime model: thread blocks per peer and the
chunk split.

A schedule becomes an MSCCL++ plan in one of two ways (:func:`tacos.msccl.mscclpp_writer.
emit_mscclpp_json`): through the MSCCL lowering (memory and port channels), or, when it is made
of in-switch groups, as switch-channel operations (:mod:`tacos.msccl.mscclpp_switch`).  What
the writer does not fix by itself is how many thread blocks carry the bytes:

* **channel plans**: ``instances`` cuts every chunk into ``I`` pieces that travel on their own
  channel and thread block, so each peer connection gets ``I`` thread blocks and the plan
  ``I x`` the chunks.  Each ``I`` of :data:`INSTANCES` is lowered, written, checked against the
  executor's loader rules (64 operations and 16 channels per thread block, the size check at
  the plan's own size) and timed by :func:`tacos.runtime.mscclpp_exec.estimate_mscclpp`, in
  increasing order until one is slower than the best so far (more thread blocks help until the
  ports are saturated, then only add work); the fastest wins, a plan within :data:`NEAR` of it
  with fewer thread blocks wins over it.  Counts that cannot load are skipped without being
  lowered (:func:`_doomed`): a plan with ``k x I`` instances has ``k x`` the chunks, channels
  and thread blocks of one with ``I``, so when ``I``'s chunks do not cut the size (predicted
  from the layout before lowering) or its lowering runs out of channels or depended-on thread
  blocks, every multiple of ``I`` fails the same way;
* **switch plans**: the thread blocks per rank (:func:`tacos.msccl.mscclpp_switch.
  best_switch_plan`).

:class:`MscclppChoice` keeps every candidate with its time or why it was rejected, for
``tacosc --report``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from tacos.errors import TacosError
from tacos.model.schedule import Schedule

__all__ = ["INSTANCES", "NEAR", "MscclppChoice", "choose_mscclpp"]

#: Thread blocks per peer connection tried for channel plans.
INSTANCES = (1, 2, 4, 8)
#: A candidate this close to the fastest (fraction) with fewer thread blocks is preferred.
NEAR = 0.005


@dataclass
class MscclppChoice:
    """The plan text written and why: ``kind`` (``'switch'`` or ``'channels'``), the knob
    chosen (``instances`` or thread blocks per rank), the model's time of every candidate
    (seconds) or the reason it was rejected."""

    text: str
    kind: str
    knob: str
    value: int
    time: float
    tried: dict[int, float | str] = field(default_factory=dict)
    chunks: int = 0
    #: the runtime model's estimate of the plan chosen, at ``nbytes`` on ``topology`` (channel
    #: plans; None for switch plans), so that the caller need not read and time it again
    estimate: Any = field(default=None, repr=False, compare=False)
    nbytes: int = 0
    topology: Any = field(default=None, repr=False, compare=False)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready facts (``tacosc --json``)."""
        return {"channels": self.kind, self.knob.replace(" ", "_"): self.value,
                "chunks": self.chunks, "time_us": round(self.time * 1e6, 3),
                "tried": {str(k): round(v * 1e6, 3) if isinstance(v, float) else v
                          for k, v in sorted(self.tried.items())}}

    def lines(self) -> list[str]:
        """Report lines (``tacosc --report``)."""
        what = "switch channels (NVLS multimem)" if self.kind == "switch" else \
            "memory/port channels"
        out = [f"mscclpp       {what}, {self.knob} {self.value}, {self.chunks} chunks per "
               f"buffer; runtime model {self.time * 1e6:.1f} us"]
        parts = []
        for k, v in sorted(self.tried.items()):
            parts.append(f"{k}: {v * 1e6:.1f} us" if isinstance(v, float) else f"{k}: {v}")
        out.append(f"  {self.knob} tried  " + "; ".join(parts))
        return out


def choose_mscclpp(schedule: Schedule, options: Any = None, *, nbytes: int | None = None,
                   instances: tuple[int, ...] = INSTANCES,
                   search: str = "pruned") -> MscclppChoice:
    """The fastest MSCCL++ plan of ``schedule`` by the runtime model at ``nbytes`` (default the
    collective's size), see the module doc; ``options`` are the MSCCL lowering's
    (:class:`tacos.msccl.lower.MscclOptions`: name, in place, window).

    ``search``: ``'pruned'`` (default) climbs the counts and skips those that cannot load;
    ``'climb'`` lowers every count it climbs to; ``'exhaustive'`` lowers and times every count
    (no early stop).  All three choose the same count where the climb's premise holds; the
    last two exist to check and measure that."""
    if search not in ("pruned", "climb", "exhaustive"):
        raise TacosError(f"unknown search {search!r}", hint="pruned, climb or exhaustive")
    from tacos.msccl.lower import MscclOptions
    from tacos.msccl.mscclpp_loader import loader_problems, size_problems
    from tacos.msccl.mscclpp_reader import read_plan
    from tacos.msccl.mscclpp_switch import best_switch_plan, has_switch_groups
    from tacos.msccl.mscclpp_writer import emit_mscclpp_json
    from tacos.runtime.mscclpp_exec import estimate_mscclpp

    base = options or MscclOptions()
    size = int(nbytes or schedule.collective.size)
    group = list(schedule.collective.group)
    if has_switch_groups(schedule):
        doc, why = best_switch_plan(
            schedule, inplace=bool(base.inplace), name=base.name or "tacos_switch",
            min_bytes=int(base.min_bytes or 0),
            max_bytes=int(base.max_bytes) if base.max_bytes else 2**64 - 1, nbytes=size)
        problems = loader_problems(doc)
        if problems:
            raise TacosError("the switch plan would not load: " + problems[0])
        times = {t: v / 1e6 for t, v in why["times_us"].items()}
        return MscclppChoice(json.dumps(doc, indent=2) + "\n", "switch", "thread blocks",
                             why["threadblocks"], times[why["threadblocks"]], dict(times),
                             _chunks(doc))
    tried: dict[int, float | str] = {}
    best: tuple[float, int, dict, int, Any] | None = None
    first: TacosError | None = None
    sized = False  # some candidate was refused only for the size
    dead: dict[int, str] = {}  # count -> why it and its multiples cannot load
    for i in instances:
        if search == "pruned":
            why = next((f"skipped: as with {d} ({w})" for d, w in dead.items() if i % d == 0),
                       None) or _doomed(schedule, replace(base, instances=i), size)
            if why:
                tried[i] = why
                sized = sized or "cut" in why
                dead.setdefault(i, why)
                continue
        try:  # compact text: json's C encoder (the chosen plan is indented once, at the end)
            text = emit_mscclpp_json(schedule, options=replace(base, instances=i), indent=None)
        except TacosError as exc:
            tried[i] = exc.message.split(";")[0]
            first = first or exc
            if search == "pruned" and _grows(exc.message):
                dead[i] = tried[i][:60]
            continue
        doc = json.loads(text)
        problems = loader_problems(doc)
        if problems:
            tried[i] = problems[0][:100]
            continue
        if size_problems(doc, size):
            tried[i] = f"its {_chunks(doc)} chunks do not cut {size} bytes into 16-byte units " \
                "(not multiples)"
            sized = True
            continue
        plan, _ = read_plan(doc)
        try:
            est = estimate_mscclpp(plan, schedule.topology, size, ranks=group)
        except TacosError as exc:
            tried[i] = exc.message
            continue
        time = est.time
        tried[i] = time
        if search != "exhaustive" and best is not None and time > best[0] * (1 + NEAR):
            break  # more thread blocks only add to what already stopped paying off
        tbs = max(len(g["threadblocks"]) for g in doc["gpus"])
        if best is None or time < best[0] * (1 - NEAR) or \
                (time <= best[0] * (1 + NEAR) and tbs < best[3]):
            best = (time, i, doc, tbs, est)
    if best is None and not sized and first is not None:
        raise first  # the schedule has no MSCCL++ form at all (e.g. too many channels)
    if best is None:
        reasons = "; ".join(f"instances {k}: {v}" for k, v in tried.items())
        raise TacosError(f"no MSCCL++ plan of this schedule loads at {size} bytes ({reasons})",
                         hint="use another chunk count (--chunks) or a size that is a "
                              "multiple of 16 bytes x the plan's chunks")
    return MscclppChoice(json.dumps(best[2], indent=2) + "\n", "channels", "instances",
                         best[1], best[0], tried, _chunks(best[2]), estimate=best[4],
                         nbytes=size, topology=schedule.topology)


def _chunks(doc: dict[str, Any]) -> int:
    g = doc["gpus"][0]
    return max(int(g["input_chunks"]), int(g["output_chunks"]))


#: Lowering failures that grow with the thread blocks per peer (channels, depended-on blocks).
_GROWING = ("channels but at most", "depid is an int8")


def _grows(message: str) -> bool:
    """Whether a lowering failure recurs for every multiple of the instance count."""
    return any(g in message for g in _GROWING)


def _doomed(schedule: Schedule, options: Any, size: int) -> str | None:
    """Why the plan lowered with ``options`` could not load at ``size``, known before lowering:
    its chunk counts (:func:`tacos.msccl.program.chunk_geometry` of the layout, what the writer
    declares) do not cut ``size`` into 16-byte units.  None when it may load."""
    from tacos.msccl.lower_layout import build_layout
    from tacos.msccl.mscclpp_loader import size_problems
    from tacos.msccl.program import chunk_geometry

    try:
        layout = build_layout(schedule.collective, inplace=bool(options.inplace),
                              instances=options.instances)
    except TacosError:
        return None  # the lowering says why
    ic, oc = chunk_geometry(layout.coll, layout.ngpus, layout.nchunksperloop)
    doc = {"collective": layout.coll, "buffer_alignment": 16,
           "gpus": [{"input_chunks": ic, "output_chunks": oc}] * layout.ngpus}
    if size_problems(doc, size):
        return f"its {max(ic, oc)} chunks do not cut {size} bytes into 16-byte units " \
            "(not multiples)"
    return None
