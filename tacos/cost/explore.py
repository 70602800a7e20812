"""AxoNN-style 4D configuration explorer (seed 003, §V).

Given a topology (its first ``gpus`` live NPUs are ranks 0..G-1), a network (fully-connected
layers, e.g. :func:`tacos.cost.axonn.transformer_layers`) and a collective algorithm,
:func:`explore` enumerates every grid ``(G_x, G_y, G_z, G_data)`` with product G and every
*placement* — the order in which the four axes are nested onto consecutive ranks (AxoNN fixes
X innermost, then Y, Z, data) — and ranks them by predicted communication time per batch:

* ``model``: the tacos placement-aware model (:func:`tacos.cost.estimates.estimate`): every
  collective of equations (4)-(8) on the real process groups, all groups of an axis at once,
  routed on the physical links;
* ``axonn``: the paper's equations (1)-(10) with G_node, β_intra and β_inter read off the
  topology (:func:`tacos.cost.placement.machine`), its hierarchy taken in the placement's
  nesting order;
* ``synthesized`` (the top few): every distinct collective synthesized as one multi-tenant
  problem (all groups of the axis together), verified and simulated, summed the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import permutations

from tacos.cost import axonn
from tacos.cost.compare import make_collective, simulated_time
from tacos.cost.estimates import estimate
from tacos.cost.models import Context
from tacos.cost.placement import machine
from tacos.errors import TacosError
from tacos.model.topology import Topology

AXES = axonn.AXES


@dataclass(frozen=True)
class Config:
    """A 4D grid (sizes in the order x, y, z, data) and its nesting order (innermost first)."""

    grid: tuple[int, int, int, int]
    order: tuple[str, ...]

    def label(self) -> str:
        """E.g. ``2x2x4x1``."""
        return "x".join(str(g) for g in self.grid)

    def placement(self) -> str:
        """The nesting order of the axes that have more than one GPU, e.g. ``x<y<z``."""
        size = dict(zip(AXES, self.grid, strict=True))
        used = [a for a in self.order if size[a] > 1]
        return "<".join(used) if used else "-"

    def groups(self, npus: Sequence[int]) -> dict[str, list[list[int]]]:
        """The process groups of every axis, as NPU ids."""
        size = dict(zip(AXES, self.grid, strict=True))
        stride = {}
        s = 1
        for a in self.order:
            stride[a] = s
            s *= size[a]
        out = {}
        for a in AXES:
            others = [b for b in AXES if b != a]
            groups = []
            for combo in _coords([size[b] for b in others]):
                base = sum(c * stride[b] for c, b in zip(combo, others, strict=True))
                groups.append([npus[base + i * stride[a]] for i in range(size[a])])
            out[a] = sorted(groups)
        return out


def _coords(sizes: Sequence[int]) -> list[tuple[int, ...]]:
    out: list[tuple[int, ...]] = [()]
    for n in sizes:
        out = [c + (i,) for c in out for i in range(n)]
    return out


def grids(g: int) -> list[tuple[int, int, int, int]]:
    """Every ``(G_x, G_y, G_z, G_data)`` with product ``g``."""
    divs = [d for d in range(1, g + 1) if g % d == 0]
    return [(a, b, c, g // (a * b * c)) for a in divs for b in divs for c in divs
            if g % (a * b * c) == 0]


def configs(g: int, placements: str = "all") -> list[Config]:
    """Grids with their placements (``'axonn'``: X<Y<Z<data only), duplicates removed."""
    out = []
    for grid in grids(g):
        seen = set()
        orders = [AXES] if placements == "axonn" else list(permutations(AXES))
        for order in orders:
            cfg = Config(grid, tuple(order))
            key = cfg.placement()
            if key not in seen:
                seen.add(key)
                out.append(cfg)
    return out


@dataclass
class Ranked:
    """One configuration's predictions (seconds per batch) and per-collective breakdown."""

    config: Config
    model: float
    axonn: float
    synthesized: float | None = None
    breakdown: dict[str, float] = field(default_factory=dict)


