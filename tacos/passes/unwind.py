"""Switch unwinding: replace switches by virtual NPU-to-NPU links.

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
α(switch→v), and bandwidth min(up port / u's fan-out, down port / v's fan-in).  Inside a
multi-switch fabric this models the fabric as non-blocking; the cut bounds are computed on the
real topology, so an oversubscribed fabric shows up as a gap, not a hidden error.  ``via`` is
the sender's switch.
"""

from __future__ import annotations

import networkx as nx

from tacos.topology import Link, Topology


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


def fabrics(topology: Topology) -> list[list[int]]:
    """Connected groups of switch ids (switch-to-switch links join them), in id order."""
    g = nx.Graph()
    g.add_nodes_from(s.id for s in topology.switches)
    for lk in topology.links:
        if topology.is_switch(lk.src) and topology.is_switch(lk.dst):
            g.add_edge(lk.src, lk.dst)
    return sorted((sorted(c) for c in nx.connected_components(g)), key=lambda c: c[0])


def unwind_switches(topology: Topology) -> Topology:
    """Return a switch-free topology whose virtual links carry ``via`` = a switch id.

    The switch entries stay in ``topology.switches`` for reporting; only links change.
    """
    if not topology.switches:
        return topology
    links: list[Link] = [lk for lk in topology.links
                         if not topology.is_switch(lk.src) and not topology.is_switch(lk.dst)]
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
        attached = sorted(set(ups) & set(downs))
        targets = _targets(first.policy, first.degree, len(attached))
        fan_in = [0] * len(attached)
        for ts in targets:
            for j in ts:
                fan_in[j] += 1
        for i, src in enumerate(attached):
            up = ups[src]
            for j in targets[i]:
                dst = attached[j]
                if (src, dst) in existing:
                    continue  # a direct link already joins them; keep the direct one
                down = downs[dst]
                hop = 0.0 if up.dst == down.src else hops.get(up.dst, {}).get(down.src)
                if hop is None:
                    continue
                bw = min(up.total_bandwidth / len(targets[i]),
                         down.total_bandwidth / max(1, fan_in[j]))
                links.append(Link(src, dst, up.alpha + hop + down.alpha, bw, 1, up.dim,
                                  up.tag or "switch", up.dst, up.span))
    return topology.with_links(links)
