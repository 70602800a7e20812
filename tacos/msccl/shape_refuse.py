"""Plans the shape search refuses before lowering any of their shapes: a thread block has one
send peer and one receive peer, and every thread block of a rank must be resident at once, so
a rank that talks to more peers than its GPU has SMs cannot load in any shape.

This is what keeps the all-pairs plans from being lowered at hundreds of ranks (a program of
``n (n - 1)`` sends per instance that the runtime would refuse anyway).

The runtime's parser also holds at most 4,096 nodes per rank (1 + the GPU count + its thread
blocks + their steps), and a step sends to one peer and receives from one: a rank that sends
or receives in ``k`` transfers needs at least ``k`` steps in any lowering (a lowering may cut a
transfer into several steps, never join two).  So a plan whose busiest rank is over the limit
by that count is refused before its one-instance program is built (NCCL's ring at the most
channels of its transfer budget on 256 ranks: 4,080 sends per rank).

From two instances on, a lowering cannot join the chunks of a transfer that land in the
receiver's output buffer into one step (:func:`instances_refusal`): piece ``p`` of output slot
``y`` is MSCCL chunk ``y·I + p``, so two chunks of one piece are ``I`` or more slots apart.  A
plan whose transfers carry many chunks each (NCCL's tree: 64 to 128 chunks per transfer at 128
to 256 ranks) then needs a step per chunk and piece, and is refused at that instance count
before it is lowered (the lowering itself would build millions of runs and gigabytes first).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from tacos.model.schedule import Schedule
from tacos.msccl.shape import RuntimeLimits


def peer_counts(plan: Schedule | Any) -> tuple[int, int, int] | None:
    """``(rank, send peers, receive peers)`` of the rank with the most of either, for a
    schedule (its transfers' ends) or an all-pairs program family; None when unknown."""
    if isinstance(plan, Schedule):
        sends: dict[int, set[int]] = defaultdict(set)
        recvs: dict[int, set[int]] = defaultdict(set)
        for t in plan.transfers:
            sends[t.src].add(t.dst)
            recvs[t.dst].add(t.src)
        ranks = set(sends) | set(recvs)
        if not ranks:
            return None
        r = max(ranks, key=lambda x: (max(len(sends[x]), len(recvs[x])), -x))
        return r, len(sends[r]), len(recvs[r])
    from tacos.msccl.allpairs_program import AllPairsAllReduce

    if isinstance(plan, AllPairsAllReduce):
        n = len(plan.collective.group)
        return plan.collective.group[0], n - 1, n - 1
    return None


def busiest_steps(plan: Schedule | Any) -> tuple[int, int, int] | None:
    """``(rank, nodes, steps)`` of a schedule's rank with the most parser nodes any lowering
    must give it at least: 1 + the GPU count + a thread block per send or receive peer (the
    more of the two) + a step per send or receive transfer (the more of the two); None for
    a program family or a schedule without transfers."""
    if not isinstance(plan, Schedule) or not plan.transfers:
        return None
    loads = RankLoads()
    for t in plan.transfers:
        loads.add(t.src, t.dst)
    head = 1 + len(plan.collective.group)
    r = max(loads.ranks(), key=lambda x: (loads.nodes(x, head), -x))
    return r, loads.nodes(r, head), loads.steps(r)


@dataclass
class RankLoads:
    """Per rank, the peers and transfers it sends to and receives from, as the parsed-node
    refusals count them (:meth:`add` one transfer at a time)."""

    peers_out: dict[int, set[int]] = field(default_factory=lambda: defaultdict(set))
    peers_in: dict[int, set[int]] = field(default_factory=lambda: defaultdict(set))
    sends: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    recvs: dict[int, int] = field(default_factory=lambda: defaultdict(int))

    def add(self, src: int, dst: int) -> None:
        """Count one transfer from ``src`` to ``dst``."""
        self.peers_out[src].add(dst)
        self.peers_in[dst].add(src)
        self.sends[src] += 1
        self.recvs[dst] += 1

    def ranks(self) -> set[int]:
        """The ranks that send or receive."""
        return set(self.sends) | set(self.recvs)

    def peers(self, r: int) -> int:
        """Rank ``r``'s send or receive peers, the more of the two (a thread block each)."""
        return max(len(self.peers_out[r]), len(self.peers_in[r]))

    def steps(self, r: int) -> int:
        """Rank ``r``'s send or receive transfers, the more of the two (a step each)."""
        return max(self.sends[r], self.recvs[r])

    def nodes(self, r: int, head: int) -> int:
        """Rank ``r``'s parsed nodes at least: ``head`` (1 + the GPU count), a thread block
        per peer and a step per transfer."""
        return head + self.peers(r) + self.steps(r)


def refusal(plan: Schedule | Any, limits: RuntimeLimits) -> str:
    """Why no shape of ``plan`` can load (or ''): more peers on one rank than SMs (a thread
    block per peer at least), or more parsed nodes than the runtime's parser holds (a thread
    block and a step per peer at least)."""
    got = peer_counts(plan)
    if got is None:
        return ""
    rank, out, into = got
    tbs = max(out, into)
    if tbs > limits.sms:
        return (f"refused before lowering: NPU {rank} has {out} send and {into} receive peers, "
                f"so at least {tbs} thread blocks > {limits.sms} SMs in every shape")
    ngpus = len(plan.collective.group)
    nodes = 1 + ngpus + 2 * tbs
    if nodes > limits.max_nodes:
        return (f"refused before lowering: NPU {rank} needs at least {nodes} parsed nodes "
                f"(1 + {ngpus} gpus + a thread block and a step per peer) > "
                f"{limits.max_nodes} in every shape")
    got = busiest_steps(plan)
    if got is not None and got[1] > limits.max_nodes:
        rank, nodes, steps = got
        return (f"refused before lowering: NPU {rank} sends or receives in {steps} transfers, "
                f"so at least {nodes} parsed nodes (a step per transfer, a thread block per "
                f"peer, 1 + {ngpus} gpus) > {limits.max_nodes} in every shape")
    return ""


@dataclass(frozen=True)
class Receipts:
    """Of a schedule's busiest rank (NPU id) from two instances on: ``per_instance`` parsed
    nodes each instance adds at least (a thread block per send or receive peer, the more of
    the two, and a step per chunk it receives and keeps), and those two counts."""

    rank: int
    per_instance: int
    peers: int
    kept: int


def kept_receipts(plan: Schedule | Any, *, inplace: bool) -> Receipts | None:
    """The :class:`Receipts` of a schedule's busiest rank (:func:`receipts_per_rank`), or
    None when no bound applies."""
    every = receipts_per_rank(plan, inplace=inplace)
    if not every:
        return None
    return max(every.values(), key=lambda x: (x.per_instance, -x.rank))


def receipts_per_rank(plan: Schedule | Any, *, inplace: bool) -> dict[int, Receipts] | None:
    """The :class:`Receipts` of every rank (NPU id) of a schedule, or None when no bound
    applies (a program family, a pipelined schedule, whose first round alone is lowered, an
    in-place all-to-all, whose output slots can hold another chunk first, or no transfers).

    Why it is a bound, from two instances on: every chunk a rank receives and keeps (it is in
    the chunk's postcondition) is written into the rank's output slot for that chunk, whose
    only other occupant is the same chunk (every layout but the in-place all-to-all's); slot
    ``y``'s piece ``p`` is MSCCL chunk ``y·I + p``, so two such chunks of one transfer and
    piece are never adjacent and each is a receiving step of its own, in every instance.
    And the pieces travel on separate channels, so every instance has its own thread block
    per peer."""
    if not isinstance(plan, Schedule) or not plan.transfers:
        return None
    coll = plan.collective
    if (coll.kind == "alltoall" and inplace) or int(
            (plan.meta.get("pipeline") or {}).get("slices", 1)) > 1:
        return None
    post = {c.id: c.post for c in coll.chunks}
    kept: dict[int, int] = defaultdict(int)
    peers_out: dict[int, set[int]] = defaultdict(set)
    peers_in: dict[int, set[int]] = defaultdict(set)
    for t in plan.transfers:
        peers_out[t.src].add(t.dst)
        peers_in[t.dst].add(t.src)
        kept[t.dst] += sum(1 for c in t.chunks if t.dst in post[c])
    out = {}
    for r in set(peers_out) | set(peers_in):
        peers = max(len(peers_out[r]), len(peers_in[r]))
        out[r] = Receipts(r, peers + kept[r], peers, kept[r])
    return out


def instances_refusal(plan: Schedule | Any, instances: int, limits: RuntimeLimits, *,
                      inplace: bool, receipts: Receipts | None = None) -> str:
    """Why ``plan`` lowered with ``instances`` (at least 2) cannot load (or ''): its busiest
    rank's parsed nodes, 1 + the GPU count + ``instances`` x :func:`kept_receipts`' nodes
    per instance, are over the runtime parser's limit.  ``receipts``: the plan's
    :func:`kept_receipts`, when already known."""
    if instances < 2:
        return ""
    got = receipts if receipts is not None else kept_receipts(plan, inplace=inplace)
    if got is None:
        return ""
    ngpus = len(plan.collective.group)
    nodes = 1 + ngpus + instances * got.per_instance
    if nodes <= limits.max_nodes:
        return ""
    return (f"refused before lowering: at {instances} instances NPU {got.rank} needs at least "
            f"{nodes} parsed nodes (1 + {ngpus} gpus + {instances} x ({got.peers} thread "
            f"blocks + a step for each of the {got.kept} chunks it receives into its output "
            f"buffer)) > {limits.max_nodes}")


def chunks_refusal(plan: Schedule | Any, elements: int) -> str:
    """Why no instance count of ``plan`` can split a message of ``elements`` elements (or ''):
    a lowered schedule's ``nchunksperloop`` is its chunk count times the instances, so when
    the chunk count does not divide the elements no shape does (what the search would find
    after lowering every shape).  None for a program family or a pipelined schedule, whose
    first round alone is lowered."""
    if not isinstance(plan, Schedule) or int(
            (plan.meta.get("pipeline") or {}).get("slices", 1)) > 1:
        return ""
    chunks = len(plan.collective.chunks)
    if not chunks or elements % chunks == 0:
        return ""
    return (f"refused before lowering: nchunksperloop ({chunks} chunks x the instances) does "
            f"not divide {elements} elements in any shape")
