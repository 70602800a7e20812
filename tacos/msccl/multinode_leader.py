"""Latency-bound multi-node all-reduce and all-gather through one leader GPU per node, for
nodes whose GPUs are not all linked to each other or share a NIC (NDv2: a cube mesh of NVLink
and one NIC per node; MI250: a partial xGMI mesh), where the rail programs
(:mod:`tacos.msccl.multinode_program`, :mod:`tacos.msccl.multinode_latency`) do not apply.

Per node, the leader is a rank with a route to every other node; the node's ranks form a
breadth-first tree over the routes that stay inside the node, rooted at the leader, each rank
hung under the parent of the level above with the fewest children so far (the fewest
additions in turn at any rank).

All-reduce (:func:`leader_allreduce`), per instance (channel p) and pipeline stage:

* up the tree: every rank adds its children's partials into its own as they arrive (``rrc``,
  one child after the other), then sends the sum to its parent;
* across the nodes: each leader sends its node's sum to every other leader and adds theirs
  in turn (after its sends have read its sum);
* down the tree: every rank receives the total from its parent and sends it to its children.

One thread block per tree or leader neighbour (``send=w recv=w``).  The critical path is
``2·depth`` in-node hops and one NIC hop, every hop carrying the whole message (the
chooser's instances split it over channels, the stages pipeline it): meant for LL at small
sizes.  The all-gather (:func:`leader_allgather`) moves the shards the same way: up to the
leader, across to the other leaders, down to every rank.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tacos.errors import TacosError
from tacos.model.collective import Collective
from tacos.model.topology import Topology
from tacos.msccl.lower import MscclOptions
from tacos.msccl.multinode_nodes import _is_nic, node_groups
from tacos.msccl.multinode_steps import Wait, _finish, _parses, _peer_tbs, _program, _Tb
from tacos.msccl.program import Program
from tacos.msccl.shape import Shape


@dataclass(frozen=True)
class LeaderLayout:
    """Per node its leader and the tree over its ranks (``parent[r]`` is -1 at a leader);
    ranks are indices into the collective's group."""

    leaders: tuple[int, ...]
    parent: tuple[int, ...]

    def children(self, r: int) -> list[int]:
        """The ranks hung under ``r``, in rank order."""
        return [c for c, p in enumerate(self.parent) if p == r]

    def depth(self) -> int:
        """Hops from the deepest rank to its leader."""
        def up(r: int) -> int:
            return 0 if self.parent[r] < 0 else 1 + up(self.parent[r])
        return max(up(r) for r in range(len(self.parent)))


def leader_layout(topology: Topology, group: Sequence[int]) -> LeaderLayout | None:
    """The leaders and trees (module docstring) of the nodes of ``group`` on ``topology``, or
    None when there are fewer than two nodes, a node of one rank, a rank no route inside its
    node reaches, or no rank of a node with a route to a leader of every other node."""
    group = list(group)
    nodes = node_groups(topology, group)
    if len(nodes) < 2 or min(len(n) for n in nodes) < 2:
        return None

    def route(a: int, b: int) -> object:
        return topology.routing.best(group[a], group[b], 1.0)

    def linked(a: int, b: int) -> bool:
        return route(a, b) is not None and route(b, a) is not None

    leaders: list[int] = []
    for n, ranks in enumerate(nodes):  # linked to the leaders so far and to the later nodes
        pick = next((a for a in ranks
                     if all(linked(a, v) for v in leaders)
                     and all(any(linked(a, b) for b in m) for m in nodes[n + 1:])), None)
        if pick is None:
            return None
        leaders.append(pick)
    parent = [-1] * len(group)
    for n, ranks in enumerate(nodes):
        inside = {a: [b for b in ranks if b != a and (rt := route(b, a)) is not None
                      and route(a, b) is not None
                      and not any(_is_nic(topology.links[i]) for i in rt.links)]
                  for a in ranks}
        level, seen = [leaders[n]], {leaders[n]}
        kids = {a: 0 for a in ranks}
        while level:
            nxt = []
            for b in ranks:
                if b in seen:
                    continue
                ups = [a for a in level if a in inside[b]]
                if ups:
                    a = min(ups, key=lambda x: (kids[x], x))
                    parent[b], kids[a] = a, kids[a] + 1
                    nxt.append(b)
            seen.update(nxt)
            level = nxt
        if len(seen) != len(ranks):
            return None
    return LeaderLayout(tuple(leaders), tuple(parent))


