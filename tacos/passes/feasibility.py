"""Feasibility: can every postcondition be met over the live links at all?

A copy chunk is feasible when every post NPU is reachable from some pre NPU; a reduction chunk
when every pre NPU reaches every post NPU (each contribution must get to each output).  Paths
may pass through switches and through NPUs outside the chunk's sets; given ``members`` (a
process group whose schedules relay through members only, the default of
:func:`tacos.synthesize`), paths pass through switches and member NPUs only.  Reachability
is computed once on the condensation (strongly connected components) of the topology, so a strongly
connected network costs one SCC pass whatever the collective.
"""

from __future__ import annotations

from collections.abc import Iterable

import networkx as nx

from tacos.collective import Chunk, Collective
from tacos.errors import InfeasibleError
from tacos.topology import Topology


def describe_npu(topology: Topology, v: int) -> str:
    """``npu 7`` or ``npu 7 (gpu7)`` when the declared name says more than the id."""
    if 0 <= v < topology.n_npus:
        name = topology.npus[v].name
        if name not in (str(v), f"npu{v}", f"n{v}", f"npu {v}"):
            return f"npu {v} ({name})"
    return f"npu {v}"


class _Reach:
    """Reachability between nodes via the SCC condensation."""

    def __init__(self, topology: Topology, members: frozenset[int] | None = None) -> None:
        g = nx.DiGraph()
        g.add_nodes_from(range(topology.n_nodes))

        def usable(v: int) -> bool:
            return members is None or topology.is_switch(v) or v in members

        g.add_edges_from((lk.src, lk.dst) for lk in topology.links
                         if usable(lk.src) and usable(lk.dst))
        cond = nx.condensation(g)
        self.comp = cond.graph["mapping"]
        self.reach: dict[int, set[int]] = {}
        for c in reversed(list(nx.topological_sort(cond))):
            r = {c}
            for s in cond.successors(c):
                r |= self.reach[s]
            self.reach[c] = r

    def __call__(self, u: int, v: int) -> bool:
        return self.comp[v] in self.reach[self.comp[u]]


def _hint(topology: Topology, target: int, members: frozenset[int] | None = None) -> str:
    if members is not None:
        return ("allow relays through NPUs outside the group (relays='all', "
                "--relays all), or add a link toward "
                f"{describe_npu(topology, target)}")
    if topology.failed_links or any(n.failed for n in topology.npus):
        return (f"remove the failure or add a link toward {describe_npu(topology, target)}")
    return f"add a link toward {describe_npu(topology, target)}, or drop it from the collective"


def _check_names(topology: Topology, chunk: Chunk) -> None:
    for role, nodes in (("precondition", chunk.pre), ("postcondition", chunk.post)):
        for v in sorted(nodes):
            if not 0 <= v < topology.n_npus:
                raise InfeasibleError(
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
    done: set[tuple[bool, frozenset[int], frozenset[int]]] = set()
    for chunk in collective.chunks:
        _check_names(topology, chunk)
        targets = chunk.post if chunk.reduce else chunk.post - chunk.pre
        if not targets:
            continue
        key = (chunk.reduce, chunk.pre, targets)
        if key in done:
            continue
        done.add(key)
        if reach is None:
            reach = _Reach(topology, group)
        comp, closure = reach.comp, reach.reach
        pre_comps = {comp[s] for s in chunk.pre}
        for q in {comp[p] for p in targets}:
            if chunk.reduce:
                ok = all(q in closure[s] for s in pre_comps)
            else:
                ok = any(q in closure[s] for s in pre_comps)
            if not ok:
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
