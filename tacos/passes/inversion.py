"""Combining collectives by inversion (SCCL's non-combining dual, TACOS §VII-A).

A reduction chunk with a single output NPU ``r`` (reduce-scatter, reduce, custom) is solved as
its *dual* on the reversed topology: dual pre = {r}, dual post = primal pre.  The dual schedule
is a set of copies in which every NPU receives the chunk at most once, i.e. a tree rooted at
``r``; reversing it in time and direction gives a reduction tree: each dual copy u→v over
``[s, e]`` on (reversed) link ``i`` becomes a reduce v→u over ``[T−e, T−s]`` on link ``i``
(reversed topologies keep link indices).  Every contribution then reaches ``r`` exactly once.

A reduction chunk with several outputs (all-reduce) is reduced to one *owner* in ``post`` first
and then copied from the owner to the rest of ``post`` (reduce-scatter then all-gather).  The
second phase also carries every non-reduction chunk, so mixed collectives work; phase-2
transfers are shifted to start when phase 1 ends.

In a multi-tenant collective (several jobs or collectives planned together) each tenant has its
own phases: its reductions are reversed within its own dual horizon and its copies start when
*its* reductions end, so a small tenant does not wait at a barrier for a large one.  Tenants
then overlap differently than in the two phase schedules, so the assembled schedule may put two
tenants on one link at once; :func:`tacos.synthesize.solve` retimes it on the physical links.
(A transfer that carries chunks of several tenants keeps them in step: it uses the latest
horizon among them.)

:func:`plan_inversion` returns the two sub-collectives and the chunk-id maps;
:func:`assemble` turns their schedules back into one schedule of the original collective.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from tacos.model.collective import Chunk, Collective
from tacos.model.schedule import Schedule, Transfer
from tacos.model.topology import Topology


@dataclass(frozen=True)
class InversionPlan:
    """The dual (reduction) phase and the forward (copy) phase of a combining collective.

    ``dual_ids[i]`` / ``forward_ids[i]`` is the original chunk id of local chunk ``i``;
    ``owner`` maps each reduction chunk id to the NPU that collects its full value.
    Either phase may be None when it has no chunk.
    """

    dual: Collective | None
    dual_ids: tuple[int, ...]
    forward: Collective | None
    forward_ids: tuple[int, ...]
    owner: dict[int, int]


def _group_order(collective: Collective, chunk: Chunk) -> list[int]:
    if collective.tenants and chunk.tenant < len(collective.tenants):
        return list(collective.tenants[chunk.tenant].group)
    return list(collective.group)


def _chunks_per_npu(collective: Collective, chunk: Chunk) -> int:
    if collective.tenants and chunk.tenant < len(collective.tenants):
        return max(1, collective.tenants[chunk.tenant].chunks_per_npu)
    return max(1, collective.chunks_per_npu)


def choose_owners(collective: Collective) -> dict[int, int]:
    """Owner NPU for every reduction chunk.

    A single-output chunk's owner is its output.  Chunks sharing a set of several outputs are
    spread evenly over it (at most ``ceil(chunks / outputs)`` each): chunk ``c`` goes to the
    group position ``index // chunks_per_npu`` or the next one with room, so all-reduce chunk
    ``c`` is owned by group member ``c // k``, matching reduce-scatter's layout.
    """
    owner: dict[int, int] = {}
    for c in collective.chunks:
        if c.reduce and len(c.post) == 1:
            (r,) = tuple(c.post)
            owner[c.id] = r
    multi: dict[frozenset[int], list[Chunk]] = defaultdict(list)
    for c in collective.chunks:
        if c.reduce and len(c.post) > 1:
            multi[c.post].append(c)
    for post, chunks in multi.items():
        order = [v for v in _group_order(collective, chunks[0]) if v in post]
        order += sorted(post - set(order))
        n = len(order)
        quota = -(-len(chunks) // n)
        local: dict[int, int] = defaultdict(int)
        for c in chunks:
            i = (c.index // _chunks_per_npu(collective, c)) % n
            while local[order[i]] >= quota:
                i = (i + 1) % n
            local[order[i]] += 1
            owner[c.id] = order[i]
    return owner


def _collective(kind: str, chunks: list[Chunk], name: str) -> Collective | None:
    if not chunks:
        return None
    group: list[int] = []
    seen: set[int] = set()
    for c in chunks:
        for v in sorted(c.pre | c.post):
            if v not in seen:
                seen.add(v)
                group.append(v)
    return Collective(kind, tuple(chunks), tuple(group), sum(c.size for c in chunks), 1, None,
                      name)


def plan_inversion(collective: Collective) -> InversionPlan:
    """Split ``collective`` into its dual reduction phase and its forward copy phase."""
    owner = choose_owners(collective)
    dual: list[Chunk] = []
    dual_ids: list[int] = []
    fwd: list[Chunk] = []
    fwd_ids: list[int] = []
    for c in collective.chunks:
        if c.reduce:
            r = owner[c.id]
            if c.pre - {r}:
                dual.append(Chunk(len(dual), c.size, frozenset({r}), c.pre, False, c.index,
                                  c.tenant))
                dual_ids.append(c.id)
            if c.post - {r}:
                fwd.append(Chunk(len(fwd), c.size, frozenset({r}), c.post, False, c.index,
                                 c.tenant))
                fwd_ids.append(c.id)
        elif c.post - c.pre:
            fwd.append(Chunk(len(fwd), c.size, c.pre, c.post, False, c.index, c.tenant))
            fwd_ids.append(c.id)
    name = collective.name or collective.kind
    return InversionPlan(
        _collective("dual", dual, f"dual of {name}"), tuple(dual_ids),
        _collective("forward", fwd, f"copy phase of {name}"), tuple(fwd_ids), owner,
    )


def tenant_horizons(dual: Schedule) -> dict[int, float]:
    """Each tenant's end of the dual phase: the last dual transfer carrying one of its
    chunks."""
    chunks = dual.collective.chunks
    out: dict[int, float] = {}
    for t in dual.transfers:
        for c in t.chunks:
            tenant = chunks[c].tenant
            out[tenant] = max(out.get(tenant, 0.0), t.end)
    return out


def _horizon(t: Transfer, chunks, horizons: dict[int, float] | None, default: float) -> float:
    if not horizons:
        return default
    return max(horizons.get(chunks[c].tenant, default) for c in t.chunks)


def invert_transfers(dual: Schedule, ids: tuple[int, ...],
                     horizons: dict[int, float] | None = None) -> list[Transfer]:
    """Time- and edge-reverse a dual schedule's copies into reduces of the original chunks.

    Without ``horizons`` the whole dual phase is reversed within its makespan; with them
    (tenant → horizon) each tenant's transfers within its own horizon.  A multicast group of
    the dual (on the reversed topology) becomes an in-switch reduction group into its source.
    """
    chunks = dual.collective.chunks
    makespan = dual.makespan  # once: a property that scans every transfer
    out = []
    for t in dual.transfers:
        horizon = _horizon(t, chunks, horizons, makespan)
        out.append(Transfer(horizon - t.end, horizon - t.start, t.dst, t.src, t.route[::-1],
                            tuple(sorted(ids[c] for c in t.chunks)), "reduce", t.group))
    return out


def shift_transfers(forward: Schedule, ids: tuple[int, ...], offset: float,
                    offsets: dict[int, float] | None = None,
                    group_offset: int = 0) -> list[Transfer]:
    """Forward-phase copies mapped to original chunk ids and delayed by ``offset`` seconds
    (by ``offsets[tenant]`` for tenants listed there); group ids moved up by
    ``group_offset``."""
    chunks = forward.collective.chunks
    out = []
    for t in forward.transfers:
        delay = _horizon(t, chunks, offsets, offset)
        out.append(Transfer(t.start + delay, t.end + delay, t.src, t.dst, t.route,
                            tuple(sorted(ids[c] for c in t.chunks)), "copy",
                            None if t.group is None else t.group + group_offset))
    return out


def _order(t: Transfer) -> tuple:
    return (t.start, t.end, t.src, t.dst, t.route, t.chunks, t.op,
            -1 if t.group is None else t.group)


def assemble(topology: Topology, collective: Collective, plan: InversionPlan,
             dual: Schedule | None, forward: Schedule | None) -> Schedule:
    """One schedule of ``collective``: the inverted dual phase, then the forward phase --
    per tenant when ``collective`` has several (see the module docstring)."""
    transfers: list[Transfer] = []
    offset = 0.0
    horizons: dict[int, float] | None = None
    groups = 0
    if dual is not None:
        if len(collective.tenants) > 1:
            horizons = tenant_horizons(dual)
        transfers += invert_transfers(dual, plan.dual_ids, horizons)
        offset = dual.makespan
        groups = 1 + max((t.group for t in dual.transfers if t.group is not None), default=-1)
    if forward is not None:
        transfers += shift_transfers(forward, plan.forward_ids, offset, horizons, groups)
    transfers.sort(key=_order)
    return Schedule(topology, collective, tuple(transfers), {})
