"""``forest``: throughput-optimal synthesis by spanning-tree packing (ForestColl's method).

For all-gather, reduce-scatter, all-reduce, broadcast and reduce on any topology (switches and
process groups included):

1. **Rate** (:mod:`~tacos.solvers.forest.rate`): the min-cut optimum x* as an exact rational and
   integer capacities for k trees per root: the exact (U, k), or a fixed k (option ``trees``).
2. **Switches** (:mod:`~tacos.solvers.forest.split`): edge splitting removes switches (and NPUs
   outside the group) without losing rate; every split arc remembers its physical path.
3. **Packing** (:mod:`~tacos.solvers.forest.pack`): k capacity-respecting out-arborescences
   per root (Edmonds/Lovász), checked against the capacities; behind scarce cuts (islands) a
   tree enters each island once and spreads inside it first.  Where the grid's translations are
   verified automorphisms (tori, rings), one root's shortest-path trees are translated to every
   root instead (:mod:`~tacos.solvers.forest.symmetric`), without max-flow tests.
4. **Pipelining** (:mod:`~tacos.solvers.forest.pipeline`): chunks of every root are spread over
   its trees and sent in s rounds; s from α and β (formula in that module), then s is doubled or
   halved while the list schedule's makespan improves, with and without merging a round's slices
   on a route into one transfer and with tapered rounds (:func:`taper`; at most 16 schedules
   per packing and :data:`SOLVE_TRANSFERS` transfers per solve are timed; for all-reduce only
   its last phase, on its own chunks).

   Where trees reach a switch's NPUs as stars, the same packing is also rebuilt with Bruck
   (binomial) spreading through the switch (:mod:`~tacos.solvers.forest.shared`): the trees of
   all roots then use the same hops at each step, and slices of one step and hop travel as one
   transfer (``batch='steps'``, :data:`STEP_MODES`); both versions are timed.  On two switch
   islands joined by rails with k = 2, two trees per root built for that layout
   (:mod:`~tacos.solvers.forest.rails`) are timed as well.  On three or more such islands
   joined by one rail switch per GPU position, trees that merge roots' slices on the rails
   (:mod:`~tacos.solvers.forest.nic`: a root crosses on the rail of a GPU its own spreading
   reaches, so each NIC serves few other nodes and sends one transfer per node and round) are
   timed as well (option ``nic``).

   On small switch-free groups at the exact rate, k trees per root of bounded depth from a
   constraint program over the topology's automorphism orbits
   (:mod:`~tacos.solvers.forest.shallow`) are timed as well (option ``shallow``), and so are
   k trees per root whose edges a time-indexed program assigns to steps, one tree edge per link
   lane and step (:mod:`~tacos.solvers.forest.timed`, option ``timed``).

   On uniform tori and rings, the dimension-ordered trees of the multi-port bucket all-gather
   (:mod:`~tacos.solvers.forest.torus`: 2d trees per root, every part of a root's data visits
   the dimensions in its own cyclic order, one step-merged transfer per link and step; the
   min-cut optimum on cubic tori) are timed as well (option ``dims``).

5. **In-switch trees** (:mod:`~tacos.solvers.forest.in_switch`): for all-reduce over a group
   attached to one switch that declares ``multicast`` and ``reduce`` (NVLS), the star tree
   through the switch is one in-switch reduction into a root and one multicast out of it; that
   pipelined plan (every byte once up and once down each port) is also built and kept when it is
   faster (``meta['forest']['in_switch']`` has its time and the in-switch optimum).

Reductions use reversed trees: reduce-scatter and reduce pack trees on the reversed topology and
the dual (copy) schedule is inverted in time and direction (:mod:`tacos.passes.inversion`);
all-reduce is reduce-scatter then all-gather.  The schedule's collective is the user's refined to
``q·K·s`` chunks per NPU (q the user's, K the lcm of the phases' k); ``meta['pipeline']`` says so,
and the MSCCL back end lowers one round (:func:`~tacos.solvers.forest.pipeline.first_round`).

Options: ``trees`` (``"auto"``: the exact k when small, and also 1 and 2 trees per root, with
and without island order up to 32 NPUs, keeping the fastest schedule; ``"exact"``; or a fixed
k), ``slices`` (``"auto"`` or s), ``shallow`` (also time the depth-bounded packing, default
true), ``timed`` (also time the step-timed packing, default true), ``share`` (also time the
Bruck-spread trees, default true), ``nic`` (also time the NIC-merged trees on three or more
rail-joined islands, default true), ``dims`` (also time the dimension-ordered trees of tori,
default true),
``max_transfers`` (bound on the schedule size used to cap
s, default 300000), ``in_switch``
(all-reduce: also try the in-switch star, default true; off gives a plan without transfer groups,
which MSCCL XML can express), ``packing`` (``"auto"``: symmetric when verified, else Lovász;
``"general"``: always Lovász).
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from fractions import Fraction
from typing import Any

from tacos.check.simulate import simulate
from tacos.errors import UsageError
from tacos.model import patterns
from tacos.model.collective import Collective
from tacos.model.columns import TransferColumns
from tacos.model.schedule import Schedule, Transfer
from tacos.model.topology import Topology
from tacos.passes.inversion import assemble, plan_inversion
from tacos.solvers.forest.bound import cannot_win, load_bound, rate_floor
from tacos.solvers.forest.candidates import ONCE, PER_PACKING, Context, named_candidates
from tacos.solvers.forest.in_switch import in_switch_allreduce, star_optimum
from tacos.solvers.forest.memo import shape_caches
from tacos.solvers.forest.pack import Tree, check_packing, pack_cached
from tacos.solvers.forest.packing import Forest, group_topology
from tacos.solvers.forest.pipeline import emit, localize, slice_count
from tacos.solvers.forest.rate import choose_rate, link_capacities
from tacos.solvers.forest.split import split_switches
from tacos.solvers.forest.symmetric import find_symmetry, pack_symmetric
from tacos.solvers.forest.view import RouteView
from tacos.solvers.islands import find_islands
from tacos.solvers.options import Option, boolean, int_or_text
from tacos.solvers.registry import Capabilities, Problem, SolverBase, SolveResult

PHASES: dict[str, tuple[tuple[str, bool, str], ...]] = {
    "allgather": (("copy", False, "group"),),
    "broadcast": (("copy", False, "root"),),
    "reducescatter": (("reduce", True, "group"),),
    "reduce": (("reduce", True, "root"),),
    "allreduce": (("reduce", True, "group"), ("copy", False, "group")),
}
MAX_TRANSFERS = 300_000
MAX_TREES = 64
"""Most trees per root ``trees=K`` may ask for (its documented range is 1 to this)."""
MAX_SLICES = 100_000
"""Most slices per chunk ``slices=N`` may ask for."""
MAX_TREE_CHANNELS = 8
TB_BUDGET = 64
INTERLEAVE_MAX = 128
"""Largest group whose trees grow together (larger ones grow one by one, see pack_trees)."""
MAX_SLICE_TRIALS = 16
BOTH_ORDERS_MAX = 32
"""Largest group packed both with and without island order (larger ones: with it only)."""
SCREEN_TRIALS = 6
"""Schedules timed per tree count before the best tree count gets the full search."""
SOLVE_TRANSFERS = 200_000
"""Transfers timed in all by one solve (screening and search): list-scheduling costs about
40 µs per transfer, so this keeps the pipeline search of a 64-NPU system to a few seconds.
Every tree count still gets one schedule, and the best one at least one more."""
PHASE_ALONE = True
"""The slice search times all-reduce's last phase as its own schedule (the same makespan and
transfers as assembling it behind an empty first phase, without the copy); off: assembled."""
FALLBACK_ONCE = True
"""A fallback integer program (a candidate ``instead_of`` another, the depth-bounded trees) is
not built for any tree count once the program it stands in for built trees for one (2x MI250:
the step-timed trees at k = 2 spare the depth-bounded program at k = 1, 6-7 s of CP-SAT whose
trees lost, 255.5 µs against 232.8 µs at 64 MiB); off: each tree count asks its own fallback."""
MODES: tuple[tuple[bool | str, int], ...] = tuple(
    (batch, depth) for depth in (2, 0, 4) for batch in (False, True))
"""(merge a round's slices on a route, taper depth) pairs the slice search tries."""
STEP_MODES: tuple[tuple[bool | str, int], ...] = (
    ("steps", -2), ("steps", -4), ("steps", 0), ("steps", -1), (True, -2), ("steps", -5),
    ("steps", 2), ("steps", -3))
"""The same for trees that share switch hops (:mod:`~tacos.solvers.forest.shared`): their
slices merge by step (``batch='steps'``); a negative taper depth only ramps down at the end."""
TIMED_MODES: tuple[tuple[bool | str, int | tuple[int, int]], ...] = (
    (False, -1), (False, (3, 1)), (False, -3), (False, -4), (False, 0), (False, -2))
"""The same for the step-timed trees (:mod:`~tacos.solvers.forest.timed`): their transfers go
in the program's step order and only the end is tapered, by halving or (depth (3, 1)) with one
last round of a third of a middle round's slices (1x MI250: 3, 1 at 64 MiB; 16, 16, 8, 4, 2,
1 at 1 GiB)."""
DIM_MODES: tuple[tuple[bool | str, int], ...] = (("steps", 0), ("steps", -2))
"""The same for the dimension-ordered trees of tori (:mod:`~tacos.solvers.forest.torus`),
after one round of step-merged transfers (every link busy from the start; one round won on
every torus measured at 64 MiB and 1 GiB, so only two slicings are timed besides it)."""


def plan_forest(topology: Topology, group: tuple[int, ...], roots: tuple[int, ...],
                phase: str, reverse: bool, trees: int | str = "auto",
                relays: str = "members", islands: bool = True,
                symmetric: bool = True, packs: dict | None = None) -> Forest:
    """Rate, switch splitting and tree packing for one phase.  NPUs outside ``group`` are left
    out unless ``relays='all'``; then they are relays, split off like switches.  ``islands``
    lets trees enter each island (:func:`~tacos.solvers.islands.find_islands`) once and spread
    inside it (:func:`~tacos.solvers.forest.pack.pack_trees`).  With ``symmetric``, a topology
    whose translations are verified automorphisms gets one root's trees translated to every
    root (:mod:`~tacos.solvers.forest.symmetric`) instead.  ``packs`` keeps the switch
    splittings and the Lovász packings by their exact inputs
    (:func:`~tacos.solvers.forest.pack.pack_cached`): a
    reduction phase whose reversed topology has the same capacities, in the same order, as the
    copy phase's gets the same trees without packing them again."""
    clock = time.perf_counter()
    topo = topology if relays == "all" else group_topology(topology, group)
    if reverse:
        topo = topo.reversed()
    graph = link_capacities(topo, group, roots)
    rate = choose_rate(topo, graph, trees)
    t_rate = time.perf_counter()
    key = ("split", graph.n_nodes, group, graph.sources, tuple(rate.caps.items()), rate.k)
    split = packs.get(key) if packs is not None else None
    if split is None:  # (the same inputs, in the same order: the same split graph)
        split = split_switches(graph.n_nodes, group, graph.sources, rate.caps, rate.k)
        if packs is not None:
            packs[key] = split
    t_split = time.perf_counter()
    packed, tests, how = None, 0, "lovasz"
    if symmetric and set(graph.sources) == set(group):
        sym = find_symmetry(topo, group, split, graph.n_nodes)
        packed = pack_symmetric(sym, split.caps, rate.k) if sym is not None else None
        how = "symmetric"
    if packed is None:
        how = "lovasz"
        found = find_islands(topo, group) if islands and len(group) <= INTERLEAVE_MAX else []
        packed, tests = pack_cached(packs, group, graph.sources, split, rate.k,
                                    interleave=len(group) <= INTERLEAVE_MAX, islands=found)
    check_packing(group, graph.sources, packed, rate.k, rate.caps)
    t_pack = time.perf_counter()
    return Forest(phase, reverse, graph.sources, rate, graph.unit, split, packed, tests,
                  {"rate": t_rate - clock, "split": t_split - t_rate, "pack": t_pack - t_split},
                  how)


def _signature(forests: list[Forest]) -> tuple:
    """What the schedules of a packing depend on: every tree's root, share of its root's data,
    edges and physical paths."""
    return tuple((t.root, Fraction(t.mult, f.rate.k), tuple(t.edges), tuple(t.paths),
                  tuple(t.steps or ())) for f in forests for t in f.trees)


def _is_shared(forests: list[Forest]) -> bool:
    """Whether the trees share switch hops across roots (step labels, §3b of docs/forest.md)."""
    return any(t.steps for f in forests for t in f.trees)


def _check_collective(coll: Collective) -> None:
    if coll.kind not in PHASES:
        raise UsageError(f"solver 'forest' does not handle {coll.label()}",
                         hint="it synthesizes allgather, reducescatter, allreduce, broadcast "
                              "and reduce; use greedy for the others")
    std = patterns.build(coll.kind, coll.group, size=coll.size,
                         chunks_per_npu=coll.chunks_per_npu, root=coll.root)
    if [(c.pre, c.post, c.reduce) for c in std.chunks] != [
            (c.pre, c.post, c.reduce) for c in coll.chunks]:
        raise UsageError(f"solver 'forest' needs the standard layout of {coll.kind}",
                         hint="declare the collective with its standard name (no custom chunks)")


def taper(rounds: int, depth: int) -> list[int]:
    """Slices per round: ``depth`` rounds doubling 1, 2, 4 … up to 2^depth, ``rounds`` rounds of
    2^depth slices, then the same halving.  Small first and last rounds make the pipeline fill
    and drain quickly while the middle rounds pay α on large transfers.  A negative depth d
    keeps only the halving at the end (``rounds`` rounds of 2^|d| slices, then 2^(|d|-1) … 1):
    for trees whose roots' own data keeps the ports busy while the pipeline fills
    (:mod:`~tacos.solvers.forest.shared`)."""
    ramp = [1 << i for i in range(abs(depth))]
    up = ramp if depth > 0 else []
    return up + [1 << abs(depth)] * max(1, rounds) + ramp[::-1]


def slice_rounds(rounds: int, depth: int | tuple[int, int]) -> list[int]:
    """Slices per round: :func:`taper` for an integer depth; for depth (w, t), ``rounds``
    rounds of w slices and a last round of t."""
    if isinstance(depth, tuple):
        return [depth[0]] * max(1, rounds) + [depth[1]]
    return taper(rounds, depth)


def _middle(depth: int | tuple[int, int]) -> int:
    """Slices of a middle round of :func:`slice_rounds`."""
    return depth[0] if isinstance(depth, tuple) else 1 << abs(depth)


def _base_ranges(forest: Forest, base: int) -> list[tuple[int, int]]:
    """(first base chunk, count) of every tree: a root's ``base`` chunks in tree order, in
    proportion to the trees' multiplicities."""
    taken: dict[int, int] = defaultdict(int)
    out = []
    for tree in forest.trees:
        n = base * tree.mult // forest.rate.k
        out.append((taken[tree.root], n))
        taken[tree.root] += n
    return out


def channel_groups(forests: list[Forest], base: int) -> dict[str, dict[str, list[int]]]:
    """MSCCL channel group of every base chunk, per phase and root: the tree's rank among its
    root's trees, modulo as many groups as keep the thread blocks per GPU within
    :data:`TB_BUDGET` (about two per peer and channel) and at most :data:`MAX_TREE_CHANNELS`."""
    out: dict[str, dict[str, list[int]]] = {}
    for f in forests:
        arcs: set[tuple[int, int]] = set()
        for t in f.trees:  # trees share most arcs: each arc once
            arcs.update(t.edges)
        peers: dict[int, set[int]] = defaultdict(set)
        for x, y in arcs:
            peers[x].add(y)
            peers[y].add(x)
        most = max((len(p) for p in peers.values()), default=1)
        groups = max(1, min(MAX_TREE_CHANNELS, TB_BUDGET // max(1, 2 * most)))
        rank: dict[int, int] = defaultdict(int)
        per_root: dict[str, list[int]] = {}
        for tree, (first, n) in zip(f.trees, _base_ranges(f, base), strict=True):
            row = per_root.setdefault(str(tree.root), [0] * base)
            for b in range(first, first + n):
                row[b] = rank[tree.root] % groups
            rank[tree.root] += 1
        out[f.phase] = per_root
    return out


def _rounds(forest: Forest, sub: Collective, ids: tuple[int, ...], refined: Collective,
            per: int, groups: list[int], base: int) -> list[list[tuple[int, ...]]]:
    """Chunk ids (of ``sub``) each tree sends in each round: round r carries slices
    ``sum(groups[:r]) .. sum(groups[:r+1]) - 1`` of all the tree's base chunks."""
    s = sum(groups)
    slot: dict[int, dict[int, dict[int, int]]] = defaultdict(lambda: defaultdict(dict))
    for c in sub.chunks:
        (root,) = tuple(c.pre)
        i = refined.chunks[ids[c.id]].index % per
        slot[root][i // s][i % s] = c.id
    bounds = [0]
    for g in groups:
        bounds.append(bounds[-1] + g)
    out: list[list[tuple[int, ...]]] = []
    for tree, (first, n) in zip(forest.trees, _base_ranges(forest, base), strict=True):
        mine = range(first, first + n)
        mine_slots = slot[tree.root]
        out.append([tuple(sorted(mine_slots[b][j] for b in mine for j in range(lo, hi)))
                    for lo, hi in zip(bounds, bounds[1:], strict=False)] if n else [])
    return out


class ForestSolver(SolverBase):
    """Spanning-tree packing (see the module docstring)."""

    name = "forest"
    capabilities = Capabilities(combining=True, native_switches=True, refines_chunks=True)
    options = {
        "trees": Option("trees per root: 'auto' (the exact k when small, also 1 and 2, keeping "
                        "the fastest schedule), 'exact', or a fixed k",
                        int_or_text("auto", "exact"), default="auto", range=(1, MAX_TREES)),
        "slices": Option("slices per chunk: 'auto' (searched) or a number",
                         int_or_text("auto"), default="auto", range=(1, MAX_SLICES)),
        "max_transfers": Option("most transfers a schedule may have (caps the slices)", int,
                                default=MAX_TRANSFERS, range=(1, 100 * MAX_TRANSFERS)),
        "share": Option("also try the trees with their switch stars rebuilt as binomial trees "
                        "that share hops across roots (Bruck), keeping the faster",
                        boolean, (True, False), True),
        "packing": Option("'auto': one root's trees translated to every root when the "
                          "topology's translations are verified automorphisms (tori, rings), "
                          "else the Lovász packing; 'general': always the Lovász packing",
                          str, ("auto", "general"), "auto"),
        "shallow": Option("also try trees of bounded depth from an integer program (small "
                          "switch-free groups), keeping the faster", boolean, (True, False),
                          True),
        "timed": Option("also try trees whose edges a time-indexed integer program assigns to "
                        "steps, one tree edge per link lane and step (small groups of directly "
                        "linked NPUs with islands, also joined by NIC switches), keeping the "
                        "faster", boolean, (True, False), True),
        "nic": Option("also try trees that merge roots' slices on the NIC rails of three or "
                      "more switch islands (a root's data crosses on another GPU's rail, so "
                      "each NIC sends to few nodes per round), keeping the faster",
                      boolean, (True, False), True),
        "dims": Option("also try the dimension-ordered trees of tori (every part of a root's "
                       "data visits the dimensions in its own cyclic order, both directions, "
                       "one transfer per link and step), keeping the faster",
                       boolean, (True, False), True),
        "in_switch": Option("all-reduce: also try the in-switch star (reduce into one root and "
                            "multicast out of it through a switch that declares both), keeping "
                            "the faster", boolean, (True, False), True),
    }

    def accepts(self, problem: Problem) -> str | None:
        """The collectives forest synthesizes (:data:`PHASES`)."""
        if problem.collective.kind not in PHASES:
            return f"solver 'forest' does not handle {problem.collective.label()}"
        return super().accepts(problem)

    def solve(self, problem: Problem) -> SolveResult:
        """Pack, pipeline and time a schedule for ``problem``."""
        clock = time.perf_counter()
        # one phase's timed transfers, by (forest, rounds, batch, q, K): all-reduce's last
        # phase is timed once, not twice
        self._emitted: dict[tuple, tuple[Forest, list[Transfer]]] = {}
        # every forest's trees on local node ids (pipeline.localize), by the forest
        self._local: dict[int, tuple[Forest, list]] = {}
        # the refined collective and its inversion plan, by chunks per NPU (_schedule)
        self._refined: dict[int, tuple[Collective, Any]] = {}
        coll, topo, opts = problem.collective, problem.topology, problem.options
        _check_collective(coll)
        trees_opt = opts.get("trees", "auto")
        group = tuple(coll.group)
        view = RouteView(topo)
        # "auto" also tries one and two trees per root: fewer, larger trees pay α less often,
        # which can beat the exact rate's many small trees on small messages
        choices: list = ["auto", 1, 2] if trees_opt == "auto" else [trees_opt]
        if trees_opt == "auto" and 2 * len(group) * (len(group) - 1) > SOLVE_TRANSFERS // 3:
            choices = [1]  # two trees per root would not fit one slice into a screening's share
        islands = len(group) <= INTERLEAVE_MAX and bool(find_islands(topo, group))
        if islands and len(group) <= BOTH_ORDERS_MAX:
            # packings with and without island order (neither wins everywhere: 2x DGX-H100's
            # exact trees are depth 3 instead of 5 with it, 4x DGX-A100 is 0.6% slower)
            choices = [(c, order) for c in choices for order in (True, False)]
        else:
            choices = [(c, islands) for c in choices]
        found: list[tuple[Schedule, list[Forest], dict, bool]] = []
        seen: set[tuple] = set()
        spent = [0]  # transfers timed so far (SOLVE_TRANSFERS)
        # packings depend on the shape, not the size: a sweep packs once (forest/memo.py)
        relays, symmetric = opts.get("relays", "members"), opts.get("packing", "auto") == "auto"
        memo = shape_caches(topo, group, coll.kind, coll.root, (trees_opt, relays, symmetric))
        deep: dict[tuple, list[Tree] | None] = memo["deep"]  # shallow packings (_shallow)
        stepped: dict[tuple, list[Tree] | None] = memo["stepped"]  # step-timed (_timed)
        fixed = trees_opt != "auto"
        bases: list[tuple[list[Forest], bool, Context]] = []
        for choice, order in choices:
            forests = memo["plans"].get((choice, order))
            if forests is None:
                forests = memo["plans"][choice, order] = [
                    plan_forest(topo, group, group if who == "group" else (int(coll.root),),
                                phase, reverse, choice, relays, order, symmetric,
                                memo["packs"])
                    for phase, reverse, who in PHASES[coll.kind]]
            bases.append((forests, order, Context(forests, topo, group, order, fixed, stepped,
                                                  deep)))
        # one root's data in the last phase (the one the slice search times)
        data = coll.size / len(group) if len(bases[0][0][-1].roots) > 1 else coll.size
        quick = tuple(c for c in PER_PACKING if not c.costly)
        costly = tuple(c for c in PER_PACKING if c.costly)
        # where each packing stood in the table order (base, then its candidates; then ONCE):
        # equal makespans go to the earlier one, whatever order they are timed in
        slot = {c.name: i + 1 for i, c in enumerate(PER_PACKING)}
        packings: list[tuple[list[Forest], bool, tuple[int, int]]] = []
        for i, (forests, order, ctx) in enumerate(bases):  # the trees and quick rebuilds first
            packings.append((forests, order, (i, 0)))
            packings += [(built, order, (i, slot[name]))
                         for name, built in named_candidates(quick, ctx, opts)]
        if packings:  # from the first packing only (tori: the multi-port bucket all-gather)
            ctx = Context(packings[0][0], topo, group, packings[0][1], fixed, stepped, deep)
            packings += [(built, ctx.order, (len(bases), j)) for j, (_, built) in
                         enumerate(named_candidates(ONCE, ctx, opts))]
        # the integer programs last, the lowest rate floor first, each only if trees at its
        # tree count could still beat the best schedule timed by then (forest/bound.py)
        later = sorted(((i, f, o, c) for i, (f, o, c) in enumerate(bases)
                        if any(opts.get(cand.option, True) and cand.gate(c)
                               for cand in costly)),
                       key=lambda b: rate_floor(b[1][-1], data))
        total = len(packings) + len(later)
        skipped = [0]  # packings not timed: their load bound reaches the best time
        ranks: list[tuple[int, int]] = []  # table position of every entry of found

        def time_one(forests: list[Forest], order: bool, rank: tuple[int, int]) -> None:
            sig = _signature(forests)
            if sig in seen:  # another tree count packed the same trees: same schedules
                return
            seen.add(sig)
            best_now = min((f[0].makespan for f in found), default=None)
            if cannot_win(load_bound(forests[-1], data, view), best_now):
                skipped[0] += 1
                return
            # screen each tree count with a few schedules, then search the best one fully
            # (each screening gets its share of the transfer budget; the winner gets the rest)
            budget = SCREEN_TRIALS if total > 1 else MAX_SLICE_TRIALS
            share = SOLVE_TRANSFERS * (len(found) + 1) // (total + 1)
            best, tried = self._pipeline(coll, view, forests, opts, budget, spent,
                                         limit=share if total > 1 else SOLVE_TRANSFERS)
            found.append((best, forests, tried, order))
            ranks.append(rank)

        for forests, order, rank in packings:
            time_one(forests, order, rank)
        # every tree count's first program before any fallback (``instead_of``): a program
        # that built trees for one tree count spares its fallback at the others (FALLBACK_ONCE)
        built_by: dict[int, set[str]] = defaultdict(set)  # candidates that built, by base
        for cand in costly:
            for i, forests, order, ctx in later:
                floor = rate_floor(forests[-1], data)

                def worth(_: Any, floor: float = floor) -> bool:
                    return not cannot_win(floor,
                                          min((f[0].makespan for f in found), default=None))

                before = (set().union(*built_by.values()) if FALLBACK_ONCE else built_by[i])
                for name, built in named_candidates((cand,), ctx, opts, worth, before):
                    built_by[i].add(name)
                    time_one(built, order, (i, slot[name]))
        pick = min(range(len(found)), key=lambda j: (found[j][0].makespan, ranks[j]))
        best, forests, tried, _ = found[pick]
        if len(found) > 1:
            best, tried = self._pipeline(coll, view, forests, opts, MAX_SLICE_TRIALS, spent,
                                         tried, SOLVE_TRANSFERS)
        if len(forests) > 1:  # the search timed the last phase: build the whole schedule
            info = best.meta["pipeline"]
            best = self._schedule(coll, view, forests,
                                  math.lcm(*(f.rate.k for f in forests)),
                                  max(1, coll.chunks_per_npu), info["slices_per_round"],
                                  info["batched"])
        self._emitted.clear()
        self._local.clear()
        self._refined.clear()
        # the list schedule lets transfers ending within TIE of each other start together;
        # the simulator's replay in the same order starts each as early as it can
        if best.columnar:  # (the compiled list schedule's columns) as a tuple, as before
            best = Schedule(best.topology, best.collective, tuple(best.transfers), best.meta)
        best = simulate(best).schedule
        data = coll.size / len(group) if len(forests[0].roots) > 1 else coll.size
        optimal = sum(f.optimal_time(data) for f in forests)
        facts: dict[str, Any] = {}
        star = in_switch_allreduce(topo, coll) if opts.get("in_switch", True) else None
        if star is not None:
            tree = star.meta["in_switch_tree"]
            tree["makespan"] = star.makespan
            tree["optimal_time"] = star_optimum(topo, coll, tree["switch"])
            facts["in_switch"] = tree
            if star.makespan < best.makespan:
                best = star
                optimal = min(optimal, tree["optimal_time"])
        best.meta.update(
            solver=self.name, status="feasible",
            forest={"phases": [f.facts(data) for f in forests],
                    "trees": sum(len(f.trees) for f in forests),
                    "optimal_time": optimal,
                    "optimal_algbw": coll.size / optimal if optimal > 0 else None,
                    "shared": _is_shared(forests),
                    "tried": [{"k": [f.rate.k for f in fs], "islands": order,
                               "shared": _is_shared(fs), "packing": fs[0].packing,
                               "makespan": b.makespan,
                               "schedules": len(t)}
                              for b, fs, t, order in found],
                    "skipped_by_bound": skipped[0], **facts},
            synthesis_time=time.perf_counter() - clock)
        stats = {"trees": best.meta["forest"]["trees"],
                 "seconds": [dict(f.seconds) for f in forests]}
        return SolveResult("feasible", best, None, stats)

    def _pipeline(self, coll: Collective, view: RouteView, forests: list[Forest],
                  opts: dict[str, Any], budget: int, spent: list[int],
                  known: dict | None = None, limit: int = SOLVE_TRANSFERS,
                  ) -> tuple[Schedule, dict]:
        """The fastest pipelined schedule the slice search finds for these forests (timing the
        last phase only: all-reduce's phases are mirror images and share the slicing), and
        every schedule timed, by (rounds, batch, taper depth).  ``known`` holds schedules an
        earlier screening timed; ``spent[0]`` counts the transfers timed by the whole solve
        (the search stops once it reaches ``limit`` and has timed one schedule of its own)."""
        big_k = math.lcm(*(f.rate.k for f in forests))
        # time the collective's own last phase (its own chunk sizes: the list schedule is
        # sensitive to them -- an all-gather stand-in for all-reduce's phases was 7% faster
        # than the phase itself on 2x DGX-A100)
        forests = forests[-1:]
        q = max(1, coll.chunks_per_npu)
        tried: dict[tuple[int, bool, int], Schedule] = dict(known or {})
        fresh = [0]  # schedules this call timed
        auto = opts.get("slices", "auto") == "auto"

        def afford() -> bool:
            return len(tried) < budget and spent[0] < limit

        dims = forests[0].packing == "dims"
        modes = (DIM_MODES if dims else TIMED_MODES if forests[0].packing == "timed"
                 else STEP_MODES if _is_shared(forests) else MODES)
        modes = modes if auto else tuple(m for m in modes if m[1] == 0)
        caps: dict[tuple[bool, int], int] = {}

        def run(m: float, batch: bool, depth: int | tuple[int, int]) -> float:
            m = max(1, int(m))
            while m > 1 and sum(slice_rounds(m, depth)) > caps[batch, depth]:
                m //= 2
            key = (m, batch, depth)
            if key not in tried:
                tried[key] = self._schedule(coll, view, forests, big_k, q,
                                            slice_rounds(m, depth), batch)
                spent[0] += len(tried[key].transfers)
                fresh[0] += 1
            return tried[key].makespan

        if auto:  # one round first: with many roots the links are busy from the start, and a
            # large system affords one schedule only (6x6x6 torus: 99.0% at 1, 96.4% at s* = 6)
            first: bool | str = "steps" if dims else False
            caps[first, 0] = self._slices(coll, forests, view, big_k, q, opts, first)[1]
            run(1, first, 0)
        # the formula's slice count in every mode, then walk from the best modes' best count
        for batch, depth in modes:
            if fresh[0] and not afford():
                break
            s0, cap = self._slices(coll, forests, view, big_k, q, opts, batch)
            if sum(slice_rounds(1, depth)) > cap:  # even the shortest has too many transfers
                continue
            caps[batch, depth] = cap
            run(max(1, round(s0 / _middle(depth))), batch, depth)

        def best_of(mode: tuple[bool, int]) -> tuple[float, int]:
            return min((sc.makespan, key[0]) for key, sc in tried.items() if key[1:] == mode)

        for mode in sorted(caps, key=best_of) if auto else ():
            for step in (2, 0.5):  # walk by factors of 2 while it improves
                m = best_of(mode)[1]
                while afford() and 1 <= m * step and run(m * step, *mode) < run(m, *mode):
                    m = int(m * step)
        best = min(tried.values(), key=lambda sc: sc.makespan)
        return best, tried

    def _slices(self, coll: Collective, forests: list[Forest], view: RouteView, big_k: int,
                q: int, opts: dict[str, Any], batch: bool) -> tuple[int, int]:
        """The slice count s* of the formula and the largest s allowed."""
        n_edges = sum(len(t.edges) for f in forests for t in f.trees)
        per_root = coll.size / len(coll.group) if len(forests[0].roots) > 1 else coll.size
        by_size = max(1, int(per_root // (q * big_k)))  # chunks of at least one byte
        cap = max(1, min(by_size, int(opts.get("max_transfers", MAX_TRANSFERS))
                         // max(1, n_edges)))
        if opts.get("slices", "auto") != "auto":
            return max(1, min(cap, int(opts["slices"]))), cap
        if cap == 1:  # nothing to choose (and the formula walks every tree edge)
            return 1, cap
        best = 1
        for f in forests:
            nbytes = [per_root * t.mult / f.rate.k for t in f.trees]
            best = max(best, slice_count(f.trees, nbytes,
                                         lambda p, f=f: view.hop(p, f.reverse), cap, batch))
        return best, cap

    def _schedule(self, coll: Collective, view: RouteView, forests: list[Forest], big_k: int,
                  q: int, groups: list[int], batch: bool) -> Schedule:
        """The schedule of ``coll`` (refined) with rounds of ``groups`` slices."""
        s = sum(groups)
        per = q * big_k * s
        known = getattr(self, "_refined", {})  # solve()'s: by chunks per NPU (one collective)
        if per not in known:
            refined = patterns.build(coll.kind, coll.group, size=coll.size,
                                     chunks_per_npu=per, root=coll.root, name=coll.name)
            known[per] = (refined, plan_inversion(refined) if refined.combining else None)
        refined, plan = known[per]
        if plan is not None:
            parts = {"reduce": (plan.dual, plan.dual_ids), "copy": (plan.forward, plan.forward_ids)}
        else:
            plan = None
            parts = {"copy": (refined, tuple(range(refined.n_chunks)))}
        scheds: dict[str, Schedule] = {}
        cache = getattr(self, "_emitted", {})  # solve()'s cache; none when called alone
        lanes = view.topology.link_arrays.multiplicity.tolist()
        for f in forests:
            sub, ids = parts[f.phase] if plan is not None else parts["copy"]
            if sub is None:
                continue
            key = (id(f), tuple(groups), batch, q, big_k)  # the search timed it already
            hit = cache.get(key)  # the entry holds f, so no other forest can take its id
            transfers = hit[1] if hit is not None and hit[0] is f else None
            if transfers is None:
                rounds = _rounds(f, sub, ids, refined, per, groups, q * big_k)
                sizes = [c.size for c in sub.chunks]
                local = getattr(self, "_local", {}).get(id(f))  # the entry holds f (below)
                if local is None or local[0] is not f:
                    local = (f, localize(f.trees, view.topology.is_switch))
                    if hasattr(self, "_local"):
                        self._local[id(f)] = local
                transfers = emit(f.trees, rounds, sizes, lambda p, f=f: view.hop(p, f.reverse),
                                 lanes, batch=batch, is_switch=view.topology.is_switch,
                                 local=local[1], ordered=True)
                cache[key] = (f, transfers)
            scheds[f.phase if plan is not None else "copy"] = Schedule(
                view.topology, sub, transfers if isinstance(transfers, tuple | TransferColumns)
                else tuple(transfers))
        topo = view.topology
        meta = {"pipeline": {"slices": s, "rounds": len(groups), "chunks_per_npu": per,
                             "base_chunks_per_npu": q * big_k, "batched": batch,
                             "slices_per_round": list(groups),
                             "channel_groups": channel_groups(forests, q * big_k)}}
        if plan is not None and PHASE_ALONE and len(forests) < len(PHASES[coll.kind]):
            # the slice search times the last phase alone: its transfers, unshifted (assemble
            # would delay them by the absent first phase's makespan, 0), give the same
            # makespan and count, and the whole schedule is built for the plan kept
            (phase,) = (f.phase for f in forests)
            return Schedule(topo, parts[phase][0], scheds[phase].transfers, meta)
        if plan is not None:
            out = assemble(topo, refined, plan, scheds.get("reduce"), scheds.get("copy"))
            return Schedule(topo, refined, out.transfers, meta)
        return Schedule(topo, refined, scheds["copy"].transfers, meta)
