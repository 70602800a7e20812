"""Multi-rail Clos fabrics of 8-GPU nodes (DGX-H100 and the like), 2-tier or 3-tier.

``K`` nodes of ``gpus`` GPUs each: inside a node every GPU links to the node's NVSwitch; GPU g of
every node has its own NIC on **rail g**, and the rails are separate fat-trees (rail-optimized
Clos, as NVIDIA's DGX SuperPOD reference architectures build the compute fabric): node n's GPU g
meets leaf switch ``n // hosts_per_leaf`` of rail g; every leaf has ``hosts_per_leaf`` uplinks,
one to each tier-2 switch of its rail (2-tier: the rail's spines) or of its pod (3-tier: the
pod's aggregation switches, ``leaves_per_pod`` leaves a pod), and aggregation switch a of every
pod of a rail links to the rail's core switches ``(a, 0..leaves_per_pod-1)``.  Every tier is
non-blocking (as many uplinks as downlinks).

Rates (the defaults, each a parameter):

* NVLink-4 inside a node: 18 links x 25 GB/s per direction = 450 GB/s per GPU into the NVSwitch
  chips (NVIDIA H100 Tensor Core GPU datasheet: "NVLink 900 GB/s" both directions), modelled as
  one switch like ``tacos/presets/dgx_h100_node.tdl``; α 0.5 µs is that preset's assumption.
* One ConnectX-7 NIC per GPU at 400 Gb/s = 50 GB/s (NVIDIA DGX H100 user guide: eight
  single-port ConnectX-7 for the compute fabric), and 400 Gb/s (NDR) switch-to-switch links:
  Quantum-2 QM9700 switches have 64 NDR ports (NVIDIA QM9700 datasheet), so a leaf takes 32
  hosts and 32 uplinks, and ``ports`` (64) caps every switch's radix.
* α of a NIC link 1 µs and of a switch-to-switch link 0.5 µs are assumptions (a GPU-to-GPU
  RDMA crossing one leaf then pays 2 µs, the figure ``dgx_h100.tdl`` assumes per NIC).

Node ids: GPU g of node n is ``8n + g``; then the NVSwitches (one per node), the leaves (rail by
rail), the tier-2 switches, the cores: the ids and names ``tacos/presets/clos_h100.tdl`` gives
(``use clos_h100(nodes=64, tiers=2)``), which :func:`recognize` finds in a loaded topology.
Link ids are arithmetic (:meth:`ClosFabric.link_table`): NVLinks ``2i``/``2i+1`` (GPU i
up/down), NIC links ``2N + 2i + d``, leaf-to-tier-2 and tier-2-to-core links after them
(``d`` = 0 up, 1 down).

**In-network reduction** (``sharp=True``): every switch declares ``multicast`` and
``reduce`` -- the Quantum-2 rail switches SHARP (NCCL's CollNet), the node's NVSwitch NVLink
SHARP (NVLS, as ``tacos/presets/dgx_h100_node.tdl`` declares it).  Links, ids and axes are
those of the plain fabric; only the capabilities differ (``sharp=False``, the default: no
switch reduces, the fabric the composition bound is for).  :mod:`tacos.model.clos_rails`
sees a ``sharp`` fabric as two axes (a node's GPUs, a whole rail) for plans that reduce in
the rail switches.

The groups (:mod:`tacos.model.symmetry`): the ``gpu`` axis (a node's GPUs on its NVSwitch), then
the node index in mixed radix, split into prime digits: ``pos`` digits (nodes on one leaf),
``leaf`` digits (leaves of one pod, joined through tier-2 switch ``pos``) and, 3-tier, ``pod``
digits (pods joined through core ``(pos, leaf)``): all groups of a digit are copies of one small
template, and the copies of one digit use disjoint links.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from tacos.errors import TacosError
from tacos.model.symmetry import Axis, Embedding, LinkTable, SymmetricSystem
from tacos.model.topology import Link, Npu, Switch, Topology

NVLINK4 = 450e9
NDR = 50e9
IN_NETWORK = ("multicast", "reduce")
"""What every switch of a ``sharp`` fabric declares: the NVSwitch NVLink SHARP (NVLS), the
rail switches SHARP (``tacos.check.in_switch``)."""


def prime_digits(n: int) -> list[int]:
    """The prime factors of ``n``, smallest first (``prime_digits(12) == [2, 2, 3]``)."""
    out, p = [], 2
    while n > 1:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out


@dataclass(frozen=True, eq=False)
class ClosFabric(SymmetricSystem):
    """A multi-rail Clos of ``nodes`` nodes (see the module docstring for the layout)."""

    nodes: int
    tiers: int = 2
    hosts_per_leaf: int = 32
    leaves_per_pod: int = 32
    gpus: int = 8
    nvlink: float = NVLINK4
    nvlink_alpha: float = 0.5e-6
    nic: float = NDR
    nic_alpha: float = 1e-6
    fabric: float = NDR
    fabric_alpha: float = 0.5e-6
    ports: int = 64
    name: str = field(default="")
    sharp: bool = False

    def __post_init__(self) -> None:
        k, h = self.nodes, self.hosts_per_leaf
        hint = "nodes must be hosts_per_leaf x leaves (2-tier) or x leaves_per_pod x pods"
        if self.tiers not in (2, 3):
            raise TacosError(f"a Clos has 2 or 3 tiers, not {self.tiers}")
        if k < 2 or h < 1 or self.gpus < 2:
            raise TacosError("a Clos needs at least 2 nodes, 2 GPUs a node and 1 host a leaf")
        if k % h:
            raise TacosError(f"{k} nodes do not fill leaves of {h} hosts", hint=hint)
        if self.tiers == 3 and (k // h) % self.leaves_per_pod:
            raise TacosError(f"{k // h} leaves do not fill pods of {self.leaves_per_pod}",
                             hint=hint)
        radix = {"leaf": 2 * h, "spine" if self.tiers == 2 else "aggregation":
                 self.n_leaves if self.tiers == 2 else 2 * self.leaves_per_pod}
        if self.tiers == 3:
            radix["core"] = self.pods
        for what, ports in radix.items():
            if ports > self.ports:
                raise TacosError(f"a {what} switch would need {ports} ports, more than "
                                 f"{self.ports}", hint="use 3 tiers or fewer hosts per leaf")
        if not self.name:
            tail = " with SHARP" if self.sharp else ""
            object.__setattr__(self, "name",
                               f"{k}x{self.gpus} multi-rail {self.tiers}-tier Clos{tail}")

    # -- sizes -------------------------------------------------------------------------------
    @property
    def n_leaves(self) -> int:
        """Leaves per rail."""
        return self.nodes // self.hosts_per_leaf

    @property
    def pods(self) -> int:
        """Pods per rail (1 for a 2-tier fabric)."""
        return self.n_leaves // self.leaves_per_pod if self.tiers == 3 else 1

    @property
    def lpp(self) -> int:
        """Leaves joined by one tier-2 switch: a pod (3-tier) or the whole rail (2-tier)."""
        return self.leaves_per_pod if self.tiers == 3 else self.n_leaves

    @cached_property
    def axes(self) -> tuple[Axis, ...]:  # type: ignore[override]
        """``gpu``, then the prime digits of the leaf position, leaf and pod indices."""
        out = [Axis("gpu", self.gpus)]
        for kind, n in (("pos", self.hosts_per_leaf), ("leaf", self.lpp), ("pod", self.pods)):
            out.extend(Axis(f"{kind}{k}", r) for k, r in enumerate(prime_digits(n)))
        return tuple(out)

    def tier(self, axis: int) -> int:
        """0 for the ``gpu`` axis, 1 for ``pos``, 2 for ``leaf``, 3 for ``pod`` digits."""
        name = self.axes[axis].name
        return 0 if name == "gpu" else {"pos": 1, "leaf": 2, "pod": 3}[name.rstrip("0123456789")]

    # -- numbering -----------------------------------------------------------------------------
    @property
    def _n(self) -> int:
        return self.nodes * self.gpus

    @property
    def _leaf0(self) -> int:
        return self._n + self.nodes

    @property
    def _top0(self) -> int:
        return self._leaf0 + self.gpus * self.n_leaves

    @property
    def _core0(self) -> int:
        return self._top0 + self.gpus * self.pods * self.hosts_per_leaf

    @property
    def n_nodes(self) -> int:
        cores = self.gpus * self.hosts_per_leaf * self.leaves_per_pod if self.tiers == 3 else 0
        return self._core0 + cores

    @property
    def _up0(self) -> int:  # leaf <-> tier-2 links
        return 4 * self._n

    @property
    def _core_links0(self) -> int:
        return self._up0 + 2 * self.gpus * self.n_leaves * self.hosts_per_leaf

    @property
    def n_links(self) -> int:
        core = 2 * self.gpus * self.pods * self.hosts_per_leaf * self.leaves_per_pod
        return self._core_links0 + (core if self.tiers == 3 else 0)

    def _parts(self, m: np.ndarray) -> tuple[np.ndarray, ...]:
        """(rail, node, pos, global leaf, pod, leaf in pod) of global GPU ids ``m``."""
        rail, n = m % self.gpus, m // self.gpus
        pos, lg = n % self.hosts_per_leaf, n // self.hosts_per_leaf
        return rail, n, pos, lg, lg // self.lpp, lg % self.lpp

    def _leaf(self, rail: np.ndarray, lg: np.ndarray) -> np.ndarray:
        return self._leaf0 + rail * self.n_leaves + lg

    def _top(self, rail: np.ndarray, pod: np.ndarray, pos: np.ndarray) -> np.ndarray:
        return self._top0 + (rail * self.pods + pod) * self.hosts_per_leaf + pos

    def _core(self, rail: np.ndarray, pos: np.ndarray, lip: np.ndarray) -> np.ndarray:
        return self._core0 + (rail * self.hosts_per_leaf + pos) * self.leaves_per_pod + lip

    def _up_link(self, rail: np.ndarray, lg: np.ndarray, pos: np.ndarray) -> np.ndarray:
        return self._up0 + 2 * ((rail * self.n_leaves + lg) * self.hosts_per_leaf + pos)

    def _core_link(self, rail, pod, pos, lip) -> np.ndarray:
        return self._core_links0 + 2 * (((rail * self.pods + pod) * self.hosts_per_leaf + pos)
                                        * self.leaves_per_pod + lip)

    # -- links ---------------------------------------------------------------------------------
    def link_table(self, ids: np.ndarray) -> LinkTable:
        """Ends and rates of global links, decoded from their ids alone."""
        ids = np.asarray(ids, dtype=np.int64)
        d, pair = ids % 2, ids // 2
        lo = np.zeros_like(ids)
        hi = np.zeros_like(ids)
        alpha = np.zeros(len(ids))
        bw = np.zeros(len(ids))
        n = self._n
        nv = ids < 2 * n
        gpu = pair[nv]
        lo[nv], hi[nv] = gpu, n + gpu // self.gpus
        alpha[nv], bw[nv] = self.nvlink_alpha, self.nvlink
        nic = (ids >= 2 * n) & (ids < self._up0)
        gpu = pair[nic] - n
        rail, _, _, lg, _, _ = self._parts(gpu)
        lo[nic], hi[nic] = gpu, self._leaf(rail, lg)
        alpha[nic], bw[nic] = self.nic_alpha, self.nic
        up = (ids >= self._up0) & (ids < self._core_links0)
        k = (ids[up] - self._up0) // 2
        pos, k = k % self.hosts_per_leaf, k // self.hosts_per_leaf
        lg, rail = k % self.n_leaves, k // self.n_leaves
        lo[up], hi[up] = self._leaf(rail, lg), self._top(rail, lg // self.lpp, pos)
        alpha[up], bw[up] = self.fabric_alpha, self.fabric
        core = ids >= self._core_links0
        k = (ids[core] - self._core_links0) // 2
        lip, k = k % self.leaves_per_pod, k // self.leaves_per_pod
        pos, k = k % self.hosts_per_leaf, k // self.hosts_per_leaf
        pod, rail = k % self.pods, k // self.pods
        lo[core], hi[core] = self._top(rail, pod, pos), self._core(rail, pos, lip)
        alpha[core], bw[core] = self.fabric_alpha, self.fabric
        src = np.where(d == 0, lo, hi)
        dst = np.where(d == 0, hi, lo)
        return LinkTable(src, dst, alpha, bw, np.ones(len(ids), dtype=np.int64))

    def topology(self) -> Topology:
        """The whole fabric as a :class:`Topology` (links in id order; for small systems)."""
        n = self._n
        npus = tuple(Npu(i, f"node[{i // self.gpus}].gpu[{i % self.gpus}]") for i in range(n))
        names = [f"node[{k}].nvswitch" for k in range(self.nodes)]
        names += [f"leaf[{k}]" for k in range(self.gpus * self.n_leaves)]
        top = "spine" if self.tiers == 2 else "agg"
        names += [f"{top}[{k}]" for k in range(self.gpus * self.pods * self.hosts_per_leaf)]
        if self.tiers == 3:
            names += [f"core[{k}]" for k in
                      range(self.gpus * self.hosts_per_leaf * self.leaves_per_pod)]
        caps = frozenset(IN_NETWORK) if self.sharp else frozenset()
        switches = tuple(Switch(n + k, s, capabilities=caps) for k, s in enumerate(names))
        t = self.link_table(np.arange(self.n_links))
        tags = np.where(np.arange(self.n_links) < 2 * n, 0,
                        np.where(np.arange(self.n_links) < self._up0, 1, 2))
        tag_names = ("nvlink", "nic", "fabric")
        links = tuple(Link(int(s), int(d), float(a), float(b), 1, None, tag_names[g])
                      for s, d, a, b, g in zip(t.src.tolist(), t.dst.tolist(), t.alpha.tolist(),
                                               t.bandwidth.tolist(), tags.tolist(), strict=True))
        return Topology(npus, switches, links, self.name, hardware="h100")

    # -- groups --------------------------------------------------------------------------------
    def resource(self, axis: int) -> str:
        """``nvlink`` for the ``gpu`` axis, ``fabric`` for every rail digit (they share NICs)."""
        return "nvlink" if self.tier(axis) == 0 else "fabric"

    def template(self, axis: int) -> Topology:
        """The group of ``axis`` as a small topology: r GPUs (ids 0..r-1), then its switches,
        links in the order :meth:`embed` maps them."""
        tier, r = self.tier(axis), self.axes[axis].size
        if tier == 0:
            rates = [(self.nvlink_alpha, self.nvlink)]
        else:
            rates = [(self.nic_alpha, self.nic)] + [(self.fabric_alpha, self.fabric)] * (tier - 1)
        # layer k (0: GPUs) has r nodes below the top; the top layer is one switch
        layers = [list(range(k * r, (k + 1) * r)) for k in range(tier if tier else 1)]
        top = (tier if tier else 1) * r
        links: list[Link] = []
        for k, (alpha, bw) in enumerate(rates):
            for j in range(r):
                a = layers[k][j]
                b = layers[k + 1][j] if k + 1 < len(layers) else top
                links += [Link(a, b, alpha, bw), Link(b, a, alpha, bw)]
        npus = tuple(Npu(j, f"member[{j}]") for j in range(r))
        switches = tuple(Switch(r + k, f"switch[{k}]") for k in range(top + 1 - r))
        return Topology(npus, switches, tuple(links), f"tier-{tier} group of {r}")

    def embed(self, axis: int) -> Embedding:
        """Global ids of every copy of ``axis``'s template (see :meth:`template`)."""
        tier = self.tier(axis)
        m = self.members(axis)                       # copies x r
        coords = self.copy_coords(axis)
        rail, node, pos, lg, pod, lip = self._parts(m)
        if tier == 0:
            nodes = np.concatenate([m, self._n + node[:, :1]], axis=1)
            links = np.stack([2 * m, 2 * m + 1], axis=2).reshape(len(m), -1)
            return Embedding(nodes, links, coords)
        leaf = self._leaf(rail, lg)
        nic = 2 * self._n + 2 * m
        cols_nodes = [m, leaf]
        cols_links = [nic]
        if tier == 1:
            cols_nodes = [m, leaf[:, :1]]
        elif tier == 2:
            cols_nodes.append(self._top(rail[:, :1], pod[:, :1], pos[:, :1]))
            cols_links.append(self._up_link(rail, lg, pos))
        else:
            cols_nodes.append(self._top(rail, pod, pos))
            cols_nodes.append(self._core(rail[:, :1], pos[:, :1], lip[:, :1]))
            cols_links.append(self._up_link(rail, lg, pos))
            cols_links.append(self._core_link(rail, pod, pos, lip))
        nodes = np.concatenate(cols_nodes, axis=1)
        links = np.concatenate([np.stack([x, x + 1], axis=2).reshape(len(m), -1)
                                for x in cols_links], axis=1)
        return Embedding(nodes, links, coords)


