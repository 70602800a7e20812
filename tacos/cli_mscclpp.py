"""``tacosc ... --format mscclpp -o plan.json``: the plan written, shaped by the runtime model,
and used at the size it was made for.

The MSCCL++ executor throws, rather than falls back, when a call's size does not cut into the
plan's chunks (``checkMessageSize``: bytes / ``buffer_alignment`` divisible by the input and
output chunk counts).  So after :func:`tacos.msccl.mscclpp_choose.choose_mscclpp` has picked the
thread blocks, a plan that would not load at its own size is replaced: the collective is
synthesized again with chunk counts that divide (:func:`rechunk_candidates`: for the forest
solver its number of trees per root, else the chunks per NPU), each candidate written and timed,
the fastest that loads kept - and said so.  With no ``--min-bytes`` the plan's window starts at
the smallest size its chunks divide (:func:`smallest_loading_size`), so a runtime selecting by
size never hands it a message it cannot cut.  With ``--solver auto`` on a node whose ranks one
multicast switch joins, the in-switch plans are timed beside it and the fastest is written
(:func:`switch_rival`).
"""

from __future__ import annotations

import argparse
from typing import Any

from tacos.errors import TacosError

__all__ = ["mscclpp_file", "rechunk_candidates", "smallest_loading_size", "switch_rival"]

#: Chunks per NPU (trees per root for forest) tried when a plan's chunks do not divide.
RECHUNK = (1, 2, 4, 8, 16)


def rechunk_candidates(solver: str) -> list[tuple[int, dict[str, Any]]]:
    """``(chunks_per_npu, solver options)`` to synthesize again with: powers of two."""
    if solver == "forest":
        return [(1, {"trees": k}) for k in RECHUNK if k <= 8]
    return [(k, {}) for k in RECHUNK]


def smallest_loading_size(doc: dict[str, Any]) -> int:
    """The smallest collective size (tacos' convention) whose buffers cut into the plan's chunk
    counts in ``buffer_alignment`` units (the executor's ``checkMessageSize``)."""
    from math import lcm

    g = doc["gpus"][0]
    n = len(doc["gpus"])
    align = int(doc.get("buffer_alignment", 16) or 16)
    ic, oc = int(g["input_chunks"]), int(g["output_chunks"])
    coll = doc.get("collective")
    # tacos' size is the larger buffer; the smaller one is size / n for allgather/reducescatter
    big, small = (oc, ic) if coll == "allgather" else (ic, oc) if coll == "reducescatter" \
        else (max(ic, oc), max(ic, oc))
    if coll in ("allgather", "reducescatter"):
        return align * lcm(max(1, big), max(1, small) * n)
    return align * max(1, big)


