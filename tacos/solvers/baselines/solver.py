"""Baseline collective algorithms as solvers: ring, bidirectional ring, direct, recursive
halving-doubling, double binary tree and hierarchical multi-rail.

Each solver builds the textbook logical program for the collective (see
:mod:`tacos.solvers.baselines.algos`), then :class:`~tacos.solvers.lowering.program.Lowering`
maps it onto the physical topology (multi-hop store-and-forward routes, cut-through switch
hops) and times it with link congestion counted.  Reductions are generated directly with
``op='reduce'`` transfers (``supports_combining = True``).  Switches are handled natively, so
the solvers want the original topology, not an unwound one.

=========  ======================================================================
solver     collectives
=========  ======================================================================
ring       allgather, reducescatter, allreduce, broadcast, reduce
biring     allgather, reducescatter, allreduce, broadcast, reduce
direct     allgather, reducescatter, allreduce, alltoall, broadcast, reduce,
           scatter, gather
rhd        allgather, reducescatter, allreduce, broadcast, reduce
dbtree     allgather, reducescatter, allreduce, broadcast, reduce
hierarchy  allgather, reducescatter, allreduce (multi-dimensional topologies)
=========  ======================================================================

A multi-tenant collective is served tenant by tenant (all running at once) when every tenant
is supported.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from tacos.errors import TacosError
from tacos.model.collective import Collective
from tacos.model.schedule import Schedule
from tacos.model.topology import Topology
from tacos.solvers.baselines import algos as algos
from tacos.solvers.baselines.hier import analyse, hierarchical_program
from tacos.solvers.lowering.hops import NpuGraph
from tacos.solvers.lowering.hops import ring_order as find_ring_order
from tacos.solvers.lowering.program import Lowering, Msg
from tacos.solvers.options import Option
from tacos.solvers.registry import Capabilities, Problem, SolverBase, SolveResult

Program = list[Msg]


class _Plan:
    """What an algorithm sees: the topology's NPU graph and one (tenant) collective."""

    def __init__(self, graph: NpuGraph, coll: Collective, offset: int,
                 ring_order: str = "auto") -> None:
        self.graph = graph
        self.coll = coll
        self.offset = offset
        self.ring_order = ring_order
        self.members = [v for v in coll.group if not graph.topology.npus[v].failed]
        self.info: dict[str, object] = {}

    def ids(self, chunks) -> tuple[int, ...]:
        return tuple(sorted(self.offset + c.id for c in chunks))

    def blocks(self) -> algos.Blocks:
        """Member -> global chunk ids it owns (source, destination or all-reduce shard)."""
        kind, k = self.coll.kind, max(1, self.coll.chunks_per_npu)
        out: dict[int, list] = {m: [] for m in self.members}
        for i, c in enumerate(self.coll.chunks):
            if kind == "allgather":
                (m,) = c.pre
            elif kind == "reducescatter":
                (m,) = c.post
            else:
                m = self.members[min(i // k, len(self.members) - 1)]
            out[m].append(c)
        return {m: self.ids(cs) for m, cs in out.items()}

    def owner(self) -> dict[int, int]:
        return {c: m for m, cs in self.blocks().items() for c in cs}

    def all_ids(self) -> tuple[int, ...]:
        return self.ids(self.coll.chunks)

    def ring(self) -> list[int]:
        if self.ring_order == "npu":
            self.info["ring_order"] = "npu-order (requested)"
            return sorted(self.members)
        order, kind = find_ring_order(self.graph, self.members)
        self.info["ring_order"] = kind
        return order


def _unsupported(name: str, kind: str, supported: tuple[str, ...]) -> TacosError:
    return TacosError(
        f"the {name} baseline does not implement {kind}",
        hint=f"{name} supports {', '.join(supported)}; try solver 'direct' or 'greedy'")


def _rooted(plan: _Plan) -> tuple[int, tuple[int, ...]]:
    if plan.coll.root is None:
        raise TacosError(f"{plan.coll.kind} needs a root")
    return plan.coll.root, plan.all_ids()


def _ag_rs_ar(plan: _Plan, rs: Callable, ag: Callable, members: list[int]) -> Program:
    blocks = plan.blocks()
    kind = plan.coll.kind
    if kind == "allgather":
        return ag(members, blocks)
    if kind == "reducescatter":
        return rs(members, blocks)
    return rs(members, blocks) + ag(members, blocks)


def _ring(plan: _Plan, bidirectional: bool) -> Program:
    order = plan.ring()
    kind = plan.coll.kind
    if kind in ("broadcast", "reduce"):
        root, ids = _rooted(plan)
        return algos.ring_rooted(order, root, ids, reduce=kind == "reduce",
                                 bidirectional=bidirectional)
    if bidirectional:
        return _ag_rs_ar(plan, algos.biring_reducescatter, algos.biring_allgather, order)
    return _ag_rs_ar(plan, algos.ring_reducescatter, algos.ring_allgather, order)


def _direct(plan: _Plan) -> Program:
    kind, members = plan.coll.kind, plan.members
    if kind in ("allgather", "reducescatter", "allreduce"):
        return _ag_rs_ar(plan, algos.direct_reducescatter, algos.direct_allgather, members)
    if kind in ("broadcast", "reduce"):
        root, ids = _rooted(plan)
        others = [m for m in members if m != root]
        if kind == "broadcast":
            return [Msg(root, v, ids) for v in others]
        return [Msg(v, root, ids) for v in others]
    pairs: dict[tuple[int, int], list[int]] = {}
    for c in plan.coll.chunks:
        for u in sorted(c.pre):
            for v in sorted(c.post - c.pre):
                pairs.setdefault((u, v), []).append(plan.offset + c.id)
            break
    return algos.direct_pairs(members, {k: tuple(v) for k, v in pairs.items()})


def _rhd(plan: _Plan) -> Program:
    kind, members = plan.coll.kind, sorted(plan.members)
    if kind in ("broadcast", "reduce"):
        root, ids = _rooted(plan)
        return algos.binomial_rooted(members, root, ids, reduce=kind == "reduce")
    return _ag_rs_ar(plan, algos.rhd_reducescatter, algos.rhd_allgather, members)


def _dbtree(plan: _Plan) -> Program:
    order = plan.ring()
    rank = {m: r for r, m in enumerate(order)}
    n, kind = len(order), plan.coll.kind
    if kind in ("broadcast", "reduce"):
        root, ids = _rooted(plan)
        flows = [(i % 2, rank[root], c) for i, c in enumerate(ids)]
        return algos.tree_flows(order, flows, toward=kind == "reduce")
    if kind == "allreduce":
        ids = plan.all_ids()
        roots = (algos.tree_root(n, 0), algos.tree_root(n, 1))
        flows = [(i % 2, roots[i % 2], c) for i, c in enumerate(ids)]
        return (algos.tree_flows(order, flows, toward=True)
                + algos.tree_flows(order, flows, toward=False))
    flows = [(i % 2, rank[m], c) for m, cs in plan.blocks().items()
             for i, c in enumerate(cs, start=rank[m])]
    return algos.tree_flows(order, flows, toward=kind == "reducescatter")


def _hierarchical(plan: _Plan) -> Program:
    grid = analyse(plan.graph.topology, plan.members, plan.graph)
    plan.info["dimensions"] = grid.describe()
    kind = plan.coll.kind
    return hierarchical_program(grid, plan.owner(),
                                reduce_scatter=kind in ("reducescatter", "allreduce"),
                                all_gather=kind in ("allgather", "allreduce"))


_AGRSAR = ("allgather", "reducescatter", "allreduce")
_ROOTED = ("broadcast", "reduce")
ALGORITHMS: dict[str, tuple[Callable[[_Plan], Program], tuple[str, ...], str]] = {
    "ring": (lambda p: _ring(p, False), _AGRSAR + _ROOTED, "ring"),
    "biring": (lambda p: _ring(p, True), _AGRSAR + _ROOTED, "bidirectional ring"),
    "direct": (_direct, _AGRSAR + _ROOTED + ("alltoall", "scatter", "gather"), "direct"),
    "rhd": (_rhd, _AGRSAR + _ROOTED, "recursive halving-doubling"),
    "dbtree": (_dbtree, _AGRSAR + _ROOTED, "double binary tree"),
    "hierarchical": (_hierarchical, _AGRSAR, "hierarchical multi-rail"),
}


def baseline_schedule(name: str, topology: Topology, collective: Collective, *,
                      ring_order: str = "auto", relays: str = "members") -> Schedule:
    """Build, route and time baseline ``name`` for ``collective`` on ``topology``.

    ``ring_order`` (ring, biring, dbtree): ``'auto'`` follows a Hamiltonian cycle (or path)
    when one is found, ``'npu'`` uses NPU-id order (a topology-unaware ring).  ``relays``:
    ``'members'`` (default) relays messages between NPUs without a route only through the
    collective's group, ``'all'`` through any NPU.  Raises
    :class:`~tacos.errors.TacosError` for an unsupported collective or topology.
    """
    if ring_order not in ("auto", "npu"):
        raise TacosError(f"unknown ring order {ring_order!r}", hint="use 'auto' or 'npu'")
    build, supported, label = ALGORITHMS[name]
    tenants = collective.tenants if collective.kind == "multi" else (collective,)
    try:
        allowed = collective.relay_npus(relays)
    except ValueError as exc:
        raise TacosError(str(exc), hint="relays='members' (default) or relays='all'") from None
    graph = NpuGraph(topology, allowed)
    lowering = Lowering(topology, collective, graph)
    info: dict[str, object] = {}
    offset = 0
    programs: list[Program] = []
    for tenant in tenants:
        if tenant.kind not in supported:
            raise _unsupported(name, tenant.kind, supported)
        plan = _Plan(graph, tenant, offset, ring_order)
        if len(plan.members) > 1:
            programs.append(build(plan))
        info.update(plan.info)
        offset += tenant.n_chunks
    for program in programs:
        lowering.run(program)
    meta = {"solver": name, "algorithm": label, **info}
    return lowering.schedule(meta)


class _BaselineSolver(SolverBase):
    """Shared :class:`~tacos.solvers.registry.Solver` implementation."""

    name = ""
    #: switches are modelled natively (cut-through hops sharing switch ports); given an
    #: unwound topology the virtual links are used as plain links.
    capabilities = Capabilities(combining=True, native_switches=True)
    options = {"ring_order": Option("ring order: 'auto' (a Hamiltonian cycle of the "
                                    "topology when one exists) or 'npu' (NPU id order)",
                                    str, ("auto", "npu"), "auto")}

    def accepts(self, problem: Problem) -> str | None:
        """The collective kinds the algorithm implements (every tenant's)."""
        supported = ALGORITHMS[self.name][1]
        coll = problem.collective
        for tenant in coll.tenants if coll.kind == "multi" else (coll,):
            if tenant.kind not in supported:
                return _unsupported(self.name, tenant.kind, supported).message
        return super().accepts(problem)

    def solve(self, problem: Problem) -> SolveResult:
        """Run the baseline; status is ``'feasible'`` (baselines prove nothing optimal).

        Options ``ring_order`` (``'auto'``, default, or ``'npu'``) and ``relays``
        (``'members'``, default, or ``'all'``), see :func:`baseline_schedule`.
        """
        t0 = time.perf_counter()
        sched = baseline_schedule(self.name, problem.topology, problem.collective,
                                  ring_order=problem.options.get("ring_order", "auto"),
                                  relays=problem.options.get("relays", "members"))
        stats = {"synthesis_time": time.perf_counter() - t0,
                 "transfers": len(sched.transfers), **sched.meta}
        return SolveResult("feasible", sched, None, stats)


class RingSolver(_BaselineSolver):
    """The textbook single ring (one channel) along a Hamiltonian cycle when one exists --
    the seed paper's baseline, not what NCCL runs: NCCL's multi-channel rings are solver
    ``nccl-ring`` (:mod:`tacos.solvers.nccl.rings`)."""

    name = "ring"


class BiRingSolver(_BaselineSolver):
    """Bidirectional ring: each block covers half the ring in each direction."""

    name = "biring"


class DirectSolver(_BaselineSolver):
    """Every NPU sends straight to every NPU that needs its data."""

    name = "direct"


class HalvingDoublingSolver(_BaselineSolver):
    """Recursive halving (reduce-scatter) and doubling (all-gather), binomial rooted ops."""

    name = "rhd"


class DoubleBinaryTreeSolver(_BaselineSolver):
    """NCCL-style double binary tree, chunks pipelined over two complementary trees."""

    name = "dbtree"


class HierarchicalSolver(_BaselineSolver):
    """Multi-rail hierarchical algorithm on multi-dimensional topologies."""

    name = "hierarchical"
