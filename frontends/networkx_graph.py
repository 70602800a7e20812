"""networkx graphs → :class:`~tacos.model.topology.Topology` (``tacos.from_networkx``).

Accepted graphs: ``DiGraph`` and ``MultiDiGraph`` (each edge one direction), ``Graph`` and
``MultiGraph`` (each edge both directions).  Nodes may be any hashable labels:

* a node with ``kind="switch"`` is a switch (``policy``, ``degree``, ``capabilities``
  optional, see :class:`tacos.model.topology.Switch`); every other node is an NPU (``failed``
  optional);
* ``name`` names the node (default: the label as text);
* when the labels are exactly the integers ``0..n-1`` with every NPU before every switch, they
  are kept as ids (so ``Topology.to_networkx`` round-trips); otherwise NPUs are numbered in the
  graph's node order, then switches.

Edge attributes: ``bandwidth`` (required; bytes/s, or a text with a unit such as ``"25GB/s"``),
``alpha`` or ``latency`` (seconds or ``"0.7us"``; default 0), ``multiplicity`` (default 1),
``tag`` and ``dim``.  Every mistake is a :class:`~tacos.errors.TacosError` naming the node or
edge.
"""

from __future__ import annotations

from typing import Any

import networkx as nx

from tacos.errors import TacosError
from tacos.model.topology import SWITCH_CAPABILITIES, Link, Npu, Switch, Topology
from tacos.model.units import as_quantity
from tacos.model.validate import check_policy, check_topology

EDGE_KEYS = ("bandwidth", "alpha", "latency", "multiplicity", "tag", "dim", "via")


def _order(g: nx.Graph) -> list[Any]:
    """Node labels in id order: NPUs first, then switches."""
    labels = list(g.nodes)
    is_switch = {v: g.nodes[v].get("kind") == "switch" for v in labels}
    ints = list(range(len(labels)))
    if all(isinstance(v, int) and not isinstance(v, bool) for v in labels) \
            and set(labels) == set(ints):
        first_switch = next((v for v in ints if is_switch[v]), len(ints))
        if all(is_switch[v] for v in ints[first_switch:]):
            return ints
    return [v for v in labels if not is_switch[v]] + [v for v in labels if is_switch[v]]


def topology_from_networkx(g: nx.Graph, name: str = "") -> Topology:
    """Build a topology from a networkx graph (see the module docstring for the attributes)."""
    if not isinstance(g, nx.Graph):
        raise TacosError(f"expected a networkx graph, not {type(g).__name__}")
    order = _order(g)
    if not order:
        raise TacosError("the graph has no nodes")
    ids = {v: i for i, v in enumerate(order)}
    npus, switches = [], []
    for v in order:
        data = g.nodes[v]
        label = str(data.get("name", v))
        kind = data.get("kind", "npu")
        if kind not in ("npu", "switch"):
            raise TacosError(f"node {v!r}: kind must be 'npu' or 'switch', not {kind!r}")
        if kind == "switch":
            policy, degree = data.get("policy", "full"), data.get("degree")
            check_policy(policy, degree, f"switch node {v!r}")
            caps = data.get("capabilities", ())
            if isinstance(caps, str):
                caps = (caps,)
            bad = sorted(set(caps) - set(SWITCH_CAPABILITIES))
            if bad:
                raise TacosError(f"switch node {v!r}: unknown capability {bad[0]!r}",
                                 hint=f"capabilities: {', '.join(SWITCH_CAPABILITIES)}")
            switches.append(Switch(ids[v], label, policy, degree,
                                   capabilities=frozenset(caps)))
        else:
            npus.append(Npu(ids[v], label, bool(data.get("failed", False))))
    if not npus:
        raise TacosError("the graph has no NPU node (every node has kind='switch')")
    edges = g.edges(data=True)
    links: list[Link] = []
    for u, v, data in edges:
        where = f"edge {u!r} -> {v!r}"
        unknown = sorted(set(data) - set(EDGE_KEYS))
        if "bandwidth" not in data:
            raise TacosError(f"{where} has no 'bandwidth' attribute",
                             hint="set it in bytes/s, e.g. g.add_edge(a, b, bandwidth=25e9)"
                             + (f" (found {', '.join(unknown)})" if unknown else ""))
        if "alpha" in data and "latency" in data:
            raise TacosError(f"{where} has both 'alpha' and 'latency'", hint="keep one")
        bw = as_quantity(data["bandwidth"], "bandwidth", f"{where} bandwidth")
        alpha = as_quantity(data.get("alpha", data.get("latency", 0.0)), "time",
                            f"{where} latency")
        mult = data.get("multiplicity", 1)
        via = data.get("via")
        pairs = [(u, v)] if g.is_directed() else [(u, v), (v, u)]
        for a, b in pairs:
            links.append(Link(ids[a], ids[b], alpha, bw, mult, data.get("dim"),
                              str(data.get("tag", "") or ""),
                              ids.get(via) if via is not None else None))
    topo = Topology(tuple(npus), tuple(switches), tuple(links),
                    name=name or str(g.graph.get("name", "") or ""))
    return check_topology(topo)
