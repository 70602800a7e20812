"""Topology IR: NPUs, switches and directed links.

Node ids share one integer namespace: NPUs are ``0 .. n_npus-1`` and switches follow them
(``n_npus .. n_npus+n_switches-1``).  Links are directed; a two-way link is two ``Link``s.  A
``Link`` with ``multiplicity`` m stands for m parallel physical links, each of ``bandwidth``.
Failed NPUs keep their id (so numbering stays stable) but have no links; failed links are kept
in ``failed_links`` for reporting only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from tacos.errors import Span

if TYPE_CHECKING:  # networkx is imported on use: the command line starts faster without it
    import networkx as nx

UNWIND_POLICIES = ("ring", "biring", "degree", "stride", "full")
SWITCH_CAPABILITIES = ("multicast", "reduce")


@dataclass(frozen=True)
class Npu:
    """A compute node (GPU/TPU/...)."""

    id: int
    name: str
    failed: bool = False
    span: Span | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Switch:
    """A switch node.

    Transfers cross switches on physical routes (:mod:`tacos.model.routes`).  ``policy`` and
    ``degree`` say how the TACOS-style unwinding view (:mod:`tacos.passes.unwind`) replaces the
    switch by virtual NPU-to-NPU links for solvers that need a fixed graph: ``policy`` is one of
    :data:`UNWIND_POLICIES`; for ``'degree'`` NPU i gets virtual links to the next ``degree``
    attached NPUs (bandwidth split by degree), for ``'stride'`` one full-bandwidth link to the
    NPU ``degree`` places further.  ``capabilities`` is a subset of
    :data:`SWITCH_CAPABILITIES`: ``multicast`` (one send reaches several down-ports) and
    ``reduce`` (contributions combine in the switch), as NVSwitch NVLS or InfiniBand SHARP.
    """

    id: int
    name: str
    policy: str = "full"
    degree: int | None = None
    span: Span | None = field(default=None, compare=False)
    capabilities: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Link:
    """A directed link: latency ``alpha`` in seconds, ``bandwidth`` in bytes/s per parallel link.

    ``via`` is set on virtual links produced by switch unwinding: the switch node the transfer
    really passes through.  ``dim`` and ``tag`` are free metadata (dimension index of a
    multi-dimensional topology, ``'nvlink'``, ``'nic'``, ...).
    """

    src: int
    dst: int
    alpha: float
    bandwidth: float
    multiplicity: int = 1
    dim: int | None = None
    tag: str = ""
    via: int | None = None
    span: Span | None = field(default=None, compare=False)

    def time(self, nbytes: float) -> float:
        """α-β time to move ``nbytes`` over one of the parallel links."""
        return self.alpha + nbytes / self.bandwidth

    @property
    def total_bandwidth(self) -> float:
        """Bandwidth of all parallel links together."""
        return self.bandwidth * self.multiplicity


@dataclass(frozen=True)
class Topology:
    """A network of NPUs and switches joined by directed links."""

    npus: tuple[Npu, ...]
    switches: tuple[Switch, ...] = ()
    links: tuple[Link, ...] = ()
    name: str = ""
    failed_links: tuple[Link, ...] = ()
    span: Span | None = field(default=None, compare=False)
    #: GPU generation of the runtime model (``hardware "h100"`` in TDL; "" when undeclared)
    hardware: str = ""

    # -- sizes -------------------------------------------------------------------------------
    @property
    def n_npus(self) -> int:
        """Number of NPU ids (failed NPUs included)."""
        return len(self.npus)

    @property
    def n_nodes(self) -> int:
        """NPUs plus switches."""
        return len(self.npus) + len(self.switches)

    @cached_property
    def live_npus(self) -> tuple[int, ...]:
        """Ids of NPUs that have not failed."""
        return tuple(n.id for n in self.npus if not n.failed)

    def is_switch(self, node: int) -> bool:
        """True when ``node`` is a switch id."""
        return node >= len(self.npus)

    def npu(self, name: str) -> int:
        """The id of the NPU called ``name`` (``"node[1].gpu[3]"``); a
        :class:`~tacos.errors.UsageError` naming the closest names when there is none."""
        ids = self._npu_ids
        if name in ids:
            return ids[name]
        import difflib

        from tacos.errors import UsageError

        close = difflib.get_close_matches(str(name), list(ids), n=3)
        raise UsageError(f"no NPU called {name!r} in {self.name or 'the topology'}",
                         hint=f"did you mean {', '.join(close)}?" if close else
                         f"names look like {self.npus[0].name!r}" if self.npus else None)

    @cached_property
    def _npu_ids(self) -> dict[str, int]:
        return {n.name: n.id for n in self.npus}

    def node_name(self, node: int) -> str:
        """The declared name of an NPU or switch id."""
        if node < len(self.npus):
            return self.npus[node].name
        return self.switches[node - len(self.npus)].name

    # -- adjacency ---------------------------------------------------------------------------
    @cached_property
    def out_links(self) -> tuple[tuple[int, ...], ...]:
        """``out_links[v]``: indices into ``links`` of the links leaving ``v``."""
        out: list[list[int]] = [[] for _ in range(self.n_nodes)]
        for i, link in enumerate(self.links):
            out[link.src].append(i)
        return tuple(tuple(x) for x in out)

    @cached_property
    def in_links(self) -> tuple[tuple[int, ...], ...]:
        """``in_links[v]``: indices into ``links`` of the links entering ``v``."""
        inc: list[list[int]] = [[] for _ in range(self.n_nodes)]
        for i, link in enumerate(self.links):
            inc[link.dst].append(i)
        return tuple(tuple(x) for x in inc)

    def link_index(self, src: int, dst: int) -> int | None:
        """Index of the (first) link ``src -> dst``, or None."""
        for i in self.out_links[src]:
            if self.links[i].dst == dst:
                return i
        return None

    def ingress_bandwidth(self, node: int) -> float:
        """Sum of bandwidth (all parallel links) entering ``node``, bytes/s."""
        return sum(self.links[i].total_bandwidth for i in self.in_links[node])

    def egress_bandwidth(self, node: int) -> float:
        """Sum of bandwidth (all parallel links) leaving ``node``, bytes/s."""
        return sum(self.links[i].total_bandwidth for i in self.out_links[node])

    def out_degree(self, node: int) -> int:
        """Number of physical links leaving ``node`` (multiplicity counted)."""
        return sum(self.links[i].multiplicity for i in self.out_links[node])

    def in_degree(self, node: int) -> int:
        """Number of physical links entering ``node`` (multiplicity counted)."""
        return sum(self.links[i].multiplicity for i in self.in_links[node])

    def scale_up_nodes(self, group: Iterable[int] | None = None) -> tuple[tuple[int, ...], ...]:
        """The group's nodes (scale-up domains): its live NPUs joined by links faster per lane
        than the topology's slowest class of link, switches included (NVLink, xGMI, NVSwitch
        inside; NICs and the scale-out fabric between).  One node when every link is of one
        class (a DGX-1 or an MI250 box alone, a torus, a single switch)."""
        members = sorted(dict.fromkeys(v for v in (self.live_npus if group is None else group)
                                       if not self.npus[v].failed))
        speeds = {lk.bandwidth for lk in self.links}
        if len(speeds) <= 1:
            return (tuple(members),) if members else ()
        import networkx as nx

        slow = min(speeds)
        g = nx.Graph()
        g.add_nodes_from(range(self.n_nodes))
        g.add_edges_from((lk.src, lk.dst) for lk in self.links if lk.bandwidth > slow)
        inside = set(members)
        parts = [tuple(sorted(v for v in comp if v in inside))
                 for comp in nx.connected_components(g)]
        return tuple(sorted(p for p in parts if p))

    @cached_property
    def link_arrays(self):  # -> tacos.model.links.LinkArrays
        """The links as arrays (:class:`tacos.model.links.LinkArrays`), built once: what every
        vectorized or compiled timer starts from."""
        from tacos.model.links import LinkArrays

        return LinkArrays.of(self.links)

    @cached_property
    def routing(self):  # -> tacos.model.routes.Routing (imported lazily: routes imports this)
        """Candidate routes between NPUs (:class:`tacos.model.routes.Routing`), built lazily
        once."""
        from tacos.model.routes import Routing

        return Routing(self)

    # -- graph views -------------------------------------------------------------------------
    def to_networkx(self) -> nx.MultiDiGraph:
        """A MultiDiGraph with node attributes ``kind``/``name`` and link attributes."""
        import networkx as nx

        g = nx.MultiDiGraph(name=self.name)
        for n in self.npus:
            g.add_node(n.id, kind="npu", name=n.name, failed=n.failed)
        for s in self.switches:
            g.add_node(s.id, kind="switch", name=s.name, policy=s.policy, degree=s.degree,
                       capabilities=sorted(s.capabilities))
        for i, link in enumerate(self.links):
            g.add_edge(
                link.src,
                link.dst,
                key=i,
                alpha=link.alpha,
                bandwidth=link.bandwidth,
                multiplicity=link.multiplicity,
                dim=link.dim,
                tag=link.tag,
                via=link.via,
            )
        return g

    def to_digraph(self) -> nx.DiGraph:
        """A simple DiGraph; parallel ``Link`` entries merge (bandwidth adds, α is the min)."""
        import networkx as nx

        g = nx.DiGraph()
        g.add_nodes_from(range(self.n_nodes))
        for link in self.links:
            if g.has_edge(link.src, link.dst):
                e = g.edges[link.src, link.dst]
                e["bandwidth"] += link.total_bandwidth
                e["alpha"] = min(e["alpha"], link.alpha)
            else:
                g.add_edge(link.src, link.dst, bandwidth=link.total_bandwidth, alpha=link.alpha)
        return g

    # -- metrics -----------------------------------------------------------------------------
    @cached_property
    def hop_distances(self) -> dict[int, dict[int, int]]:
        """All-pairs hop distances between nodes (switches counted as hops)."""
        import networkx as nx

        return dict(nx.all_pairs_shortest_path_length(self.to_digraph()))

    def diameter(self, among: Iterable[int] | None = None) -> int | None:
        """Largest hop distance between live NPUs (or ``among``); None if some pair is cut off.

        Exact, in memory linear in the links (:func:`tacos.model.hops.diameter`).
        """
        from tacos.model.hops import diameter

        return diameter(self, among, budget=math.inf).exact

    def with_links(self, links: Iterable[Link]) -> Topology:
        """A copy with another link set (used by passes such as switch unwinding)."""
        return Topology(self.npus, self.switches, tuple(links), self.name, self.failed_links,
                        self.span, self.hardware)

    def with_capabilities(self, capabilities: dict[str, Iterable[str]]) -> Topology:
        """A copy whose switches named by a pattern (an exact name, or a shell pattern such as
        ``'rail*'`` or ``'*nvswitch'``) declare the given capabilities (a subset of
        :data:`SWITCH_CAPABILITIES`), e.g.
        ``topo.with_capabilities({"*nvswitch": {"multicast", "reduce"}})``.  Switches matching
        no pattern keep theirs.  Raises ``ValueError`` for an unknown capability or a pattern
        that matches no switch.
        """
        from dataclasses import replace
        from fnmatch import fnmatchcase

        switches = list(self.switches)
        for pattern, caps in capabilities.items():
            wanted = frozenset(caps)
            unknown = sorted(wanted - set(SWITCH_CAPABILITIES))
            if unknown:
                raise ValueError(f"unknown switch capability {unknown[0]!r} (known: "
                                 f"{', '.join(SWITCH_CAPABILITIES)})")
            hit = [k for k, sw in enumerate(switches)
                   if sw.name == pattern or fnmatchcase(sw.name, pattern)]
            if not hit:
                raise ValueError(f"no switch matches {pattern!r}")
            for k in hit:
                switches[k] = replace(switches[k], capabilities=wanted)
        return Topology(self.npus, tuple(switches), self.links, self.name, self.failed_links,
                        self.span, self.hardware)

    def reversed(self) -> Topology:
        """The transposed topology: every link flipped (used to synthesize reductions)."""
        flipped = tuple(
            Link(lk.dst, lk.src, lk.alpha, lk.bandwidth, lk.multiplicity, lk.dim, lk.tag, lk.via,
                 lk.span)
            for lk in self.links
        )
        return self.with_links(flipped)


def fabrics(topology: Topology) -> list[list[int]]:
    """Connected groups of switch ids (switch-to-switch links join them), in id order."""
    import networkx as nx

    g = nx.Graph()
    g.add_nodes_from(s.id for s in topology.switches)
    for lk in topology.links:
        if topology.is_switch(lk.src) and topology.is_switch(lk.dst):
            g.add_edge(lk.src, lk.dst)
    return sorted((sorted(c) for c in nx.connected_components(g)), key=lambda c: c[0])
