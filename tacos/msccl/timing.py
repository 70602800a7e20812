"""α-β time of an MSCCL program on a topology.

Model (an estimate for comparing plans, not a cycle-accurate GPU model):

* Rank ``r`` runs on NPU ``ranks[r]`` of the topology (by default NPU ``r``, when the topology
  has exactly ``ngpus`` NPUs; :mod:`tacos.msccl.ranks` finds the mapping of a process group's
  plan); switches are allowed.
* One MSCCL chunk is ``nbytes / nchunksperloop`` bytes, where ``nbytes`` is the total message
  size of §1.1 (``count × typesize × sizeMultiplier``); by default the top of the file's size
  window (``maxBytes``, or ``max(minBytes, 1 MiB)`` when unlimited).
* Each connection ``A -> B`` takes the fastest candidate route for one chunk (the machine
  model's routes, :mod:`tacos.model.routes`: a direct link or a path through switches; a connection
  between NPUs that no route joins is an error, since the runtime does not relay through other
  GPUs).  A transfer of ``cnt`` chunks is cut-through: ``Σ α + cnt·chunk / min β`` along the
  route, holding one of the ``multiplicity`` parallel lanes of every link on the route for that
  time; lanes are granted in order of request.
* A transmission starts when all its happens-before predecessors have finished (program order,
  dependency waits, and for receives the arrival of the matching send); fused ops forward after
  the whole receive (no slice pipelining).  Local ops (``cpy``, ``re``) take no time; FIFO
  capacity is ignored.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any

from tacos.errors import TacosError
from tacos.model.links import route_time
from tacos.model.topology import Topology
from tacos.msccl.program import Program
from tacos.msccl.verify_deps import HappensBefore, build_hb
from tacos.msccl.verify_model import Model, build_model

DEFAULT_NBYTES = 1 << 20


@dataclass
class TimingResult:
    """Makespan in seconds and how it was obtained."""

    time: float
    nbytes: int
    chunk_bytes: float
    rank_finish: list[float] = field(default_factory=list)
    routes: dict[str, list[int]] = field(default_factory=dict)
    ranks: tuple[int, ...] = ()
    ranks_from: str = ""

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready details."""
        return {
            "model": "alpha-beta, cut-through routes, lanes per link, no slice pipelining",
            "time": self.time,
            "nbytes": self.nbytes,
            "chunk_bytes": self.chunk_bytes,
            "rank_finish": self.rank_finish,
            "routes": self.routes,
            "ranks": list(self.ranks),
            "ranks_from": self.ranks_from,
        }


def default_nbytes(program: Program) -> int:
    """The message size timed by default: the top of the size window."""
    if program.maxBytes and program.maxBytes < 1 << 62:  # not the "no limit" 2^64 - 1
        return program.maxBytes
    return max(program.minBytes or 0, DEFAULT_NBYTES)


def _route(topology: Topology, ranks: tuple[int, ...], a: int, b: int, chunk: float
           ) -> list[int]:
    src, dst = ranks[a], ranks[b]
    route = topology.routing.best(src, dst, chunk)
    if route is None:
        raise TacosError(f"the topology has no route from NPU {src} to NPU {dst} "
                         f"({topology.npus[src].name} -> {topology.npus[dst].name}: no direct "
                         f"link or path through switches), but the program sends from rank {a} "
                         f"to rank {b}",
                         hint="check the topology matches the ranks of the XML") from None
    return list(route.links)


def alpha_beta_time(program: Program, topology: Topology, *, nbytes: int | None = None,
                    model: Model | None = None, hb: HappensBefore | None = None,
                    ranks: tuple[int, ...] | None = None, ranks_from: str = ""
                    ) -> TimingResult:
    """Estimate the run time of ``program`` on ``topology`` (see the module docstring).

    ``ranks[r]`` is the NPU of rank r (default: NPU r).  Raises ``TacosError`` when the mapping
    does not fit the topology, a connection has no route, or the program deadlocks
    (happens-before cycle).
    """
    from tacos.msccl.ranks import resolve_ranks

    given = ranks is not None
    ranks, source = resolve_ranks(topology, program.ngpus, explicit=ranks)
    ranks_from = (ranks_from or "given") if given else source
    model = model or build_model(program)
    hb = hb or build_hb(model)
    if not hb.acyclic:
        raise TacosError("cannot time a program whose happens-before graph has a cycle")
    nbytes = default_nbytes(program) if nbytes is None else nbytes
    chunk = nbytes / program.nchunksperloop
    routes: dict[tuple[int, int], list[int]] = {}
    for a, b, _c in model.sender:
        if (a, b) not in routes:
            routes[(a, b)] = _route(topology, ranks, a, b, chunk)
    lanes = [[0.0] * max(1, link.multiplicity) for link in topology.links]
    n = len(model.txs)
    succs: list[list[int]] = [[] for _ in range(n)]
    indeg = [len(p) for p in hb.preds]
    for v, ps in enumerate(hb.preds):
        for u in ps:
            succs[u].append(v)
    ready = [0.0] * n
    finish = [0.0] * n
    heap = [(0.0, v) for v in range(n) if indeg[v] == 0]
    heapq.heapify(heap)
    while heap:
        t, v = heapq.heappop(heap)
        tx = model.txs[v]
        end = t
        if tx.step.sends:
            tb = model.tbs[tx.key]
            path = routes[(tx.rank, tb.send)]
            if path:
                dur = route_time((topology.links[i] for i in path), tx.step.cnt * chunk)
                picks = [min(range(len(lanes[i])), key=lanes[i].__getitem__) for i in path]
                start = max([t] + [lanes[i][k] for i, k in zip(path, picks, strict=True)])
                end = start + dur
                for i, k in zip(path, picks, strict=True):
                    lanes[i][k] = end
        finish[v] = end
        for w in succs[v]:
            ready[w] = max(ready[w], end)
            indeg[w] -= 1
            if indeg[w] == 0:
                heapq.heappush(heap, (ready[w], w))
    rank_finish = [0.0] * program.ngpus
    for tx in model.txs:
        if 0 <= tx.rank < program.ngpus:
            rank_finish[tx.rank] = max(rank_finish[tx.rank], finish[tx.gid])
    return TimingResult(max(finish, default=0.0), nbytes, chunk, rank_finish,
                        {f"{a}->{b}": p for (a, b), p in sorted(routes.items())},
                        ranks, ranks_from)
