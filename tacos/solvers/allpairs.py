"""Latency-optimal all-pairs plans for small messages: one-shot and two-shot.

Below about 1 MiB a collective is bound by latency, not bandwidth, and the plans that win on a
fully connected node (NVSwitch) exchange data with every peer at once in as few steps as
possible (Microsoft's production MSCCL plans ``allreduce_pairs`` and ``all_gather_llm`` run
them in LL):

* **two-shot all-reduce**: a direct reduce-scatter (rank v receives everyone's partial of
  block v) followed by a direct all-gather (two steps, the bandwidth-optimal amount of data);
* **one-shot all-gather**: every rank sends its block to every other rank;
* **one-shot reduce-scatter**: every rank sends its partial of block v straight to v.

A *one-shot* all-reduce (every rank sends its whole buffer to every peer and reduces what it
receives) is not built: in the link-level model a transfer carries the sender's value when it
starts, and with one port per GPU some rank always receives (and reduces) before its last send,
so the plan would count contributions twice; the runtime does it with scratch buffers the
schedule cannot name.  Two-shot is what Microsoft's ``allreduce_pairs`` plans run.

The plans are built as logical programs and routed and timed like the textbook baselines
(:mod:`tacos.solvers.baselines_lower`), so they verify like every schedule.
"""

from __future__ import annotations

from tacos.errors import TacosError
from tacos.model.collective import Collective
from tacos.model.schedule import Schedule
from tacos.model.topology import Topology
from tacos.solvers.baselines import algos
from tacos.solvers.lowering.hops import NpuGraph
from tacos.solvers.lowering.program import Lowering

KINDS = ("allreduce", "allgather", "reducescatter")


def allpairs_schedule(topology: Topology, collective: Collective) -> Schedule:
    """The all-pairs plan of ``collective`` timed on ``topology``: two-shot for an all-reduce,
    one-shot for an all-gather or a reduce-scatter.

    Raises :class:`~tacos.errors.TacosError` for another collective.
    """
    kind = collective.kind
    if kind not in KINDS:
        raise TacosError(f"all-pairs plans are built for {', '.join(KINDS)}, not {kind}",
                         hint="use --solver direct for other collectives")
    from tacos.nogc import paused_gc

    with paused_gc(aged=True):  # millions of messages and rows, no cycles (5 s of GC at 512)
        return _built(topology, collective, kind)


def _built(topology: Topology, collective: Collective, kind: str) -> Schedule:
    members = [v for v in collective.group if not topology.npus[v].failed]
    graph = NpuGraph(topology, members)
    lowering = Lowering(topology, collective, graph)
    if kind == "allgather":
        blocks = {m: tuple(sorted(c.id for c in collective.chunks if m in c.pre))
                  for m in members}
        lowering.run(algos.direct_allgather(members, blocks))
        label = "one-shot all-pairs all-gather"
    elif kind == "reducescatter":
        blocks = {m: tuple(sorted(c.id for c in collective.chunks if m in c.post))
                  for m in members}
        lowering.run(algos.direct_reducescatter(members, blocks))
        label = "one-shot all-pairs reduce-scatter"
    else:
        k = max(1, collective.chunks_per_npu)
        blocks = {m: tuple(c.id for i, c in enumerate(collective.chunks)
                           if members[min(i // k, len(members) - 1)] == m) for m in members}
        lowering.run(algos.direct_reducescatter(members, blocks)
                     + algos.direct_allgather(members, blocks))
        label = "two-shot all-pairs all-reduce"
    return lowering.schedule({"solver": "allpairs", "algorithm": label})
