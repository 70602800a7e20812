"""One estimate per request: the model's plan timed at a size, NCCL's own pick
(:mod:`tacos.cost.nccl`) or AxoNN's equations (:mod:`tacos.cost.axonn`)."""

from __future__ import annotations

from collections.abc import Sequence

from tacos.cost import axonn
from tacos.cost.models import (
    FORMULAS,
    Context,
    Estimate,
    canonical,
    check_request,
    check_size,
    plan,
)
from tacos.cost.nccl import nccl_estimate
from tacos.cost.placement import machine
from tacos.errors import TacosError
from tacos.model.topology import Topology


def _axonn(ctx: Context, kind: str, size: int, groups: Sequence[Sequence[int]]) -> Estimate:
    """AxoNN's equations on the group: β from equation (10) where the groups sit."""
    n = len(groups[0])
    if kind not in FORMULAS["axonn"]:
        return Estimate("axonn", kind, size, n, len(groups), None,
                        reason="AxoNN models all-gather, reduce-scatter and all-reduce only")
    mach = machine(ctx.graph)
    where = mach.node_of()
    spans = {where[v] for v in groups[0]}
    if len(spans) == 1:
        beta = mach.beta_intra
        note = f"group inside one node: β = β_intra = {beta / 1e9:.4g} GB/s"
    else:
        # Π_{j<i} G_j: how many of the concurrent groups cross the same nodes
        sharing = sum(1 for g in groups if {where[v] for v in g} & spans)
        beta = mach.beta_inter / min(mach.g_node, sharing)
        note = (f"group spans {len(spans)} nodes, {sharing} concurrent group(s) share them: "
                f"β = β_inter / min(G_node={mach.g_node}, {sharing}) = {beta / 1e9:.4g} GB/s")
    m = size / n if kind == "allgather" else size  # eq. (1) takes the per-GPU input
    t = {"allgather": axonn.t_allgather, "reducescatter": axonn.t_reducescatter,
         "allreduce": axonn.t_allreduce}[kind](n, m, beta)
    return Estimate("axonn", kind, size, n, len(groups), t, 0.0, beta,
                    FORMULAS["axonn"][kind], None, (note,))


def estimate(topology: Topology | Context, kind: str, size: int, *, model: str = "ring",
             groups: Sequence[Sequence[int]] | None = None, root: int | None = None,
             chunks: int = 1, relays: str = "members") -> Estimate:
    """Predict the time of collective ``kind`` of ``size`` bytes (nccl-tests convention).

    ``groups``: process groups that run the collective at the same time (default: one group
    of every live NPU); their sends share links and ports.  ``root`` (rooted collectives) is
    an NPU of the first group (the others use the member at the same position).  ``chunks``
    per NPU matters to pipelined algorithms (rooted rings, trees) as in the baselines.
    ``relays``: sends between NPUs without a route relay through the groups' NPUs
    (``'members'``, the baselines' default) or through any NPU (``'all'``).  Returns an
    :class:`Estimate` whose ``time`` is None (with ``reason``) when the model has no form for
    the case.
    """
    ctx = topology if isinstance(topology, Context) else Context(topology)
    topo = ctx.topology
    model = canonical(model)
    groups = [list(g) for g in (groups or [topo.live_npus])]
    check_request(topo, kind, groups, root)
    check_size(size, chunks)
    n = len(groups[0])
    if n == 1:
        return Estimate(model, kind, size, 1, len(groups), 0.0, formula="0 (one NPU)")
    if model == "axonn":
        return _axonn(ctx, kind, size, groups)
    if model == "nccl":
        return nccl_estimate(ctx, kind, size, groups, root, relays)
    try:
        p = plan(ctx, model, kind, groups, root=root, chunks=chunks, relays=relays)
    except TacosError as exc:
        return Estimate(model, kind, size, n, len(groups), None, reason=exc.message)
    alpha, beta = p.effective(size)
    return Estimate(model, kind, size, n, len(groups), p.time(size), alpha, beta, p.formula, p)
