"""In-switch operations: what a group of transfers (``Transfer.group``) may be.

A switch that declares ``multicast`` copies one incoming transfer to several down-ports (NVLS
``multimem.st``, InfiniBand multicast); one that declares ``reduce`` combines contributions
arriving on several up-ports into one outgoing transfer (NVLS ``multimem.ld_reduce``, SHARP).
A schedule writes such an operation as several transfers with the same ``group`` id, one per
destination (multicast) or per source (reduce), so that every member still has a plain route,
chunks and op.  This module owns the rules (``docs/machine-model.md``, "In-switch
collectives"), shared by the verifier, the simulator and the solvers:

* **fan-out** (multicast): the members share their source, carry the same chunks with
  ``op='copy'`` and go to distinct destinations; their routes form a tree out of the source
  (once two routes part they never meet again), they leave the source by one link, and every
  node where they part is a switch that declares ``multicast``;
* **fan-in** (reduce): the members share their destination, carry the same chunks with
  ``op='reduce'`` and come from distinct sources; their routes form a tree into the
  destination, they enter it by one link, and every node where they meet is a switch that
  declares ``reduce``;
* **joint** (several payloads, one signal): the members share their source, destination and
  route and carry disjoint chunks, each with its own ``op`` (one may copy into the
  destination's output while another is reduced into it); no switch capability is needed, and
  the group lasts at least the route's α plus **all** its members' bytes over the bandwidth
  (the verifier's ``duration`` rule): several puts to one peer followed by one signal, which
  pays the route latency once (MSCCL++ port channels: ``put`` pushes a data trigger per
  destination region, ``signal`` one flag for all of them);
* the members start and end together (checked by the verifier with its time tolerance) and a
  link used by several members is held **once** for the group's whole duration.

A group of one transfer is an ordinary transfer.  Data semantics do not change: a fan-out
member copies the source's value like any copy, a fan-in member adds the source's value at the
start like any reduce, so the verifier's causality and contribution replay applies member by
member.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tacos.model.schedule import Transfer
from tacos.model.topology import Topology

MULTICAST = "multicast"
REDUCE = "reduce"
JOINT = "joint"


class GroupError(ValueError):
    """A group of transfers that is not a valid in-switch operation (the message says why)."""


@dataclass(frozen=True)
class GroupShape:
    """What a valid group is: ``kind`` (``'multicast'``, ``'reduce'`` or ``'single'``), the
    physical ``links`` it holds (each once, in first-use order) and the switches where its
    routes part (multicast) or meet (reduce)."""

    kind: str
    links: tuple[int, ...]
    switches: tuple[int, ...]


def union_links(routes: Sequence[Sequence[int]]) -> tuple[int, ...]:
    """Links of several routes, each once, in first-use order."""
    return tuple(dict.fromkeys(li for r in routes for li in r))


def group_shape(topology: Topology, members: Sequence[Transfer]) -> GroupShape:
    """Check that ``members`` form one in-switch operation on ``topology`` and describe it.

    The members' routes must already be valid routes (the verifier checks them first).
    Raises :class:`GroupError` naming the broken rule.
    """
    if not members:
        raise GroupError("the group has no transfer")
    routes = [tuple(t.route) for t in members]
    if len(members) == 1:
        return GroupShape("single", union_links(routes), ())
    if len(set(routes)) == 1 and len({(t.src, t.dst) for t in members}) == 1:
        seen = [c for t in members for c in t.chunks]
        if len(set(seen)) != len(seen):
            raise GroupError("a joint transfer (one source, one destination, one route) "
                             "carries every chunk once: its members' chunks overlap")
        return GroupShape(JOINT, union_links(routes), ())
    chunks = {tuple(sorted(t.chunks)) for t in members}
    if len(chunks) != 1:
        raise GroupError("its transfers carry different chunks; one in-switch operation moves "
                         "the same chunks to (or from) every member")
    srcs = {t.src for t in members}
    dsts = {t.dst for t in members}
    if len(srcs) == 1 and len(dsts) == len(members):
        if any(t.op != "copy" for t in members):
            raise GroupError("a multicast (one source, several destinations) copies: every "
                             "member needs op 'copy'")
        return GroupShape(MULTICAST, union_links(routes),
                          _tree(topology, routes, MULTICAST))
    if len(dsts) == 1 and len(srcs) == len(members):
        if any(t.op != "reduce" for t in members):
            raise GroupError("an in-switch reduction (several sources, one destination) "
                             "reduces: every member needs op 'reduce'")
        flipped = [r[::-1] for r in routes]
        return GroupShape(REDUCE, union_links(routes),
                          _tree(topology, flipped, REDUCE, reverse=True))
    raise GroupError("its transfers neither share one source with distinct destinations "
                     "(multicast) nor one destination with distinct sources (reduce)")


def _tree(topology: Topology, routes: list[tuple[int, ...]], capability: str, *,
          reverse: bool = False) -> tuple[int, ...]:
    """Check that ``routes`` (all starting at one node; flipped for a fan-in) form a tree and
    that every node where they part is a switch declaring ``capability``; return those
    switches."""
    links = topology.links

    def tail(li: int) -> int:
        return links[li].dst if reverse else links[li].src

    entered: dict[int, int] = {}  # node -> the link routes enter it by
    leaving: dict[int, set[int]] = {}  # node -> links routes leave it by
    for route in routes:
        for k, li in enumerate(route):
            node = tail(li)
            if k > 0:
                prev = route[k - 1]
                if entered.setdefault(node, prev) != prev:
                    where = "meet again at" if not reverse else "part again at"
                    raise GroupError(f"its routes {where} {topology.node_name(node)} after "
                                     "taking different links; an in-switch operation's routes "
                                     "form a tree")
            leaving.setdefault(node, set()).add(li)
    start = tail(routes[0][0])
    if len(leaving.get(start, ())) > 1:
        end = "enter the destination" if reverse else "leave the source"
        raise GroupError(f"its transfers {end} {topology.node_name(start)} by different "
                         "links; an in-switch operation is one transfer between the NPU and "
                         "the switch")
    out = []
    for node, outs in leaving.items():
        if len(outs) < 2:
            continue
        if not topology.is_switch(node):
            raise GroupError(f"its routes part at NPU {topology.node_name(node)}, which is not "
                             "a switch")
        caps = topology.switches[node - topology.n_npus].capabilities
        if capability not in caps:
            what = "copies to several down-ports" if capability == MULTICAST else \
                "combines contributions"
            raise GroupError(f"it {what} at switch {topology.node_name(node)}, which does not "
                             f"declare '{capability}'")
        out.append(node)
    return tuple(sorted(out))
