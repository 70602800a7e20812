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


def symmetric_bound(system: SymmetricSystem, kind: str, size: int) -> float:
    """The physical lower bound (seconds) of ``kind`` (allgather, reducescatter, allreduce)
    of ``size`` bytes (nccl-tests convention) on ``system``."""
    one = _bandwidth_one_way(system, size)
    bw = 2 * one if kind == "allreduce" else one
    return max(hop_latency(system), bw)
