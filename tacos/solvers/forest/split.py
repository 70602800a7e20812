"""Switch removal by edge splitting, keeping the map back to physical paths.

Edmonds' theorem packs trees in graphs whose every node is a tree node; switches (and NPUs
outside the group) are not.  Splitting off a pair of arcs ``u → w → t`` at such a node w by μ
replaces μ units of both by a direct arc ``u → t`` (a loop when u = t is dropped).  By the
splitting theorem of Bang-Jensen, Frank and Jackson (1995) every arc at a node with equal in- and
out-capacity can be split off while every max-flow σ → v (v in the group) stays ≥ N·k, so the
tree rate is unchanged.  The largest safe μ for a pair is

    min(c(u,w), c(w,t), min over *dangerous* sets X of ρ_σ(X) − N·k)

where ρ_σ counts σ's arcs (k to each root) and X is dangerous if it holds a group NPU, avoids σ,
and either contains w but neither u nor t
(splitting removes μ from its in-capacity through u → w) or contains u and t but not w (the
arc w → t it loses).  Each family's minimum is one multi-source/multi-sink max-flow
(:class:`~tacos.solvers.forest.flow.FlowNetwork`); only when the minimizing set holds no group
NPU are the group NPUs tried one by one, as ForestColl does for every pair.  A switch's first,
proportional splits (see :meth:`_Splitter.split`) are made unchecked and confirmed by one
feasibility check (N max-flows), which on real switches replaces thousands of pair checks; if
it fails they are undone and made checked.

Every arc keeps the physical paths it stands for, as ``(path, units)`` pairs (``path`` is a
node list); a split concatenates μ units of both arcs' paths, so a split arc through several
switches (a leaf-spine fabric) maps back to the full physical path.
"""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass

from tacos.solvers.forest.flow import FlowNetwork
from tacos.solvers.forest.rate import Edge

Path = tuple[int, ...]
FAN_OUT = 8
"""Most peers one switch port is first split towards (the rest follows if needed)."""


@dataclass
class SplitGraph:
    """Integer capacities between group NPUs and, per arc, the physical paths behind them."""

    caps: dict[Edge, int]
    paths: dict[Edge, list[tuple[Path, int]]]
    flows: int = 0


def _take(pool: list[tuple[Path, int]], amount: int) -> list[tuple[Path, int]]:
    """Remove ``amount`` units from ``pool`` (largest entries first) and return them."""
    out: list[tuple[Path, int]] = []
    pool.sort(key=lambda pu: -pu[1])
    while amount > 0:
        path, units = pool[0]
        used = min(units, amount)
        out.append((path, used))
        amount -= used
        if used == units:
            pool.pop(0)
        else:
            pool[0] = (path, units - used)
    return out


def _join(a: list[tuple[Path, int]], b: list[tuple[Path, int]]) -> list[tuple[Path, int]]:
    """Pair up two equal-sized unit lists, concatenating paths (ForestColl's ``_match``)."""
    out: list[tuple[Path, int]] = []
    i = j = 0
    a, b = [list(x) for x in a], [list(x) for x in b]
    while i < len(a) and j < len(b):
        used = min(a[i][1], b[j][1])
        out.append((tuple(a[i][0]) + tuple(b[j][0])[1:], used))
        a[i][1] -= used
        b[j][1] -= used
        i += a[i][1] == 0
        j += b[j][1] == 0
    return out


