"""The cost models by name, and :func:`estimate`: a model's time for a collective on process
group(s) of a topology.

=================  ===============================================================  ========
model              algorithm                                                        baseline
=================  ===============================================================  ========
ring               unidirectional ring (pipelined chain for rooted collectives)     ring
biring             bidirectional ring                                               biring
direct             every NPU to every NPU at once                                   direct
halving-doubling   recursive halving/doubling, binomial trees, Bruck all-to-all      rhd
tree               NCCL's double binary tree, pipelined per chunk                   dbtree
hierarchical       per-dimension stages of a multi-dimensional topology (seed 000)  hierarchical
nccl               NCCL-style: multi-channel rings (one per rail), tree all-reduce,  (own)
                   point-to-point all-to-all/scatter/gather
axonn              AxoNN's equations (1)-(3) with equation (10)'s bandwidths         ring
=================  ===============================================================  ========

Every model but ``axonn`` is *placement-aware on the physical model*: its sends are routed on
the topology's links and switch ports, and every link shared by concurrent sends (of the same
group or of the other ``groups`` running at once) serializes them (:mod:`tacos.cost.steps`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from tacos.cost import programs
from tacos.cost.hierarchical import hierarchical, sub_grid, whole_grid
from tacos.cost.paths import Router
from tacos.cost.steps import Plan, Step, evaluate, merge
from tacos.errors import TacosError
from tacos.model.collective import ROOTED_COLLECTIVES, STANDARD_COLLECTIVES
from tacos.model.topology import Topology
from tacos.solvers.lowering.hops import ring_order

MODELS = ("ring", "biring", "direct", "halving-doubling", "tree", "hierarchical", "nccl",
          "axonn")
ALIASES = {"rhd": "halving-doubling", "hd": "halving-doubling", "dbtree": "tree",
           "hier": "hierarchical"}
#: model -> the baseline solver whose schedule it predicts
BASELINE = {"ring": "ring", "biring": "biring", "direct": "direct", "halving-doubling": "rhd",
            "tree": "dbtree", "hierarchical": "hierarchical", "axonn": "nccl", "nccl": "nccl"}

FORMULAS: dict[str, dict[str, str]] = {
    "ring": {"allgather": "(N-1)(α + M/(Nβ))", "reducescatter": "(N-1)(α + M/(Nβ))",
             "allreduce": "2(N-1)(α + M/(Nβ))", "broadcast": "(N-2+k)(α + M/(kβ))",
             "reduce": "(N-2+k)(α + M/(kβ))", "scatter": "(N-1)(α + M/(Nβ))",
             "gather": "(N-1)(α + M/(Nβ))", "alltoall": "(N-1)α + (N-1)M/(2β)"},
    "biring": {"allgather": "⌊N/2⌋(α + M/(Nβ))", "reducescatter": "⌊N/2⌋(α + M/(Nβ))",
               "allreduce": "2⌊N/2⌋(α + M/(Nβ))", "broadcast": "(⌊N/2⌋-1+k)(α + M/(kβ))",
               "reduce": "(⌊N/2⌋-1+k)(α + M/(kβ))"},
    "direct": {"allgather": "α + M/(Nβ)", "reducescatter": "α + M/(Nβ)",
               "allreduce": "2(α + M/(Nβ))", "broadcast": "α + M/β", "reduce": "α + M/β",
               "scatter": "α + M/(Nβ)", "gather": "α + M/(Nβ)", "alltoall": "α + M/(Nβ)"},
    "halving-doubling": {"allgather": "log₂N·α + (N-1)M/(Nβ)",
                         "reducescatter": "log₂N·α + (N-1)M/(Nβ)",
                         "allreduce": "2log₂N·α + 2(N-1)M/(Nβ)",
                         "broadcast": "⌈log₂N⌉(α + M/β)", "reduce": "⌈log₂N⌉(α + M/β)",
                         "scatter": "⌈log₂N⌉α + (N-1)M/(Nβ)",
                         "gather": "⌈log₂N⌉α + (N-1)M/(Nβ)",
                         "alltoall": "⌈log₂N⌉(α + M/(2β))"},
    "tree": {"allreduce": "(2D + ⌈Nk/2⌉ - 1)(α + M/(Nkβ))",
             "broadcast": "(D + ⌈k/2⌉ - 1)(α + M/(kβ))",
             "reduce": "(D + ⌈k/2⌉ - 1)(α + M/(kβ))",
             "allgather": "(D + L - 1)(α + M/(Nkβ)), L = blocks on the busiest tree edge",
             "reducescatter": "(D + L - 1)(α + M/(Nkβ)), L = blocks on the busiest tree edge",
             "scatter": "(D + L - 1)(α + M/(Nβ))", "gather": "(D + L - 1)(α + M/(Nβ))",
             "alltoall": "(D + L - 1)(α + M/(Nβ))"},
    "hierarchical": {kind: "Σ_d stage_d(P_d, M_d): ring / direct / halving-doubling per "
                     "dimension kind" for kind in STANDARD_COLLECTIVES},
    "axonn": {"allgather": "(G-1)·m/β  (eq. 1)", "reducescatter": "(G-1)/G·m/β  (eq. 2)",
              "allreduce": "2(G-1)/G·m/β  (eq. 3)"},
}


@dataclass(frozen=True)
class Estimate:
    """A model's prediction for one collective.

    ``time`` in seconds (None when the model has no form for this case, ``reason`` says why);
    ``alpha``/``beta`` are the effective latency and bandwidth of the bottleneck transfer;
    ``plan`` holds the routed steps (None for ``axonn``).
    """

    model: str
    kind: str
    size: int
    n: int
    groups: int
    time: float | None
    alpha: float = 0.0
    beta: float = math.inf
    formula: str = ""
    plan: Plan | None = None
    notes: tuple[str, ...] = field(default=())
    reason: str = ""


def canonical(name: str) -> str:
    """The model's canonical name (aliases resolved); unknown names raise with a hint."""
    key = ALIASES.get(name, name)
    if key not in MODELS:
        import difflib

        close = difflib.get_close_matches(name, list(MODELS) + list(ALIASES), n=1)
        raise TacosError(f"unknown cost model {name!r}",
                         hint=f"did you mean '{close[0]}'?" if close else
                         f"use one of {', '.join(MODELS)}")
    return key


