"""Switch unwinding: a switch-free *view* of a topology for solvers that need a fixed graph.

The physical model (:mod:`tacos.model.routes`) routes transfers through switches; the TEN ILP, the
TACCL-like solver and TACOS-style synthesis instead need every NPU-to-NPU connection as one
link with a fixed share of the port.  :func:`unwind` builds that view (the seed paper's switch
unwinding) and remembers, for each view link, the physical route it stands for;
:func:`to_physical` maps a schedule made on the view back to those routes and retimes it on the
physical links (a view link's static share of a port becomes the port itself, shared in time),
as cvxpy's reductions invert.  Nobody but the solver ever sees a view schedule.

Switches joined to each other (a leaf-spine fabric) are unwound together: each connected group
of switches is one *fabric*, and the NPUs linked to any of its switches are its attached NPUs.
The fabric's policy is its first switch's:

* ``full``: every attached NPU gets a virtual link to every other one; the sender's port
  bandwidth is split over its ``n-1`` virtual links.
* ``degree`` (TACOS): NPU i (in id order) gets links to the next ``d`` NPUs
  ``i+1 .. i+d (mod n)``, each with port bandwidth / d.
* ``ring``: ``degree`` with d = 1.
* ``biring``: links to the next and the previous NPU, port bandwidth / 2 each.
* ``stride`` (s): one full-bandwidth link to the NPU s places further, ``i -> i+s (mod n)``.
  With NPUs attached node by node, ``stride(per-node count)`` pairs equal local ranks of
  consecutive nodes (a rail ring), which suits a scale-out switch shared by whole nodes.

A virtual link u→v has latency α(u→its switch) + the α of the shortest switch-to-switch path +
α(switch→v), and bandwidth min(up port / u's fan-out, down port / v's fan-in).  Its physical
route is a fewest-link route from u to v through the fabric's switches; in a multi-switch
fabric with several such routes (ECMP), virtual links are spread over them in turn.  The view
treats the fabric as non-blocking; the mapped-back schedule is timed on the real links, so an
oversubscribed fabric shows up in the time.  ``via`` is the sender's switch.

**Process groups.**  ``unwind(topology, members=group)`` builds the view a collective over
``group`` needs: only group members are attached to switch fabrics (a 4-GPU group on an 8-port
NVSwitch gets three virtual links per GPU at a third of its port, not seven at a seventh), and
only direct links between members are kept, so schedules relay through group members only.
With ``relays=True`` every direct NPU-to-NPU link is kept (relays through NPUs outside the
group are allowed); fabrics still attach members only, since through a switch a member reaches
another member directly.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import networkx as nx

from tacos.model.schedule import Schedule, Transfer
from tacos.model.topology import Link, Topology, fabrics


@dataclass(frozen=True)
class View:
    """A switch-free view of ``physical``: ``topology`` has NPU-to-NPU links only, and view
    link ``i`` stands for the physical route ``routes[i]`` (link ids of ``physical``)."""

    physical: Topology
    topology: Topology
    routes: tuple[tuple[int, ...], ...]

    @property
    def identity(self) -> bool:
        """True when the view is the physical topology itself (no switch to unwind)."""
        return self.topology is self.physical


def _targets(policy: str, degree: int | None, n: int) -> list[list[int]]:
    """For attachment positions 0..n-1, the positions each one sends to."""
    if n <= 1:
        return [[] for _ in range(n)]
    if policy == "full":
        return [[j for j in range(n) if j != i] for i in range(n)]
    if policy == "biring":
        return [sorted({(i + 1) % n, (i - 1) % n}) for i in range(n)]
    if policy == "stride":
        s = (degree or 1) % n
        return [[(i + s) % n] if s else [] for i in range(n)]
    if policy == "ring":
        d = 1
    elif policy == "degree":
        d = degree or 1
    else:
        raise ValueError(f"unknown unwinding policy {policy!r}")
    d = min(d, n - 1)
    return [[(i + s) % n for s in range(1, d + 1)] for i in range(n)]


def _switch_links(topology: Topology) -> bool:
    return any(topology.is_switch(lk.src) or topology.is_switch(lk.dst) for lk in topology.links)


def unwind_switches(topology: Topology) -> Topology:
    """The view's topology alone: switch-free, virtual links carry ``via`` = a switch id.

    The switch entries stay in ``topology.switches`` for reporting; only links change.
    """
    return unwind(topology).topology


def unwind(topology: Topology, members: Iterable[int] | None = None, *,
           relays: bool = False) -> View:
    """The switch-free :class:`View` of ``topology`` (itself when it has no switch links and
    every NPU is a member).

    ``members`` (default: every NPU) are the NPUs the view attaches to switch fabrics and joins
    by direct links; NPU ids stay as they are, non-members simply have no view link unless
    ``relays`` keeps every direct NPU-to-NPU link for them to relay on (see the module
    docstring).
    """
    keep = None if members is None else frozenset(members)
    if keep is not None and keep >= set(topology.live_npus):
        keep = None
    if keep is None and not _switch_links(topology):
        return View(topology, topology, tuple((i,) for i in range(len(topology.links))))
    links: list[Link] = []
    routes: list[tuple[int, ...]] = []
    for i, lk in enumerate(topology.links):
        if topology.is_switch(lk.src) or topology.is_switch(lk.dst):
            continue
        if keep is None or relays or (lk.src in keep and lk.dst in keep):
            links.append(lk)
            routes.append((i,))
    inner = nx.DiGraph()
    for lk in topology.links:
        if topology.is_switch(lk.src) and topology.is_switch(lk.dst):
            inner.add_edge(lk.src, lk.dst, alpha=lk.alpha)
    hops = dict(nx.all_pairs_dijkstra_path_length(inner, weight="alpha"))
    existing = {(lk.src, lk.dst) for lk in links}
    for fabric in fabrics(topology):
        first = topology.switches[fabric[0] - topology.n_npus]
        ups: dict[int, Link] = {}
        downs: dict[int, Link] = {}
        for sw in fabric:
            for i in topology.in_links[sw]:
                lk = topology.links[i]
                if not topology.is_switch(lk.src):
                    ups.setdefault(lk.src, lk)
            for i in topology.out_links[sw]:
                lk = topology.links[i]
                if not topology.is_switch(lk.dst):
                    downs.setdefault(lk.dst, lk)
        attached = sorted(v for v in set(ups) & set(downs) if keep is None or v in keep)
        targets = _targets(first.policy, first.degree, len(attached))
        fan_in = [0] * len(attached)
        for ts in targets:
            for j in ts:
                fan_in[j] += 1
        members = set(fabric)
        for i, src in enumerate(attached):
            up = ups[src]
            for j in targets[i]:
                dst = attached[j]
                if (src, dst) in existing:
                    continue  # a direct link already joins them; keep the direct one
                down = downs[dst]
                hop = 0.0 if up.dst == down.src else hops.get(up.dst, {}).get(down.src)
                cands = [r for r in topology.routing.routes(src, dst)
                         if r.switched and topology.links[r.links[0]].dst in members]
                if hop is None or not cands:
                    continue
                bw = min(up.total_bandwidth / len(targets[i]),
                         down.total_bandwidth / max(1, fan_in[j]))
                links.append(Link(src, dst, up.alpha + hop + down.alpha, bw, 1, up.dim,
                                  up.tag or "switch", up.dst, up.span))
                fewest = min(len(r.links) for r in cands)
                cands = [r for r in cands if len(r.links) == fewest]
                routes.append(cands[(i + j) % len(cands)].links)
    return View(topology, topology.with_links(links), tuple(routes))


def to_physical(schedule: Schedule, view: View, *, retime: bool = True) -> Schedule:
    """Map a schedule made on ``view.topology`` back to physical routes of ``view.physical``.

    Each transfer over view link ``i`` takes the route ``view.routes[i]``.  With ``retime``
    (the default) the result is replayed on the physical links by
    :func:`tacos.check.simulate.simulate`: transfers whose routes share a link (several view links
    standing for one port) take turns, each at the route's full cut-through speed.  Both
    replay orders are tried -- the view's order on every link, and work-conserving (a transfer
    goes as soon as its data is there and its route is free) -- and the faster is kept.  The
    identity view returns the schedule unchanged.
    """
    if view.identity:
        return schedule
    routes = view.routes
    transfers = tuple(
        Transfer(t.start, t.end, t.src, t.dst, routes[t.link], t.chunks, t.op)
        for t in schedule.transfers
    )
    mapped = Schedule(view.physical, schedule.collective, transfers, dict(schedule.meta))
    if not retime:
        return mapped
    from tacos.check.simulate import simulate

    out = min((simulate(mapped, order=o).schedule for o in ("planned", "ready")),
              key=lambda s: s.makespan)
    out.meta.pop("retimed", None)
    out.meta["view"] = "unwound"
    return out
