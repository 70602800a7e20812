"""The α-β step engine every cost model is written in.

An algorithm is a list of :class:`Step`, run one after another.  A step is a set of logical
sends that run at the same time; send ``s`` moves ``frac_s · M`` bytes (``M`` the collective's
size) and repeats ``load_s`` times.  One transfer of a send takes

    t_s = Σ_hops (α_h + frac_s · M / β_h)

(one hop per direct link or cut-through switch path, store-and-forward between hops).  On the
machine model a physical link carries one transfer at a time (``multiplicity`` at once), so a
link ``l`` that several sends need is busy for

    busy_l = Σ_{sends s, hops h of s through l} load_s · (α_h + frac_s · M / β_h) / m_l

and the step lasts the longer of its algorithmic critical path and its busiest link:

* ``rounds`` (a synchronous algorithm):   T = max( max_s r_s , max_l busy_l )
* ``pipeline`` (chunks down fixed paths):  T = max( fill + max_s (load_s − 1) · u_s , max_l busy_l )
* ``flows`` (blocks from many sources):    T = max( fill , max_s r_s , max_l busy_l )

and, for the rings of a step (``cycles``), ``r`` also covers the chain of ``load`` consecutive
edges around the ring (round r of an edge forwards what the edge before it delivered in round
r − 1: with relayed edges, a ring's rounds cannot all overlap).

where ``fill`` = Σ over the step's segments of the longest path (Σ t_s along it), ``u_s`` the
time of the slowest hop of send s and ``r_s = t_s + (load_s − 1) · u_s`` its repeated rounds
(a relayed send forwards round i while round i+1 takes its first hop, so the slowest hop sets
its pace; for a one-hop send ``r_s = load_s · t_s``).  Ring
all-reduce on an N-ring is one ``rounds`` step with ``load = 2(N−1)``, ``frac = 1/N``: the
textbook ``2(N−1)(α + M/(N·β))``.  On a switch, direct all-gather's N−1 sends from one NPU all
need its up-port: ``busy = (N−1)(2α + M/(N·β))``, a GPU behind an NVSwitch sending to one peer
at a time.

:func:`evaluate` routes the sends once (:mod:`tacos.cost.paths`); the resulting
:class:`Plan` is a closed form in ``M`` and, for bandwidth allocation, in the per-dimension
bandwidths.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tacos.cost.paths import Router, assign_routes


@dataclass(frozen=True)
class Send:
    """A logical send of ``frac · M`` bytes from NPU ``src`` to ``dst``, ``load`` times."""

    src: int
    dst: int
    frac: float
    load: int = 1


MODES = ("rounds", "pipeline", "flows")


@dataclass(frozen=True)
class Step:
    """Concurrent sends; ``mode`` is one of :data:`MODES` and ``segments`` (paths of send
    indices) describe a pipeline's fill (default: every send alone)."""

    sends: tuple[Send, ...]
    label: str = ""
    segments: tuple[tuple[tuple[int, ...], ...], ...] | None = None
    mode: str = "rounds"
    #: rings of sends (indices in ring order) whose round r waits for the previous send's
    #: round r − 1 (a ring forwards what it just received)
    cycles: tuple[tuple[int, ...], ...] = ()


def ring_chain(times: Sequence[float], rounds: int) -> float:
    """The longest chain of ``rounds`` consecutive transfers around a ring whose edges take
    ``times``: each round of a ring forwards what the previous edge delivered in the round
    before, so ``rounds`` rounds cross ``rounds`` consecutive edges one after another."""
    n = len(times)
    if n == 0 or rounds <= 0:
        return 0.0
    full, rem = divmod(rounds, n)
    base = full * sum(times)
    if rem == 0:
        return base
    doubled = list(times) + list(times)
    window = sum(doubled[:rem])
    best = window
    for i in range(1, n):
        window += doubled[i + rem - 1] - doubled[i - 1]
        best = max(best, window)
    return base + best


