"""``a2a``: all-to-all (the MoE pattern) as aggregated exchanges, one dimension at a time.

A direct all-to-all sends ``N - 1`` messages per NPU, each paying the route's latency, and on a
multi-node system most of them are relayed (NCCL's PXN: over NVLink to the GPU on the right
rail, then across).  ``a2a`` finds the topology's dimensions and moves the data one dimension
at a time, **aggregating** everything bound for one peer into one message:

* on a multi-node system the dimensions are *inside the node* (its GPUs, over NVLink or the
  NVSwitch) and *along the rail* (GPU g of every node): first GPU g of node a hands GPU h of
  its node every chunk bound for GPU h of any node, then GPU h sends node b's share to GPU h of
  node b -- ``(G - 1) + (nodes - 1)`` messages per GPU instead of ``N - 1``, every byte across
  the network once, on its own rail;
* on a multi-dimensional topology (links carry ``dim``: tori, meshes, ``Ring(4)_FC(2)_Switch(8)``)
  the dimensions are the topology's (:func:`tacos.solvers.baselines.hier.analyse`), each
  exchange inside the groups of one dimension;
* otherwise it is the direct exchange.

Every exchange is direct within its group (step i: member j sends to member j+i), routed and
timed by the baseline lowering on the physical links.  The plan is fast to build -- linear in
the chunks -- so 512 NPUs take seconds, and the ``auto`` portfolio sets it against NCCL's
send/recv model, keeping whichever is faster at each size.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence

from tacos.errors import TacosError
from tacos.model.collective import Collective
from tacos.model.schedule import Schedule
from tacos.model.topology import Topology
from tacos.solvers.baselines import algos as algos
from tacos.solvers.baselines.hier import analyse
from tacos.solvers.nccl.lower import GroupLowering, best_of, check_standard
from tacos.solvers.nccl.system import System, system
from tacos.solvers.registry import Capabilities, Problem, SolverBase, SolveResult

MAX_TRIED = 128  # above this many NPUs the number of waves comes from a formula


def dimensions(sys_: System) -> tuple[dict[int, tuple[int, ...]], list[list[list[int]]], str]:
    """Coordinates of every member and, per dimension, its groups; and how they were found."""
    topo, members = sys_.topology, list(sys_.group)
    if sys_.multi_node and len({len(n) for n in sys_.nodes}) == 1:
        coords = {v: (k, i) for i, node in enumerate(sys_.nodes) for k, v in enumerate(node)}
        inside = [list(node) for node in sys_.nodes]
        rails = [[node[k] for node in sys_.nodes] for k in range(len(sys_.nodes[0]))]
        return coords, [inside, rails], f"node x rail ({len(sys_.nodes)} x " \
                                        f"{len(sys_.nodes[0])})"
    if any(lk.dim is not None for lk in topo.links):
        try:
            grid = analyse(topo, members, sys_.graph)
        except TacosError:
            grid = None
        if grid is not None:
            coords = {v: grid.coords[v] for v in members}
            return coords, [[list(g) for g in d.groups] for d in grid.dims], grid.describe()
    return {v: (i,) for i, v in enumerate(members)}, [[members]], "direct"


def alltoall_program(collective: Collective, coords: dict[int, tuple[int, ...]],
                     dims: list[list[list[int]]], waves: int = 1):
    """Messages of the dimension-ordered exchange (see module doc), stage after stage; with
    ``waves > 1`` the chunks are split by destination into that many waves, each exchanged
    dimension by dimension in turn, so that a wave's later dimensions overlap the next wave's
    earlier ones (every dimension has links of its own)."""
    order = {v: i for i, v in enumerate(collective.group)}
    program = []
    for w in range(waves):
        program += _wave(collective, coords, dims,
                         lambda v, w=w: order[v] % waves == w)
    return program


def _wave(collective: Collective, coords, dims, keep) -> list:
    # where each chunk is, and where it must end
    at: dict[int, int] = {}
    dest: dict[int, int] = {}
    for c in collective.chunks:
        (u,) = tuple(c.pre)
        (v,) = tuple(c.post)
        if u != v and keep(v):
            at[c.id], dest[c.id] = u, v
    program = []
    for d, groups in enumerate(dims):
        by_coord = {}
        for group in groups:
            for v in group:
                by_coord[(coords[v][:d] + coords[v][d + 1:], coords[v][d])] = v
        held: dict[int, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
        for c, x in at.items():
            want = coords[dest[c]][d]
            if coords[x][d] != want:
                y = by_coord[(coords[x][:d] + coords[x][d + 1:], want)]
                held[x][y].append(c)
        for group in groups:
            pairs = {(x, y): tuple(sorted(cs)) for x in group for y, cs in held[x].items()}
            program += algos.direct_pairs(group, pairs)
            for (_, y), cs in pairs.items():
                for c in cs:
                    at[c] = y
    return program


def alltoall_schedule(topology: Topology, collective: Collective, waves: int | None = None
                      ) -> Schedule:
    """The ``a2a`` schedule of a standard all-to-all (see module doc).  ``waves`` (default:
    the fastest of 1, 2 and the number of dimensions, or only the formula's pick on large
    systems) splits the exchange into pipelined waves."""
    if collective.kind != "alltoall":
        raise TacosError(f"solver 'a2a' runs all-to-all, not {collective.label()}",
                         hint="use greedy or auto for the other collectives")
    check_standard(collective, "solver 'a2a'")
    sys_ = system(topology, collective.group)
    coords, dims, how = dimensions(sys_)

    def build(w: int) -> Schedule:
        lowering = GroupLowering(topology, collective, sys_.graph)
        lowering.run(alltoall_program(collective, coords, dims, w))
        return lowering.schedule({"algorithm": f"aggregated all-to-all by dimension: {how}",
                                  "waves": w})

    if waves is not None:
        return build(waves)
    if len(dims) == 1:
        return build(1)
    n = len(collective.group)
    if n > MAX_TRIED:
        return build(_waves_formula(topology, collective, dims))
    return best_of([{"w": w} for w in sorted({1, 2, len(dims)})],
                   lambda s: build(s["w"])).schedule


def _waves_formula(topology: Topology, collective: Collective, dims) -> int:
    """Pipeline the dimensions when a message's bytes outweigh its latency ten times over."""
    chunk = collective.chunks[0].size
    n = len(collective.group)
    biggest = max(len(g) for groups in dims for g in groups)
    slow = min(topology.links, key=lambda lk: lk.bandwidth)
    per_message = chunk * n / biggest
    return len(dims) if per_message / slow.bandwidth > 10 * slow.alpha else 1


class AllToAllSolver(SolverBase):
    """``a2a`` as a :class:`~tacos.solvers.registry.Solver`."""

    name = "a2a"
    capabilities = Capabilities(native_switches=True)

    def accepts(self, problem: Problem) -> str | None:
        """All-to-all only."""
        if problem.collective.kind != "alltoall":
            return f"solver 'a2a' runs all-to-all, not {problem.collective.label()}"
        return super().accepts(problem)

    def solve(self, problem: Problem) -> SolveResult:
        """Build the dimension-ordered all-to-all."""
        t0 = time.perf_counter()
        sched = alltoall_schedule(problem.topology, problem.collective)
        return SolveResult("feasible", sched, None,
                           {"synthesis_time": time.perf_counter() - t0})


__all__: Sequence[str] = ["AllToAllSolver", "alltoall_program", "alltoall_schedule",
                          "dimensions"]