class Context:
    """A topology with its router and cached ring orders (shared by many estimates)."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self.router = Router(topology)
        self._orders: dict[tuple, list[int]] = {}
        self._plans: dict[tuple, Plan] = {}
        self._grid = None

    @property
    def graph(self):
        """The NPU-level hop view (relays through any NPU)."""
        return self.router.graph()

    def order(self, members: Sequence[int], how: str,
              relays: frozenset[int] | None = None) -> list[int]:
        """Members in the order an algorithm visits them (like the matching baseline)."""
        if how == "sorted":
            return sorted(members)
        if how == "given":
            return list(members)
        key = (tuple(sorted(members)), relays)
        hit = self._orders.get(key)
        if hit is None:
            hit = ring_order(self.router.graph(relays), list(members))[0]
            self._orders[key] = hit
        return hit

    def grid(self, members: Sequence[int], relays: frozenset[int] | None = None):
        """The hierarchical product structure of ``members`` (raises when there is none)."""
        if self._grid is None:
            self._grid = whole_grid(self.graph)
        return sub_grid(self._grid, members, lambda g: self.order(g, "ring", relays))


def relay_set(groups: Sequence[Sequence[int]], relays: str = "members"
              ) -> frozenset[int] | None:
    """The NPUs sends may relay through: every group's members (``'members'``, what the
    baselines do by default) or any NPU (``'all'``, None)."""
    if relays not in ("members", "all"):
        raise TacosError(f"relays must be 'members' or 'all', not {relays!r}")
    return None if relays == "all" else frozenset(v for g in groups for v in g)


def check_size(size: float, chunks: int = 1) -> None:
    """Raise a :class:`TacosError` unless ``size`` is a finite size in range (docs/tdl.md,
    "Numbers and limits") and ``chunks`` a whole number of at least 1."""
    from tacos.limits import require_number

    require_number("size", size, "cost estimate: ")
    if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1:
        raise TacosError(f"cost estimate: chunks must be a whole number >= 1, not {chunks!r}")


def check_request(topology: Topology, kind: str, groups: Sequence[Sequence[int]],
                  root: int | None) -> None:
    """Raise a :class:`TacosError` for an unknown collective, bad groups or a bad root."""
    if kind not in STANDARD_COLLECTIVES:
        import difflib

        close = difflib.get_close_matches(kind, STANDARD_COLLECTIVES, n=1)
        raise TacosError(f"unknown collective {kind!r}",
                         hint=f"did you mean '{close[0]}'?" if close else
                         f"use one of {', '.join(STANDARD_COLLECTIVES)}")
    if not groups or any(len(g) < 1 for g in groups):
        raise TacosError("a cost estimate needs at least one non-empty process group")
    live = set(topology.live_npus)
    seen: set[int] = set()
    for g in groups:
        for v in g:
            if v not in live:
                raise TacosError(f"NPU {v} is not a live NPU of the topology",
                                 hint=f"NPU ids run from 0 to {topology.n_npus - 1}")
            if v in seen:
                raise TacosError(f"NPU {topology.node_name(v)} is in two concurrent groups",
                                 hint="concurrent process groups must not overlap")
            seen.add(v)
    if len({len(g) for g in groups}) != 1:
        raise TacosError("concurrent process groups must have the same size")
    if kind in ROOTED_COLLECTIVES:
        if root is None:
            raise TacosError(f"{kind} needs a root")
        if root not in groups[0]:
            raise TacosError(f"root {root} is not in the (first) process group")


def roots_of(groups: Sequence[Sequence[int]], root: int | None) -> list[int | None]:
    """The root of every concurrent group: the member at ``root``'s position in the first."""
    if root is None:
        return [None] * len(groups)
    i = list(groups[0]).index(root)
    return [list(g)[i] for g in groups]


def _steps(ctx: Context, model: str, kind: str, groups: Sequence[Sequence[int]],
           root: int | None, k: int, allowed: frozenset[int] | None) -> list[Step]:
    roots = roots_of(groups, root)
    if model == "hierarchical":
        return merge([hierarchical(ctx.grid(g, allowed), kind, root=r, k=k)
                      for g, r in zip(groups, roots, strict=True)])
    build, how = programs.ALGORITHMS[model]
    return merge([build(ctx.order(g, how, allowed), kind, root=r, k=k)
                  for g, r in zip(groups, roots, strict=True)])


def plan(ctx: Context, model: str, kind: str, groups: Sequence[Sequence[int]], *,
         root: int | None = None, chunks: int = 1, relays: str = "members") -> Plan:
    """The routed :class:`~tacos.cost.steps.Plan` of a step-program model (cached)."""
    key = (model, kind, tuple(tuple(g) for g in groups), root, chunks, relays)
    hit = ctx._plans.get(key)
    if hit is None:
        allowed = relay_set(groups, relays)
        steps = _steps(ctx, model, kind, groups, root, chunks, allowed)
        hit = Plan(model, kind, len(groups[0]), evaluate(ctx.router, steps, allowed),
                   FORMULAS.get(model, {}).get(kind, ""))
        ctx._plans[key] = hit
    return hit
