"""The ``auto`` portfolio on large groups: what it skips there, and why.

On a small group ``auto`` builds, verifies and ranks every candidate.  From
:data:`SCALE_PAIRS` ordered (source, destination) NPU pairs up (225 NPUs), every candidate's
schedule has on the order of N² transfers, and building, verifying and ranking one costs
seconds to minutes.  There the portfolio goes through a :class:`ScaleGate`:

* **NCCL's algorithms are ranked before they are built** (when the plan is not written as
  MSCCL XML).  ``auto`` ranks an NCCL plan by NCCL's own model of running it
  (:func:`tacos.runtime.plans.nccl_runtime`), a function of the topology and the size, not of
  the plan's transfers.  So the gate ranks the synthesized plans first, then builds only the
  NCCL algorithms whose modelled time is under the best of them; any other cannot win (a tie
  goes to the synthesized plan, whose label sorts first) and is listed in ``skipped`` with
  both times.  The winner is the one the full portfolio picks.
* **NCCL's ring is built at the most channels that fit** :data:`TRANSFER_BUDGET`.  Its
  ranking time does not depend on the channel count of its link-level plan, but that plan's
  transfers grow with it (NCCL's search over 1, 2, 4 and 8 channels on 1,024 GPUs: 15.7
  million transfers); the channel count built and those not built are in ``skipped``.
* **A synthesized plan whose runtime floor is above NCCL's fastest model is not timed in
  full** (:func:`tacos.solvers.auto_floor.runtime_floor`: one pass of the runtime model with
  every connection at its full rate, not even that when the busiest thread block of the
  lowering already takes longer at the CTA rate); the portfolio's ranking leaves it out from
  the same floor.
* **A plan already verified or ranked is not verified or ranked again**: the command line's
  verification and report reuse the winner's verification (:func:`verified_report`) and its
  runtime-model time (:func:`ranked_runtime`).
* **The hierarchical plan is not built where it cannot win** (:meth:`ScaleGate.skip`): on a
  group so large that no MSCCL program of any plan loads (:func:`no_plan_loads`: the gpu
  elements alone fill the runtime parser's nodes), no synthesized plan has a runtime-model
  time, so the portfolio ranks them at the link level (or leaves them out of a ranking by
  NCCL's models).  There :func:`tacos.solvers.baselines.hier_bound.hierarchical_floor`, a
  lower bound on the hierarchical plan's link-model time computed from the topology's
  dimensions before the plan exists, is compared with the verified plans built so far: when
  it is above one of them (or equal, that plan's label sorting first, as ties go), the
  hierarchical plan cannot win and is listed in ``skipped`` with both times.
* **Written as MSCCL XML** (``tacosc -o plan.xml``), NCCL's algorithms are ranked by their own
  XML lowering, so all are built, the ring within the transfer budget; the runtime-shaped
  ranking is :mod:`tacos.solvers.scale_shaped`.  Two exceptions there:

  - NCCL's tree is not built when its XML is provably refused for its chunk count
    (:func:`tacos.solvers.nccl.tree_refuse.refused_unbuilt`: an upper bound on the makespan of
    each of its tuned settings shows the tuner keeps one whose chunk count does not divide the
    message); ``skipped`` gives the refusal the shaped ranking would give, and says it was
    not built.  Should the shaped ranking fail, it is built then (:meth:`ScaleGate.build_deferred`).
  - A plan is verified once it can be ranked: just before it is lowered, after the refusals
    and floors that may leave it out; a ``skipped`` line that quotes the link-model time of a
    plan not verified says so.  The winner is always verified.

Everything the gate decides is in the portfolio's ``skipped`` entries; naming candidates
(``-O candidates=...``) runs the full portfolio at any size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tacos.check.verify import VerifyReport
from tacos.check.verify_once import verified
from tacos.errors import TacosError
from tacos.model.collective import Collective
from tacos.model.schedule import Schedule
from tacos.model.topology import Topology

SCALE_PAIRS = 50_000
"""Ordered NPU pairs of a group (N (N - 1)) from which the portfolio goes through the gate."""

TRANSFER_BUDGET = 600_000
"""Most (NPU pair x channel) transfers of the NCCL ring's link-level plan the gate builds."""

