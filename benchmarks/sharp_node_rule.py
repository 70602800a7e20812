"""What the NVSwitch's rule costs the SHARP all-reduce: a what-if on the layout search.

The SHARP plans (:mod:`tacos.scale.sharp`) pay 8 route α per node phase: in the link model a
fan-in holds every other GPU's NVSwitch port for its whole duration (one lane per port), so a
node's 8 fan-ins (and fan-outs) run one after another.  This script searches the layouts (parts,
lead, batch) of the 1,024- and 5,000-node SHARP fabrics at 1 GiB twice, on the templates' α-β
lines:

* ``model``: the node phases as the link model times them (what ``synthesize_sharp`` builds);
* ``concurrent``: a **hypothetical** rule where a node phase's fan-ins and fan-outs run at once,
  paying the route α once and each port's summed bytes (what NVLS's multimem operations do on a
  real NVSwitch, and what the link model does not express).

It builds no plan and proves nothing about plans; it says how much of the gap to the bound the
node rule explains.  Usage: ``python -m benchmarks.sharp_node_rule``.
"""

from __future__ import annotations

import time

from tacos.check.bounds_symmetric import in_network_allreduce
from tacos.model.clos import ClosFabric
from tacos.model.clos_rails import RailAxes
from tacos.scale.sharp import Templates, search

FABRICS = {"1,024 nodes": {"nodes": 1024, "tiers": 2},
           "5,000 nodes": {"nodes": 5000, "tiers": 3, "hosts_per_leaf": 25,
                           "leaves_per_pod": 25}}


class Concurrent(Templates):
    """The templates' times with every node phase's fan-ins and fan-outs at once."""

    def duration(self, what: str, sizes: tuple[int, ...]) -> float:
        """α once, then the busier direction of a GPU's port: a fan-in into GPU j sends
        ``(r-1)/r`` of the reduce-scattered bytes up j's port and ``1/r`` down, a fan-out the
        reverse."""
        if what in ("fi", "fo"):
            return super().duration(what, sizes)
        r, a, b = self.r, self.nv_alpha, self.nv_beta
        g, s = sizes if what == "mix" else (sizes[0], 0) if what == "ag" else (0, sizes[0])
        return a + max(g + (r - 1) * s, s + (r - 1) * g) / r * b


def main() -> None:
    """One line per fabric and rule: the searched layout's end against the bound."""
    size = 1 << 30
    print("| fabric | node phases | parts | lead | batch | time (ms) | time / bound | CPU (s) |")
    print("|---|---|---|---|---|---|---|---|")
    for name, opts in FABRICS.items():
        system = RailAxes(ClosFabric(sharp=True, **opts))
        n = system.n_npus
        bound = in_network_allreduce(system.fabric, size - size % n)
        for rule, cls in (("model (one after another)", Templates),
                          ("concurrent (hypothetical)", Concurrent)):
            t0 = time.process_time()
            sizes, lead, batch, end = search(size - size % n, system, cls(system))
            print(f"| {name} | {rule} | {len(sizes)} | {lead} | {batch} | {end * 1e3:.3f} | "
                  f"{end / bound:.4f} | {time.process_time() - t0:.1f} |", flush=True)


if __name__ == "__main__":
    main()
