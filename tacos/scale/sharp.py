"""All-reduce on a multi-rail Clos whose switches reduce: NVLS in the node, SHARP in the rails.

On a ``sharp`` :class:`~tacos.model.clos.ClosFabric` (every switch declares ``reduce`` and
``multicast``) a part of the buffer goes, on the axes of :class:`~tacos.model.clos_rails.RailAxes`:

1. **NVSwitch reduce-scatter** along ``gpu`` (one fan-in per GPU, chunk j into GPU j:
   :func:`~tacos.scale.sharp_templates.nvls_reducescatter`): GPU j holds the node's sum of
   the j-th eighth of the part;
2. **rail reduce** along ``rail`` (:func:`~tacos.scale.sharp_templates.rail_reduce`): every
   rail's GPUs send their eighth up the rail's switch tree once, the switches add, the sum
   lands in the rail's member 0 (node 0);
3. **rail broadcast** along ``rail`` (:func:`~tacos.scale.sharp_templates.rail_broadcast`):
   member 0 multicasts it down the tree, every NIC receives it once;
4. **NVSwitch all-gather** along ``gpu`` (one fan-out per GPU).

So every NIC carries a part's eighth once each way (the node cut's minimum) and every NVLink
the part once each way, with step 4 of one part and step 1 of a later one in one **mixed**
template (:func:`~tacos.scale.sharp_templates.nvls_mixed`: GPU j's fan-out and fan-in at once,
on disjoint ports).  The rail reduce of part q + 1 runs while the rail broadcast of part q
does (the fan-in uses only links toward member 0, the fan-out only links away from it), so the
rails are busy for the parts' bytes plus one tree α per part, and the pipeline's fill and drain
are the first part's reduce-scatter and the last part's broadcast and all-gather.  Parts whose
node phase has no partner (the first reduce-scatters, the last all-gathers) take the faster of
NVLS and direct rounds (:func:`~tacos.scale.sharp_templates.node_alone`).

The NVSwitch is the critical resource: per byte it is 89% as busy as the NICs, but each node
phase pays 8 slots of α against the rail tree's one.  :func:`run` places a layout, deciding
the NVSwitch's sequence as it goes (the ``lead``: how many parts it may reduce-scatter ahead of
the rails; ``batch``: how many parts one node phase may move).  :func:`search` tries ramps
(small parts first and last, large ones in the middle), leads and batches on the templates'
exact α-β lines, then refines one weight at a time; :func:`build` builds the best with the real
templates.  :func:`synthesize_sharp` returns a
:class:`~tacos.model.symmetric_plan.SymmetricPlan` on the ``RailAxes`` view that
:func:`tacos.check.symmetric.verify_symmetric` checks unexpanded and
:func:`tacos.model.symmetric_plan.expand` writes out for the full verifier.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tacos.errors import TacosError
from tacos.model.clos import ClosFabric
from tacos.model.clos_rails import RailAxes
from tacos.model.schedule import Schedule
from tacos.model.symmetric_plan import Phase, SymmetricPlan
from tacos.model.symmetry import subtopology
from tacos.scale.parts import split
from tacos.scale.sharp_templates import (
    node_alone,
    nvls_mixed,
    nvls_reducescatter,
    rail_broadcast,
    rail_reduce,
)

LEADS = (2, 3, 4)
BATCHES = (1, 2)
UP = ((1.15, 6), (1.25, 4), (1.25, 8), (1.4, 4), (1.4, 6))      # (ratio, parts) of the ramp-up
DOWN = ((1.25, 4), (1.5, 3), (1.5, 5), (2.0, 3), (2.0, 5), (2.5, 4))
FLAT = (4, 8, 12, 16, 20, 32, 64, 128)


@dataclass(frozen=True)
class Task:
    """One phase to place: ``what`` ('rs', 'mix', 'ag' on the NVSwitch, 'fi', 'fo' on the
    rails), the parts it all-gathers (``ag``) and the parts it reduce-scatters, or reduces and
    broadcasts in the rails (``rs``); several parts in one node phase ride one template."""

    what: str
    ag: tuple[int, ...] = ()
    rs: tuple[int, ...] = ()


def run(parts: Sequence[int], lead: int, dur, seq: Sequence[Task] | None = None,
        batch: int = 1) -> tuple[float, list[Task], list[tuple[Task, float]]]:
    """Place a layout's phases; ``dur(task)`` gives a phase's time.

    The rails take each part's reduce then broadcast as early as they can (a part's reduce
    after its node reduce-scatter and the previous part's reduce; its broadcast after its
    reduce and the previous broadcast).  The NVSwitch follows ``seq`` if given; otherwise, each
    time it is free, it mixes the oldest all-gathers that are ready (up to ``batch`` parts)
    with the next reduce-scatters (as many), but reduce-scatters one part alone first when the
    rails would otherwise wait for it, reduce-scatters alone while fewer than ``lead`` parts
    wait for the rails, and otherwise waits for the next all-gather.  Returns the end, the
    NVSwitch's sequence and every phase with its start."""
    k = len(parts)
    fi_start = [0.0] * k
    fi_end = [0.0] * k
    fo_end = [0.0] * k
    placed: list[tuple[Task, float]] = []
    order: list[Task] = []
    state = {"rs": 0, "fi_free": 0.0, "fo_free": 0.0, "first": 0}

    def rs_done(q: int, t: float) -> None:   # the rails take part q from t
        fi = Task("fi", rs=(q,))
        st = fi_start[q] = max(t, state["fi_free"])
        fi_end[q] = state["fi_free"] = st + dur(fi)
        placed.append((fi, st))
        fo = Task("fo", rs=(q,))
        st2 = max(fi_end[q], state["fo_free"])
        fo_end[q] = state["fo_free"] = st2 + dur(fo)
        placed.append((fo, st2))

    nv, ag, end = 0.0, 0, 0.0
    it = iter(seq) if seq is not None else None
    while ag < k:
        r = state["rs"]
        if it is not None:
            task = next(it)
        else:
            ready = tuple(q for q in range(ag, min(ag + batch, r)) if fo_end[q] <= nv)
            ready = ready[:next((i for i, q in enumerate(ready) if q != ag + i), len(ready))]
            while state["first"] < r and fi_start[state["first"]] <= nv:
                state["first"] += 1            # parts whose rail reduce has started by now
            waiting = r - state["first"]
            one = (r,) if r < k else ()
            starving = r < k and state["fi_free"] <= nv + dur(Task("rs", rs=one))
            nxt = tuple(range(r, min(r + batch, k)))
            if ready and r < k and not (starving and waiting == 0):
                task = Task("mix", ready, nxt)
            elif ready:
                task = Task("ag", ready) if r == k or waiting else Task("rs", rs=one)
            elif r < k and (waiting < lead or ag >= r):
                task = Task("rs", rs=one if starving else nxt)
            else:
                nv = max(nv, fo_end[ag])
                continue
        start = max([nv] + [fo_end[q] for q in task.ag])
        ag += len(task.ag)
        nv = start + dur(task)
        end = max(end, nv)
        order.append(task)
        placed.append((task, start))
        for q in task.rs:
            state["rs"] += 1
            rs_done(q, nv)
    return max(end, max(fo_end, default=0.0)), order, placed


