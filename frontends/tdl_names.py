"""Name scopes of a TDL file: groups of NPUs/switches, instances of used files, values.

Inside the builder a node is a *key*: NPU number k is ``k`` (k >= 0) and switch number j is
``-(j + 1)``.  The final ids (NPUs first, then switches) are assigned when the topology is built.
Groups have a shape; members are indexed flat (``gpu[3]``) or by coordinates with the first
index varying fastest (``m[x, y]`` is member ``x + X*y``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import product
from math import prod

from tacos.errors import Span


@dataclass
class Namespace:
    """The groups declared in one file instance, by name."""

    groups: dict[str, Group] = field(default_factory=dict)

    def keys(self, npus_only: bool = True) -> list[int]:
        """Every node key declared in this namespace (recursively), NPUs only by default."""
        out: list[int] = []
        for g in self.groups.values():
            for m in g.members:
                if isinstance(m, Namespace):
                    out.extend(m.keys(npus_only))
                elif m >= 0 or not npus_only:
                    out.append(m)
        return out


@dataclass
class Group:
    """A declared name: a scalar (shape ``()``) or an array of nodes or instances."""

    name: str
    shape: tuple[int, ...]
    members: list[int | Namespace]
    span: Span | None = None

    @property
    def is_switch(self) -> bool:
        """True when the members are switches."""
        return bool(self.members) and isinstance(self.members[0], int) and self.members[0] < 0


def index_label(shape: tuple[int, ...], flat: int) -> str:
    """``[i]`` or ``[x,y,...]`` for member ``flat`` of a group of that shape ('' for scalars)."""
    if not shape:
        return ""
    coords = []
    rest = flat
    for n in shape:
        coords.append(rest % n)
        rest //= n
    return "[" + ",".join(str(c) for c in coords) + "]"


def flat_indices(
    shape: tuple[int, ...], indices: list[list[int]]
) -> tuple[list[int], str | None]:
    """Flat member numbers selected by per-position index lists, or an error message.

    One index list selects flat members; ``len(shape)`` lists select coordinates.
    """
    size = prod(shape) if shape else 1
    if len(indices) == 1:
        bad = [i for i in indices[0] if not 0 <= i < size]
        if bad:
            return [], f"index {bad[0]} is out of range 0..{size - 1}"
        return list(indices[0]), None
    if len(indices) != len(shape):
        return [], f"expected 1 or {len(shape)} indices, got {len(indices)}"
    for axis, (idx, n) in enumerate(zip(indices, shape, strict=True)):
        bad = [i for i in idx if not 0 <= i < n]
        if bad:
            return [], f"index {bad[0]} is out of range 0..{n - 1} in dimension {axis}"
    out = []
    for combo in product(*reversed(indices)):
        coords = list(reversed(combo))
        flat, stride = 0, 1
        for c, n in zip(coords, shape, strict=True):
            flat += c * stride
            stride *= n
        out.append(flat)
    return out, None