def mscclpp_file(schedule: Any, args: argparse.Namespace, options: Any, synth: Any,
                 reporter: Any) -> tuple[Any, Any, list[str]]:
    """``(choice, schedule, notes)``: the MSCCL++ plan for ``schedule`` (thread blocks chosen
    by the runtime model), or, when it would not load at the collective's size, the fastest
    plan of a re-synthesis with chunk counts that divide (``synth(collective, **options)``
    synthesizes and verifies; ``synth(None, solver=NAME)`` the user's collective with another
    solver), or, when ``auto``'s winner has no MSCCL++ form, its best runner-up that has one;
    with ``auto``, an in-switch plan instead when it is faster (:func:`switch_rival`).
    ``notes`` say what was changed and why."""
    from tacos.model import patterns
    from tacos.msccl.mscclpp_choose import choose_mscclpp

    coll = schedule.collective
    size = int(coll.size)
    notes: list[str] = []
    try:
        choice = choose_mscclpp(schedule, options, nbytes=size)
    except TacosError as exc:
        if "loads at" not in exc.message:
            alt = _runner_up(schedule, options, size, synth, reporter, exc)
            if alt is None:
                raise
            choice, schedule, note = alt
            notes.append(note)
            rival = switch_rival(schedule, choice, options, synth, reporter)
            if rival is not None:
                choice, schedule, note = rival
                notes.append(note)
            return choice, schedule, notes
        first = exc.message
        best = None
        tried = []
        n = len(coll.group)
        odd = n // (n & -n)  # every layout has n x (power of two) chunks, or n^2 for alltoall
        futile = (size // 16) % odd != 0
        if futile:
            tried.append(f"every chunk count is a multiple of {n} ranks, and {odd} does not "
                         f"divide {size // 16} 16-byte units")
        for per, extra in [] if futile else rechunk_candidates(args.solver):
            try:
                again = patterns.build(coll.kind, coll.group, size=size, chunks_per_npu=per,
                                       root=coll.root)
                with reporter.phase(f"re-synthesizing ({_label(per, extra)})"):
                    cand = synth(again, **extra)
                    got = choose_mscclpp(cand, options, nbytes=size)
            except TacosError as err:
                why = "its chunks do not cut the size" if "loads at" in err.message \
                    else err.message[:80]
                tried.append(f"{_label(per, extra)}: {why}")
                continue
            tried.append(f"{_label(per, extra)}: {got.time * 1e6:.1f} us")
            if best is None or got.time < best[0].time:
                best = (got, cand, per, extra)
        if best is None:  # e.g. all-reduce on 6, 12 or 20 ranks: chunks are a multiple of n
            choice = _nearest(schedule, options, size, first, tried, notes)
        else:
            choice, schedule = best[0], best[1]
            notes.append(f"the solver's {coll.n_chunks} chunks do not cut {size} bytes into "
                         f"MSCCL++'s 16-byte units; re-synthesized with "
                         f"{_label(best[2], best[3])} (fastest that loads; "
                         + "; ".join(tried) + ")")
    if args.solver == "auto":
        rival = switch_rival(schedule, choice, options, synth, reporter)
        if rival is not None:
            choice, schedule, note = rival
            notes.append(note)
    values_min = getattr(args, "min_bytes", None)
    if not values_min:
        import json

        doc = json.loads(choice.text)
        low = smallest_loading_size(doc)
        if low > int(doc.get("min_message_size", 0) or 0):
            choice.text = _with_min_message_size(choice.text, doc, low)
            notes.append(f"window starts at {low} bytes, the smallest size the plan's chunks "
                         "divide")
    return choice, schedule, notes


def _with_min_message_size(text: str, doc: dict[str, Any], low: int) -> str:
    """``text`` (the indented plan ``doc``) with its window starting at ``low`` bytes: the
    top-level field's line replaced (re-encoding a plan of a million lines with indentation
    takes seconds), the same bytes as writing the changed ``doc`` again."""
    import json

    old = doc.get("min_message_size")
    line = f'\n  "min_message_size": {json.dumps(old)},\n'
    if old is not None and text.count(line) == 1:
        return text.replace(line, f'\n  "min_message_size": {json.dumps(low)},\n')
    doc = {**doc, "min_message_size": low}
    return json.dumps(doc, indent=2) + "\n"


def switch_rival(schedule: Any, choice: Any, options: Any, synth: Any,
                 reporter: Any) -> tuple[Any, Any, str] | None:
    """``auto`` ranks plans MSCCL XML can express; MSCCL++ also runs in-switch plans on switch
    channels.  Where one switch with ``multicast`` (and ``reduce`` unless all-gather) joins
    every rank of an all-reduce, all-gather or reduce-scatter, the in-switch plans - NCCL's
    NVLS schedule (``nvls``) and, for all-reduce, forest's star (``forest-star``) - are
    written and timed by the runtime model (:func:`tacos.msccl.mscclpp_choose.
    choose_mscclpp`) beside ``choice``; ``(choice, schedule, note)`` of the fastest when it
    beats ``choice``, else None.  The schedule's ``meta['auto']`` then names it the winner."""
    from dataclasses import replace

    from tacos.check.verify import verify_schedule
    from tacos.msccl.mscclpp_channels import switch_for
    from tacos.msccl.mscclpp_choose import choose_mscclpp
    from tacos.msccl.mscclpp_switch import SWITCH_KINDS, has_switch_groups
    from tacos.solvers.forest.in_switch import in_switch_allreduce

    coll = schedule.collective
    topo = schedule.topology
    if coll.kind not in SWITCH_KINDS or coll.tenants or \
            switch_for(topo, list(coll.group), reduce=coll.kind != "allgather") is None:
        return None
    facts = schedule.meta.get("auto")
    best: tuple[Any, Any, str] | None = None
    tried = []
    for label in ("nvls", "forest-star"):
        try:
            with reporter.phase(f"timing the in-switch plan ({label})"):
                if label == "nvls":
                    cand = synth(None, solver="nvls")
                else:
                    cand = in_switch_allreduce(topo, coll) if coll.kind == "allreduce" \
                        else None
                    if cand is None:
                        continue
                    verify_schedule(cand).raise_if_failed()
                if not has_switch_groups(cand):
                    continue
                got = choose_mscclpp(cand, options, nbytes=int(coll.size))
        except TacosError as exc:
            tried.append(f"{label}: {exc.message[:60]}")
            continue
        tried.append(f"{label} {got.time * 1e6:.1f} us")
        if got.time < (best[0].time if best else choice.time):
            best = (got, cand, label)
    if best is None:
        return None
    got, cand, label = best
    before = facts.get("winner", "auto's plan") if isinstance(facts, dict) else "auto's plan"
    if isinstance(facts, dict):
        new = {**facts, "winner": label, "runner_up": before,
               "margin": choice.time / got.time if got.time > 0 else None,
               "mscclpp_switch": True}
        if facts.get("nccl_time"):
            new["speedup_vs_nccl"] = float(facts["nccl_time"]) / got.time
        cand = replace(cand, meta={**cand.meta, "auto": new})
    note = (f"auto: the in-switch plan {label} (MSCCL++ switch channels) is fastest in the "
            f"runtime model: {got.time * 1e6:.1f} us vs {choice.time * 1e6:.1f} us for "
            f"{before} (" + "; ".join(tried) + ")")
    return got, cand, note


def _runner_up(schedule: Any, options: Any, size: int, synth: Any, reporter: Any,
               exc: TacosError) -> tuple[Any, Any, str] | None:
    """``auto`` won with a plan MSCCL++ cannot run (say NCCL's ring needing more channels than
    the lowering has): the next candidates of the portfolio in its ranking, each synthesized
    alone, the first that writes kept.  None when ``schedule`` is not ``auto``'s."""
    from tacos.msccl.mscclpp_choose import choose_mscclpp

    facts = schedule.meta.get("auto")
    if not isinstance(facts, dict) or not isinstance(facts.get("times"), dict):
        return None
    times = facts["times"]
    order = sorted((k for k in times if k != facts.get("winner") and "+" not in k),
                   key=lambda k: (times[k], k))
    for label in order:
        try:
            with reporter.phase(f"writing the runner-up ({label})"):
                cand = synth(None, solver=label)  # the collective as the user asked it
                choice = choose_mscclpp(cand, options, nbytes=size)
        except TacosError:
            continue
        return choice, cand, (f"auto's winner {facts.get('winner')} has no MSCCL++ plan "
                              f"({exc.message[:80]}); wrote {label}, the fastest candidate "
                              "that has one")
    return None


def _nearest(schedule: Any, options: Any, size: int, first: str, tried: list[str],
             notes: list[str]) -> Any:
    """No chunk count cuts ``size``: the plan shaped at the nearest size it loads at, its
    window starting at the smallest; the caller warns that ``size`` is not served."""
    import json

    from tacos.msccl.mscclpp_choose import choose_mscclpp
    from tacos.msccl.mscclpp_writer import emit_mscclpp_json

    try:
        unit = smallest_loading_size(json.loads(emit_mscclpp_json(schedule, options=options)))
        nearest = max(unit, size // unit * unit)
        choice = choose_mscclpp(schedule, options, nbytes=nearest, instances=(1, 2, 4, 8))
    except TacosError:
        raise TacosError(first, hint="no power-of-two chunk count loads either: "
                         + "; ".join(t[:60] for t in tried)) from None
    unit = smallest_loading_size(json.loads(choice.text))
    below = size // unit * unit
    notes.append(f"no chunk count cuts {size} bytes ("
                 + "; ".join(t[:90] for t in tried) + f"); the plan loads at multiples of "
                 f"{unit} bytes (nearest: {below or unit} and {below + unit}); shaped at "
                 f"{nearest}")
    return choice


def _label(per: int, extra: dict[str, Any]) -> str:
    if "trees" in extra:
        return f"{extra['trees']} tree(s) per root"
    return f"{per} chunk(s) per NPU"