def leader_allreduce(layout: LeaderLayout, instances: int, options: MscclOptions,
                     stages: int = 1) -> Program:
    """The all-reduce program (module docstring) on ``layout``, each instance's data cut into
    ``stages`` pipeline stages (chunk ``p·K + k``): every thread block takes the stages in
    turn, so a rank forwards stage k while its children still send stage k+1."""
    n_ranks, inst, k_n = len(layout.parent), instances, stages
    out = "o" if options.out_of_place else "i"
    ranks: dict[int, dict[int, _Tb]] = {}
    for r in range(n_ranks):
        kids = layout.children(r)
        up = layout.parent[r]
        rails = [v for v in layout.leaders if v != r] if up < 0 else []
        peers = kids + rails + ([up] if up >= 0 else [])
        if up < 0 and not kids:
            raise TacosError("a leader needs at least one rank under it")
        tbs: dict[int, _Tb] = {}
        for p in range(inst):
            tb = {w: _Tb(p * len(peers) + j, w, w, p) for j, w in enumerate(peers)}
            tbs.update({t.id: t for t in tb.values()})
            done: dict[int, list[Wait]] = {}
            for k in range(k_n):
                c = p * k_n + k
                cur, chain = ("i", c), []
                for w in kids:  # the children's partials, added in turn
                    chain = [(tb[w].id, tb[w].add("rrc", cur, (out, c), 1, chain))]
                    cur = (out, c)
                if up >= 0:
                    tb[up].add("s", cur, (out, c), 1, chain)
                    continue
                sent = [(tb[v].id, tb[v].add("s", cur, cur, 1, chain)) for v in rails]
                done[k] = sent
                for v in rails:  # the other nodes' sums, once my sends have read mine
                    done[k] = [(tb[v].id, tb[v].add("rrc", cur, cur, 1, done[k]))]
            for k in range(k_n):  # the total down the tree
                c = p * k_n + k
                if up >= 0:
                    done[k] = [(tb[up].id, tb[up].add("r", (out, c), (out, c), 1))]
                for w in kids:
                    tb[w].add("s", (out, c), (out, c), 1, done[k])
        ranks[r] = tbs
    blocks_of = _finish(ranks)
    if not _parses(blocks_of, n_ranks):
        raise TacosError(f"{n_ranks} ranks with {inst} instances exceed the runtime parser's "
                         "nodes per rank", hint="fewer instances")
    c = inst * k_n
    return _program("allreduce", blocks_of, f"tacos_leader_allreduce_{len(layout.leaders)}",
                    inst, c, options)


