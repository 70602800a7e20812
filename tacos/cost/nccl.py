"""The NCCL-style model: what NCCL's algorithms would cost on the physical model.

* **Rings over channels.**  NCCL runs C rings ("channels") at once and gives each 1/C of the
  data.  Across nodes each channel leaves a node through a different NIC, so C channels use C
  rails: the ring of channel c enters node i at the NPU whose rail it arrives on and leaves
  through the next rail ((c + i) mod R), and walks the node's other NPUs in between.  Inside
  one node the channels are Hamiltonian cycles that avoid each other's links where they can
  (a ring and its reverse first, as NCCL does on NVLink meshes).  The channel count is the
  one with the smallest predicted time (NCCL too picks channels for bandwidth).
* **Tree** (all-reduce only): a chain through each node and NCCL's double binary tree over
  the nodes' first NPUs, pipelined in 512 KiB steps (NCCL's Simple protocol step).
* NCCL's choice: the faster of ring and tree for all-reduce; rings for all-gather,
  reduce-scatter, broadcast and reduce (rooted ones pipelined in 512 KiB steps); point-to-point
  sends (the direct model) for all-to-all, scatter and gather.

:func:`channel_schedule` builds the channel rings as a real, verified schedule (the baseline
lowering times it), so the ring part of the model can be checked against a simulation.
NCCL's own protocol overheads (LL/LL128 flags, proxy threads) are not modelled.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tacos.cost import programs
from tacos.cost.placement import nodes
from tacos.cost.steps import Plan, Step, evaluate, merge
from tacos.model.collective import Collective
from tacos.model.schedule import Schedule
from tacos.model.topology import Topology
from tacos.solvers.baselines import algos as algos
from tacos.solvers.lowering.hops import NpuGraph, _hamilton, ring_order
from tacos.solvers.lowering.program import Lowering, Msg

#: NCCL's Simple-protocol pipeline step (NCCL_BUFFSIZE 4 MiB / NCCL_STEPS 8)
STEP_BYTES = 512 * 1024
MAX_CHANNELS = 16
FORMULA_P2P = "α + M/(Nβ) (every peer at once)"


def _cycle_pairs(order: Sequence[int]) -> list[tuple[int, int]]:
    return [(order[i], order[(i + 1) % len(order)]) for i in range(len(order))]


def _intra_path(graph: NpuGraph, members: list[int], entry: int, exit_: int) -> list[int] | None:
    """A Hamiltonian path over ``members`` from ``entry`` to ``exit_`` along hops."""
    if len(members) == 1:
        return [entry]
    inside = set(members)
    succ = {v: [w for w in graph.neighbours(v) if w in inside] for v in members}
    return _hamilton(sorted(members), succ, entry, lambda last: last == exit_, 50_000)


def _multi_node_rings(graph: NpuGraph, parts: list[list[int]], count: int
                      ) -> list[list[int]] | None:
    """``count`` channel rings through the nodes ``parts`` in order (see module doc)."""
    k = len(parts)
    crossings = []
    for i in range(k):
        a, b = parts[i], set(parts[(i + 1) % k])
        cands = sorted((u, v) for u in a for v in graph.neighbours(u) if v in b)
        if not cands:
            return None
        crossings.append(cands)
    rings = []
    for c in range(count):
        picks = [crossings[i][(c + i) % len(crossings[i])] for i in range(k)]
        order: list[int] = []
        for i in range(k):
            entry = picks[i - 1][1]
            exit_ = picks[i][0]
            node = parts[i]
            if entry == exit_ and len(node) > 1:
                alt = [p for p in crossings[i] if p[0] != entry]
                if not alt:
                    return None
                picks[i] = alt[c % len(alt)]
                exit_ = picks[i][0]
            path = _intra_path(graph, node, entry, exit_)
            if path is None:
                return None
            order += path
        # the first node's entry depends on the last crossing: rotate so it is consistent
        if order[0] != picks[-1][1]:
            return None
        rings.append(order)
    return rings


def _single_node_rings(graph: NpuGraph, members: list[int], count: int) -> list[list[int]]:
    base = ring_order(graph, members)[0]
    rings = [base]
    used = set(_cycle_pairs(base))
    if count > 1:
        rev = base[::-1]
        rings.append(rev)
        used |= set(_cycle_pairs(rev))
    while len(rings) < count:
        inside = set(members)
        succ = {v: sorted((w for w in graph.neighbours(v) if w in inside),
                          key=lambda w, v=v: ((v, w) in used, w)) for v in members}
        start = base[0]
        closes = {v for v in members if start in succ[v]}
        found = _hamilton(sorted(members), succ, start, closes.__contains__, 20_000)
        if found is None or set(_cycle_pairs(found)) <= used:
            rings.append(rings[len(rings) % 2])
        else:
            rings.append(found)
            used |= set(_cycle_pairs(found))
    return rings


def channel_rings(graph: NpuGraph, members: Sequence[int], count: int) -> list[list[int]]:
    """The member orders of ``count`` NCCL-style channel rings."""
    members = sorted(members)
    parts = [list(p) for p in nodes(graph, members)]
    if len(parts) > 1:
        rings = _multi_node_rings(graph, parts, count)
        if rings is not None:
            return rings
    return _single_node_rings(graph, members, count)


def max_channels(graph: NpuGraph, members: Sequence[int]) -> int:
    """Most channels worth trying: the crossings between two consecutive nodes (one per
    rail), or twice the hop degree inside a node, at most :data:`MAX_CHANNELS`."""
    parts = nodes(graph, sorted(members))
    if len(parts) > 1:
        b = set(parts[1])
        width = sum(1 for u in parts[0] for v in graph.neighbours(u) if v in b)
    else:
        inside = set(members)
        width = 2 * max(sum(1 for w in graph.neighbours(v) if w in inside) for v in members)
    return max(1, min(MAX_CHANNELS, width))


def channel_counts(most: int) -> list[int]:
    """Channel counts worth pricing: powers of two up to ``most``, and ``most``."""
    out = []
    c = 1
    while c < most:
        out.append(c)
        c *= 2
    return out + [most]


def _pipeline(kind: str, size: int, channels: int) -> int:
    """Chunks per channel of a rooted collective: NCCL's 512 KiB steps (at most 1024)."""
    if kind not in ("broadcast", "reduce"):
        return 1
    return max(1, min(1024, math.ceil(size / channels / STEP_BYTES)))


