"""NCCL-faithful baselines as solvers, and the set of algorithms NCCL would choose from.

Each algorithm lives in its own module and says which NCCL behaviour it reproduces:

==========  ===============================================  ===============================
solver      NCCL algorithm                                   collectives
==========  ===============================================  ===============================
nccl-ring   multi-channel rings (:mod:`.nccl_rings`)        allgather, reducescatter,
                                                             allreduce, broadcast, reduce
nccl-tree   chains + double binary tree (:mod:`.nccl_tree`)  allreduce
nvls        NVSwitch multicast/reduce (:mod:`.nccl_nvls`)    allreduce (also across nodes),
                                                             allgather, reducescatter
collnet     SHARP in-network reduce (:mod:`.nccl_collnet`)   allreduce (across nodes)
pat         aggregated binomial trees (:mod:`.nccl_pat`)     allgather, reducescatter
nccl-p2p    grouped send/recv, NCCL's all-to-all             alltoall, scatter, gather,
                                                             allgather
nccl        NCCL's tuner: the fastest of the above that
            NCCL would run for this collective here          all of the above
==========  ===============================================  ===============================

:func:`nccl_algorithms` says which of them NCCL would consider (NVLS only where every node has
an NVLS-capable switch, CollNet only with SHARP switches across nodes, PAT only with one GPU
per node, point-to-point for all-to-all); :func:`nccl_best` runs them and keeps the fastest,
an idealized tuner that always picks right -- the strongest NCCL a user could get from this
model.  Every schedule is on the physical topology and of the user's collective refined to more
chunks per NPU (channels and pipeline slices; ``refines_chunks``).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable

from tacos.errors import TacosError
from tacos.model.collective import Collective
from tacos.model.schedule import Schedule
from tacos.model.topology import Topology
from tacos.solvers.baselines import algos as algos
from tacos.solvers.nccl.collnet import nccl_collnet, sharp_switches
from tacos.solvers.nccl.lower import GroupLowering, check_standard
from tacos.solvers.nccl.nvls import nccl_nvls
from tacos.solvers.nccl.pat import pat_schedule
from tacos.solvers.nccl.rings import nccl_ring
from tacos.solvers.nccl.system import System, system
from tacos.solvers.nccl.tree import nccl_tree
from tacos.solvers.registry import Capabilities, Problem, SolverBase, SolveResult

RING_KINDS = ("allgather", "reducescatter", "allreduce", "broadcast", "reduce")
P2P_KINDS = ("alltoall", "scatter", "gather", "allgather")

LABELS = {
    "ring": "NCCL ring",
    "tree": "NCCL tree",
    "nvls": "NCCL NVLS",
    "collnet": "NCCL CollNet",
    "pat": "NCCL PAT",
    "p2p": "NCCL send/recv",
}


def p2p_schedule(sys_: System, collective: Collective) -> Schedule:
    """NCCL's grouped send/recv (what ``ncclAllToAll`` and friends are): every rank sends each
    peer its data directly, peers in NCCL's order (step i: rank r sends to r+i)."""
    if collective.kind not in P2P_KINDS:
        raise TacosError(f"point-to-point sends serve {', '.join(P2P_KINDS)}, not "
                         f"{collective.kind}")
    pairs: dict[tuple[int, int], list[int]] = defaultdict(list)
    for c in collective.chunks:
        (u,) = tuple(c.pre)
        for v in sorted(c.post - c.pre):
            pairs[(u, v)].append(c.id)
    members = [m for m in collective.group if not sys_.topology.npus[m].failed]
    lowering = GroupLowering(sys_.topology, collective, sys_.graph)
    lowering.run(algos.direct_pairs(members, {k: tuple(v) for k, v in pairs.items()}))
    return lowering.schedule({"algorithm": "NCCL send/recv (point-to-point)"})


BUILDERS: dict[str, Callable[[System, Collective], Schedule]] = {
    "ring": nccl_ring,
    "tree": nccl_tree,
    "nvls": nccl_nvls,
    "collnet": nccl_collnet,
    "pat": pat_schedule,
    "p2p": p2p_schedule,
}