class Templates:
    """The node and rail templates of one fabric, each (kind, sizes) built once."""

    def __init__(self, system: RailAxes) -> None:
        self.system = system
        self.node = system.template(0)
        self.cache: dict[tuple, Schedule] = {}
        r = system.fabric.gpus
        self.r = r
        unit = system.fabric.nodes      # the rail templates are α + bytes / bw: two points
        one, two = self.rail(unit * r).makespan, self.rail(2 * unit * r).makespan
        self.rail_beta = (two - one) / unit            # seconds per byte of a part's eighth
        self.rail_alpha = one - self.rail_beta * unit
        # a node fan-in of chunk size c lasts α + c β, every one of the r slots alike
        one = nvls_reducescatter(self.node, r * r).makespan
        two = nvls_reducescatter(self.node, 2 * r * r).makespan
        self.nv_beta = (two - one) / (r * r)           # seconds per byte of a part
        self.nv_alpha = (one - self.nv_beta * r * r) / r
        self.cache.clear()

    def get(self, what: str, sizes: tuple[int, ...]) -> Schedule:
        """The template of a task: ``sizes`` are the parts' bytes."""
        key = (what, sizes)
        hit = self.cache.get(key)
        if hit is None:
            hit = self.cache[key] = self._build(what, sizes)
        return hit

    def rail(self, part: int) -> Schedule:
        """The rail reduce of one part of ``part`` bytes (its eighth)."""
        return self.get("fi", (part,))

    def _build(self, what: str, sizes: tuple[int, ...]) -> Schedule:
        rail = self.system.template(1)
        if what in ("rs", "ag"):
            return node_alone(self.node, "reducescatter" if what == "rs" else "allgather",
                              sizes[0])
        if what == "mix":
            return nvls_mixed(self.node, sizes[0], sizes[1])
        if what == "fi":
            return rail_reduce(rail, sizes[0] // self.r)
        return rail_broadcast(rail, sizes[0] // self.r)

    def duration(self, what: str, sizes: tuple[int, ...]) -> float:
        """A task's time from the templates' α-β lines (what :meth:`get` builds lasts this
        long, up to rounding: a test checks it)."""
        r, a, b = self.r, self.nv_alpha, self.nv_beta
        if what in ("fi", "fo"):
            return self.rail_alpha + self.rail_beta * (sizes[0] // r)
        if what == "mix":
            return r * a + max(sizes) * b
        return min(r * a + sizes[0] * b, (r - 1) * (a + sizes[0] * b / r))


def _sizes_of(t: Task, parts: Sequence[int]) -> tuple[int, ...]:
    """The template sizes of a task: (all-gathered bytes, reduce-scattered bytes) of a mix,
    the bytes its parts hold together otherwise."""
    g, s = sum(parts[q] for q in t.ag), sum(parts[q] for q in t.rs)
    return (g, s) if t.what == "mix" else (g + s,)


def place(parts: Sequence[int], lead: int, tpl: Templates, batch: int = 1) -> float:
    """The end of one layout on the model."""
    return run(parts, lead, lambda t: tpl.duration(t.what, _sizes_of(t, parts)),
               batch=batch)[0]


def ramp(up: tuple[float, int], flat: int, down: tuple[float, int]) -> tuple[int, ...]:
    """Weights (thousandths of the flat parts'): ``up = (ratio, count)`` parts growing by
    ratio to the top, ``flat`` parts at the top, ``down`` parts shrinking by its ratio."""
    (ru, nu), (rd, nd) = up, down
    w = [ru**-i for i in range(nu, 0, -1)] + [1.0] * flat + [rd**-i for i in range(1, nd + 1)]
    return tuple(max(1, round(1000 * x)) for x in w)


def search(size: int, system: RailAxes, tpl: Templates
           ) -> tuple[tuple[int, ...], int, int, float]:
    """The best (part sizes, lead, batch, end) on the model: a grid of ramps, then each
    weight moved by ±50%, ±25%, ±10%, ±4% while that helps."""
    n = system.n_npus
    best: tuple[float, tuple[int, ...], int, int] | None = None
    seen: set[tuple] = set()

    def score(weights: tuple[int, ...], lead: int, batch: int) -> float:
        nonlocal best
        sizes = split(size, weights, n)
        if min(sizes) < n or (tuple(sizes), lead, batch) in seen:
            return float("inf")
        seen.add((tuple(sizes), lead, batch))
        end = place(sizes, lead, tpl, batch)
        if best is None or end < best[0]:
            best = (end, weights, lead, batch)
        return end

    for batch in BATCHES:
        for lead in LEADS:
            for up in UP:
                for down in DOWN:
                    for flat in FLAT:
                        score(ramp(up, flat, down), lead, batch)
    assert best is not None
    for step in (0.5, 0.25, 0.1, 0.04):
        improved = True
        while improved:
            improved = False
            end0, w0, lead, batch = best
            for i in range(len(w0)):
                for f in (1 + step, 1 - step):
                    w = list(w0)
                    w[i] = max(1, round(w[i] * f))
                    if score(tuple(w), lead, batch) < end0 * (1 - 1e-9):
                        improved = True
                        break
                if improved:
                    break
    end, weights, lead, batch = best
    return split(size, weights, n), lead, batch, end


def build(system: RailAxes, size: int, parts: Sequence[int], lead: int,
          tpl: Templates, batch: int = 1) -> SymmetricPlan:
    """The plan of one layout: the NVSwitch's sequence decided on the model, then every phase
    placed with the real templates' times."""
    _, seq, _ = run(parts, lead, lambda t: tpl.duration(t.what, _sizes_of(t, parts)),
                    batch=batch)
    made: dict[tuple, Schedule] = {}

    def real(t: Task) -> float:
        key = (t.what, _sizes_of(t, parts))
        if key not in made:
            made[key] = tpl.get(*key)
        return made[key].makespan

    _, _, placed = run(parts, lead, real, seq)
    phases = []
    for t, st in placed:
        s = made[(t.what, _sizes_of(t, parts))]
        if t.what == "rs":
            phases.append(Phase(t.rs[0], 0, "reducescatter", s, st, joint=t.rs[1:]))
        elif t.what == "ag":
            phases.append(Phase(t.ag[0], 0, "allgather", s, st, joint=t.ag[1:]))
        elif t.what == "mix":
            phases.append(Phase(t.ag[0], 0, "allgather", s, st, joint=t.ag[1:], scatter=t.rs))
        else:
            phases.append(Phase(t.rs[0], 1, "reduce" if t.what == "fi" else "broadcast",
                                s, st))
    mixed = sum(t.what == "mix" for t in seq)
    return SymmetricPlan(system, "allreduce", sum(parts), tuple(parts), tuple(phases),
                         {"parts": len(parts), "lead": lead, "batch": batch,
                          "mixed_phases": mixed, "node_phases": len(seq),
                          "in_network": "sharp+nvls"})


def synthesize_sharp(fabric: ClosFabric | RailAxes, size: int, *,
                     parts: Sequence[int] | None = None, lead: int | None = None,
                     batch: int | None = None, symmetric: bool = True) -> SymmetricPlan:
    """An all-reduce of ``size`` bytes (rounded down to a multiple of the NPU count) on a
    ``sharp`` fabric, as the module docstring builds it.  ``parts`` (weights) and ``lead`` fix
    the layout instead of searching it; ``symmetric=False`` also builds every copy's templates
    from the whole topology (cut out and renumbered) and raises
    :class:`~tacos.errors.TacosError` unless each has the template's time."""
    system = fabric if isinstance(fabric, RailAxes) else RailAxes(fabric)
    if not system.sharp:
        raise TacosError("the rail switches do not reduce: in-network all-reduce needs a "
                         "fabric with SHARP", hint="ClosFabric(..., sharp=True), or "
                         "use clos_h100(..., sharp=1)")
    n = system.n_npus
    if size < n:
        raise TacosError(f"{size} bytes is less than one byte per NPU",
                         hint=f"use at least {n} bytes")
    t0 = time.process_time()
    tpl = Templates(system)
    if parts is None:
        sizes, found_lead, found_batch, _ = search(size, system, tpl)
        lead = found_lead if lead is None else lead
        batch = found_batch if batch is None else batch
    else:
        sizes = split(size, tuple(parts), n)
        if min(sizes) < n:
            raise TacosError("a part of this layout is less than one byte per NPU")
        lead = 1 if lead is None else lead
        batch = 1 if batch is None else batch
    plan = build(system, size, sizes, lead, tpl, batch)
    if not symmetric:
        _every_copy(plan)
    meta: dict[str, Any] = {"solver": "symmetric-sharp", "size_requested": size,
                            "templates": len(tpl.cache),
                            "synthesis_cpu": time.process_time() - t0, **plan.meta}
    return SymmetricPlan(system, plan.kind, plan.size, plan.parts, plan.phases, meta)


def _every_copy(plan: SymmetricPlan) -> None:
    """Build every phase's template on every copy's own cut of the whole topology."""
    system = plan.system
    whole = system.topology()
    seen: set[int] = set()
    makers = {"reducescatter": lambda tp, t: node_alone(tp, "reducescatter", t.collective.size),
              "reduce": lambda tp, t: rail_reduce(tp, t.collective.size),
              "broadcast": lambda tp, t: rail_broadcast(tp, t.collective.size)}
    for ph in plan.phases:
        if id(ph.template) in seen:
            continue
        seen.add(id(ph.template))
        emb = system.embed(ph.axis)
        r = system.axes[ph.axis].size
        for c in range(len(emb.nodes)):
            sub = subtopology(whole, emb.nodes[c].tolist(), emb.links[c].tolist())
            t = ph.template
            if ph.kind == "allgather":
                gather = sum(ch.size for ch in t.collective.chunks[:r])
                rest = sum(ch.size for ch in t.collective.chunks[r:])
                own = nvls_mixed(sub, gather, rest) if ph.scatter else \
                    node_alone(sub, "allgather", gather)
            else:
                own = makers[ph.kind](sub, t)
            if abs(own.makespan - t.makespan) > 1e-12 * t.makespan:
                raise TacosError(f"copy {c} of axis {system.axes[ph.axis].name}: "
                                 f"{own.makespan} s alone against {t.makespan} s")
