"""The runtime-model time of what tacos emits for a schedule.

A schedule is a link-level plan; what a runtime executes is its lowering.  :func:`runtime_of`
times that executable form:

* an NCCL baseline (``--solver nccl*``): NCCL itself running the algorithm
  (:func:`tacos.runtime.nccl_model.estimate_nccl`; ``--solver nccl``: NCCL's own choice);
* any other plan: its MSCCL XML lowering (the program ``-o plan.xml`` writes, or the default
  lowering when none is given), timed by the MSCCL executor model;
* a plan with in-switch groups (NVLS/SHARP multicast or reduce transfers) that is not NCCL's:
  no runtime format tacos writes can express it, so it has no runtime time -- the reason is
  returned instead, and callers must not report its link-model time as the emitted file's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tacos.errors import TacosError
from tacos.model.schedule import Schedule
from tacos.model.topology import Topology
from tacos.runtime.estimate import RuntimeEstimate

#: tacos's NCCL solver algorithms -> the runtime model's.
NCCL_ALGORITHMS = {"ring": "ring", "tree": "tree", "nvls": "nvls", "collnet": "collnet",
                   "pat": "pat", "p2p": None}
LINK_ONLY = ("uses in-switch multicast/reduce groups that neither MSCCL XML nor the MSCCL++ "
             "plans tacos writes can express: it exists only in the link model")


def nccl_runtime(topology: Topology, kind: str, nbytes: int, group: Sequence[int],
                 algorithm: str | None) -> RuntimeEstimate:
    """NCCL running ``algorithm`` (tacos's name; None: NCCL's own choice) in the model."""
    from tacos.runtime.hardware import hardware_for
    from tacos.runtime.nccl_model import estimate_nccl, nccl_system

    algo = NCCL_ALGORITHMS.get(algorithm, algorithm) if algorithm else None
    if algo == "nvls" and nccl_system(topology, group, hardware_for(topology)).nodes > 1:
        algo = "nvls_tree"
    return estimate_nccl(topology, kind, nbytes, group=group, algorithm=algo)


def runtime_of(schedule: Schedule, topology: Topology | None = None, *,
               program: Any = None, options: Any = None, as_xml: bool = False
               ) -> tuple[RuntimeEstimate | None, str]:
    """``(estimate, what was timed)`` for ``schedule``, or ``(None, why not)``.

    ``program`` is the MSCCL program already lowered (``-o plan.xml``: that file is what runs,
    NCCL baselines included), ``options`` the :class:`tacos.msccl.lower.MscclOptions` to lower
    with otherwise; ``as_xml`` times the MSCCL XML lowering even of an NCCL baseline.
    ``topology`` defaults to the schedule's.
    """
    topo = topology or schedule.topology
    coll = schedule.collective
    meta = schedule.meta
    try:
        if program is None and not as_xml and ("nccl" in meta or "nccl_models" in meta):
            algo = None if "nccl_models" in meta else meta.get("nccl")
            est = nccl_runtime(topo, coll.kind, coll.size, coll.group, algo)
            return est, "NCCL running " + (f"its {algo}" if algo else "its own choice")
        if program is None:
            if any(t.group is not None for t in schedule.transfers):
                return None, LINK_ONLY
            program = lowering_of(schedule, options)
        key = (id(program), id(topo))
        got = _TIMED.get(key)
        if got is not None and got[0][0] is program and got[0][1] is topo:
            return got[1]
        from tacos.runtime.msccl_exec import estimate_program

        out = estimate_program(program, topo, coll.size, ranks=coll.group), \
            "its MSCCL XML lowering"
        _remember(_TIMED, key, (program, topo), out)
        return out
    except TacosError as exc:
        return None, f"runtime model: {exc.message}"


def lowering_of(schedule: Schedule, options: Any = None, check: Any = None) -> Any:
    """The MSCCL XML lowering of ``schedule`` (:func:`tacos.msccl.lower.lower` with
    ``options``), lowered once per process for a schedule whose transfers cannot change (a
    portfolio's plan is lowered for its runtime floor, timed, then timed again by the report
    and by sweeps: the same program each time).  ``check``: the lowering's hook
    (:func:`~tacos.msccl.lower.lower`), which may stop it: nothing is kept then."""
    from tacos.msccl.lower import lower

    key = (id(schedule.transfers), id(schedule.collective), id(schedule.topology), options)
    got = _LOWERED.get(key)
    if got is not None and all(a is b for a, b in zip(
            got[0], (schedule.transfers, schedule.collective, schedule.topology), strict=True)):
        program = got[1]
    else:  # a refusal is kept as its text: the floor, the ranking and the report ask again
        why = unloadable(schedule, options)
        program = f"no MSCCL program of this plan can load: {why}" if why else \
            lower(schedule, options=options, check=check)
        if not isinstance(schedule.transfers, list):  # a list may change: not kept
            _remember(_LOWERED, key, (schedule.transfers, schedule.collective,
                                      schedule.topology), program)
    if isinstance(program, str):
        raise TacosError(program)
    return program


def unloadable(schedule: Schedule, options: Any = None) -> str:
    """Why no MSCCL XML lowering of ``schedule`` can load in the runtime, or '': the sound
    refusals of the shape search (:func:`tacos.msccl.shape_refuse.refusal`: more peers on a
    rank than SMs, or more parsed nodes than the runtime's parser holds -- at 4,096 ranks the
    gpu elements alone are over it).  Checked before lowering, so that a plan no runtime can
    run is not lowered only to be timed (at 4,096 ranks that lowering took over 14 GiB)."""
    from tacos.msccl.lower import MscclOptions
    from tacos.msccl.shape_choose import limits_for
    from tacos.msccl.shape_refuse import refusal

    steps = (options or MscclOptions()).max_steps_per_tb
    return refusal(schedule, limits_for(schedule.topology, steps))


#: the last few lowerings and runtime times, by the identity of what they were computed from
#: (each entry keeps those objects alive, so an identity cannot be reused while it is kept)
_LOWERED: dict[tuple, tuple[tuple, Any]] = {}
_TIMED: dict[tuple, tuple[tuple, tuple[RuntimeEstimate, str]]] = {}
_KEEP = 8


def _remember(cache: dict, key: tuple, owners: tuple, value: Any) -> None:
    if len(cache) >= _KEEP:
        cache.pop(next(iter(cache)))
    cache[key] = (owners, value)


def runtime_json(est: RuntimeEstimate | None, note: str, link_time: float | None = None
                 ) -> dict[str, Any]:
    """The ``runtime`` object of a JSON report: ``time`` (s), ``algbw``, ``busbw``, ``model``,
    ``bound``, what was timed (``of``) and the link-model time beside it (``link_time``)."""
    if est is None:
        out: dict[str, Any] = {"time": None, "algbw": None, "busbw": None, "model": None,
                               "bound": None, "note": note}
    else:
        out = {**est.to_json(), "of": note}
    if link_time is not None:
        out["link_time"] = link_time
    return out
