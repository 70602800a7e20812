"""A latency-bound multi-node all-reduce through one leader GPU per node, for nodes whose GPUs
are not all linked to each other or share a NIC (NDv2: a cube mesh of NVLink and one NIC per
node; MI250: a partial xGMI mesh), where the rail programs
(:mod:`tacos.msccl.multinode_program`, :mod:`tacos.msccl.multinode_latency`) do not apply.

Per node, the leader is a rank with a route to every other node; the node's ranks form a
breadth-first tree over the routes that stay inside the node, rooted at the leader, each rank
hung under the parent of the level above with the fewest children so far (the fewest
additions in turn at any rank).  Per instance (channel p, chunk p):

* up the tree: every rank adds its children's partials into its own as they arrive (``rrc``,
  one child after the other), then sends the sum to its parent;
* across the nodes: each leader sends its node's sum to every other leader and adds theirs
  in turn (after its sends have read its sum);
* down the tree: every rank receives the total from its parent and sends it to its children.

One thread block per tree or leader neighbour (``send=w recv=w``).  The critical path is
``2·depth`` in-node hops and one NIC hop, every hop carrying the whole message (the
chooser's instances split it over channels): meant for LL at small sizes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tacos.errors import TacosError
from tacos.model.collective import Collective
from tacos.model.topology import Topology
from tacos.msccl.lower import MscclOptions
from tacos.msccl.multinode_program import _is_nic, node_groups
from tacos.msccl.multinode_steps import Wait, _finish, _parses, _Tb
from tacos.msccl.program import Gpu, Program
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
    inplace = bool(options.inplace)
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
    gpus = [Gpu(r, c, 0 if inplace else c, 0, tuple(blocks))
            for r, blocks in enumerate(blocks_of)]
    return Program(options.name or f"tacos_leader_allreduce_{len(layout.leaders)}",
                   options.proto, inst, c, n_ranks, "allreduce", int(inplace),
                   int(options.out_of_place), options.min_bytes, options.max_bytes,
                   tuple(gpus), options.redop)


@dataclass(frozen=True)
class Leader:
    """The leader all-reduce family for ``collective`` on ``layout``: any shape's instances
    and protocol (port order and pairing do not apply)."""

    collective: Collective
    layout: LeaderLayout
    stages: int = 1

    @property
    def label(self) -> str:
        """What the family is, for reports."""
        return (f"leader all-reduce: {len(self.layout.leaders)} nodes, a tree of depth "
                f"{self.layout.depth()} to each node's leader, leaders exchange their sums, "
                f"{self.stages} pipeline stage{'s' * (self.stages > 1)}")

    def lower(self, shape: Shape, base: MscclOptions | None = None) -> Program:
        """The program for ``shape`` with ``base``'s header fields."""
        opts = shape.options(base)
        opts.validate()
        if self.collective.kind != "allreduce":
            raise TacosError(f"no leader program for {self.collective.kind}")
        return leader_allreduce(self.layout, shape.instances, opts, self.stages)


LEADER = "latency-leader"
#: The leader family in :data:`STAGES` pipeline stages: the hops overlap at larger sizes.
LEADER_STAGED = "leader-staged"
STAGES = 4


def leader_candidates(topology: Topology, collective: Collective) -> dict[str, Leader]:
    """The leader families (one stage and :data:`STAGES`) for an all-reduce on ``topology``
    when :func:`leader_layout` finds leaders and trees, else none."""
    if collective.kind != "allreduce":
        return {}
    layout = leader_layout(topology, list(collective.group))
    if layout is None:
        return {}
    return {LEADER: Leader(collective, layout),
            LEADER_STAGED: Leader(collective, layout, stages=STAGES)}
