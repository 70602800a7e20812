"""The ``auto`` portfolio's ranking by runtime-shaped MSCCL XML (``tacosc -o plan.xml``) on
large groups: one plan lowered at a time, and only while it can still win.

On a small group ``auto`` shapes every candidate plan at once
(:func:`tacos.msccl.shape_choose.choose_shape`, its quick search), which first lowers every
plan's one-instance program to order them.  At 512 ranks one such program has about a million
steps (tens of seconds and gigabytes to lower), so holding several at once fills the memory.
Behind the scale gate (:mod:`tacos.solvers.scale_gate`), :func:`shaped_ranking` instead

1. refuses, before lowering, the plans no shape can load (:func:`tacos.msccl.shape_refuse.refusal`,
   and :func:`tacos.msccl.channel_floor.channels_refusal`: more channels than the runtime's
   32 at one instance already);
2. takes every plan's **port floor** from its schedule alone (:func:`port_floor`: the bytes
   its transfers put on every link over the link's best effective rate in any protocol, plus
   that protocol's base latency), the same bound the shape search prunes with once a plan is
   lowered (:func:`tacos.msccl.shape_bounds.port_bound`), valid for every shape of the plan;
3. shapes the plans one at a time, lowest floor first, each against the best time found so
   far (the search's ``incumbent``: its shapes whose port, synchronization or CTA bound is no
   faster are pruned), and leaves out without lowering it a plan whose floor is no faster
   than that best (**cannot win**, in ``skipped`` with both figures);
4. forgets the programs of every plan once it is beaten (:meth:`ShapeCache.forget`), so at
   most the best plan's programs and the current plan's are held; the winner's stay in the
   shared cache, where the file written reuses them.

A plan left out cannot win: its every shape is at least its floor, which is no faster than a
time another plan reaches (a tie goes to the plan timed first).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tacos.check.verify import VerifyReport
from tacos.errors import TacosError
from tacos.model.collective import Collective
from tacos.model.schedule import Schedule
from tacos.model.topology import Topology

RANK_INSTANCES = (1, 2, 4, 8)
"""The instance counts the ranking tries: those of the portfolio's own shaped ranking
(``tacos.solvers.auto.RANK_INSTANCES``)."""


def schedule_link_bytes(schedule: Schedule, topology: Topology) -> dict[int, float]:
    """Bytes ``schedule``'s transfers send through every topology link (index), each pair of
    ranks routed as the runtime model routes their connection
    (:func:`tacos.msccl.shape_bounds.link_bytes` of any lowering of the schedule gives the
    same loads: a lowering sends every transfer's chunks from its source to its
    destination, once).  Raises :class:`~tacos.errors.TacosError` when a pair has no route."""
    coll = schedule.collective
    chunk = coll.size / max(1, len(coll.chunks))
    per_pair: dict[tuple[int, int], float] = {}
    for t in schedule.transfers:
        key = (t.src, t.dst)
        per_pair[key] = per_pair.get(key, 0.0) + schedule.transfer_bytes(t)
    out: dict[int, float] = {}
    for (a, b), nbytes in per_pair.items():
        route = topology.routing.best(a, b, chunk)
        if route is None:
            raise TacosError(f"the topology has no route from {topology.node_name(a)} to "
                             f"{topology.node_name(b)}, but the plan connects them")
        for i in route.links:
            out[i] = out.get(i, 0.0) + nbytes
    return out


def port_floor(schedule: Schedule, topology: Topology) -> float:
    """Seconds no runtime-shaped MSCCL XML lowering of ``schedule`` can be under in the
    runtime model: the least over the protocols of
    :func:`tacos.msccl.shape_bounds.port_bound` of its :func:`schedule_link_bytes`."""
    from tacos.msccl.shape import PROTOCOLS
    from tacos.msccl.shape_bounds import port_bound

    loads = schedule_link_bytes(schedule, topology)
    return min(port_bound(loads, topology, proto) for proto in PROTOCOLS)


def shaped_ranking(topology: Topology, collective: Collective, plans: dict[str, Schedule],
                   link_times: dict[str, float], skipped: dict[str, str], *,
                   instances: tuple[int, ...] = RANK_INSTANCES,
                   verify: Callable[[Schedule], VerifyReport] | None = None
                   ) -> tuple[dict[str, float], dict[str, Any], str] | None:
    """``(times, runtime, ranked_by)`` as :func:`tacos.solvers.auto._shaped_times` returns
    them, ranked one plan at a time (see module doc; ``instances``: the counts tried, as the
    portfolio's ranking).  Plans left out are in ``skipped`` with the reason.  None when no
    plan can be shaped (the caller then ranks the fixed lowering).

    ``verify``: the plans of ``link_times`` are not verified yet; each is verified by it once
    it can be ranked (no refusal or floor leaves it out), before it is lowered, and leaves the
    ranking when it fails (``did not verify``).  A line of ``skipped`` that quotes the
    link-model time of a plan not verified says so."""
    from tacos.model.units import format_time
    from tacos.msccl.busiest_memo import busiest_pair_once
    from tacos.msccl.channel_floor import channels_refusal
    from tacos.msccl.lower import IN_PLACE_KINDS, MscclOptions
    from tacos.msccl.shape import shapes
    from tacos.msccl.shape_choose import (
        ELEMENT_BYTES,
        SHARED_CACHE,
        ShapesPruned,
        choose_shape,
        limits_for,
    )
    from tacos.msccl.shape_refuse import chunks_refusal, refusal

    inplace = collective.kind in IN_PLACE_KINDS  # as the file is written: programs reused
    base = MscclOptions(inplace=inplace, outofplace=not inplace)
    checked: set[str] = set()  # plans verified here

    def link_time(label: str) -> str:
        """The link-model figure a line of ``skipped`` quotes, and of what plan."""
        unverified = ", plan not verified" if verify is not None and label not in checked \
            else ""
        return f"link-model time {link_times[label]:.4g} s{unverified}"

    plain = {k: plans[k] for k in link_times
             if not any(t.group is not None for t in plans[k].transfers)}
    for label in link_times:
        if label not in plain:
            skipped[label] = ("not ranked: runtime-shaped XML in-switch groups: MSCCL XML "
                              f"cannot express them ({link_time(label)})")
    if not plain:
        return None
    lim = limits_for(topology, base.max_steps_per_tb)
    nbytes = max(1, int(collective.size))
    floors: dict[str, float] = {}
    for label in list(plain):
        why = (refusal(plain[label], lim)
               or chunks_refusal(plain[label], nbytes // ELEMENT_BYTES)
               or channels_refusal(plain[label], 1, base.max_steps_per_tb,
                                   min(base.max_channels, lim.max_channels),
                                   inplace=inplace,  # the shape search asks for it again
                                   busiest=busiest_pair_once(plain[label],
                                                             base.max_steps_per_tb)))
        if why:
            skipped[label] = f"not ranked: runtime-shaped XML {why} ({link_time(label)})"
            del plain[label]
            continue
        try:
            floors[label] = port_floor(plain[label], topology)
        except TacosError:
            floors[label] = 0.0
    cands = shapes(instances=instances, port_orders=(False,))
    cache = SHARED_CACHE
    times: dict[str, float] = {}
    runtime: dict[str, Any] = {}
    best: tuple[float, str] | None = None
    for label in sorted(plain, key=lambda k: (floors[k], link_times[k], k)):
        if best is not None and floors[label] >= best[0]:
            skipped[label] = (f"cannot win: its runtime-shaped MSCCL XML takes at least "
                              f"{format_time(floors[label])} in the runtime model (its links' "
                              f"bytes at their full rate), no faster than {best[1]}'s "
                              f"{format_time(best[0])} (not lowered)")
            continue
        if verify is not None:  # it can be ranked: verified before it is lowered
            checked.add(label)
            rep = verify(plain[label])
            if not rep.ok:
                skipped[label] = "did not verify: " + rep.violations[0].text()
                continue
        try:
            choice = choose_shape({label: plain[label]}, topology, nbytes, quick=True,
                                  base=base, candidates=cands, cache=cache,
                                  incumbent=best[0] if best else float("inf"))
        except ShapesPruned:
            top = best or (0.0, "")
            skipped[label] = (f"cannot win: every runtime-shaped MSCCL XML shape of it is "
                              f"bounded at or above {top[1]}'s {format_time(top[0])}"
                              " (port, synchronization or thread-block bound)")
            cache.forget(plain[label])
            continue
        except (TacosError, ImportError) as exc:
            skipped[label] = f"not ranked: runtime-shaped XML {exc} ({link_time(label)})"
            cache.forget(plain[label])
            continue
        times[label] = choice.time
        runtime[label] = {"time": choice.time, "of": "its runtime-shaped MSCCL XML lowering "
                          f"({choice.shape.label()})", "instances": choice.shape.instances,
                          "proto": choice.shape.proto, "bound": choice.bound}
        if best is None or choice.time < best[0]:
            if best is not None:
                cache.forget(plain[best[1]])
            best = (choice.time, label)
        else:
            cache.forget(plain[label])
        del choice
    if not times:
        return None
    return times, runtime, "runtime model (shaped MSCCL XML)"
