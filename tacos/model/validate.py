"""Validation of a :class:`~tacos.model.topology.Topology` built outside the TDL.

The TDL frontend checks everything with source locations; topologies built in Python
(:mod:`tacos.builders`, :func:`tacos.from_networkx`, importers, or the dataclasses directly)
are checked here before a solver sees them, so that a link to a missing NPU is a clear
:class:`~tacos.errors.TacosError` instead of an ``IndexError`` deep inside a solver.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable

from tacos import limits
from tacos.errors import TacosError, UsageError
from tacos.model.collective import Collective
from tacos.model.topology import UNWIND_POLICIES, Link, Topology, fabrics


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_policy(policy: object, degree: object, where: str) -> None:
    """Raise unless ``policy``/``degree`` is a known switch unwinding policy."""
    if policy not in UNWIND_POLICIES:
        close = difflib.get_close_matches(str(policy), UNWIND_POLICIES, n=1)
        raise TacosError(f"{where}: unknown unwinding policy {policy!r}",
                         hint=f"did you mean '{close[0]}'?" if close
                         else f"use one of {', '.join(UNWIND_POLICIES)}")
    if degree is not None and (isinstance(degree, bool) or not isinstance(degree, int)
                               or degree < 1):
        raise TacosError(f"{where}: the policy argument must be a positive integer, "
                         f"not {degree!r}", hint="e.g. policy='degree', degree=2")


def check_link(link: Link, n_nodes: int | None, where: str,
               name: Callable[[int], str] = str) -> None:
    """Raise unless ``link`` joins two existing (ids below ``n_nodes``; any integer when
    None), distinct nodes with sane numbers."""
    for end in (link.src, link.dst):
        if isinstance(end, bool) or not isinstance(end, int) \
                or (n_nodes is not None and not 0 <= end < n_nodes):
            raise TacosError(f"{where}: endpoint {end!r} is not a node (ids are 0.."
                             f"{n_nodes - 1})", hint="declare the NPU or switch first")
    if link.src == link.dst:
        raise TacosError(f"{where}: {name(link.src)} is linked to itself",
                         hint="a link joins two different nodes")
    if not _number(link.bandwidth) or not math.isfinite(link.bandwidth) \
            or link.bandwidth <= 0:
        raise TacosError(f"{where}: bandwidth must be a positive number of bytes/s, "
                         f"not {link.bandwidth!r}",
                         hint="e.g. 25e9 for 25 GB/s; a failed link is left out instead")
    if not _number(link.alpha) or not math.isfinite(link.alpha) or link.alpha < 0:
        raise TacosError(f"{where}: latency must be a number of seconds >= 0, "
                         f"not {link.alpha!r}", hint="e.g. 0.7e-6 for 0.7 us")
    if isinstance(link.multiplicity, bool) or not isinstance(link.multiplicity, int) \
            or link.multiplicity < 1:
        raise TacosError(f"{where}: multiplicity must be an integer >= 1, "
                         f"not {link.multiplicity!r}")
    for kind, value in (("bandwidth", link.bandwidth), ("latency", link.alpha)):
        problem = limits.check_number(kind, value)
        if problem is not None:
            raise TacosError(f"{where}: {problem}")
    if link.multiplicity > limits.current().multiplicity:
        raise limits.exceeded("multiplicity", link.multiplicity, f"{where}: multiplicity")


def check_topology(topology: Topology) -> Topology:
    """Raise :class:`~tacos.errors.TacosError` for a malformed topology; return it otherwise.

    Checks node numbering (NPUs ``0..n-1``, then switches), switch policies, and every link's
    endpoints, bandwidth, latency and multiplicity.
    """
    if not isinstance(topology, Topology):
        raise TacosError(f"expected a tacos.Topology, not {type(topology).__name__}",
                         hint="build one with tacos.load(...), tacos.builders or "
                              "tacos.from_networkx(...)")
    if not topology.npus:
        raise TacosError("the topology has no NPU")
    for i, npu in enumerate(topology.npus):
        if npu.id != i:
            raise TacosError(f"NPU {npu.name!r} has id {npu.id}; NPU ids must be 0..n-1 in "
                             "order")
    n = len(topology.npus)
    for j, sw in enumerate(topology.switches):
        if sw.id != n + j:
            raise TacosError(f"switch {sw.name!r} has id {sw.id}; switches are numbered "
                             f"after the NPUs ({n + j} expected)")
        check_policy(sw.policy, sw.degree, f"switch {sw.name!r}")
    n_nodes = topology.n_nodes

    def name(v: int) -> str:
        return topology.node_name(v)

    for i, link in enumerate(topology.links):
        check_link(link, n_nodes, f"link {i}", name)
    return topology


def check_collective(collective: Collective) -> None:
    """Chunk count, demanded deliveries and chunk sizes are within limits and ranges."""
    name = collective.name or collective.kind
    limits.check("chunks", collective.n_chunks, f"collective {name} has too many chunks")
    limits.check("deliveries", sum(len(c.post) for c in collective.chunks),
                 f"collective {name} demands too many chunk arrivals")
    lo, hi, _ = limits.RANGES["size"]
    bad = [c for c in collective.chunks if not lo <= c.size <= hi]
    if bad:
        raise TacosError(f"chunk {bad[0].id}: {limits.check_number('size', bad[0].size)}")


def unwound_link_count(topology: Topology) -> int:
    """Links (and switch-pair distances) switch unwinding will produce, without building them.

    Per fabric of n attached NPUs: ``full`` gives n(n-1) links, ``degree(d)`` n·min(d, n-1),
    ``ring``/``biring``/``stride`` at most 2n; a fabric of s > 1 switches also needs s² switch
    distances.
    """
    if not topology.switches:
        return len(topology.links)
    total = sum(1 for lk in topology.links
                if not (topology.is_switch(lk.src) or topology.is_switch(lk.dst)))
    for fabric in fabrics(topology):
        attached = set()
        for sw in fabric:
            attached.update(topology.links[i].src for i in topology.in_links[sw])
            attached.update(topology.links[i].dst for i in topology.out_links[sw])
        n = len(attached - set(fabric))
        first = topology.switches[fabric[0] - topology.n_npus]
        if first.policy == "full":
            total += n * (n - 1)
        elif first.policy == "degree":
            total += n * min(max(n - 1, 0), first.degree or 1)
        else:
            total += 2 * n
        if len(fabric) > 1:
            total += len(fabric) ** 2
    return total


def check_group_ids(topology: Topology, collective: Collective) -> None:
    """Every NPU id of the collective's group is an NPU of ``topology``: a
    :class:`~tacos.errors.UsageError` (an input error) naming the first that is not."""
    n = topology.n_npus
    for v in collective.group:
        if not 0 <= v < n:
            raise UsageError(f"NPU id {v!r} of the collective's group is not an NPU of the "
                             f"topology (it has {n} NPUs, ids 0 to {n - 1})",
                             hint="check the group, or look ids up with Topology.npu(name)")


def check_problem(topology: Topology, collective: Collective) -> None:
    """The limits synthesis needs to hold before it starts work (the API's entry check; link
    values are checked by :func:`tacos.model.validate.check_topology`); errors are located
    at the statement responsible (:mod:`tacos.model.limit_spans`)."""
    from tacos.model.limit_spans import locate_group, locate_links

    check_group_ids(topology, collective)
    try:
        check_collective(collective)
    except limits.LimitError as exc:
        raise locate_group(exc, topology, collective.group, collective) from None
    try:
        limits.check("links", unwound_link_count(topology), "switch unwinding would create "
                     "too many links (a fully unwound switch of n ports gives n(n-1))")
    except limits.LimitError as exc:
        raise locate_links(exc, topology) from None