def clos_h100(nodes: int, tiers: int = 2, **options: float | int) -> ClosFabric:
    """A multi-rail Clos of ``nodes`` DGX-H100 nodes (8 GPUs, 8 rails of 400 Gb/s),
    ``tiers`` 2 or 3; ``options`` override :class:`ClosFabric`'s fields (``hosts_per_leaf``,
    ``leaves_per_pod``, rates and latencies in B/s and s)."""
    return ClosFabric(nodes, tiers, **options)  # type: ignore[arg-type]


def recognize(topology: Topology) -> ClosFabric | None:
    """The :class:`ClosFabric` ``topology`` is (same ids, ends, α, bandwidths and lane counts,
    as ``use clos_h100(...)`` builds it), or None.  It is a ``sharp`` fabric when every switch
    declares ``multicast`` and ``reduce`` (``use clos_h100(..., sharp=1)``); otherwise the plain
    one, whose plans use no switch capability."""
    import math

    names = [s.name.split("[")[0] for s in topology.switches]
    count = {k: names.count(k) for k in ("leaf", "spine", "agg", "core")}
    gpus = sum(1 for v in topology.npus if v.name.startswith("node[0]."))
    if not count["leaf"] or not gpus or topology.n_npus % gpus or \
            any(v.failed for v in topology.npus) or topology.failed_links:
        return None
    nodes = topology.n_npus // gpus
    leaves = count["leaf"] // gpus
    tiers = 3 if count["agg"] else 2
    if not leaves or nodes % leaves:
        return None
    h = nodes // leaves
    per_pod = count["core"] // (gpus * h) if tiers == 3 and h else 32
    try:
        out = topology.out_links
        nv = topology.links[out[0][0]]
        nic = next(topology.links[i] for i in out[0] if topology.links[i].tag == "nic")
        up = topology.links[out[nic.dst][-1]]
        fabric = ClosFabric(nodes, tiers, h, max(1, per_pod), gpus, nv.bandwidth, nv.alpha,
                            nic.bandwidth, nic.alpha, up.bandwidth, up.alpha,
                            ports=max(64, 2 * h, leaves, 2 * per_pod),
                            sharp=all(set(IN_NETWORK) <= s.capabilities
                                      for s in topology.switches))
    except (TacosError, StopIteration, IndexError, ZeroDivisionError):
        return None
    if fabric.n_nodes != topology.n_nodes or fabric.n_links != len(topology.links):
        return None
    t = fabric.link_table(np.arange(fabric.n_links))
    got = np.array([(lk.src, lk.dst) for lk in topology.links], dtype=np.int64)
    if not (np.array_equal(got[:, 0], t.src) and np.array_equal(got[:, 1], t.dst)):
        return None
    for lk, a, b in zip(topology.links, t.alpha.tolist(), t.bandwidth.tolist(), strict=True):
        if lk.multiplicity != 1 or not math.isclose(lk.alpha, a, rel_tol=1e-12) or \
                not math.isclose(lk.bandwidth, b, rel_tol=1e-12):
            return None
    return fabric