def _cached(ctx, key: tuple, make) -> Plan:
    hit = ctx._plans.get(key)
    if hit is None:
        hit = ctx._plans[key] = make()
    return hit


def _ring_steps(ctx, groups, kind, roots, channels: int, k: int) -> list[Step]:
    per_group = []
    for g, root in zip(groups, roots, strict=True):
        rings = _rings(ctx, g, channels)
        per_group.append(merge([programs.ring(r, kind, root=root, k=k,
                                              scale=1.0 / channels) for r in rings]))
    return merge(per_group)


def _rings(ctx, members: list[int], channels: int) -> list[list[int]]:
    key = ("nccl-rings", tuple(members), channels)
    hit = ctx._plans.get(key)
    if hit is None:
        hit = ctx._plans[key] = channel_rings(ctx.graph, members, channels)
    return hit


def _tree_steps(ctx, groups, total: int) -> list[Step]:
    """NCCL tree all-reduce: chains inside nodes below NCCL's double binary tree of nodes."""
    per_group = []
    for g in groups:
        parts = [list(p) for p in nodes(ctx.graph, g)]
        heads = [p[0] for p in parts]
        flows = programs.Flows()
        inter = algos.dtree_parents(len(parts)) if len(parts) > 1 else ([None], [None])
        order = [v for p in parts for v in p]
        rank = {v: r for r, v in enumerate(order)}
        for t in (0, 1):
            count = (total + 1 - t) // 2
            parent: dict[int, int] = {}
            for i, p in enumerate(parts):
                for a, b in zip(p, p[1:], strict=False):
                    parent[rank[b]] = rank[a]
                up = inter[t][i]
                parent[rank[p[0]]] = rank[heads[up]] if up is not None else rank[p[0]]
            flows.up_and_down(t, parent, count)
        per_group.append([flows.step(order, 1.0 / total, "NCCL tree", split=True)])
    return merge(per_group)


def choose(ctx, kind: str, size: int, groups: list[list[int]], root: int | None,
           relays: str = "members") -> tuple[str, int, Plan]:
    """NCCL's pick: ``('ring', channels, plan)``, ``('tree', 0, plan)`` or ``('p2p', 0, plan)``
    (see module doc)."""
    from tacos.cost.models import plan, relay_set, roots_of

    n = len(groups[0])
    if kind in ("alltoall", "scatter", "gather"):
        return "p2p", 0, plan(ctx, "direct", kind, groups, root=root, relays=relays)
    roots = roots_of(groups, root)
    allowed = relay_set(groups, relays)
    key = (tuple(tuple(g) for g in groups), relays)
    options = []
    for c in channel_counts(max_channels(ctx.graph, groups[0])):
        k = _pipeline(kind, size, c)
        p = _cached(ctx, ("nccl-ring", kind, key, root, c, k), lambda c=c, k=k: Plan(
            "nccl", kind, n,
            evaluate(ctx.router, _ring_steps(ctx, groups, kind, roots, c, k), allowed),
            "ring over C channels"))
        options.append((p.time(size), c, "ring", p))
    if kind == "allreduce" and n > 2:
        total = max(2, math.ceil(size / STEP_BYTES))
        p = _cached(ctx, ("nccl-tree", key, total), lambda: Plan(
            "nccl", kind, n, evaluate(ctx.router, _tree_steps(ctx, groups, total), allowed),
            "tree: node chains + double binary tree"))
        options.append((p.time(size), 0, "tree", p))
    _, c, what, p = min(options, key=lambda x: (x[0], x[1]))
    return what, c, p