def nccl_algorithms(sys_: System, collective: Collective) -> list[str]:
    """The algorithms NCCL would consider for ``collective`` on ``sys_`` (see module doc)."""
    kind = collective.kind
    out = []
    if kind in RING_KINDS:
        out.append("ring")
    if kind == "allreduce" and len(sys_.group) > 2:
        out.append("tree")
    if kind in ("allreduce", "allgather", "reducescatter") and \
            (kind == "allreduce" or not sys_.multi_node) and \
            all(sys_.nvls_switch(i, reduce=kind != "allgather") is not None
                for i in range(len(sys_.nodes))) and len(sys_.nodes[0]) > 1:
        out.append("nvls")
    if kind == "allreduce" and sys_.multi_node and _has_sharp(sys_):
        out.append("collnet")
    if kind in ("allgather", "reducescatter") and sys_.one_per_node:
        out.append("pat")
    if kind in ("alltoall", "scatter", "gather"):
        out.append("p2p")
    return out


def _has_sharp(sys_: System) -> bool:
    try:
        sharp_switches(sys_)
    except TacosError:
        return False
    return True


def nccl_schedule(algorithm: str, topology: Topology, collective: Collective, *,
                  sys_: System | None = None) -> Schedule:
    """The schedule of NCCL algorithm ``algorithm`` (a key of :data:`BUILDERS`)."""
    check_standard(collective, f"NCCL's {algorithm}")
    sys_ = sys_ or system(topology, collective.group)
    if len(sys_.group) < 2:
        raise TacosError("an NCCL collective needs at least two ranks")
    sched = BUILDERS[algorithm](sys_, collective)
    sched.meta.update(solver=f"nccl-{algorithm}", nccl=algorithm)
    return sched


def nccl_best(topology: Topology, collective: Collective, *, sys_: System | None = None
              ) -> tuple[str, Schedule, dict[str, Schedule]]:
    """NCCL's tuner in the model: every algorithm NCCL would consider, the fastest kept.

    Returns ``(name, schedule, every schedule by name)``.
    """
    check_standard(collective, "NCCL")
    sys_ = sys_ or system(topology, collective.group)
    names = nccl_algorithms(sys_, collective)
    if not names:
        raise TacosError(f"NCCL has no algorithm for {collective.label()}")
    results = {name: nccl_schedule(name, topology, collective, sys_=sys_) for name in names}
    best = min(names, key=lambda n: results[n].makespan)
    return best, results[best], results


class _NcclSolver(SolverBase):
    """Shared :class:`~tacos.solvers.registry.Solver` implementation."""

    name = ""
    algorithm = ""
    capabilities = Capabilities(combining=True, native_switches=True, refines_chunks=True)

    def solve(self, problem: Problem) -> SolveResult:
        """Build the NCCL schedule; status ``'feasible'`` (a model of NCCL proves nothing)."""
        t0 = time.perf_counter()
        if self.algorithm:
            sched = nccl_schedule(self.algorithm, problem.topology, problem.collective)
        else:
            name, sched, results = nccl_best(problem.topology, problem.collective)
            sched.meta["nccl_models"] = {k: v.makespan for k, v in results.items()}
        stats = {"synthesis_time": time.perf_counter() - t0, "transfers": len(sched.transfers)}
        return SolveResult("feasible", sched, None, stats)


class NcclSolver(_NcclSolver):
    """NCCL's choice: the fastest of the NCCL algorithms NCCL would run here."""

    name = "nccl"


class NcclRingSolver(_NcclSolver):
    """NCCL's multi-channel rings."""

    name, algorithm = "nccl-ring", "ring"


class NcclTreeSolver(_NcclSolver):
    """NCCL's tree all-reduce (node chains, double binary tree across nodes)."""

    name, algorithm = "nccl-tree", "tree"


class NvlsSolver(_NcclSolver):
    """NCCL's NVLS: NVSwitch multicast and in-switch reduction."""

    name, algorithm = "nvls", "nvls"


class CollNetSolver(_NcclSolver):
    """NCCL's CollNet Direct: SHARP in-network reduction across nodes."""

    name, algorithm = "collnet", "collnet"


class PatSolver(_NcclSolver):
    """NCCL's PAT all-gather / reduce-scatter (one GPU per node)."""

    name, algorithm = "pat", "pat"


class NcclP2pSolver(_NcclSolver):
    """NCCL's grouped send/recv (all-to-all, scatter, gather)."""

    name, algorithm = "nccl-p2p", "p2p"
