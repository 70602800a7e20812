"""Lower bounds of systems too large for :func:`tacos.check.bounds.lower_bound`, in closed form.

:func:`symmetric_bound` gives, for a :class:`~tacos.model.clos.ClosFabric` or a
:class:`~tacos.model.torus_axes.TorusAxes`, the physical bound ``max(hop latency, bandwidth)``
that :func:`~tacos.check.bounds.lower_bound` computes with max-flows and shortest paths, without
building the collective (40,000 chunks of 40,000-NPU sets would not fit):

* bandwidth, all-gather (reduce-scatter: the same on the reversed links): the most loaded cut
  around one scale-up node (a DGX node takes in ``size (N - g)/N`` over its ``g`` NICs) or one
  NPU (``size (N - 1)/N`` over all its links in); an all-reduce is the reduce-scatter then the
  all-gather (the composition bound: no switch here reduces), twice that.  On a non-blocking
  fabric larger cuts carry more links per byte, and on a torus the single NPU is the tightest
  cut (the tests compare against ``lower_bound`` on small systems).
* latency: Σ α of the fastest path between the farthest pair of NPUs.

**With in-network reduction** (a ``sharp`` Clos: every switch declares ``reduce`` and
``multicast``; :func:`in_network_allreduce`) the composition bound no longer holds: a switch
adds contributions on their way, so a NIC need not carry a value once to reduce it and once
more to gather it.  What still holds, for any schedule (any chunking, any in-switch fan-in and
fan-out):

*Claim.*  For every cut ``(A, B)`` of the machine with an NPU on each side, an all-reduce of
``S`` bytes takes at least ``S / B(A→B)`` and ``S / B(B→A)``, ``B`` the total bandwidth of the
links crossing the cut in that direction.

*Proof.*  Take NPUs ``a ∈ A``, ``b ∈ B`` and a byte position ``x`` of the buffer.  ``b``'s
result at ``x`` depends on ``a``'s input at ``x``, so some transfer carrying position ``x``
crosses from ``A`` to ``B`` (data leaves a node only by transfers on its links).  A byte on a
link carries one position: an in-switch reduction adds values of the **same** position of
several transfers, a multicast copies a transfer's bytes to several links, and neither makes one
byte stand for two positions.  So the links ``A → B`` carry at least ``S`` bytes during the
run, and in time ``T`` they carry at most ``T · B(A→B)``.  The same for ``B → A``.  ∎

The smallest such cut of a Clos (links are full duplex and rates symmetric, so both directions
agree) is the smallest of: one GPU (its NVLink and its NIC, ``nvlink + nic``); one node (its
``g`` NICs; with two nodes or more); the nodes under one leaf (``g · hosts_per_leaf``
leaf-to-tier-2 links; with two leaves or more); one pod (``g · hosts_per_leaf ·
leaves_per_pod`` tier-2-to-core links; 3 tiers, two pods or more) -- a non-blocking tree has no
narrower cut between NPUs, and the tests check the value against
:func:`tacos.check.bounds.lower_bound` (which finds the cut with max-flows:
:func:`~tacos.check.bounds.in_network_allreduce_cut`) on small fabrics.  Per NPU the
ingress/egress term (every NPU receives and sends ``S``: each position of its result depends on
the others, each position of its input is needed elsewhere) is the one-GPU cut again.  So on
DGX-H100 nodes the bound is ``S / (8 · 50 GB/s)``: every NIC carries, on average over its node,
an eighth of the buffer each way, and nothing forces more on the NVSwitch ports than the GPU
cut (``S / (450 + 50 GB/s)``).
"""

from __future__ import annotations

from tacos.model.clos import ClosFabric
from tacos.model.symmetry import SymmetricSystem
from tacos.model.torus_axes import TorusAxes


def _bandwidth_one_way(system: SymmetricSystem, size: int) -> float:
    n = system.n_npus
    if isinstance(system, ClosFabric):
        g = system.gpus
        node = size * (n - g) / n / (g * system.nic)
        npu = size * (n - 1) / n / (system.nvlink + system.nic)
        return max(node, npu)
    if isinstance(system, TorusAxes):
        return size * (n - 1) / n / (2 * len(system.shape) * system.bandwidth)
    raise TypeError(f"no closed-form bound for {type(system).__name__}")


def hop_latency(system: SymmetricSystem) -> float:
    """Σ α of the fastest path between the two farthest NPUs."""
    if isinstance(system, ClosFabric):
        lat = 2 * system.nvlink_alpha
        lat += 2 * system.nic_alpha
        if system.nodes > system.hosts_per_leaf:
            lat += 2 * system.fabric_alpha
        if system.tiers == 3 and system.pods > 1:
            lat += 2 * system.fabric_alpha
        return lat
    if isinstance(system, TorusAxes):
        return sum(n // 2 for n in system.shape) * system.alpha
    raise TypeError(f"no closed-form bound for {type(system).__name__}")


def smallest_cut(fabric: ClosFabric) -> float:
    """Bandwidth (B/s) of the narrowest cut of ``fabric`` with an NPU on each side (see the
    module docstring)."""
    f = fabric
    cuts = [f.nvlink + f.nic]
    if f.nodes > 1:
        cuts.append(f.gpus * f.nic)
    if f.n_leaves > 1:
        cuts.append(f.gpus * f.hosts_per_leaf * f.fabric)
    if f.tiers == 3 and f.pods > 1:
        cuts.append(f.gpus * f.hosts_per_leaf * f.leaves_per_pod * f.fabric)
    return min(cuts)


def in_network_allreduce(fabric: ClosFabric, size: int) -> float:
    """The physical lower bound (seconds) of an all-reduce of ``size`` bytes on ``fabric``
    when its switches reduce (module docstring): ``max(hop latency, size / smallest cut)``."""
    return max(hop_latency(fabric), size / smallest_cut(fabric))


def symmetric_bound(system: SymmetricSystem, kind: str, size: int) -> float:
    """The physical lower bound (seconds) of ``kind`` (allgather, reducescatter, allreduce)
    of ``size`` bytes (nccl-tests convention) on ``system``: for an all-reduce on a ``sharp``
    Clos (or its :class:`~tacos.model.clos_rails.RailAxes` view) the in-network bound
    (:func:`in_network_allreduce`), otherwise the composition bound."""
    from tacos.model.clos_rails import RailAxes

    if isinstance(system, RailAxes):
        system = system.fabric
    if kind == "allreduce" and isinstance(system, ClosFabric) and system.sharp:
        return in_network_allreduce(system, size)
    one = _bandwidth_one_way(system, size)
    bw = 2 * one if kind == "allreduce" else one
    return max(hop_latency(system), bw)