_LAST: dict[str, Any] = {}  # the last gate's winner: its transfers and its runtime estimate


def scale_gate(topology: Topology, collective: Collective, *,
               candidates: tuple[str, ...] | None, emit: str) -> ScaleGate | None:
    """The gate for this portfolio run, or None when the full portfolio runs (a small group,
    or candidates named by the user)."""
    n = len(collective.group)
    if candidates is not None or n * (n - 1) < SCALE_PAIRS:
        return None
    _LAST.clear()
    return ScaleGate(n, emit)


def no_plan_loads(topology: Topology, collective: Collective) -> bool:
    """Whether no MSCCL XML lowering of any plan with a transfer can load on this group:
    a rank with a peer needs at least 1 + the GPU count + a thread block and a step parsed
    nodes (:func:`tacos.msccl.shape_refuse.refusal`), over the parser's limit.  Every such
    plan is then refused before lowering (:func:`tacos.runtime.plans.unloadable`) and has no
    runtime-model time."""
    from tacos.msccl.lower import MscclOptions
    from tacos.msccl.shape_choose import limits_for

    limits = limits_for(topology, MscclOptions().max_steps_per_tb)
    return 1 + len(collective.group) + 2 > limits.max_nodes


def verified_report(schedule: Schedule) -> VerifyReport | None:
    """The verification the last gate made of ``schedule``'s plan (None when it was not the
    winner of a gated portfolio run): the same transfers, so the same report."""
    if _LAST.get("transfers") is schedule.transfers and schedule.meta.get("auto"):
        return _LAST.get("report")
    return None


def ranked_runtime(schedule: Schedule) -> tuple[Any, str] | None:
    """The runtime-model ``(estimate, note)`` the last gate ranked ``schedule``'s plan by
    (None when it was not the winner of a gated portfolio run)."""
    if _LAST.get("transfers") is schedule.transfers and schedule.meta.get("auto"):
        return _LAST.get("runtime")
    return None