class _Splitter:
    def __init__(self, n_nodes: int, compute: tuple[int, ...], roots: tuple[int, ...],
                 caps: dict[Edge, int], k: int) -> None:
        self.compute = compute
        self.need = len(roots) * k
        self.net = FlowNetwork(n_nodes + 1)
        self.sigma = n_nodes
        self.caps = dict(caps)
        self.arc = {e: self.net.add_arc(e[0], e[1], c) for e, c in self.caps.items()}
        for v in roots:
            self.net.add_arc(self.sigma, v, k)
        self.paths: dict[Edge, list[tuple[Path, int]]] = {e: [(e, c)] for e, c in caps.items()}
        self.flows = 0

    def _set(self, e: Edge, c: int) -> None:
        self.caps[e] = c
        if e not in self.arc:
            self.arc[e] = self.net.add_arc(e[0], e[1], c)
        else:
            self.net.set_cap(self.arc[e], c)

    def _flow(self, src: list[int], dst: list[int], cut: bool = False):
        self.flows += 1
        return self.net.max_flow(src, dst, min_cut=cut)

    def _slack(self, src: list[int], dst: list[int], limit: int) -> int:
        """min ρ_σ(X) − N·k over X ⊇ dst, X ∩ src = ∅, X holding a group NPU (capped)."""
        value, side = self._flow(src, dst, cut=True)
        slack = value - self.need
        if slack >= limit:
            return limit
        if any(v not in side for v in self.compute):  # the largest min-cut sink side
            return slack
        best = limit
        for v in self.compute:
            if v in src or v in dst:
                continue
            value, _ = self._flow(src, dst + [v])
            best = min(best, value - self.need)
            if best <= 0:
                return 0
        return best

    def split(self, w: int) -> None:
        """Split off every arc pair at ``w``: first each in-port's capacity spread over up to
        :data:`FAN_OUT` peers in proportion to their out-capacity (peers the rest of the graph
        reaches last come first), so that a port's capacity spreads as a switch spreads it
        instead of going to the first peer in id order; then the rest, pair by pair."""
        ins = sorted(u for (u, x), c in self.caps.items() if x == w and c > 0)
        outs = sorted(t for (x, t), c in self.caps.items() if x == w and c > 0)
        share = {}
        for u in ins:
            peers = self._preferred(u, w, [t for t in outs if t != u])
            rest = sum(self.caps[(w, t)] for t in peers)
            for t in peers:
                share[(u, t)] = -(-self.caps[(u, w)] * self.caps[(w, t)] // rest)
        # the proportional splits unchecked, then one feasibility check (N max-flows) instead
        # of a check per pair; if it fails they are undone and redone pair by pair, checked
        saved = (dict(self.caps), {e: list(p) for e, p in self.paths.items()})
        for checked in (False, True):
            for u in ins:
                for t in outs:
                    if (u, t) in share:
                        cap = min(self.caps.get((u, w), 0), self.caps.get((w, t), 0),
                                  share[(u, t)])
                        if cap > 0:
                            self._split_pair(u, w, t, cap, checked)
            if checked or self._feasible():
                break
            for e, c in saved[0].items():
                self._set(e, c)
            for e in [e for e in self.caps if e not in saved[0]]:
                self._set(e, 0)
            self.paths = saved[1]
        for u in ins:
            for t in outs:
                cap = min(self.caps.get((u, w), 0), self.caps.get((w, t), 0))
                if cap > 0:
                    self._split_pair(u, w, t, cap, True)

    def _feasible(self) -> bool:
        """Every max-flow σ → group NPU still reaches N·k."""
        return all(self._flow([self.sigma], [v])[0] >= self.need for v in self.compute)

    def _preferred(self, u: int, w: int, peers: list[int]) -> list[int]:
        """At most :data:`FAN_OUT` of ``peers``: farthest from ``u`` without ``w`` first, then
        by circular offset from ``u`` (a rail-like pattern on a switch shared by several
        nodes)."""
        if len(peers) <= FAN_OUT:
            return peers
        succ = successors(self.caps, avoid=w)
        dist = hop_distances(succ, u)
        order = sorted(peers + [u])
        pos = {v: i for i, v in enumerate(order)}
        n = len(order)
        far = sorted(peers, key=lambda t: (-dist.get(t, n + 1), (pos[t] - pos[u]) % n))
        return far[:FAN_OUT]

    def _split_pair(self, u: int, w: int, t: int, cap: int, checked: bool = True) -> None:
        ends = [u] if u == t else [u, t]
        mu = cap
        if checked:
            mu = self._slack([self.sigma, *ends], [w], cap)
            if mu > 0:
                mu = self._slack([self.sigma, w], ends, mu)
        if mu <= 0:
            return
        self._set((u, w), self.caps[(u, w)] - mu)
        self._set((w, t), self.caps[(w, t)] - mu)
        first = _take(self.paths[(u, w)], mu)
        second = _take(self.paths[(w, t)], mu)
        if u != t:
            self._set((u, t), self.caps.get((u, t), 0) + mu)
            self.paths.setdefault((u, t), []).extend(_join(first, second))


def successors(caps: dict[Edge, int], avoid: int | None = None) -> dict[int, list[int]]:
    """Out-neighbours along the positive-capacity arcs of ``caps`` (arcs touching ``avoid``
    left out)."""
    succ: dict[int, list[int]] = defaultdict(list)
    for (a, b), c in caps.items():
        if c > 0 and avoid not in (a, b):
            succ[a].append(b)
    return succ


def hop_distances(succ: dict[int, list[int]], source: int) -> dict[int, int]:
    """Breadth-first hop counts from ``source`` over ``succ`` (reachable nodes only)."""
    dist = {source: 0}
    frontier = deque([source])
    while frontier:
        a = frontier.popleft()
        for b in succ[a]:
            if b not in dist:
                dist[b] = dist[a] + 1
                frontier.append(b)
    return dist


def split_switches(n_nodes: int, compute: tuple[int, ...], roots: tuple[int, ...],
                   caps: dict[Edge, int], k: int) -> SplitGraph:
    """Split off every non-group node (``roots`` root k trees each); returns arcs between
    group NPUs only.

    Arcs a node could not split off (possible only when its in- and out-capacity differ) are
    dropped with it; the caller re-checks feasibility of the result.
    """
    sp = _Splitter(n_nodes, compute, roots, caps, k)
    relays = sorted({v for e in caps for v in e} - set(compute))
    for w in relays:
        sp.split(w)
        for e in [e for e in sp.caps if w in e]:
            sp._set(e, 0)
    keep = {e: c for e, c in sp.caps.items() if c > 0 and e[0] != e[1]}
    return SplitGraph(keep, {e: sp.paths[e] for e in keep}, sp.flows)
