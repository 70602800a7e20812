"""NCCL's PAT (Parallel Aggregated Trees) all-gather and reduce-scatter.

What NCCL does (``src/include/collectives.h`` ``PatAGAlgorithm``/``PatRSAlgorithm``, NCCL 2.23+,
enabled when every node holds one GPU): rank r's data reaches rank ``r + s`` along a binomial
tree whose hops are the set bits of ``s``, the farthest dimension first (dimension d joins ranks
``2^d`` apart).  The trees of all ranks are *aggregated*: in the step of dimension d, rank r
sends rank ``r + 2^d`` everything it holds that the peer's subtree still needs, in one message.
With NCCL's buffers large enough to aggregate fully (the schedule here), that is a Bruck-style
all-gather with decreasing distances: ``ceil(log2 N)`` steps, the d-th carrying the blocks of
sources ``r - u`` for ``u`` a multiple of ``2^(d+1)`` with ``u + 2^d < N`` -- ``(N-1)/N`` of the
buffer in all, in logarithmic latency.  Reduce-scatter runs the same trees reversed (nearest
dimension first, partial sums toward the block's owner).

Works for any group size (non-powers of two skip the targets past ``N-1``).  NCCL enables PAT
only with one GPU per node; the baseline runs on any group, and the NCCL model set
(:func:`tacos.solvers.nccl.nccl_algorithms`) offers it only where NCCL would.
"""

from __future__ import annotations

from tacos.errors import TacosError
from tacos.model.collective import Collective
from tacos.model.schedule import Schedule
from tacos.solvers.lowering.program import Msg
from tacos.solvers.nccl.lower import GroupLowering, member_chunks
from tacos.solvers.nccl.system import System

KINDS = ("allgather", "reducescatter")


def pat_steps(n: int) -> list[tuple[int, list[int]]]:
    """For each step of the aggregated all-gather: ``(distance, offsets)`` -- rank r sends to
    ``r + distance`` the blocks of sources ``r - u`` for ``u`` in ``offsets``."""
    dims = max(0, (n - 1).bit_length())
    out = []
    for d in reversed(range(dims)):
        dist = 1 << d
        offsets = [u for u in range(0, n, 2 * dist) if u + dist <= n - 1]
        out.append((dist, offsets))
    return out


def pat_program(order: list[int], kind: str, blocks: dict[int, tuple[int, ...]]) -> list[Msg]:
    """The PAT all-gather (or reduce-scatter) messages over ranks ``order``."""
    n = len(order)
    msgs = []
    for dist, offsets in pat_steps(n):
        for r in range(n):
            owners = [order[(r - u) % n] for u in offsets]
            parts = tuple(blocks[o] for o in owners if blocks[o])
            chunks = tuple(sorted(c for p in parts for c in p))
            if chunks:
                msgs.append(Msg(order[r], order[(r + dist) % n], chunks, parts))
    if kind == "allgather":
        return msgs
    # reduce-scatter: the same trees reversed in time and direction; a message that carried
    # the blocks of sources r-u now carries partial sums for destinations (r-u)
    return [Msg(m.dst, m.src, m.chunks, m.parts) for m in reversed(msgs)]


def pat_schedule(system: System, collective: Collective) -> Schedule:
    """PAT for ``collective`` (all-gather or reduce-scatter) on the group in rank order."""
    kind = collective.kind
    if kind not in KINDS:
        raise TacosError(f"PAT runs all-gather and reduce-scatter, not {kind}")
    order = list(collective.group)
    # all-gather: the chunks a member sources; reduce-scatter: the chunks it ends with
    blocks = {m: tuple(ids) for m, ids in member_chunks(collective).items()}
    lowering = GroupLowering(system.topology, collective, system.graph)
    lowering.run(pat_program(order, kind, blocks))
    return lowering.schedule({"algorithm": "NCCL PAT (aggregated binomial trees)"})
