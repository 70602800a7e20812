"""Design-space answers that come before synthesis.

* :func:`estimate` / :func:`compare`: closed-form α-β times of ring, bidirectional ring,
  direct, halving-doubling, tree, hierarchical and NCCL-style algorithms (and AxoNN's model)
  for a collective on process groups of a topology, placement-aware on the physical links,
  next to the simulated time of the matching baseline schedule (``tacosc cost``);
* :func:`explore`: AxoNN-style 4D parallel configurations ranked by communication time
  (``tacosc explore``);
* :func:`allocate`: the split of a per-NPU bandwidth budget across the dimensions of a
  hierarchical topology (``tacosc allocate``).

>>> from tacos.builders import ring
>>> from tacos.cost import estimate
>>> t = estimate(ring(8, bandwidth=50e9, latency=1e-6), "allreduce", 8 << 20).time
>>> round(t * 1e6, 3)  # 2(N-1)(α + M/(N·β)) with N = 8
307.601
"""

from tacos.cost.allocate import Allocation, Op, allocate, parse_op, workload_terms
from tacos.cost.compare import Comparison, compare
from tacos.cost.estimates import estimate
from tacos.cost.explore import Config, Ranked, explore
from tacos.cost.models import MODELS, Context, Estimate

__all__ = [
    "MODELS",
    "Allocation",
    "Comparison",
    "Config",
    "Context",
    "Estimate",
    "Op",
    "Ranked",
    "allocate",
    "compare",
    "estimate",
    "explore",
    "parse_op",
    "workload_terms",
]