@dataclass
class ScaleGate:
    """One gated portfolio run: the group size, the output ranked for, and what was done."""

    npus: int
    emit: str
    _reports: dict[int, VerifyReport] = field(default_factory=dict)
    _runtimes: dict[tuple[int, bool], tuple[Any, str]] = field(default_factory=dict)
    _floors: dict[int, float] = field(default_factory=dict)
    #: NCCL's fastest modelled time, once known: a floor only needs to be known above it
    _above: float | None = None
    #: synthesizers not run (:meth:`skip`): their link-model lower bound (s)
    skipped_floors: dict[str, float] = field(default_factory=dict)
    #: plans refused unbuilt (:meth:`_tree_refused`): label -> their builder
    _deferred: dict[str, Any] = field(default_factory=dict)

    def skip(self, name: str, topology: Topology, collective: Collective,
             plans: dict[str, Schedule], relays: str = "members") -> str:
        """Why synthesizer ``name`` is not run (its ``skipped`` entry), or '' (see module
        doc): the hierarchical plan, when the plan is not written as MSCCL XML, no plan can
        have a runtime-model time (:func:`no_plan_loads`) and its link-model lower bound
        (:func:`~tacos.solvers.baselines.hier_bound.hierarchical_floor`) is not under a
        verified plan of ``plans`` that wins a tie against it."""
        if name != "hierarchical" or self.emit or not plans \
                or not no_plan_loads(topology, collective):
            return ""
        from tacos.solvers.baselines.hier_bound import hierarchical_floor

        floor = hierarchical_floor(topology, collective, relays)
        if floor is None:
            return ""
        beaten = [(plans[k].makespan, k) for k in sorted(plans)
                  if plans[k].makespan < floor.time
                  or (plans[k].makespan == floor.time and k < name)]
        best = next(((t, k) for t, k in sorted(beaten) if self.verify(plans[k]).ok), None)
        if best is None:
            return ""
        from tacos.model.units import format_time

        self.skipped_floors[name] = floor.time
        return (f"cannot win: its plan takes at least {format_time(floor.time)} in the link "
                f"model ({floor.describe()}, one hop per message at the fastest link), "
                f"{best[1]}'s {format_time(best[0])}; no MSCCL program loads on "
                f"{self.npus} NPUs, so the link model ranks (not built)")

    def runner_up(self, facts: dict[str, Any], times: dict[str, float]) -> None:
        """Name a plan :meth:`skip` left out as the runner-up in ``facts``, at least its bound
        behind the winner, when that bound is under every other candidate's time."""
        winner = facts["winner"]
        others = [t for k, t in times.items() if k != winner]
        if not self.skipped_floors or not times[winner] > 0:
            return
        label, floor = min(self.skipped_floors.items(), key=lambda kv: (kv[1], kv[0]))
        if others and not floor < min(others) or facts.get("margin_at_least") \
                and not floor < facts["margin"] * times[winner]:
            return
        facts.update(runner_up=label, margin=floor / times[winner], margin_at_least=True)

    def verify(self, schedule: Schedule) -> VerifyReport:
        """:func:`~tacos.check.verify_once.verified`, kept for the winner's report."""
        key = id(schedule)
        if key not in self._reports:
            self._reports[key] = verified(schedule)
        return self._reports[key]

    def runtime_of(self, schedule: Schedule, topology: Topology, *, as_xml: bool = False
                   ) -> tuple[Any, str]:
        """:func:`tacos.runtime.plans.runtime_of`, once per plan."""
        from tacos.runtime.plans import runtime_of

        key = (id(schedule), as_xml)
        if key not in self._runtimes:
            self._runtimes[key] = runtime_of(schedule, topology, as_xml=as_xml)
        return self._runtimes[key]

    def remember(self, schedule: Schedule) -> None:
        """Keep the winner's verification and runtime estimate for the command line's check
        and report (:func:`verified_report`, :func:`ranked_runtime`)."""
        _LAST.clear()
        if id(schedule) in self._reports:
            _LAST.update(transfers=schedule.transfers, report=self._reports[id(schedule)])
        if (id(schedule), False) in self._runtimes and not self.emit:
            _LAST.update(transfers=schedule.transfers,
                         runtime=self._runtimes[(id(schedule), False)])

    def floor_of(self, schedule: Schedule, topology: Topology) -> float:
        """The runtime floor of ``schedule``'s MSCCL XML lowering
        (:func:`tacos.solvers.auto_floor.runtime_floor`), once per plan; 0.0 when it has none
        (in-switch groups, or a lowering the runtime model cannot time).  Once NCCL's fastest
        model is known, a floor above it may be the cheaper thread-block bound
        (``runtime_floor(..., above=)``)."""
        key = id(schedule)
        if key not in self._floors and len(schedule.transfers) \
                and no_plan_loads(topology, schedule.collective):
            self._floors[key] = 0.0  # every lowering is refused: no floor (not a pass over
            # a million transfers to learn it)
        if key not in self._floors:
            from tacos.runtime.plans import lowering_of
            from tacos.solvers.auto_floor import runtime_floor

            floor = 0.0
            if all(t.group is None for t in schedule.transfers):
                coll = schedule.collective
                try:
                    floor = runtime_floor(lowering_of(schedule), topology, int(coll.size),
                                          coll.group, above=self._above)
                except TacosError:
                    floor = 0.0
            self._floors[key] = floor
        return self._floors[key]

    def shaped_times(self, topology: Topology, collective: Collective,
                     plans: dict[str, Schedule], link_times: dict[str, float],
                     skipped: dict[str, str]
                     ) -> tuple[dict[str, float], dict[str, Any], str] | None:
        """The ranking by runtime-shaped MSCCL XML, one plan at a time
        (:func:`tacos.solvers.scale_shaped.shaped_ranking`)."""
        from tacos.solvers.scale_shaped import shaped_ranking

        return shaped_ranking(topology, collective, plans, link_times, skipped,
                              verify=self.verify)

    def verified_times(self, plans: dict[str, Schedule], link_times: dict[str, float],
                       skipped: dict[str, str], *, all_: bool) -> dict[str, float]:
        """The entries of ``link_times`` (label -> link-model time) whose plan this gate
        verified and found correct (:meth:`verify`); with ``all_`` every plan is verified
        first (the ranking that follows times every one), and one that fails is in
        ``skipped`` with its first violation."""
        out: dict[str, float] = {}
        if all_:
            link_times = {k: v.makespan for k, v in plans.items()}
        for label, t in link_times.items():
            key = id(plans[label])
            if key not in self._reports and not all_:
                continue
            rep = self.verify(plans[label])
            if rep.ok:
                out[label] = t
            elif all_:
                skipped[label] = "did not verify: " + rep.violations[0].text()
        return out

    def nccl(self, topology: Topology, collective: Collective, plans: dict[str, Schedule],
             skipped: dict[str, str], *, sys_: Any = None
             ) -> tuple[str, Schedule | None, dict[str, Schedule]] | None:
        """NCCL's algorithms that can beat the best synthesized plan in ``plans``, as
        :func:`tacos.solvers.nccl.solver.nccl_best` returns them (name of the fastest in NCCL's
        model, its schedule when built, every schedule built); the others are listed in
        ``skipped``.  Written as MSCCL XML (``emit``), every algorithm is built (the ring within
        the budget): the XML lowering ranks them.  None when the gate cannot rank NCCL ahead of
        building it (no synthesized plan has a runtime time): the caller then builds every
        NCCL algorithm."""
        from tacos.runtime.plans import nccl_runtime
        from tacos.solvers.nccl.lower import check_standard
        from tacos.solvers.nccl.solver import nccl_algorithms, nccl_schedule
        from tacos.solvers.nccl.system import system

        check_standard(collective, "NCCL")
        sys_ = sys_ or system(topology, collective.group)
        names = nccl_algorithms(sys_, collective)
        if not names:
            raise TacosError(f"NCCL has no algorithm for {collective.label()}")
        if self.emit:  # ranked by their own XML lowering: every algorithm is built
            if self.emit == "shaped" and "tree" in names:  # unless refused unbuilt
                names = self._tree_refused(topology, collective, sys_, names, skipped)
            built = {name: self._build(name, topology, collective, sys_, skipped,
                                       nccl_schedule) for name in names}
            if not built:
                return "tree", None, {}
            first = min(names, key=lambda a: (built[a].makespan, a))  # as nccl_best chooses
            return first, built[first], built
        times: dict[str, float] = {}
        for name in names:
            try:
                times[name] = nccl_runtime(topology, collective.kind, collective.size,
                                           collective.group, name).time
            except (TacosError, KeyError, ValueError):
                times[name] = 0.0  # no model time: cannot be ranked ahead, so it is built
        fastest = min(times.values())
        self._above = fastest if fastest > 0 else None
        best = self._best_synthesized(topology, plans, fastest)
        if best is None:
            return None
        label, bound = best
        from tacos.model.units import format_time

        built: dict[str, Schedule] = {}
        for name in sorted(names, key=lambda a: (times[a], a)):
            if times[name] >= bound > 0:
                skipped[f"nccl-{name}"] = (
                    f"cannot win: NCCL's {name} takes {format_time(times[name])} in the "
                    f"runtime model, {label}'s plan {format_time(bound)} (not built: "
                    f"{self.npus} NPUs)")
                continue
            built[name] = self._build(name, topology, collective, sys_, skipped, nccl_schedule)
        first = min(names, key=lambda a: (times[a], a))
        return first, built.get(first), built

    def _best_synthesized(self, topology: Topology, plans: dict[str, Schedule],
                          fastest: float) -> tuple[str, float] | None:
        """The verified synthesized plan with the least runtime-model time, and that time.
        A plan whose runtime floor is above ``fastest`` (NCCL's fastest model) is not timed:
        it cannot win, and the portfolio's ranking says so from the same floor; when every
        plan is left out so, ``(label, inf)`` (NCCL's algorithms are then all built).  None
        when no plan has a runtime time."""
        out: tuple[str, float] | None = None
        for label in sorted(plans):
            if not self.verify(plans[label]).ok:
                continue
            if fastest > 0 and self.floor_of(plans[label], topology) > fastest:
                out = out or (label, float("inf"))
                continue
            est, _ = self.runtime_of(plans[label], topology)
            if est is not None and (out is None or out[1] == float("inf")
                                    or est.time < out[1]):
                out = (label, est.time)
        return out

    def _tree_refused(self, topology: Topology, collective: Collective, sys_: Any,
                      names: list[str], skipped: dict[str, str]) -> list[str]:
        """``names`` without NCCL's tree when the shaped ranking would refuse its XML before
        lowering for its chunk count, proved without building it
        (:func:`tacos.solvers.nccl.tree_refuse.refused_unbuilt`; ``skipped`` says so).  Its
        builder is kept for :meth:`build_deferred`."""
        from tacos.msccl.lower import MscclOptions
        from tacos.msccl.shape_choose import ELEMENT_BYTES, limits_for
        from tacos.solvers.nccl.tree_refuse import refused_unbuilt

        elements = max(1, int(collective.size)) // ELEMENT_BYTES
        got = refused_unbuilt(sys_, collective, elements,
                              limits_for(topology, MscclOptions().max_steps_per_tb))
        if got is None:
            return names
        from tacos.solvers.nccl.solver import nccl_schedule

        skipped["nccl-tree"] = f"not ranked: runtime-shaped XML {got[0]} ({got[1]})"
        self._deferred["nccl-tree"] = lambda: nccl_schedule("tree", topology, collective,
                                                            sys_=sys_)
        return [n for n in names if n != "tree"]

    def build_deferred(self, plans: dict[str, Schedule], skipped: dict[str, str]) -> None:
        """Build into ``plans`` what :meth:`_tree_refused` left unbuilt (the shaped ranking
        failed, and the ranking that replaces it times every plan)."""
        for label, build in self._deferred.items():
            skipped.pop(label, None)
            try:
                plans[label] = build()
            except TacosError as exc:
                skipped[label] = exc.message
        self._deferred.clear()

    def _build(self, name: str, topology: Topology, collective: Collective, sys_: Any,
               skipped: dict[str, str], build: Any) -> Schedule:
        """NCCL's ``name`` schedule; the ring at the most channels within the budget."""
        if name != "ring":
            return build(name, topology, collective, sys_=sys_)
        from tacos.solvers.nccl.lower import powers_of_two
        from tacos.solvers.nccl.rings import max_channels, ring_schedule

        counts = powers_of_two(max_channels(sys_))  # what NCCL's channel search builds
        pairs = self.npus * (self.npus - 1)
        if pairs * sum(counts) <= TRANSFER_BUDGET:
            return build(name, topology, collective, sys_=sys_)
        c = max((x for x in counts if pairs * x <= TRANSFER_BUDGET), default=counts[0])
        sched = ring_schedule(sys_, collective, c)
        sched.meta.update(solver="nccl-ring", nccl="ring", tuned={"channels": c, "slices": 1})
        others = ", ".join(str(x) for x in counts if x != c)
        skipped[f"nccl-ring ({others} channels)"] = (
            f"link-level plan built with {c} channel(s) only: NCCL's search over "
            f"{', '.join(map(str, counts))} channels on {pairs:,} NPU pairs is over "
            f"{TRANSFER_BUDGET:,} transfers (its runtime-model time is NCCL's own channel "
            "count either way)")
        return sched
