"""Exporter to ASTRA-sim's analytical network backend (``astra-network-analytical``).

Its network configuration is a YAML file with one entry per dimension::

    topology: [ Ring, FullyConnected, Switch ]
    npus_count: [ 2, 8, 4 ]
    bandwidth: [ 200.0, 100.0, 50.0 ]   # GB/s
    latency: [ 50.0, 500.0, 2000.0 ]    # ns

so only multi-dimensional topologies of rings, fully connected groups and switches can be
expressed: TDL's ``dims`` notation (and :func:`tacos.builders.multi_dim`), whose links carry
the dimension index and kind.  Anything else raises :class:`~tacos.errors.TacosError` saying why
(ASTRA-sim's ns-3 backend takes arbitrary graphs but no public schema of a stable version is
targeted here).  Plans go to ASTRA-sim as Chakra execution traces:
:mod:`tacos.backends.chakra_et`.
"""

from __future__ import annotations

from tacos.errors import TacosError
from tacos.model.topology import Topology

KINDS = {"Ring": "Ring", "FullyConnected": "FullyConnected", "FC": "FullyConnected",
         "Switch": "Switch"}


def network_yaml(topology: Topology) -> str:
    """The ASTRA-sim analytical network YAML of a multi-dimensional topology."""
    dims: dict[int, dict] = {}
    for lk in topology.links:
        if lk.dim is None or lk.tag not in KINDS:
            raise TacosError(
                "ASTRA-sim's analytical network describes only multi-dimensional Ring / "
                "FullyConnected / Switch topologies; this one has other links "
                f"({topology.node_name(lk.src)} -> {topology.node_name(lk.dst)})",
                hint="describe the system with  dims npu Ring(2)_FullyConnected(4)_Switch(8) ...")
        d = dims.setdefault(lk.dim, {"kind": KINDS[lk.tag], "bw": set(), "alpha": set()})
        d["bw"].add(lk.bandwidth)
        d["alpha"].add(lk.alpha)
    if sorted(dims) != list(range(len(dims))):
        raise TacosError("the topology's dimensions are not numbered 0..k-1")
    sizes = _sizes(topology, len(dims))
    kinds, bws, lats = [], [], []
    for k in range(len(dims)):
        d = dims[k]
        if len(d["bw"]) != 1 or len(d["alpha"]) != 1:
            raise TacosError(f"dimension {k} mixes link speeds; ASTRA-sim takes one per "
                             "dimension")
        kinds.append(d["kind"])
        bws.append(next(iter(d["bw"])) / 1e9)
        lats.append(next(iter(d["alpha"])) * 1e9)
    return ("# ASTRA-sim analytical network (exported by tacos from "
            f"{topology.name or 'a topology'})\n"
            f"topology: [ {', '.join(kinds)} ]\n"
            f"npus_count: [ {', '.join(str(s) for s in sizes)} ]\n"
            f"bandwidth: [ {', '.join(f'{b:g}' for b in bws)} ]  # GB/s\n"
            f"latency: [ {', '.join(f'{x:g}' for x in lats)} ]  # ns\n")


def _sizes(topology: Topology, ndims: int) -> list[int]:
    """NPUs per dimension: the size of the groups each dimension's links join."""
    import networkx as nx

    out = []
    for k in range(ndims):
        g = nx.Graph()
        g.add_nodes_from(range(topology.n_nodes))
        g.add_edges_from((lk.src, lk.dst) for lk in topology.links if lk.dim == k)
        sizes = {sum(1 for v in c if not topology.is_switch(v))
                 for c in nx.connected_components(g)} - {0}
        if len(sizes) != 1:
            raise TacosError(f"dimension {k} has groups of different sizes {sorted(sizes)}")
        out.append(sizes.pop())
    if 0 in out or 1 in out:
        raise TacosError("every ASTRA-sim dimension needs at least 2 NPUs")
    return out
