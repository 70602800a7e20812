"""NCCL's multi-channel rings on the physical model.

What NCCL does (``src/graph/search.cc``, ``connect.cc``, ``enqueue.cc``), and how it is
reproduced here:

* **Channels.**  NCCL searches *channels*: each one a ring through every GPU that reserves a
  per-channel bandwidth on every link it crosses (``ncclTopoFollowPath`` subtracts it), and it
  keeps the set with the most total bandwidth.  On an NVLink mesh that is as many
  link-disjoint rings as the graph has: each ring takes one NVLink lane out of and into every
  GPU, so a DGX-1 (6 lanes per GPU, some pairs doubled) carries 6 rings and an MI250 box 6 of
  its 7 xGMI lanes.  :func:`intra_rings` finds them: undirected Hamiltonian cycles of the
  residual lane graph first (each gives a ring and its reverse), then directed ones, with a
  few seeded restarts, keeping the largest set.  Behind an NVSwitch every order is a ring and
  all channels use the same one (NCCL's ``sameChannels``), sharing the ports in time.
* **Across nodes** every channel's ring enters a node from the network at one GPU and leaves
  it from another (``NET n -> GPU a -> .. -> GPU x -> NET m``), and the rings of successive
  channels start on successive NICs, so with one NIC per GPU (rail-optimized DGX-A100/H100)
  channel c crosses from node i to node i+1 on rail ``c+i+1``: every rail carries one channel
  per direction.  A node with fewer NICs than channels (NDv2: one NIC) sends from its last GPU
  through the NIC's GPU (NCCL's PXN relay; store-and-forward here).
* **Data split.**  Channel c moves the c-th share of every block: the schedule is the
  collective refined to ``C`` chunks per NPU (times the user's chunks), and ring all-gather,
  reduce-scatter and all-reduce run per channel exactly as in
  :mod:`tacos.solvers.baselines.algos`; broadcast and reduce are pipelined chains from the
  root along each ring in ``S`` chunks (NCCL's ring broadcast/reduce).
* **Per size.**  NCCL's tuner uses fewer channels for small messages; here every channel count
  in ``{1, 2, 4, ..., C_max}`` (and every pipeline depth for rooted ops) is lowered and the
  fastest kept.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Sequence

from tacos.errors import TacosError
from tacos.model.collective import Collective
from tacos.model.schedule import Schedule
from tacos.solvers.baselines.solver import algos as algos
from tacos.solvers.lowering.hops import hamiltonian_path
from tacos.solvers.lowering.program import Msg
from tacos.solvers.nccl.lower import (
    MAX_TRANSFERS,
    GroupLowering,
    best_of_bounded,
    egress_floor,
    interleave,
    member_chunks,
    powers_of_two,
    refine,
    split,
    steps_of,
)
from tacos.solvers.nccl.system import System

MAX_CHANNELS = 16
ATTEMPTS = 12
BUDGET = 20_000
KINDS = ("allgather", "reducescatter", "allreduce", "broadcast", "reduce")


# -- ring search ------------------------------------------------------------------------------
def _lanes(system: System, members: Sequence[int]) -> tuple[dict, dict]:
    """Direct NVLink/xGMI lanes between members, and which pairs a switch joins."""
    graph = system.graph
    inside = set(members)
    lanes: dict[tuple[int, int], int] = defaultdict(int)
    switched: set[tuple[int, int]] = set()
    for u in members:
        for v, hops in graph.hops(u).items():
            if v not in inside:
                continue
            for h in hops:
                if not system.intra_hop(h):
                    continue
                if len(h.links) == 1:
                    lanes[(u, v)] += h.lanes
                else:
                    switched.add((u, v))
    return dict(lanes), switched


def _search(nodes: Sequence[int], start: int, succ, rng: random.Random, budget: int, *,
            end: int | None = None, cycle: bool = False, weight=None) -> list[int] | None:
    """A Hamiltonian path over ``nodes`` from ``start`` along ``succ(v)`` -- closing into a
    cycle when ``cycle``, ending at ``end`` when given -- by depth-first search
    (:func:`~tacos.solvers.lowering.hops.hamiltonian_path`): hops with the most spare lanes
    first (``weight(v, w)``), then Warnsdorff's rule (fewest onward options), random ties;
    None within ``budget``.

    ``succ`` and ``weight`` must not change during the search (the callers change the lanes
    left only between searches): both are read once per node and hop, not once per step.
    Searches of at least :data:`~tacos.solvers.nccl.ring_search_jit.MIN_NODES` nodes may run
    compiled, with the same answer and draws (:mod:`tacos.solvers.nccl.ring_search_jit`):
    once the kernel is loaded, or when the Python search has not ended within
    :data:`~tacos.solvers.nccl.ring_search_jit.PYTHON_STEPS` steps (it then starts again,
    compiled, from the generator's state at the start: the same search)."""
    from tacos.solvers.nccl import ring_search_jit

    if ring_search_jit.usable(nodes):
        state = rng.getstate()
        if not ring_search_jit.loaded():
            calls = [0]
            found = _search_python(nodes, start, succ, rng, min(budget,
                                                               ring_search_jit.PYTHON_STEPS),
                                   end=end, cycle=cycle, weight=weight, calls=calls)
            # options() runs once per step and once at the start: fewer calls, the search
            # ended on its own before the short budget
            if found is not None or budget <= ring_search_jit.PYTHON_STEPS \
                    or calls[0] <= ring_search_jit.PYTHON_STEPS:
                return found
            rng.setstate(state)
        got = ring_search_jit.search(nodes, start, succ, rng, budget, end=end, cycle=cycle,
                                     weight=weight)
        if got is not False:
            return got
        rng.setstate(state)
    return _search_python(nodes, start, succ, rng, budget, end=end, cycle=cycle,
                          weight=weight)


def _search_python(nodes: Sequence[int], start: int, succ, rng: random.Random, budget: int,
                   *, end: int | None = None, cycle: bool = False,
                   weight=None, calls: list[int] | None = None) -> list[int] | None:
    """:func:`_search` in Python; ``calls[0]`` counts the calls of its options step."""
    n = len(nodes)
    allowed = set(nodes)
    after: dict[int, tuple[int, ...]] = {}  # succ(v), as read once
    hops: dict[int, tuple[tuple[int, int], ...]] = {}  # (w, -weight(v, w)) of allowed w

    def onward(v: int) -> tuple[int, ...]:
        got = after.get(v)
        if got is None:
            got = after[v] = tuple(succ(v))
        return got

    def options(path: list[int], on: set[int]) -> list[int]:
        if calls is not None:
            calls[0] += 1
        v, last = path[-1], len(path) == n - 1
        nxt = hops.get(v)
        if nxt is None:
            nxt = hops[v] = tuple((w, -(weight(v, w) if weight else 0))
                                  for w in onward(v) if w in allowed)
        cand = [(w, lanes) for w, lanes in nxt
                if w not in on and (end is None or (w == end) == last)]
        if len(cand) < 2:  # nothing to order (shuffling fewer than two draws no number)
            return [w for w, _ in cand]
        rng.shuffle(cand)
        return [w for w, _ in sorted(cand, key=lambda c: (c[1], sum(
            1 for x in onward(c[0]) if x not in on)))]

    return hamiltonian_path(n, start, options,
                            lambda path: not cycle or start in onward(path[-1]), budget)


def _pairs(order: Sequence[int]) -> list[tuple[int, int]]:
    return [(order[i], order[(i + 1) % len(order)]) for i in range(len(order))]


def intra_rings(system: System, members: Sequence[int], *, seed: int = 0,
                limit: int = MAX_CHANNELS) -> list[list[int]]:
    """Lane-disjoint directed rings over ``members`` (see module doc), at most ``limit``.

    The search is deterministic for its arguments, and the channel count and every ring
    setting ask for the same rings: it runs once per ``system`` (a fresh copy is returned)."""
    cache = system.__dict__.setdefault("_intra_rings", {})
    key = (tuple(sorted(members)), seed, limit)
    if key not in cache:
        cache[key] = _intra_rings(system, members, seed=seed, limit=limit)
    return [list(r) for r in cache[key]]


def _intra_rings(system: System, members: Sequence[int], *, seed: int = 0,
                 limit: int = MAX_CHANNELS) -> list[list[int]]:
    """:func:`intra_rings`, searched."""
    members = sorted(members)
    if len(members) <= 2:
        return [members]
    lanes, switched = _lanes(system, members)
    if not lanes:
        return [members]  # behind a switch: every order is a ring, channels share it
    from tacos.solvers.nccl.search_cache import remembered_rings

    inputs = {"members": members, "lanes": sorted([u, w, c] for (u, w), c in lanes.items()),
              "switched": sorted([u, w] for u, w in switched), "seed": seed, "limit": limit,
              "attempts": ATTEMPTS, "budget": BUDGET}
    return remembered_rings(inputs, members,
                            lambda: _searched(members, lanes, switched, seed=seed, limit=limit))


def _searched(members: list[int], lanes: dict[tuple[int, int], int],
              switched: set[tuple[int, int]], *, seed: int, limit: int) -> list[list[int]]:
    """:func:`_intra_rings` over the direct ``lanes`` between ``members`` (sorted, more than
    two), by search."""
    out_lanes: dict[int, int] = defaultdict(int)  # lanes out of and into each member,
    in_lanes: dict[int, int] = defaultdict(int)  # summed in one pass over the lanes
    for (u, w), c in lanes.items():
        out_lanes[u] += c
        in_lanes[w] += c
    cap = min(min(out_lanes[v], in_lanes[v]) for v in members)
    best: list[list[int]] = []
    peers: dict[int, list[int]] = defaultdict(list)  # lane neighbours, in member order
    for u, w in sorted(lanes):
        peers[u].append(w)
    for attempt in range(ATTEMPTS):
        rng = random.Random(seed * 7919 + attempt)
        left = dict(lanes)
        rings: list[list[int]] = []

        def und(v: int, left=left) -> list[int]:
            return [w for w in peers[v] if left[(v, w)] > 0 and left.get((w, v), 0) > 0]

        def directed(v: int, left=left) -> list[int]:
            return [w for w in peers[v] if left[(v, w)] > 0]

        for succ, both in ((und, True), (directed, False)):
            while len(rings) < min(cap, limit):
                cyc = _search(members, members[0], succ, rng, BUDGET, cycle=True,
                              weight=lambda v, w, left=left: left.get((v, w), 0))
                if cyc is None:
                    break
                for a, b in _pairs(cyc):
                    left[(a, b)] -= 1
                    if both:
                        left[(b, a)] -= 1
                rings.append(cyc)
                if both and len(rings) < limit:
                    rings.append([cyc[0]] + cyc[1:][::-1])
        if len(rings) > len(best):
            best = rings
        if len(best) >= min(cap, limit):
            break
    if not best:
        if switched:
            return [members]
        raise TacosError(f"NCCL's ring search found no ring through every NPU of the group "
                         f"within {BUDGET:,} steps per try",
                         hint="the NCCL ring baseline needs a Hamiltonian cycle of hops; like "
                              "NCCL's own search, this one gives up after a bounded number of "
                              "steps, so a ring may exist that it did not find")
    return best[:limit]


def _path(node: Sequence[int], entry: int, exit_: int | None,
          left: dict[tuple[int, int], int], switched: set, rng: random.Random) -> list[int]:
    """An order of ``node`` from ``entry`` (ending at ``exit_`` when given) along residual
    lanes or switch hops; the lanes it uses are taken from ``left``.  Falls back to id order
    (the lowering routes sends between non-adjacent NPUs) when none is found."""
    end = exit_ if exit_ not in (None, entry) else None
    plain = [entry] + sorted(v for v in node if v not in (entry, end)) + \
        ([end] if end is not None else [])
    if len(node) <= 2:
        return plain

    def succ(v: int) -> list[int]:
        return [w for w in node if left.get((v, w), 0) > 0 or (v, w) in switched]

    def shared(v: int) -> list[int]:  # lanes run out: channels share them (half the speed)
        return [w for w in node if (v, w) in lanes or (v, w) in switched]

    lanes = set(left)
    found = _search(node, entry, succ, rng, BUDGET, end=end) or \
        _search(node, entry, shared, rng, BUDGET, end=end)
    if found is None:
        return plain
    for a, b in zip(found, found[1:], strict=False):
        if left.get((a, b), 0) > 0:
            left[(a, b)] -= 1
    return found


def channel_rings(system: System, channels: int, *, seed: int = 0) -> list[list[int]]:
    """The member orders of ``channels`` NCCL channels (see module doc)."""
    if not system.multi_node:
        found = intra_rings(system, system.nodes[0], seed=seed)
        return [found[c % len(found)] for c in range(channels)]
    nodes, nics = system.nodes, system.nics
    m = len(nodes)
    rng = random.Random(seed)
    lefts = []
    for node in nodes:
        lanes, switched = _lanes(system, node)
        lefts.append((dict(lanes), switched))
    rings = []
    for c in range(channels):
        entries = []
        for i in range(m):
            r = len(nics[i])
            entries.append(nics[i][(c + i) % r] if r else nodes[i][0])
        order: list[int] = []
        for i, node in enumerate(nodes):
            nxt = (i + 1) % m
            r = len(nics[i])
            # leave through the NIC on the rail the next node is entered on, when this node
            # has it and it is not where the ring came in
            rail = nics[nxt].index(entries[nxt]) if entries[nxt] in nics[nxt] else 0
            exit_ = nics[i][rail] if r > rail else None
            if exit_ == entries[i]:
                exit_ = None
            left, switched = lefts[i]
            order += _path(node, entries[i], exit_, left, switched, rng)
        rings.append(order)
    return rings


def max_channels(system: System) -> int:
    """Most channels worth building: the rings an NVLink node holds, or the rails (one channel
    per NIC) across nodes, at most :data:`MAX_CHANNELS`."""
    if system.multi_node:
        per_node = max(1, system.rails)
        inner = min(len(intra_rings(system, n)) if len(n) > 2 else 1 for n in system.nodes)
        return max(1, min(MAX_CHANNELS, max(per_node, min(inner, 2 * per_node))))
    return max(1, min(MAX_CHANNELS, len(intra_rings(system, system.nodes[0]))))


# -- programs ---------------------------------------------------------------------------------
def ring_program(kind: str, rings: list[list[int]], coll: Collective, slices: int = 1
                 ) -> list[Msg]:
    """Per-channel ring programs over the refined collective ``coll`` (``len(rings)`` channel
    shares, ``slices`` pipelined pieces per share for broadcast/reduce), interleaved."""
    channels = len(rings)
    own = member_chunks(coll)
    programs = []
    for c, ring in enumerate(rings):
        n = len(ring)
        if kind in ("broadcast", "reduce"):
            ids = split(own[coll.root], channels)[c]
            prog = algos.ring_rooted(ring, coll.root, ids, reduce=kind == "reduce")
            programs.append(steps_of(prog, max(1, len(ids))))
            continue
        blocks = {m: split(ids, channels)[c] for m, ids in own.items()}
        prog = []
        if kind in ("reducescatter", "allreduce"):
            prog += algos.ring_reducescatter(ring, blocks)
        if kind in ("allgather", "allreduce"):
            prog += algos.ring_allgather(ring, blocks)
        programs.append(steps_of(prog, n))
    return interleave(programs)


def ring_schedule(system: System, collective: Collective, channels: int, slices: int = 1,
                  *, seed: int = 0) -> Schedule:
    """The NCCL ring schedule with ``channels`` channels (``slices`` pipeline pieces per
    channel for broadcast/reduce) on the refined collective."""
    kind = collective.kind
    if kind not in KINDS:
        raise TacosError(f"NCCL's ring does not run {kind}",
                         hint=f"it runs {', '.join(KINDS)}; all-to-all is point-to-point")
    coll = refine(collective, channels * slices)
    rings = channel_rings(system, channels, seed=seed)
    lowering = GroupLowering(system.topology, coll, system.graph)
    lowering.run(ring_program(kind, rings, coll, slices))
    return lowering.schedule({"algorithm": "NCCL ring", "channels": channels,
                              "slices": slices, "rings": [list(r) for r in rings[:4]]})


def ring_floor(system: System, collective: Collective, channels: int, slices: int = 1,
               *, seed: int = 0) -> float:
    """A lower bound on ``ring_schedule(system, collective, channels, slices).makespan``
    (:func:`~tacos.solvers.nccl.lower.egress_floor` of its program): with one channel on a
    torus every rank sends all it forwards down one link."""
    if collective.kind not in KINDS:
        return 0.0
    coll = refine(collective, channels * slices)
    rings = channel_rings(system, channels, seed=seed)
    return egress_floor(system.graph, system.topology, coll,
                        ring_program(collective.kind, rings, coll, slices))


def nccl_ring(system: System, collective: Collective, *, seed: int = 0,
              channels: int | None = None) -> Schedule:
    """NCCL's ring for ``collective``, at the channel count (and pipeline depth) the model
    finds fastest for its size (see module doc)."""
    kind = collective.kind
    cmax = channels or max_channels(system)
    cands = [channels] if channels else powers_of_two(cmax)
    n = len(system.group)
    settings = []
    for c in cands:
        if kind in ("broadcast", "reduce"):
            per = max(1, collective.chunks_per_npu)
            cap = max(1, MAX_TRANSFERS // max(1, n * c * per))
            settings += [{"channels": c, "slices": s} for s in powers_of_two(min(64, cap))]
        else:
            settings.append({"channels": c, "slices": 1})
    best = best_of_bounded(settings, lambda s: ring_schedule(system, collective, s["channels"],
                                                             s["slices"], seed=seed),
                           lambda s: ring_floor(system, collective, s["channels"], s["slices"],
                                                seed=seed))
    best.schedule.meta["tuned"] = best.setting
    return best.schedule