def leader_allgather(layout: LeaderLayout, instances: int, options: MscclOptions,
                     merge: bool = True) -> Program:
    """The all-gather through the leaders: every rank sends its shard up the tree and
    forwards its children's as they arrive; each leader sends its node's shards to every
    other leader as they arrive (a send and a receive thread block per other leader, so two
    leaders' sends never wait on each other); down the tree every rank sends each child the
    shards outside the child's subtree, its own subtree's first, then as they arrive from
    above.  Chunk ``r·I + p`` of the output is rank r's shard, instance p.  ``merge``: every
    message takes its shards in rank order, consecutive chunks in one step (at one instance
    a leader sends its node's shards in one step: one call's latency instead of one per
    shard), each step after all its shards have arrived; else one step per shard, in the
    order they arrive (a pipeline, for larger sizes)."""
    n_ranks, inst = len(layout.parent), instances
    inplace = bool(options.inplace)
    kids = {r: layout.children(r) for r in range(n_ranks)}

    def sub(r: int) -> list[int]:
        """r's subtree, r first, in the order r sends it up."""
        return [r] + [q for w in kids[r] for q in sub(w)]

    subs = {r: sub(r) for r in range(n_ranks)}
    incoming: dict[int, list[int]] = {}  # per leader: the other nodes' shards, as they arrive
    for v in layout.leaders:
        incoming[v] = [q for u in layout.leaders if u != v for q in subs[u]]

    def down(r: int, w: int) -> list[int]:
        """The shards r sends child w, in order."""
        up = layout.parent[r]
        above = incoming[r] if up < 0 else down(up, r)
        inside = set(subs[w])
        return [q for q in subs[r] if q not in inside] + above

    def shard(r: int, p: int) -> int:
        return r * inst + p

    def runs(shards: list[int], sender: int) -> list[list[int]]:
        """The steps of a message of ``shards`` from ``sender``: one per shard, or (merged)
        runs of consecutive chunks (the sender's own shard alone when it comes from the
        input buffer)."""
        if not merge:
            return [[q] for q in shards]
        out: list[list[int]] = []
        for q in sorted(shards):
            alone = not inplace and sender in (q, out[-1][-1] if out else -1)
            if out and inst == 1 and q == out[-1][-1] + 1 and not alone:
                out[-1].append(q)
            else:
                out.append([q])
        return out

    ranks: dict[int, dict[int, _Tb]] = {}
    for r in range(n_ranks):
        up = layout.parent[r]
        rails = [v for v in layout.leaders if v != r] if up < 0 else []
        tree = kids[r] + ([up] if up >= 0 else [])
        per_tb = len(tree) + 2 * len(rails)
        tbs: dict[int, _Tb] = {}
        for p in range(inst):
            tb = {w: _Tb(p * per_tb + j, w, w, p) for j, w in enumerate(tree)}
            tbs.update({t.id: t for t in tb.values()})
            rs, rr = _peer_tbs(rails, p * per_tb + len(tree), p, False, tbs)
            mine = ("o", shard(r, p)) if inplace else ("i", p)
            have: dict[int, list[Wait]] = {r: []}

            def src(q: int, p: int = p, mine: tuple[str, int] = mine,
                    r: int = r) -> tuple[str, int]:
                return mine if q == r else ("o", shard(q, p))

            def send(t: _Tb, shards: list[int], p: int = p, r: int = r,
                     have: dict[int, list[Wait]] = have) -> None:
                for run in runs(shards, r):
                    t.add("s", src(run[0]), ("o", shard(run[0], p)), len(run),
                          list(dict.fromkeys(w for q in run for w in have[q])))

            def recv(t: _Tb, shards: list[int], sender: int, p: int = p,
                     have: dict[int, list[Wait]] = have) -> None:
                for run in runs(shards, sender):
                    at = ("o", shard(run[0], p))
                    got = [(t.id, t.add("r", at, at, len(run)))]
                    have.update({q: got for q in run})

            for w in kids[r]:  # up: my children's subtrees arrive
                recv(tb[w], subs[w], w)
            if up >= 0:
                send(tb[up], subs[r])
                recv(tb[up], down(up, r), up)  # down: from my parent
            else:
                for v in rails:
                    send(rs[v], subs[r])
                    recv(rr[v], subs[v], v)
            for w in kids[r]:
                send(tb[w], down(r, w))
        if not inplace:  # my own shard into my output
            tb0 = tbs[inst * per_tb] = _Tb(inst * per_tb, -1, -1, 0)
            for p in range(inst):
                tb0.add("cpy", ("i", p), ("o", shard(r, p)), 1)
        ranks[r] = tbs
    blocks_of = _finish(ranks)
    if not _parses(blocks_of, n_ranks):
        raise TacosError(f"{n_ranks} ranks with {inst} instances exceed the runtime parser's "
                         "nodes per rank", hint="fewer instances")
    return _program("allgather", blocks_of, f"tacos_leader_allgather_{len(layout.leaders)}",
                    inst, inst, options)


@dataclass(frozen=True)
class Leader:
    """The leader family for ``collective`` on ``layout``: any shape's instances and protocol
    (port order and pairing do not apply); all-reduce in ``stages`` pipeline stages,
    all-gather in merged steps (``stages == 1``) or one step per shard."""

    collective: Collective
    layout: LeaderLayout
    stages: int = 1

    @property
    def label(self) -> str:
        """What the family is, for reports."""
        tree = (f"{len(self.layout.leaders)} nodes, a tree of depth {self.layout.depth()} to "
                "each node's leader")
        if self.collective.kind == "allgather":
            how = "merged steps" if self.stages == 1 else "one step per shard as it arrives"
            return f"leader all-gather: {tree}, {how}"
        return (f"leader all-reduce: {tree}, leaders exchange their sums, {self.stages} "
                f"pipeline stage{'s' * (self.stages > 1)}")

    def lower(self, shape: Shape, base: MscclOptions | None = None) -> Program:
        """The program for ``shape`` with ``base``'s header fields."""
        opts = shape.options(base)
        opts.validate()
        if self.collective.kind == "allgather":  # merged steps, or shards as they arrive
            return leader_allgather(self.layout, shape.instances, opts, self.stages == 1)
        if self.collective.kind != "allreduce":
            raise TacosError(f"no leader program for {self.collective.kind}")
        return leader_allreduce(self.layout, shape.instances, opts, self.stages)


LEADER = "latency-leader"
#: The leader family in :data:`STAGES` pipeline stages: the hops overlap at larger sizes.
LEADER_STAGED = "leader-staged"
STAGES = 4


def leader_candidates(topology: Topology, collective: Collective) -> dict[str, Leader]:
    """The leader families (all-reduce: one stage and :data:`STAGES`; all-gather: merged
    steps and one step per shard) on ``topology`` when :func:`leader_layout` finds leaders
    and trees, else none."""
    if collective.kind not in ("allreduce", "allgather"):
        return {}
    layout = leader_layout(topology, list(collective.group))
    if layout is None:
        return {}
    return {LEADER: Leader(collective, layout),
            LEADER_STAGED: Leader(collective, layout, stages=STAGES)}
