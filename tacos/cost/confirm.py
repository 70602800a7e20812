"""Confirm bandwidth splits by simulation, and the seed's network prices.

:func:`confirm` rebuilds the topology with each candidate split and times the workload twice:
with the baseline schedule of the model that found the split (the hierarchical baseline for
the hierarchical model) and with a synthesized plan (greedy by default), every schedule
verified and simulated.  :func:`seed_prices` turns seed 000's Table II (link $2, NIC $48 and
switch $24 per GB/s, a switch priced per port) into a price per GB/s of each dimension per NPU.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tacos.cost.allocate import GB, Op, with_bandwidths
from tacos.cost.compare import baseline_schedule_for, make_collective, simulated_time
from tacos.cost.models import Context, canonical
from tacos.errors import TacosError
from tacos.model.topology import Topology

#: seed 000, Table II: $ per GB/s
LINK_PRICE, NIC_PRICE, SWITCH_PRICE = 2.0, 48.0, 24.0


def seed_prices(topology: Topology) -> list[float]:
    """$ per GB/s of each dimension, per NPU, from seed 000's Table II.

    A ring of n > 2 NPUs has one link per NPU (n = 2: half a link), a fully connected group
    (n − 1)/2; a switch dimension needs per NPU one link, one NIC and one switch port.
    """
    grid = Context(topology).grid(topology.live_npus)
    out = []
    for dim in grid.dims:
        n = len(dim.groups[0])
        if dim.kind == "switch":
            out.append(LINK_PRICE + NIC_PRICE + SWITCH_PRICE)
        elif dim.kind == "fc":
            out.append(LINK_PRICE * (n - 1) / 2)
        else:
            out.append(LINK_PRICE * (1.0 if n > 2 else 0.5))
    return out


def confirm(topology: Topology, ops: Sequence[Op], splits: dict[str, np.ndarray], *,
            model: str = "hierarchical", solver: str | None = "greedy", seed: int = 0,
            trials: int | None = None, dims: Sequence[int] | None = None) -> list[dict]:
    """Simulated workload time of each split: ``{'name', 'bandwidth', 'baseline',
    'synthesized', 'baseline_note'}`` (seconds; None where unavailable)."""
    from tacos.synthesize import synthesize

    model = canonical(model)
    dims = list(dims) if dims is not None else sorted({lk.dim for lk in topology.links})
    npus = list(topology.live_npus)
    rows = []
    for name, b in splits.items():
        topo = with_bandwidths(topology, {k: float(x) for k, x in zip(dims, b, strict=True)})
        base: float | None = 0.0
        synth: float | None = 0.0 if solver else None
        note = ""
        for op in ops:
            coll = make_collective(topo, op.kind, op.size, op.groups(npus))
            if base is not None:
                try:
                    base += op.count * simulated_time(baseline_schedule_for(topo, model, coll))
                except TacosError as exc:
                    base, note = None, exc.message
            if synth is not None:
                opts = {"seed": seed, "bound": False}
                if trials is not None:
                    opts["trials"] = trials
                plan = synthesize(topo, coll, solver=solver, **opts)
                synth += op.count * simulated_time(plan)
        rows.append({"name": name, "bandwidth": [float(x) / GB for x in b], "baseline": base,
                     "synthesized": synth, "baseline_note": note})
    return rows
