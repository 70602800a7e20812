"""Feasibility: can every postcondition be met over the live links at all?

A copy chunk is feasible when every post NPU is reachable from some pre NPU; a reduction chunk
when every pre NPU reaches every post NPU (each contribution must get to each output).  Paths
may pass through switches and through NPUs outside the chunk's sets; given ``members`` (a
process group whose schedules relay through members only, the default of
:func:`tacos.synthesize`), paths pass through switches and member NPUs only.  Reachability
is computed once on the condensation (strongly connected components, scipy) of the topology,
so a strongly connected network costs one SCC pass whatever the collective, and each distinct
set of NPUs is looked at once, not once per chunk.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from tacos.errors import InfeasibleError, UsageError
from tacos.model.collective import Chunk, Collective
from tacos.model.topology import Topology


def describe_npu(topology: Topology, v: int) -> str:
    """``npu 7`` or ``npu 7 (gpu7)`` when the declared name says more than the id."""
    if 0 <= v < topology.n_npus:
        name = topology.npus[v].name
        if name not in (str(v), f"npu{v}", f"n{v}", f"npu {v}"):
            return f"npu {v} ({name})"
    return f"npu {v}"


class _Reach:
    """Reachability between nodes via the SCC condensation, on arrays: scipy's strongly
    connected components, then one reachability bitset (a Python int over components) per
    component, built in reverse topological order of the condensation.  Sets of NPUs are
    turned into component bitsets once per set object (patterns share one ``everyone``)."""

    def __init__(self, topology: Topology, members: frozenset[int] | None = None) -> None:
        n = topology.n_nodes
        usable = np.ones(n, dtype=bool)
        if members is not None:
            usable[:] = False
            usable[[v for v in members if 0 <= v < n]] = True
            usable[[sw.id for sw in topology.switches]] = True
        links = topology.links
        src = np.fromiter((lk.src for lk in links), dtype=np.int64, count=len(links))
        dst = np.fromiter((lk.dst for lk in links), dtype=np.int64, count=len(links))
        keep = usable[src] & usable[dst]
        src, dst = src[keep], dst[keep]
        self._sets: dict[int, tuple[frozenset[int], int]] = {}
        if members is None and _strongly_connected(n, src, dst):
            self.comp, self.ncomp, self.reach = [0] * n, 1, [1]
            return
        from scipy.sparse import csr_matrix
        from scipy.sparse.csgraph import connected_components

        g = csr_matrix((np.ones(len(src)), (src, dst)), shape=(n, n))
        ncomp, labels = connected_components(g, directed=True, connection="strong")
        self.comp = labels.tolist()
        self.ncomp = ncomp
        cs, cd = labels[src], labels[dst]
        across = cs != cd
        pairs = np.unique(np.stack([cs[across], cd[across]], axis=1), axis=0).tolist() \
            if across.any() else []
        succ: list[list[int]] = [[] for _ in range(ncomp)]
        indeg = [0] * ncomp
        for a, b in pairs:
            succ[a].append(b)
            indeg[b] += 1
        order = [c for c in range(ncomp) if indeg[c] == 0]
        for c in order:  # Kahn: the condensation is acyclic
            for b in succ[c]:
                indeg[b] -= 1
                if indeg[b] == 0:
                    order.append(b)
        self.reach = [0] * ncomp
        for c in reversed(order):
            r = 1 << c
            for b in succ[c]:
                r |= self.reach[b]
            self.reach[c] = r

    def __call__(self, u: int, v: int) -> bool:
        return bool(self.reach[self.comp[u]] >> self.comp[v] & 1)

    def comps(self, nodes: frozenset[int]) -> int:
        """Bitset of the components of ``nodes`` (cached per set object)."""
        hit = self._sets.get(id(nodes))
        if hit is None or hit[0] is not nodes:
            bits = 0
            for c in {self.comp[v] for v in nodes}:
                bits |= 1 << c
            hit = self._sets[id(nodes)] = (nodes, bits)
        return hit[1]

    def served(self, chunk: Chunk) -> bool:
        """Whether every NPU that must receive ``chunk`` can (see :func:`check_feasible`)."""
        want = self.comps(chunk.post)  # a post NPU that already holds a copy chunk is its own
        sources = self.comps(chunk.pre)  # nearest source, so it may stay in ``want``
        if self.ncomp == 1:
            return True
        if chunk.reduce:  # every contribution reaches every output
            have = -1
            while sources:
                low = sources & -sources
                have &= self.reach[low.bit_length() - 1]
                sources ^= low
            return want & ~have == 0
        have = 0
        while sources:
            low = sources & -sources
            have |= self.reach[low.bit_length() - 1]
            sources ^= low
        return want & ~have == 0


BFS_WORK = 50_000_000
"""Link visits the breadth-first test of :func:`_strongly_connected` may spend."""


def _strongly_connected(n: int, src: np.ndarray, dst: np.ndarray) -> bool:
    """True when node 0 reaches every node and every node reaches it (numpy frontiers, one
    pass over the links per level); False also when that would exceed :data:`BFS_WORK`
    (long chains), leaving the answer to the full component analysis."""
    if n <= 1:
        return True
    for a, b in ((src, dst), (dst, src)):
        seen = np.zeros(n, dtype=bool)
        seen[0] = True
        frontier = seen.copy()
        work = 0
        while frontier.any():
            work += len(a)
            if work > BFS_WORK:
                return False
            nxt = np.zeros(n, dtype=bool)
            nxt[b[frontier[a]]] = True
            frontier = nxt & ~seen
            seen |= frontier
        if not seen.all():
            return False
    return True


def _hint(topology: Topology, target: int, members: frozenset[int] | None = None) -> str:
    if members is not None:
        return ("allow relays through NPUs outside the group (relays='all', "
                "--relays all), or add a link toward "
                f"{describe_npu(topology, target)}")
    if topology.failed_links or any(n.failed for n in topology.npus):
        return (f"remove the failure or add a link toward {describe_npu(topology, target)}")
    return f"add a link toward {describe_npu(topology, target)}, or drop it from the collective"


def _check_names(topology: Topology, chunk: Chunk, named: set[int] | None = None) -> None:
    """Every NPU the chunk names exists and is alive; sets whose ``id`` is in ``named`` were
    checked before (for an earlier chunk sharing them) and are skipped."""
    for role, nodes in (("precondition", chunk.pre), ("postcondition", chunk.post)):
        if named is not None and id(nodes) in named:
            continue
        for v in sorted(nodes):
            if not 0 <= v < topology.n_npus:  # an input error, not a hard problem
                raise UsageError(
                    f"chunk {chunk.id} names node {v} in its {role}, which is not an NPU "
                    f"of the topology (it has {topology.n_npus} NPUs)",
                    hint="collectives run between NPUs; check the group or the custom chunks",
                )
            if topology.npus[v].failed:
                raise InfeasibleError(
                    f"chunk {chunk.id} names failed {describe_npu(topology, v)} in its {role}",
                    hint=f"leave {describe_npu(topology, v)} out of the collective's group, "
                         "or remove the failure",
                )
    if chunk.post and not chunk.pre:
        raise InfeasibleError(
            f"chunk {chunk.id} has no precondition: no NPU holds it at the start",
            hint="give the chunk at least one source NPU",
        )


def check_feasible(topology: Topology, collective: Collective,
                   members: Iterable[int] | None = None) -> None:
    """Raise :class:`~tacos.errors.InfeasibleError` if some postcondition cannot be met.

    The message names the NPU, the chunk and why, e.g.
    ``npu 7 cannot receive chunk 3 (no path from npu 2)``.  Checks run on strongly connected
    components, so the cost is per distinct (pre, post) pattern, not per NPU pair.  With
    ``members`` paths may relay only at those NPUs (and pass any switch); the chunks' own NPUs
    are always members.
    """
    group = None if members is None else frozenset(members) | collective.npus
    if group is not None and group >= set(topology.live_npus):
        group = None
    reach: _Reach | None = None
    named: set[int] = set()  # ids of node sets already checked (patterns share sets)
    keep: list[frozenset[int]] = []  # keeps those ids from being reused
    for chunk in collective.chunks:
        if id(chunk.pre) not in named or id(chunk.post) not in named:
            _check_names(topology, chunk, named)
            named.update((id(chunk.pre), id(chunk.post)))
            keep.extend((chunk.pre, chunk.post))
        if not chunk.post or (not chunk.reduce and chunk.post <= chunk.pre):
            continue
        if reach is None:
            reach = _Reach(topology, group)
        if not reach.served(chunk):
            targets = chunk.post if chunk.reduce else chunk.post - chunk.pre
            _explain(topology, chunk, sorted(targets), reach, group)


def _explain(topology: Topology, chunk: Chunk, targets: list[int], reach: _Reach,
             group: frozenset[int] | None) -> None:
    """Find the NPU pair behind a failed component check and raise the error."""
    sources = sorted(chunk.pre)
    only = ("" if group is None else
            "; relays through NPUs outside the group are off, and no route through switches "
            "and group members joins them")
    for p in targets:
        if chunk.reduce:
            for s in sources:
                if s != p and not reach(s, p):
                    raise InfeasibleError(
                        f"{describe_npu(topology, p)} cannot receive chunk {chunk.id}: "
                        f"the contribution of {describe_npu(topology, s)} cannot reach it "
                        f"(no path from npu {s}{only})",
                        hint=_hint(topology, p, group),
                    )
        elif not any(reach(s, p) for s in sources):
            origin = (f"npu {sources[0]}" if len(sources) == 1
                      else "any of npus " + ", ".join(map(str, sources)))
            raise InfeasibleError(
                f"{describe_npu(topology, p)} cannot receive chunk {chunk.id} "
                f"(no path from {origin}{only})",
                hint=_hint(topology, p, group),
            )
