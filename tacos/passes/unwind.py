"""Switch unwinding: replace each switch by virtual NPU-to-NPU links.

Policies (per switch):

* ``full``: every attached NPU gets a virtual link to every other one; the sender's port
  bandwidth is split over its ``n-1`` virtual links.
* ``degree`` (TACOS): NPU i (in attachment order) gets links to the next ``d`` NPUs
  ``i+1 .. i+d (mod n)``, each with port bandwidth / d.
* ``ring``: ``degree`` with d = 1.
* ``biring``: links to the next and the previous NPU, port bandwidth / 2 each.

A virtual link's latency is α(up) + α(down); its ``via`` is the switch id.  Links between two
switches are not supported by unwinding (use NPU-attached switches).
"""

from __future__ import annotations

from tacos.errors import TdlSemanticError
from tacos.topology import Link, Topology


def _targets(policy: str, degree: int | None, n: int) -> list[list[int]]:
    """For attachment positions 0..n-1, the positions each one sends to."""
    if n <= 1:
        return [[] for _ in range(n)]
    if policy == "full":
        return [[j for j in range(n) if j != i] for i in range(n)]
    if policy == "ring":
        d = 1
    elif policy == "biring":
        return [sorted({(i + 1) % n, (i - 1) % n}) for i in range(n)]
    elif policy == "degree":
        d = degree or 1
    else:
        raise ValueError(f"unknown unwinding policy {policy!r}")
    d = min(d, n - 1)
    return [[(i + s) % n for s in range(1, d + 1)] for i in range(n)]


def unwind_switches(topology: Topology) -> Topology:
    """Return a switch-free topology whose virtual links carry ``via`` = the switch id.

    The switch entries stay in ``topology.switches`` for reporting; only links change.
    """
    if not topology.switches:
        return topology
    links: list[Link] = [lk for lk in topology.links
                         if not topology.is_switch(lk.src) and not topology.is_switch(lk.dst)]
    for sw in topology.switches:
        ups = {topology.links[i].src: topology.links[i] for i in topology.in_links[sw.id]}
        downs = {topology.links[i].dst: topology.links[i] for i in topology.out_links[sw.id]}
        for node in list(ups) + list(downs):
            if topology.is_switch(node):
                raise TdlSemanticError(
                    f"switch {sw.name!r} is linked to switch {topology.node_name(node)!r}; "
                    "switch-to-switch links cannot be unwound",
                    span=sw.span,
                    hint="attach NPUs to each switch, or model the fabric with NPU-level links",
                )
        attached = sorted(set(ups) & set(downs))
        targets = _targets(sw.policy, sw.degree, len(attached))
        for i, src in enumerate(attached):
            up = ups[src]
            fan = max(1, len(targets[i]))
            for j in targets[i]:
                dst = attached[j]
                down = downs[dst]
                bw = min(up.total_bandwidth, down.total_bandwidth) / fan
                links.append(
                    Link(src, dst, up.alpha + down.alpha, bw, 1, up.dim, up.tag or "switch",
                         sw.id, up.span)
                )
    return topology.with_links(links)