@dataclass(frozen=True)
class SendCost:
    """A routed send: ``alpha`` (s) and ``inv_bw`` (s/B) summed over its hops, and
    ``by_dim[k]`` = how many of its hops run in dimension k (None when some hop has no single
    dimension): with per-dimension bandwidths b the byte term is Σ_k by_dim[k] / b_k."""

    send: Send
    alpha: float
    inv_bw: float
    hops: int
    by_dim: tuple[tuple[int, int], ...] | None
    #: per hop: (α_h, 1/β_h, dimension or None)
    legs: tuple[tuple[float, float, int | None], ...] = ()

    def time(self, size: float) -> float:
        """Duration of one transfer of this send for a collective of ``size`` bytes."""
        return self.alpha + self.send.frac * size * self.inv_bw

    def slowest(self, size: float) -> float:
        """Duration of its slowest hop (the pace of repeated relayed rounds)."""
        if len(self.legs) <= 1:
            return self.time(size)
        b = self.send.frac * size
        return max(a + b * inv for a, inv, _ in self.legs)

    def slowest_dims(self, size: float, bandwidth: Mapping[int, float]) -> float:
        """:meth:`slowest` with per-dimension bandwidths."""
        if len(self.legs) <= 1:
            return self.time_dims(size, bandwidth)
        b = self.send.frac * size
        return max(a + b / bandwidth[k] for a, _, k in self.legs)

    def time_dims(self, size: float, bandwidth: Mapping[int, float]) -> float:
        """Duration with dimension k's links at ``bandwidth[k]`` (B/s)."""
        if self.by_dim is None:
            raise ValueError("send crosses links without a single dimension")
        return self.alpha + self.send.frac * size * sum(w / bandwidth[k] for k, w in self.by_dim)


@dataclass(frozen=True)
class LinkLoad:
    """What a step asks of one physical link: ``busy = (alpha + size · per_byte) / m``;
    ``volume`` = Σ load · frac (bytes per byte of ``M``) for per-dimension bandwidths."""

    link: int
    users: int
    multiplicity: int
    alpha: float
    per_byte: float
    volume: float
    dim: int | None
    max_load: int
    transfers: int

    def busy(self, size: float) -> float:
        """Time the link is occupied (s)."""
        return (self.alpha + size * self.per_byte) / self.multiplicity

    def busy_dims(self, size: float, bandwidth: Mapping[int, float]) -> float:
        """Occupied time with per-dimension bandwidths."""
        if self.dim is None:
            raise ValueError("link has no dimension")
        return (self.alpha + size * self.volume / bandwidth[self.dim]) / self.multiplicity


@dataclass(frozen=True)
class StepCost:
    """A :class:`Step` after routing: its sends and the links shared by two or more."""

    step: Step
    sends: tuple[SendCost, ...]
    links: tuple[LinkLoad, ...]

    def _core(self, t: Sequence[float], u: Sequence[float]) -> float:
        if not t:
            return 0.0
        mode, segs = self.step.mode, self.step.segments
        loads = [s.send.load for s in self.sends]
        longest = max(x + (load - 1) * y for load, x, y in zip(loads, t, u, strict=True))
        for cycle in self.step.cycles:
            longest = max(longest, ring_chain([t[i] for i in cycle],
                                              max(loads[i] for i in cycle)))
        if mode == "rounds":
            return longest
        fill = (max(t) if segs is None else
                sum(max(sum(t[i] for i in path) for path in seg) for seg in segs if seg))
        if mode == "flows":
            return max(fill, longest)
        return fill + max((load - 1) * y for load, y in zip(loads, u, strict=True))

    def time(self, size: float) -> float:
        """Duration of the step (s) for a collective of ``size`` bytes."""
        core = self._core([s.time(size) for s in self.sends],
                          [s.slowest(size) for s in self.sends])
        return max([core] + [lk.busy(size) for lk in self.links])

    def time_dims(self, size: float, bandwidth: Mapping[int, float]) -> float:
        """Duration with per-dimension bandwidths (see :meth:`SendCost.time_dims`)."""
        core = self._core([s.time_dims(size, bandwidth) for s in self.sends],
                          [s.slowest_dims(size, bandwidth) for s in self.sends])
        return max([core] + [lk.busy_dims(size, bandwidth) for lk in self.links])

    def effective(self, size: float) -> tuple[float, float, LinkLoad | None]:
        """``(α_eff, β_eff, link)`` of what bounds the step: per transfer, the latency paid and
        the bandwidth really obtained (a link shared by n sends gives each 1/n of it); ``link``
        is the shared link that bounds it (None: the algorithm's critical path does)."""
        if not self.sends:
            return 0.0, math.inf, None
        def rounds(s: SendCost) -> float:
            return s.time(size) + (s.send.load - 1) * s.slowest(size)

        send = max(self.sends, key=rounds)
        link = max(self.links, key=lambda lk: lk.busy(size), default=None)
        if link is None or link.busy(size) <= rounds(send) * (1 + 1e-12):
            beta = 1.0 / send.inv_bw if send.inv_bw > 0 else math.inf
            return send.alpha, beta, None
        # busy = L (α_eff + f M / β_eff) with L the heaviest user's load, f the mean fraction
        rounds = link.max_load * link.multiplicity
        frac = link.volume / link.transfers
        beta = frac * rounds / link.per_byte if link.per_byte > 0 else math.inf
        return link.alpha / rounds, beta, link


