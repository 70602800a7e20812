"""Put each model next to a real schedule: the matching baseline's and the synthesizer's.

:func:`compare` estimates a collective with every requested model and, for each, builds the
baseline schedule that runs the same algorithm (``ring`` for ``ring`` and ``axonn``, ``rhd``
for ``halving-doubling`` ...), verifies it and times it with the α-β simulator; optionally it
also synthesizes a plan (greedy by default).  The error of a model is
``(predicted − simulated) / simulated``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tacos.check.simulate import simulate
from tacos.check.verify import verify_schedule
from tacos.cost.estimates import estimate
from tacos.cost.models import (
    BASELINE,
    MODELS,
    Context,
    Estimate,
    canonical,
    check_request,
    roots_of,
)
from tacos.errors import TacosError
from tacos.model.collective import Collective, combine
from tacos.model.patterns import build
from tacos.model.schedule import Schedule
from tacos.model.topology import Topology


@dataclass(frozen=True)
class Row:
    """One model's estimate with the simulated time of its baseline (s) and the error."""

    estimate: Estimate
    baseline: str
    simulated: float | None
    error: float | None
    note: str = ""
    schedule_time: float | None = None


@dataclass(frozen=True)
class Comparison:
    """Every model's row, and the synthesized plan's simulated time when asked for."""

    rows: tuple[Row, ...]
    synthesized: float | None = None
    solver: str = ""

    def error_vs_synthesized(self, row: Row) -> float | None:
        """``(predicted − synthesized) / synthesized`` for a row."""
        t = row.estimate.time
        if t is None or not self.synthesized:
            return None
        return (t - self.synthesized) / self.synthesized


def make_collective(topology: Topology, kind: str, size: int, groups: Sequence[Sequence[int]],
                    root: int | None = None, chunks: int = 1) -> Collective:
    """The collective (multi-tenant for several concurrent groups) a model describes."""
    from tacos.limits import LimitError
    from tacos.model.limit_spans import locate_group

    parts = []
    for g, r in zip(groups, roots_of(groups, root), strict=True):
        try:
            parts.append(build(kind, list(g), size=size, chunks_per_npu=chunks, root=r))
        except LimitError as exc:  # at the file's statement that makes the group that big
            raise locate_group(exc, topology, list(g)) from None
    return combine(parts)


def simulated_time(schedule: Schedule) -> float:
    """The α-β simulator's time for a verified schedule (raises if it does not verify)."""
    verify_schedule(schedule).raise_if_failed()
    return simulate(schedule).time


def baseline_schedule_for(topology: Topology, model: str, collective: Collective,
                          relays: str = "members") -> Schedule:
    """The baseline schedule that runs the algorithm ``model`` describes."""
    if BASELINE[model] == "nccl":
        from tacos.cost.nccl import best_channel_schedule

        return best_channel_schedule(topology, collective, relays)
    from tacos.solvers.baselines.solver import baseline_schedule

    return baseline_schedule(BASELINE[model], topology, collective, relays=relays)


def compare(topology: Topology, kind: str, size: int, *,
            models: Sequence[str] = MODELS, groups: Sequence[Sequence[int]] | None = None,
            root: int | None = None, chunks: int = 1, relays: str = "members",
            baselines: bool = True,
            synthesize: str | None = None, seed: int = 0, trials: int | None = None,
            ) -> Comparison:
    """Estimate with each of ``models`` and measure the matching baseline schedules.

    ``relays`` as in :func:`~tacos.cost.estimates.estimate` (and the baselines).  ``synthesize``
    names a solver (e.g. ``'greedy'``) whose plan is also simulated.
    """
    ctx = Context(topology)
    groups = [list(g) for g in (groups or [topology.live_npus])]
    check_request(topology, kind, groups, root)
    coll = make_collective(topology, kind, size, groups, root, chunks)
    rows = []
    for name in models:
        model = canonical(name)
        est = estimate(ctx, kind, size, model=model, groups=groups, root=root, chunks=chunks,
                       relays=relays)
        sim = err = own = None
        note = ""
        if baselines and est.time is not None and len(groups[0]) > 1:
            try:
                sched = baseline_schedule_for(topology, model, coll, relays)
                sim, own = simulated_time(sched), sched.makespan
            except TacosError as exc:
                note = exc.message
            if sim:
                err = (est.time - sim) / sim
        rows.append(Row(est, BASELINE[model], sim, err, note or est.reason, own))
    synth = None
    if synthesize:
        from tacos.synthesize import synthesize as run

        opts = {"seed": seed, "bound": False, "relays": relays}
        if trials is not None:
            opts["trials"] = trials
        synth = simulated_time(run(topology, coll, solver=synthesize, **opts))
    return Comparison(tuple(rows), synth, synthesize or "")
