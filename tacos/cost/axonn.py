"""AxoNN's communication model (seed 003, §V), equation by equation.

Ring collectives on ``G`` GPUs with peer-to-peer bandwidth ``β`` and ``m`` the size of the
input buffer of each GPU, latency ignored (the paper's Assumption 3):

* (1) all-gather      ``t_AG = (G − 1) · m / β``
* (2) reduce-scatter  ``t_RS = (G − 1)/G · m / β``
* (3) all-reduce      ``t_AR = 2 (G − 1)/G · m / β``

A fully-connected layer ``O = I · W`` with ``I ∈ R^{m×k}``, ``W ∈ R^{k×n}`` on the 4D grid
``(G_x, G_y, G_z, G_data)`` issues (4) an all-gather of W over Z, (5) a reduce-scatter of its
gradient over Z, (6) an all-reduce of O over Y, (7) an all-reduce of ∂L/∂I over X and (8) the
data-parallel all-reduce of the gradient; (9) is their sum.  A "transposed" layer swaps the
roles of X and Y.  Equation (10) gives the bandwidth of each process group from where it sits:

    β_i = β_intra                                   if Π_{j≤i} G_j ≤ G_node
    β_i = β_inter / min(G_node, Π_{j<i} G_j)        otherwise

with the groups nested X (innermost), Y, Z, data.  Sizes here are element counts times
``bytes_per_element`` (1 reproduces the paper's formulas literally).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import prod

AXES = ("x", "y", "z", "data")


def t_allgather(g: int, m: float, beta: float) -> float:
    """Equation (1): ring all-gather of ``m`` bytes per GPU on ``g`` GPUs."""
    return (g - 1) * m / beta


def t_reducescatter(g: int, m: float, beta: float) -> float:
    """Equation (2): ring reduce-scatter of an ``m``-byte input buffer."""
    return (g - 1) / g * m / beta


def t_allreduce(g: int, m: float, beta: float) -> float:
    """Equation (3): ring all-reduce of an ``m``-byte buffer."""
    return 2 * (g - 1) / g * m / beta


def group_bandwidths(grid: Sequence[int], g_node: int, beta_intra: float,
                     beta_inter: float) -> tuple[float, ...]:
    """Equation (10): β of the process groups of each level of ``grid`` (innermost first)."""
    out = []
    for i, g in enumerate(grid):
        inner = prod(grid[:i])
        if inner * g <= g_node:
            out.append(beta_intra)
        else:
            out.append(beta_inter / min(g_node, inner))
    return tuple(out)


@dataclass(frozen=True)
class Layer:
    """A fully-connected layer: ``m`` rows of input (tokens of one data-parallel group),
    ``k`` inputs, ``n`` outputs; ``transposed`` layers swap the X and Y roles."""

    m: int
    k: int
    n: int
    transposed: bool = False


def layer_collectives(layer: Layer, gx: int, gy: int, gz: int, gdata: int,
                      bytes_per_element: float = 1.0) -> list[tuple[str, str, float]]:
    """The five collectives of equations (4)-(8): ``(name, axis, m)`` with ``m`` as in
    equations (1)-(3) (per-GPU input bytes)."""
    if layer.transposed:
        gx, gy = gy, gx
    ax, ay = ("y", "x") if layer.transposed else ("x", "y")
    b = bytes_per_element
    kn, mn, mk = layer.k * layer.n, layer.m * layer.n, layer.m * layer.k
    return [
        ("allgather", "z", kn / (gx * gy * gz) * b),        # (4)
        ("reducescatter", "z", kn / (gx * gy) * b),         # (5)
        ("allreduce", ay, mn / (gz * gx) * b),              # (6)
        ("allreduce", ax, mk / (gz * gy) * b),              # (7)
        ("allreduce", "data", kn / (gx * gy * gz) * b),     # (8)
    ]


_EQ = {"allgather": t_allgather, "reducescatter": t_reducescatter, "allreduce": t_allreduce}


def layer_times(layer: Layer, grid: Sequence[int], betas: Sequence[float],
                bytes_per_element: float = 1.0) -> dict[str, float]:
    """Equations (4)-(8) for one layer: ``{'AG,z': t, 'RS,z': t, 'AR,y': t, 'AR,x': t,
    'AR,data': t}``; ``grid`` and ``betas`` are in the order x, y, z, data."""
    size = dict(zip(AXES, grid, strict=True))
    beta = dict(zip(AXES, betas, strict=True))
    short = {"allgather": "AG", "reducescatter": "RS", "allreduce": "AR"}
    out = {}
    for kind, axis, m in layer_collectives(layer, *grid, bytes_per_element):
        out[f"{short[kind]},{axis}"] = _EQ[kind](size[axis], m, beta[axis])
    return out


def layer_time(layer: Layer, grid: Sequence[int], betas: Sequence[float],
               bytes_per_element: float = 1.0) -> float:
    """Equation (9): the communication time of one layer."""
    return sum(layer_times(layer, grid, betas, bytes_per_element).values())


def model_time(layers: Sequence[Layer], grid: Sequence[int], betas: Sequence[float],
               bytes_per_element: float = 1.0) -> float:
    """Equation (9) summed over every layer of the network."""
    return sum(layer_time(lay, grid, betas, bytes_per_element) for lay in layers)


#: GPT-style transformers of the paper's Table I: name -> (layers, hidden size, heads)
GPT_MODELS = {
    "gpt-5b": (24, 4096, 32),
    "gpt-10b": (32, 5120, 40),
    "gpt-20b": (32, 7168, 56),
    "gpt-40b": (38, 9216, 72),
    "gpt-80b": (42, 12288, 96),
}


def transformer_layers(n_layers: int, hidden: int, tokens: int) -> list[Layer]:
    """The fully-connected layers of a GPT transformer: per block QKV (h x 3h), attention
    output (h x h), MLP up (h x 4h) and MLP down (4h x h), every second one transposed (the
    paper's Section III); ``tokens`` rows each (the batch of one data-parallel group)."""
    h = hidden
    block = [Layer(tokens, h, 3 * h), Layer(tokens, h, h, True),
             Layer(tokens, h, 4 * h), Layer(tokens, 4 * h, h, True)]
    return block * n_layers