_FORMULA = {"ring": {"allreduce": "2(N-1)(α + M/(NCβ))", "broadcast": "(N-2+k)(α + M/(Ckβ))",
                     "reduce": "(N-2+k)(α + M/(Ckβ))"},
            "tree": {"allreduce": "(2D + S - 1)(α + M/(Sβ)), S = M/512KiB"},
            "p2p": {}}
_DEFAULT = {"ring": "(N-1)(α + M/(NCβ))", "p2p": "α + M/(Nβ)"}


def nccl_estimate(ctx, kind: str, size: int, groups: list[list[int]], root: int | None,
                  relays: str = "members"):
    """The NCCL-style :class:`~tacos.cost.models.Estimate` (see module doc)."""
    from tacos.cost.models import Estimate

    what, c, p = choose(ctx, kind, size, groups, root, relays)
    alpha, beta = p.effective(size)
    label = {"ring": f"rings over {c} channel{'s' if c > 1 else ''}", "tree": "tree",
             "p2p": "point-to-point sends"}[what]
    formula = _FORMULA[what].get(kind, _DEFAULT.get(what, ""))
    return Estimate("nccl", kind, size, len(groups[0]), len(groups), p.time(size), alpha, beta,
                    formula, p, (f"NCCL would pick: {label}",))


def _owners(coll: Collective) -> dict[int, list[int]]:
    members = list(coll.group)
    k = coll.chunks_per_npu
    own: dict[int, list[int]] = {m: [] for m in members}
    for i, c in enumerate(coll.chunks):
        if coll.kind == "allgather":
            (m,) = c.pre
        elif coll.kind == "reducescatter":
            (m,) = c.post
        else:
            m = members[min(i // k, len(members) - 1)]
        own[m].append(c.id)
    return own


def channel_schedule(topology: Topology, collective: Collective, channels: int,
                     relays: str = "members") -> Schedule:
    """The channel rings as a schedule (all-gather, reduce-scatter, all-reduce; one or several
    concurrent groups).

    Every group's ``chunks_per_npu`` must be a multiple of ``channels``: channel c carries the
    c-th share of every NPU's chunks.  Timed by the baseline lowering (physical links and
    ports, congestion counted); verify it before trusting it.
    """
    graph = NpuGraph(topology, collective.relay_npus(relays))
    tenants = collective.tenants if collective.kind == "multi" else (collective,)
    progs = []
    offset = 0
    for coll in tenants:
        k = coll.chunks_per_npu
        if coll.kind not in ("allgather", "reducescatter", "allreduce") or k % channels:
            raise ValueError("channel schedules cover all-gather, reduce-scatter and "
                             "all-reduce with chunks per NPU a multiple of the channel count")
        own = _owners(coll)
        per = k // channels
        for c, ring in enumerate(channel_rings(graph, list(coll.group), channels)):
            blocks = {m: tuple(offset + i for i in ids[c * per:(c + 1) * per])
                      for m, ids in own.items()}
            prog: list[Msg] = []
            if coll.kind in ("reducescatter", "allreduce"):
                prog += algos.ring_reducescatter(ring, blocks)
            if coll.kind in ("allgather", "allreduce"):
                prog += algos.ring_allgather(ring, blocks)
            progs.append((len(ring), prog))
        offset += coll.n_chunks
    lowering = Lowering(topology, collective, graph)
    longest = max(len(p) // w for w, p in progs)
    for step in range(longest):  # interleave the channels step by step
        for width, prog in progs:
            lowering.run(prog[step * width:(step + 1) * width])
    return lowering.schedule({"solver": "nccl-channels", "channels": channels,
                              "algorithm": f"{channels}-channel rings"})


def best_channel_schedule(topology: Topology, collective: Collective,
                          relays: str = "members") -> Schedule:
    """The schedule of NCCL's pick for ``collective`` (rings over the model's channel count;
    point-to-point sends through the direct baseline).  NCCL's tree has no schedule here."""
    from tacos.cost.models import Context
    from tacos.errors import TacosError
    from tacos.model.patterns import build
    from tacos.solvers.baselines.solver import baseline_schedule

    tenants = collective.tenants if collective.kind == "multi" else (collective,)
    groups = [list(t.group) for t in tenants]
    what, c, _ = choose(Context(topology), tenants[0].kind, tenants[0].size, groups,
                        tenants[0].root, relays)
    if what == "p2p":
        return baseline_schedule("direct", topology, collective, relays=relays)
    if what == "tree":
        raise TacosError("NCCL's tree has no schedule in tacos yet (only its model)")
    if tenants[0].kind not in ("allgather", "reducescatter", "allreduce"):
        raise TacosError(f"NCCL-style {tenants[0].kind} has no schedule in tacos yet "
                         "(only its model)")
    k = tenants[0].chunks_per_npu * c
    from tacos.model.collective import combine

    again = combine([build(t.kind, list(t.group), size=t.size, chunks_per_npu=k, root=t.root)
                     for t in tenants])
    return channel_schedule(topology, again, c, relays)
