"""The one line a successful ``tacosc TOPO -o FILE`` prints: what was written, its time in the
runtime model, its speedup over NCCL's modelled best on the same topology, and that it was
verified (``wrote plan.xml: allreduce 64 MiB on 16 NPUs, 812.4 us (runtime model),
1.31x faster than NCCL's modelled best (nccl-ring, 1.06 ms), verified``)."""

from __future__ import annotations

from typing import Any

from tacos.errors import TacosError
from tacos.model.units import format_size, format_time


def nccl_reference(schedule: Any, topology: Any) -> tuple[str | None, float | None]:
    """``(label, seconds)`` of NCCL's modelled best for the schedule's collective: the
    ``auto`` portfolio's reference when it ran, else NCCL's own choice in the runtime model;
    ``(None, None)`` when the runtime model has no NCCL time for it."""
    auto = schedule.meta.get("auto")
    if isinstance(auto, dict) and auto.get("nccl_time") is not None:
        return str(auto.get("nccl_best")), float(auto["nccl_time"])
    from tacos.runtime.plans import nccl_runtime

    coll = schedule.collective
    try:
        est = nccl_runtime(topology, coll.kind, coll.size, coll.group, None)
    except (TacosError, KeyError, ValueError):
        return None, None
    algo = str(est.detail.get("algorithm", "")) if est.detail else ""
    return ("nccl-" + algo if algo else "NCCL"), est.time


def compile_line(schedule: Any, topology: Any, written: str, runtime: Any,
                 verified: bool = True) -> str:
    """The summary line (see module doc); ``runtime`` is the ``(estimate, note)`` pair of
    :func:`tacos.runtime.plans.runtime_of` for the plan written (None: not timed)."""
    coll = schedule.collective
    where = "standard output" if written == "-" else written
    text = (f"wrote {where}: {coll.label()} {format_size(coll.size)} on {len(coll.group)} NPUs")
    est = runtime[0] if runtime is not None else None
    if est is None:
        why = runtime[1] if runtime is not None else "not timed"
        text += f", link-model time {format_time(schedule.makespan)} (runtime model: {why})"
    else:
        text += f", {format_time(est.time)} (runtime model)"
        label, ref = nccl_reference(schedule, topology)
        if ref is not None and est.time > 0:
            speedup = ref / est.time
            how = "faster" if speedup >= 1 else "slower"
            factor = speedup if speedup >= 1 else 1 / speedup
            text += (f", {factor:.2f}x {how} than NCCL's modelled best ({label}, "
                     f"{format_time(ref)})")
    auto = schedule.meta.get("auto")
    if isinstance(auto, dict) and auto.get("mscclpp_switch"):
        text += f", in-switch plan {auto['winner']} (switch channels) chosen by auto"
    return text + (", verified" if verified else ", NOT verified")
