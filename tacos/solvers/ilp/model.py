"""Backend-neutral model of the TACOS time-expanded-network (TEN) ILP.

Time is in integer steps; chunk ``c`` takes ``w_l`` steps on link ``l`` (from
:func:`tacos.passes.discretize.discretize`).  Binary variables (reference §2.4):

* ``x[c,l,t]``: chunk ``c`` starts on link ``l = (u, v)`` at step ``t`` and is at ``v`` at
  ``t + w_l``;
* ``h[c,v,t]``: node ``v`` holds ``c`` at step ``t`` (constant 1 on the precondition, constant 0
  before the earliest step ``c`` can reach ``v``).

Constraints: hold-or-arrive ``h[c,v,t] <= h[c,v,t-1] + Σ_l x[c,l,t-w_l]``, keep what you hold
(``h`` non-decreasing), send only what you hold (``x[c,(u,·),t] <= h[c,u,t]``, multicast allowed),
receive each chunk at most once, and congestion: at most ``multiplicity`` chunks in flight on a
link in any step.  The postcondition is either hard (``h[c,d,T] = 1``) or the objective.

Variables that cannot matter are never created: ``c`` cannot be at ``v`` before its step distance
from the precondition, and (``prune_late``) a copy at ``v`` is useless after
``T - dist(v, nearest destination)``.  ``forward_only`` (time clustering) keeps only moves that
get strictly closer to some destination.

The model is a plain sparse matrix (:class:`IlpModel`); :mod:`tacos.solvers.ilp.backends`
hands it to CBC, HiGHS, CP-SAT or Gurobi.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from tacos.model.topology import Topology

Send = tuple[int, int, int]  # (chunk, link index, start step)
INF = 1 << 40


class BuildTimeout(Exception):
    """Building the model ran past its deadline."""


@dataclass
class IlpModel:
    """A binary program ``maximize obj·z  s.t.  row_lo <= A z <= row_hi``, ``z ∈ {0,1}``.

    Rows are stored in CSR form (``starts``, ``index``, ``coef``).  ``col_lo``/``col_hi`` fix
    variables (e.g. a hard postcondition sets ``col_lo = 1``).
    """

    n_vars: int = 0
    col_lo: list[float] = field(default_factory=list)
    col_hi: list[float] = field(default_factory=list)
    obj: list[float] = field(default_factory=list)
    starts: list[int] = field(default_factory=lambda: [0])
    index: list[int] = field(default_factory=list)
    coef: list[float] = field(default_factory=list)
    row_lo: list[float] = field(default_factory=list)
    row_hi: list[float] = field(default_factory=list)
    x_vars: dict[Send, int] = field(default_factory=dict)
    h_vars: dict[tuple[int, int, int], int] = field(default_factory=dict)
    horizon: int = 0
    n_demands: int = 0

    @property
    def n_rows(self) -> int:
        """Number of constraints."""
        return len(self.row_lo)

    @property
    def n_nonzeros(self) -> int:
        """Number of matrix entries."""
        return len(self.index)

    def add_var(self, obj: float = 0.0, lo: float = 0.0, hi: float = 1.0) -> int:
        """A new binary variable; returns its column."""
        self.col_lo.append(lo)
        self.col_hi.append(hi)
        self.obj.append(obj)
        self.n_vars += 1
        return self.n_vars - 1

    def add_row(self, terms: Iterable[tuple[int, float]], lo: float, hi: float) -> None:
        """Add ``lo <= Σ coef·z <= hi`` (use ±inf for one-sided rows)."""
        for j, a in terms:
            self.index.append(j)
            self.coef.append(a)
        self.starts.append(len(self.index))
        self.row_lo.append(lo)
        self.row_hi.append(hi)

    def rows(self) -> Iterable[tuple[list[int], list[float], float, float]]:
        """Iterate ``(columns, coefficients, lo, hi)`` per row."""
        for r in range(self.n_rows):
            a, b = self.starts[r], self.starts[r + 1]
            yield self.index[a:b], self.coef[a:b], self.row_lo[r], self.row_hi[r]

    def satisfied_by(self, values: Sequence[float], tol: float = 1e-6) -> bool:
        """True when ``values`` is integral, within bounds and satisfies every row."""
        for j, v in enumerate(values):
            if abs(v - round(v)) > tol or not self.col_lo[j] - tol <= v <= self.col_hi[j] + tol:
                return False
        for cols, coefs, lo, hi in self.rows():
            act = sum(values[j] * a for j, a in zip(cols, coefs, strict=True))
            if act < lo - tol or act > hi + tol:
                return False
        return True

    def sends_of(self, values: Sequence[float]) -> list[Send]:
        """The sends a solution vector switches on."""
        return sorted(key for key, j in self.x_vars.items() if values[j] > 0.5)

    def hint_from(self, sends: Iterable[Send], pre: Sequence[frozenset[int]],
                  steps: Sequence[int], topology: Topology) -> list[float]:
        """A full 0/1 vector for a warm start: the sends that exist in the model and are causal.

        Sends outside the model (pruned or past the horizon) are dropped together with anything
        that depended on them.
        """
        kept = causal_sends([s for s in sends if s in self.x_vars], pre, steps, topology)
        values = [0.0] * self.n_vars
        arrive: dict[tuple[int, int], int] = {}
        for c, li, t in kept:
            values[self.x_vars[(c, li, t)]] = 1.0
            dst = topology.links[li].dst
            arrive[(c, dst)] = min(arrive.get((c, dst), INF), t + steps[li])
        for (c, v, t), j in self.h_vars.items():
            if arrive.get((c, v), INF) <= t:
                values[j] = 1.0
        return values


def step_distances(topology: Topology, steps: Sequence[int], sources: Iterable[int],
                   reverse: bool = False) -> list[int]:
    """Fewest steps from any of ``sources`` to every node (to ``sources`` when ``reverse``)."""
    dist = [INF] * topology.n_nodes
    heap = []
    for s in sources:
        dist[s] = 0
        heap.append((0, s))
    heapq.heapify(heap)
    adj = topology.in_links if reverse else topology.out_links
    while heap:
        d, u = heapq.heappop(heap)
        if d > dist[u]:
            continue
        for li in adj[u]:
            lk = topology.links[li]
            v = lk.src if reverse else lk.dst
            nd = d + steps[li]
            if nd < dist[v]:
                dist[v] = nd
                heapq.heappush(heap, (nd, v))
    return dist


def build_ten_model(
    topology: Topology,
    steps: Sequence[int],
    pre: Sequence[frozenset[int]],
    post: Sequence[frozenset[int]],
    horizon: int,
    *,
    hard_post: bool = False,
    objective: str = "delivered",
    prune_late: bool = True,
    forward_only: bool = False,
    deadline: float | None = None,
) -> IlpModel:
    """Build the TEN ILP for chunks with holders ``pre[c]`` and wanted at ``post[c]``.

    ``objective``: ``"delivered"`` maximizes postcondition pairs held at the horizon (the model
    is feasible-complete iff the optimum equals ``n_demands``); ``"early"`` maximizes
    ``Σ_t h`` over postcondition pairs (earlier arrivals score more, seed §V-A) plus a small
    reward for moving chunks closer to destinations they still miss (used by time clustering).
    Raises :class:`BuildTimeout` once ``time.perf_counter()`` passes ``deadline``.
    """
    m = IlpModel(horizon=horizon)
    links = topology.links
    n_nodes = topology.n_nodes
    T = horizon
    x_by_link: list[list[tuple[int, int]]] = [[] for _ in links]  # (start step, var)
    for c, (have, want) in enumerate(zip(pre, post, strict=True)):
        targets = sorted(want - have)
        if not targets:
            continue
        if deadline is not None and time.perf_counter() > deadline:
            raise BuildTimeout
        m.n_demands += len(targets)
        early = step_distances(topology, steps, have)
        to_target = step_distances(topology, steps, targets, reverse=True)
        per_target = ({d: step_distances(topology, steps, [d], reverse=True) for d in targets}
                      if forward_only else {})
        late = [T - to_target[v] if prune_late else T for v in range(n_nodes)]
        useful = [early[v] <= late[v] and early[v] < INF and to_target[v] < INF
                  for v in range(n_nodes)]
        is_target = set(targets)
        # progress weights for objective "early": Σ over missing targets of distance saved
        reach = {d: min(per_target[d][u] for u in have) for d in targets} if forward_only else {}
        h: dict[tuple[int, int], int] = {}
        for v in range(n_nodes):
            if v in have or not useful[v]:
                continue
            for t in range(max(early[v], 0), late[v] + 1):
                coef = 0.0
                if v in is_target:
                    if objective == "early" and t >= 1:
                        coef = 1.0
                    elif objective == "delivered" and t == T:
                        coef = 1.0
                if objective == "early" and t == T and forward_only:
                    gain = sum(max(0, reach[d] - per_target[d][v]) for d in targets)
                    coef += 0.5 * gain / max(1, len(targets) * max(reach.values()))
                lo = 1.0 if (hard_post and v in is_target and t == T) else 0.0
                h[(v, t)] = m.add_var(coef, lo, 1.0)
                m.h_vars[(c, v, t)] = h[(v, t)]
        arrivals: dict[tuple[int, int], list[int]] = {}
        receives: dict[int, list[int]] = {}
        for li, lk in enumerate(links):
            u, v = lk.src, lk.dst
            if v in have or not useful[u] or not useful[v]:
                continue
            if forward_only and not any(per_target[d][v] < per_target[d][u] for d in targets):
                continue
            w = steps[li]
            for t in range(early[u], late[v] - w + 1):
                j = m.add_var()
                m.x_vars[(c, li, t)] = j
                x_by_link[li].append((t, j))
                arrivals.setdefault((v, t + w), []).append(j)
                receives.setdefault(v, []).append(j)
                if u not in have:  # send only what you hold
                    m.add_row(((j, 1.0), (h[(u, t)], -1.0)), -float("inf"), 0.0)
        for (v, t), j in h.items():  # hold-or-arrive, and keep what you hold
            terms = [(j, 1.0)] + [(a, -1.0) for a in arrivals.get((v, t), ())]
            prev = h.get((v, t - 1))
            if prev is not None:
                terms.append((prev, -1.0))
                m.add_row(((prev, 1.0), (j, -1.0)), -float("inf"), 0.0)
            m.add_row(terms, -float("inf"), 0.0)
        for js in receives.values():  # a node receives a chunk at most once
            if len(js) > 1:
                m.add_row(((j, 1.0) for j in js), -float("inf"), 1.0)
    for li, lk in enumerate(links):  # congestion: ≤ multiplicity chunks in flight per step
        entries = x_by_link[li]
        if len(entries) <= lk.multiplicity:
            continue
        w = steps[li]
        by_start: dict[int, list[int]] = {}
        for t, j in entries:
            by_start.setdefault(t, []).append(j)
        starts = sorted(by_start)
        for s in sorted({t + k for t in starts for k in range(w)}):
            js = [j for t in range(s - w + 1, s + 1) for j in by_start.get(t, ())]
            if len(js) > lk.multiplicity:
                m.add_row(((j, 1.0) for j in js), -float("inf"), float(lk.multiplicity))
    return m


def causal_sends(sends: Iterable[Send], pre: Sequence[frozenset[int]], steps: Sequence[int],
                 topology: Topology) -> list[Send]:
    """Keep the sends whose source holds the chunk when it starts (in step order)."""
    have: dict[tuple[int, int], int] = {}
    for c, nodes in enumerate(pre):
        for v in nodes:
            have[(c, v)] = 0
    kept = []
    for c, li, t in sorted(sends, key=lambda s: (s[2], s[0], s[1])):
        lk = topology.links[li]
        if have.get((c, lk.src), INF) <= t:
            kept.append((c, li, t))
            key = (c, lk.dst)
            have[key] = min(have.get(key, INF), t + steps[li])
    return kept


def prune_useless(sends: Iterable[Send], post: Sequence[frozenset[int]],
                  topology: Topology) -> list[Send]:
    """Drop sends that neither reach a postcondition node nor feed a later useful send."""
    kept = sorted(sends, key=lambda s: (s[2], s[0], s[1]))
    while True:
        forwards: set[tuple[int, int]] = set()
        for c, li, _t in kept:
            forwards.add((c, topology.links[li].src))
        nxt = [s for s in kept
               if topology.links[s[1]].dst in post[s[0]]
               or (s[0], topology.links[s[1]].dst) in forwards]
        if len(nxt) == len(kept):
            return kept
        kept = nxt


def holdings_after(sends: Iterable[Send], pre: Sequence[frozenset[int]],
                   topology: Topology) -> list[frozenset[int]]:
    """Per chunk, the nodes holding it once every send has arrived."""
    out = [set(p) for p in pre]
    for c, li, _t in sends:
        out[c].add(topology.links[li].dst)
    return [frozenset(s) for s in out]


def schedule_steps(sends: Iterable[Send], steps: Sequence[int]) -> int:
    """Step at which the last send arrives (0 when there is none)."""
    return max((t + steps[li] for _c, li, t in sends), default=0)


def demands_met(sends: Iterable[Send], pre: Sequence[frozenset[int]],
                post: Sequence[frozenset[int]], topology: Topology) -> int:
    """Number of (chunk, destination) postcondition pairs the sends satisfy."""
    held = holdings_after(sends, pre, topology)
    return sum(len((post[c] - pre[c]) & held[c]) for c in range(len(pre)))


def transfers_to_sends(transfers: Iterable, steps: Sequence[int], pre: Sequence[frozenset[int]],
                       topology: Topology, multiplicity: Mapping[int, int] | None = None
                       ) -> list[Send]:
    """List-schedule a continuous schedule's transfers on the step grid, keeping each link's order.

    Every chunk of a multi-chunk transfer becomes its own send; a send starts when its chunk is
    at the source and a lane of the link is free.  Redundant receives are dropped.  The result is
    a causal, congestion-free TEN schedule (used as upper bound and warm start).
    """
    have: dict[tuple[int, int], int] = {}
    for c, nodes in enumerate(pre):
        for v in nodes:
            have[(c, v)] = 0
    lanes: dict[int, list[int]] = {}
    out: list[Send] = []
    rows = sorted((t.start, t.end, t.link, t.chunks) for t in transfers)
    for _, _, li, chunks in rows:
        lk = topology.links[li]
        mult = (multiplicity or {}).get(li, lk.multiplicity)
        free = lanes.setdefault(li, [0] * mult)
        for c in chunks:
            if (c, lk.dst) in have or (c, lk.src) not in have:
                continue
            lane = min(range(len(free)), key=free.__getitem__)
            t = max(have[(c, lk.src)], free[lane])
            free[lane] = t + steps[li]
            have[(c, lk.dst)] = t + steps[li]
            out.append((c, li, t))
    return out


def sends_to_transfers(sends: Iterable[Send], step: float, steps: Sequence[int],
                       topology: Topology, sizes: Sequence[int]) -> list:
    """Turn TEN sends into :class:`~tacos.model.schedule.Transfer` objects in seconds.

    A send at step ``t`` starts at ``t·step`` and lasts its real α-β time, which never exceeds
    its ``w`` steps (discretization rounds up), so causality and link exclusivity carry over.
    The end is clamped to ``(t + w)·step`` so float rounding cannot make it overlap the next
    send on the link by an ulp.
    """
    from tacos.model.schedule import Transfer

    out = []
    for c, li, t in sorted(sends, key=lambda s: (s[2], s[1], s[0])):
        lk = topology.links[li]
        start = t * step
        end = min(start + lk.time(sizes[c]), (t + steps[li]) * step)
        out.append(Transfer(start, end, lk.src, lk.dst, (li,), (c,)))
    return out