@dataclass(frozen=True)
class Plan:
    """An algorithm's routed steps, run one after another.

    ``formula`` is the closed form in the textbook's symbols; ``notes`` say what was assumed.
    """

    algorithm: str
    kind: str
    n: int
    steps: tuple[StepCost, ...]
    formula: str = ""
    notes: tuple[str, ...] = field(default=())

    def time(self, size: float) -> float:
        """Predicted time (s) for a collective of ``size`` bytes."""
        return sum(s.time(size) for s in self.steps)

    def time_dims(self, size: float, bandwidth: Mapping[int, float]) -> float:
        """Predicted time with dimension k's links at ``bandwidth[k]`` B/s."""
        return sum(s.time_dims(size, bandwidth) for s in self.steps)

    def effective(self, size: float) -> tuple[float, float]:
        """``(α_eff, β_eff)`` of what bounds the longest step (see
        :meth:`StepCost.effective`)."""
        if not self.steps:
            return 0.0, math.inf
        step = max(self.steps, key=lambda s: s.time(size))
        alpha, beta, _ = step.effective(size)
        return alpha, beta

    @property
    def per_dimension(self) -> bool:
        """True when every hop stays inside one dimension (per-dimension bandwidths apply)."""
        return all(s.by_dim is not None for st in self.steps for s in st.sends)


def evaluate(router: Router, steps: Sequence[Step], relays: frozenset[int] | None = None
             ) -> tuple[StepCost, ...]:
    """Route every step's sends (relaying only through ``relays``, None: any NPU); price the
    sends and the links two or more of them share."""
    links = router.topology.links
    out = []
    for step in steps:
        routed, use = assign_routes(router, [(s.src, s.dst) for s in step.sends], relays)
        costs = []
        acc: dict[int, list] = {}
        for send, legs in zip(step.sends, routed, strict=True):
            alpha = inv = 0.0
            dims: dict[int, int] | None = {}
            hop_terms = []
            for leg in legs:
                alpha += leg.alpha
                inv += 1.0 / leg.bandwidth
                hop_terms.append((leg.alpha, 1.0 / leg.bandwidth, leg.dim))
                if dims is not None:
                    if leg.dim is None:
                        dims = None
                    else:
                        dims[leg.dim] = dims.get(leg.dim, 0) + 1
                for li in leg.links:
                    if use[li] < 2 and links[li].multiplicity == 1:
                        continue
                    a = acc.setdefault(li, [0.0, 0.0, 0.0, leg.dim, 0, 0])
                    a[0] += send.load * leg.alpha
                    a[1] += send.load * send.frac / leg.bandwidth
                    a[2] += send.load * send.frac
                    a[4] = max(a[4], send.load)
                    a[5] += send.load
                    if a[3] != leg.dim:
                        a[3] = None
            by_dim = tuple(sorted(dims.items())) if dims is not None else None
            costs.append(SendCost(send, alpha, inv, len(legs), by_dim, tuple(hop_terms)))
        loads = tuple(LinkLoad(li, use[li], links[li].multiplicity, *a)
                      for li, a in sorted(acc.items()) if use[li] > links[li].multiplicity)
        out.append(StepCost(step, tuple(costs), loads))
    return tuple(out)


def merge(programs: Sequence[Sequence[Step]]) -> list[Step]:
    """Run the same algorithm in several groups at once: step i of every group becomes one
    step (sends concatenated, segment indices shifted).  Programs must have equal length."""
    if not programs:
        return []
    lengths = {len(p) for p in programs}
    if len(lengths) != 1:
        raise ValueError("concurrent groups must run programs of the same shape")
    out = []
    for parts in zip(*programs, strict=True):
        sends: list[Send] = []
        cycles: list[tuple[int, ...]] = []
        segs: list[list[tuple[int, ...]]] | None = None
        if any(p.segments is not None for p in parts):
            width = max(len(p.segments or ()) for p in parts)
            segs = [[] for _ in range(width)]
        for p in parts:
            base = len(sends)
            sends.extend(p.sends)
            cycles.extend(tuple(base + i for i in c) for c in p.cycles)
            if segs is not None:
                own = p.segments or (tuple((i,) for i in range(len(p.sends))),)
                for k, seg in enumerate(own):
                    segs[k].extend(tuple(base + i for i in path) for path in seg)
        out.append(Step(tuple(sends), parts[0].label,
                        tuple(tuple(s) for s in segs) if segs is not None else None,
                        parts[0].mode, tuple(cycles)))
    return out