def _axonn_betas(cfg: Config, g_node: int, b_intra: float, b_inter: float) -> list[float]:
    size = dict(zip(AXES, cfg.grid, strict=True))
    nested = axonn.group_bandwidths([size[a] for a in cfg.order], g_node, b_intra, b_inter)
    beta = dict(zip(cfg.order, nested, strict=True))
    return [beta[a] for a in AXES]


def explore(topology: Topology, layers: Sequence[axonn.Layer], *, gpus: int | None = None,
            algorithm: str = "ring", bytes_per_element: float = 2.0, top: int = 3,
            synthesize: str | None = "greedy", placements: str = "all", seed: int = 0,
            trials: int | None = None) -> list[Ranked]:
    """Rank every 4D configuration (see module doc); the first ``top`` are synthesized."""
    npus = list(topology.live_npus)
    g = gpus or len(npus)
    if g < 1 or g > len(npus):
        raise TacosError(f"cannot place {g} GPUs on a topology with {len(npus)} live NPUs",
                         hint=f"use at most {len(npus)} GPUs")
    npus = npus[:g]
    ctx = Context(topology)
    mach = machine(ctx.graph, npus)
    calls = _calls(layers, bytes_per_element)
    ranked = []
    # many configurations share an axis's process groups (same size and stride): price each
    # (collective, size, groups) once -- about a ninth of the estimates on a 64-GPU torus
    priced: dict[tuple[str, int, tuple[tuple[int, ...], ...]], float | None] = {}
    for cfg in configs(g, placements):
        groups = cfg.groups(npus)
        betas = _axonn_betas(cfg, mach.g_node, mach.beta_intra, mach.beta_inter)
        t_axonn = axonn.model_time(layers, cfg.grid, betas, bytes_per_element)
        breakdown: dict[str, float] = {}
        total = 0.0
        for (kind, axis, size), count in calls(cfg).items():
            if len(groups[axis][0]) < 2 or size < 1:  # one GPU or no bytes: no call
                continue
            key = (kind, int(size), tuple(tuple(grp) for grp in groups[axis]))
            if key not in priced:
                priced[key] = estimate(ctx, kind, int(size), model=algorithm,
                                       groups=groups[axis]).time
            t = priced[key]
            if t is None:
                raise TacosError(f"the {algorithm} model cannot price {kind}")
            breakdown[f"{kind},{axis}"] = breakdown.get(f"{kind},{axis}", 0.0) + count * t
            total += count * t
        ranked.append(Ranked(cfg, total, t_axonn, None, breakdown))
    ranked.sort(key=lambda r: (r.model, r.axonn, r.config.grid, r.config.order))
    if synthesize:
        for r in ranked[:top]:
            r.synthesized = _synthesized(topology, npus, r.config, calls, synthesize, seed,
                                         trials)
    return ranked


def _calls(layers: Sequence[axonn.Layer], bpe: float):
    """``calls(cfg)``: distinct (kind, axis, nccl-tests size) -> how many times per batch."""
    def count(cfg: Config) -> dict[tuple[str, str, float], int]:
        out: dict[tuple[str, str, float], int] = {}
        size = dict(zip(AXES, cfg.grid, strict=True))
        for layer in layers:
            for kind, axis, m in axonn.layer_collectives(layer, *cfg.grid, bpe):
                # equations (1)-(3) take the per-GPU input; all-gather's size is the output
                nbytes = m * size[axis] if kind == "allgather" else m
                key = (kind, axis, float(round(nbytes)))
                out[key] = out.get(key, 0) + 1
        return out
    return count


def _synthesized(topology: Topology, npus: list[int], cfg: Config, calls, solver: str,
                 seed: int, trials: int | None) -> float:
    from tacos.synthesize import synthesize

    groups = cfg.groups(npus)
    total = 0.0
    opts = {"seed": seed, "bound": False}
    if trials is not None:
        opts["trials"] = trials
    for (kind, axis, size), count in calls(cfg).items():
        if len(groups[axis][0]) < 2 or size < 1:
            continue
        coll = make_collective(topology, kind, int(size), groups[axis])
        total += count * simulated_time(synthesize(topology, coll, solver=solver, **opts))
    return total
