"""Summary of a schedule: simulated time, bandwidths, lower bound and gap, solver facts.

:func:`report` returns a JSON-safe dict (non-finite numbers become ``None``);
:func:`format_report` renders it as aligned text (what ``tacosc --report`` prints).
"""

from __future__ import annotations

import math
from typing import Any

from tacos.check.bounds import MODEL_ASSUMPTIONS, lower_bound
from tacos.check.simulate import simulate
from tacos.check.verify_once import verified
from tacos.model.schedule import Schedule
from tacos.model.topology import Topology
from tacos.model.units import format_bandwidth, format_size, format_time

SOLVER_KEYS = ("solver", "seed", "trials", "trials_run", "status", "synthesis_time",
               "auto_seconds",
               "best_trial",
               "max_merge", "backend", "algorithm")


def _num(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def json_safe(value: Any) -> Any:
    """``value`` with tuples/sets as lists, non-finite floats as None and unknown objects as
    strings, keeping only str/int/float/bool/None/list/dict (dict keys become strings)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return _num(value)
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return [json_safe(v) for v in sorted(value, key=repr)]
    return str(value)


def report(schedule: Schedule, *, topology: Topology | None = None,
           verify: bool = True, runtime: Any = "auto") -> dict[str, Any]:
    """Facts about ``schedule`` as a JSON-safe dict.

    Times are estimates of the α-β model (α + bytes / bandwidth per transfer), not
    measurements.  ``time`` is the α-β replay time (:func:`tacos.simulate.simulate`),
    ``schedule_time`` the schedule's own makespan.  The bound is computed on ``topology``
    (default: the schedule's own); ``gap`` = time / the *physical* bound (min-cut bandwidth,
    hop latency), the same for every solver.  ``model_bounds`` lists the bounds that hold only
    for the collective's own chunks, each with what it assumes (the chunk-granular one only
    when every transfer carries one chunk), and ``model_gap`` = time / the largest bound
    including them.  ``forest`` (from the forest solver's ``meta``) gives its optimal rate, the
    achieved fraction of it, tree and slice counts.  ``verify=False`` skips the verifier.

    ``runtime`` is the runtime model's view of the emitted plan (``docs/runtime-model.md``):
    an ``(estimate, note)`` pair from :func:`tacos.runtime.plans.runtime_of` (computed here by
    default; None leaves it out).  It becomes the top-level ``runtime`` object: ``time`` (s),
    ``algbw``, ``busbw``, ``model``, ``bound``, beside ``link_time`` (the α-β ``time``).
    """
    coll = schedule.collective
    sim = simulate(schedule)
    bound = lower_bound(topology or schedule.topology, coll)
    time = sim.time
    gap = time / bound.value if bound.value > 0 and math.isfinite(bound.value) else None
    models = dict(bound.model)
    if any(len(t.chunks) > 1 for t in schedule.transfers):  # its assumption does not hold
        models.pop("chunk_granular", None)
    model = max([bound.value, *(v for v in models.values() if v is not None)])
    model_gap = time / model if model > 0 and math.isfinite(model) else None
    util = sim.link_utilization
    busiest = sim.busiest_link
    topo = schedule.topology
    out: dict[str, Any] = {
        "collective": {
            "kind": coll.kind,
            "label": coll.label(),
            "size": coll.size,
            "npus": len(coll.group),
            "chunks": coll.n_chunks,
            "chunks_per_npu": coll.chunks_per_npu,
            "chunk_size": coll.chunks[0].size if coll.chunks else 0,
        },
        "topology": {"name": topo.name, "npus": topo.n_npus, "switches": len(topo.switches),
                     "links": len(topo.links)},
        "time": time,
        "schedule_time": schedule.makespan,
        "algbw": sim.algbw,
        "busbw": sim.busbw,
        "bound": {"value": bound.value, "latency": bound.latency,
                  "bandwidth": bound.bandwidth, "kind": bound.kind, "parts": bound.parts},
        "gap": gap,
        "model_bounds": {k: {"value": v, "assumes": MODEL_ASSUMPTIONS[k]}
                         for k, v in models.items() if v is not None},
        "model_gap": model_gap,
        "transfers": len(schedule.transfers),
        "chunk_hops": sum(len(t.chunks) for t in schedule.transfers),
        "bytes_moved": sum(schedule.transfer_bytes(t) for t in schedule.transfers),
        "link_utilization": {
            "mean": sum(util) / len(util) if util else 0.0,
            "max": max(util, default=0.0),
            "busiest_link": busiest,
            "busiest": (f"{topo.node_name(topo.links[busiest].src)}->"
                        f"{topo.node_name(topo.links[busiest].dst)}"
                        if busiest is not None else None),
        },
        "solver": {k: schedule.meta[k] for k in SOLVER_KEYS if k in schedule.meta},
    }
    forest = schedule.meta.get("forest")
    if forest:
        opt = forest.get("optimal_algbw")
        out["forest"] = {
            "optimal_algbw": opt,
            "achieved_fraction": sim.algbw / opt if opt else None,
            "trees": forest.get("trees"),
            "phases": [{k: p.get(k) for k in ("phase", "k", "U", "exact", "trees", "depth")}
                       for p in forest.get("phases", [])],
            "slices": (schedule.meta.get("pipeline") or {}).get("slices"),
        }
    if runtime == "auto":
        from tacos.runtime.plans import runtime_of

        runtime = runtime_of(schedule, topology)
    if runtime is not None:
        from tacos.runtime.plans import runtime_json

        out["runtime"] = runtime_json(runtime[0], runtime[1], time)
    auto = schedule.meta.get("auto")
    if isinstance(auto, dict) and auto.get("winner"):
        out["auto"] = auto_json(auto)
    if verify:
        from tacos.solvers.scale_gate import verified_report

        # the compile verified this plan already (a gated winner by its gate)
        rep = verified_report(schedule) or verified(schedule)
        out["verified"] = rep.ok
        out["violations"] = len(rep.violations) + rep.omitted
    return json_safe(out)


def auto_json(facts: dict[str, Any]) -> dict[str, Any]:
    """The ``auto`` portfolio's verdict (``meta['auto']``) as the report prints it: the
    winner, NCCL's modelled best and the speedup over it, every candidate's time (s) and the
    candidates skipped, as ``[{candidate, reason}]``."""
    from tacos.solvers.auto import describe

    keys = ("winner", "ranked_by", "nccl_best", "nccl_time", "speedup_vs_nccl", "runner_up",
            "margin", "margin_at_least", "times")
    out = {k: facts[k] for k in keys if k in facts}
    out["skipped"] = skipped_list(facts)
    out["verdict"] = describe(facts)
    return out


def skipped_list(facts: dict[str, Any]) -> list[dict[str, str]]:
    """``facts['skipped']`` (candidate -> reason) as ``[{candidate, reason}]``, sorted."""
    return [{"candidate": k, "reason": v} for k, v in sorted(facts.get("skipped", {}).items())]


def _t(x: float | None) -> str:
    return format_time(x) if x is not None else "n/a"


def format_report(schedule: Schedule, *, topology: Topology | None = None,
                  verify: bool = True, runtime: Any = "auto") -> str:
    """The :func:`report` as aligned ``label  value`` lines."""
    r = report(schedule, topology=topology, verify=verify, runtime=runtime)
    c, b, u = r["collective"], r["bound"], r["link_utilization"]
    parts = b["parts"]
    names = {"latency": "hop latency", "ingress_egress": "ingress/egress", "cut": "min-cut",
             "chunk_latency": "chunk latency", "chunk_granular": "chunk-granular",
             "group_cut": "group cut"}
    part_text = ", ".join(f"{names[k]} {_t(v)}" for k, v in parts.items() if v is not None)
    model_text = "; ".join(f"{names[k]} {_t(m['value'])} (assumes {m['assumes']})"
                           for k, m in r["model_bounds"].items())
    lines = [
        ("collective", f"{c['label']} on {c['npus']} NPUs, {format_size(c['size'])}, "
                       f"{c['chunks']} chunks of {format_size(c['chunk_size'])}"),
        ("topology", f"{r['topology']['name'] or 'unnamed'}: {r['topology']['npus']} NPUs, "
                     f"{r['topology']['links']} links"),
        ("time", f"{_t(r['time'])} link model (schedule says {_t(r['schedule_time'])})"),
        ("algbw", (format_bandwidth(r["algbw"]) if r["algbw"] is not None else "n/a")
                  + " link model"),
        ("busbw", (format_bandwidth(r["busbw"]) if r["busbw"] is not None else "n/a")
                  + " link model"),
        ("bound", f"{_t(b['value'])} physical ({b['kind']}): {part_text}"),
        ("gap", (f"{r['gap']:.3f}x" if r["gap"] is not None else "n/a")
                + " (time / physical bound)"),
        ("transfers", f"{r['transfers']} ({r['chunk_hops']} chunk hops, "
                      f"{format_size(r['bytes_moved'])} moved)"),
        ("links", f"utilization mean {u['mean']:.0%}, max {u['max']:.0%}"
                  + (f" ({u['busiest']})" if u["busiest"] else "")),
    ]
    rt = r.get("runtime")
    if rt is not None:
        if rt["time"] is not None:
            lines[3:3] = [
                ("runtime", f"{_t(rt['time'])}, algbw {format_bandwidth(rt['algbw'])}, busbw "
                            f"{format_bandwidth(rt['busbw'])} ({rt['model']}: {rt['of']})"),
                ("bounded by", rt["bound"]),
            ]
        else:
            lines.insert(3, ("runtime", f"none: {rt['note']}"))
    if model_text:
        at = next(i for i, (k, _) in enumerate(lines) if k == "gap") + 1
        lines.insert(at, ("model bounds", model_text + (
            f"; time / largest {r['model_gap']:.3f}x" if r["model_gap"] is not None else "")))
    f = r.get("forest")
    if f:
        ks = ", ".join(f"{p['phase']} k={p['k']} U={p['U']}{'' if p['exact'] else ' (fixed k)'}"
                       for p in f["phases"])
        frac = f"{f['achieved_fraction']:.1%}" if f["achieved_fraction"] is not None else "n/a"
        opt = format_bandwidth(f["optimal_algbw"]) if f["optimal_algbw"] else "n/a"
        lines.append(("forest", f"optimal algbw {opt}, achieved {frac}; {f['trees']} trees "
                                f"({ks}), {f['slices']} slices"))
    if "verified" in r:
        lines.append(("verified", "yes" if r["verified"] else
                      f"NO ({r['violations']} violations)"))
    s = r["solver"]
    if s:
        bits = [str(s.get("solver", "?"))]
        if "seed" in s:
            bits.append(f"seed {s['seed']}")
        if s.get("trials") is not None:
            runs = s.get("trials_run")
            bits.append(f"{s['trials']} trials" + (f" ({runs} runs, as the progress display "
                        "counts: merged and one-chunk transfers)" if runs and runs != s["trials"]
                        else ""))
        if "status" in s:
            bits.append(f"status {s['status']}")
        if s.get("synthesis_time") is not None:
            bits.append(f"synthesis {_t(s['synthesis_time'])}")
        lines.append(("solver", ", ".join(bits)))
    auto = schedule.meta.get("auto")
    if isinstance(auto, dict) and auto.get("winner"):
        from tacos.solvers.auto import describe

        lines.append(("plan", describe(auto)))
        by_reason: dict[str, list[str]] = {}
        for item in skipped_list(auto):
            by_reason.setdefault(item["reason"], []).append(item["candidate"])
        for reason, names in by_reason.items():
            lines.append(("skipped", f"{', '.join(names)}: {reason}"))
    width = max(len(k) for k, _ in lines)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in lines)
