"""Device meshes and sharding specs (GSPMD / Alpa notation).

A :class:`DeviceMesh` is a group of NPUs seen with a logical shape, filled row by row (the last
mesh axis varies fastest, as ``numpy.reshape`` and Alpa do): a mesh of shape ``(2, 4)`` over
``node[0..1].gpu[0..3]`` has host ``i`` on axis 0 and GPU ``j`` on axis 1.

A :class:`ShardingSpec` says, per tensor dimension, along which mesh axes that dimension is
split: ``R`` (replicated), ``S0`` (split along mesh axis 0), ``S1``, ``S01`` (split along axes 0
and 1 together, axis 1 fastest), ...  ``"S0RR"`` is the spec of a 3-D tensor whose first
dimension is split over mesh axis 0 and replicated over axis 1.

A dimension of length ``n`` split ``k`` ways gives tiles of ``ceil(n / k)`` elements, the last
ones shorter when ``k`` does not divide ``n`` (padding a tensor to a multiple, as the seed
does, gives the same tiles); every tile must hold at least one element.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import product
from math import prod

from tacos.errors import TacosError

Interval = tuple[int, int]
"""A half-open element range ``[lo, hi)`` along one tensor dimension."""

_DIM = re.compile(r"R|S[0-9]+")


class ShardingError(TacosError):
    """A mesh or sharding spec that does not fit the tensor (the message says why)."""


@dataclass(frozen=True)
class DeviceMesh:
    """NPUs ``devices`` arranged in a logical ``shape`` (row-major, last axis fastest)."""

    devices: tuple[int, ...]
    shape: tuple[int, ...]
    name: str = ""

    def __post_init__(self) -> None:
        if not self.shape or any(s < 1 for s in self.shape):
            raise ShardingError(f"{self.title}: shape {list(self.shape)} must be positive sizes",
                                hint="e.g. shape [2, 4] for 2 hosts of 4 GPUs")
        if prod(self.shape) != len(self.devices):
            raise ShardingError(
                f"{self.title} has {len(self.devices)} NPUs but shape "
                f"{list(self.shape)} needs {prod(self.shape)}",
                hint="list as many NPUs as the shape's product, row by row")
        if len(set(self.devices)) != len(self.devices):
            dup = next(d for d in self.devices if self.devices.count(d) > 1)
            raise ShardingError(f"{self.title} lists NPU {dup} twice",
                                hint="every device appears once in a mesh")

    @classmethod
    def of(cls, devices: Sequence[int], shape: Sequence[int] | None = None,
           name: str = "") -> DeviceMesh:
        """A mesh over ``devices``; ``shape`` defaults to one axis of all of them."""
        devs = tuple(int(d) for d in devices)
        return cls(devs, tuple(int(s) for s in shape) if shape is not None else (len(devs),),
                   name)

    @property
    def title(self) -> str:
        """``'the source mesh'`` (with its name) or ``'the mesh'``, for messages."""
        return f"the {self.name} mesh" if self.name else "the mesh"

    @property
    def ndim(self) -> int:
        """Number of mesh axes."""
        return len(self.shape)

    def coords(self) -> Iterator[tuple[tuple[int, ...], int]]:
        """``(coordinate, device)`` pairs in row-major order."""
        for i, coord in enumerate(product(*(range(s) for s in self.shape))):
            yield coord, self.devices[i]


@dataclass(frozen=True)
class ShardingSpec:
    """Per tensor dimension, the mesh axes it is split along (``()`` = replicated)."""

    dims: tuple[tuple[int, ...], ...]

    @classmethod
    def parse(cls, text: str | Sequence[str]) -> ShardingSpec:
        """Read ``"S0RR"``, ``"S0 R R"``, ``"S0,R,R"`` or ``["S0", "R", "R"]``."""
        parts = [text] if isinstance(text, str) else list(text)
        dims: list[tuple[int, ...]] = []
        for part in parts:
            body = re.sub(r"[\s,]+", "", str(part))
            pos = 0
            while pos < len(body):
                m = _DIM.match(body, pos)
                if m is None:
                    raise ShardingError(
                        f"cannot read sharding spec {text!r} at {body[pos:]!r}",
                        hint="write one of R, S0, S1, S01, ... per tensor dimension, "
                        "e.g. S0RR or RS01R")
                token = m.group()
                dims.append(() if token == "R" else tuple(int(c) for c in token[1:]))
                pos = m.end()
        if not dims:
            raise ShardingError("an empty sharding spec",
                                hint="write one of R, S0, S1, S01, ... per tensor dimension")
        for axes in dims:
            if len(set(axes)) != len(axes):
                raise ShardingError(f"sharding spec {text!r} splits a dimension twice along "
                                    "the same mesh axis", hint="e.g. S01, not S00")
        return cls(tuple(dims))

    def __str__(self) -> str:
        return "".join("R" if not a else "S" + "".join(map(str, a)) for a in self.dims)

    def check(self, mesh: DeviceMesh, shape: Sequence[int], role: str = "") -> None:
        """Raise :class:`ShardingError` unless the spec fits ``mesh`` and a tensor ``shape``."""
        who = f"{role} spec {self}" if role else f"spec {self}"
        if len(self.dims) != len(shape):
            raise ShardingError(
                f"{who} has {len(self.dims)} dimension(s) but the tensor has {len(shape)}",
                hint=f"write one of R, S0, S1, ... for each of the {len(shape)} dimensions")
        used: dict[int, int] = {}
        for d, axes in enumerate(self.dims):
            for a in axes:
                if a >= mesh.ndim:
                    raise ShardingError(
                        f"{who} splits tensor dimension {d} along mesh axis {a}, but "
                        f"{mesh.title} has {mesh.ndim} axis/axes (shape {list(mesh.shape)})",
                        hint=f"use mesh axes 0..{mesh.ndim - 1}")
                if a in used:
                    raise ShardingError(
                        f"{who} uses mesh axis {a} for tensor dimensions {used[a]} and {d}",
                        hint="each mesh axis splits at most one tensor dimension")
                used[a] = d
            ways = self.ways(mesh, d)
            if ways > 1 and (ways - 1) * -(-shape[d] // ways) >= shape[d]:
                raise ShardingError(
                    f"{who} splits tensor dimension {d} (length {shape[d]}) {ways} ways on "
                    f"{mesh.title}: some tiles would be empty",
                    hint="split a longer dimension, or fewer ways")

    def ways(self, mesh: DeviceMesh, dim: int) -> int:
        """Into how many tiles tensor dimension ``dim`` is split on ``mesh``."""
        return prod(mesh.shape[a] for a in self.dims[dim])

    def tile_index(self, mesh: DeviceMesh, coord: Sequence[int], dim: int) -> int:
        """Which tile of dimension ``dim`` the device at ``coord`` holds (last listed mesh
        axis fastest: ``S01`` gives ``coord[0] * shape[1] + coord[1]``)."""
        index = 0
        for a in self.dims[dim]:
            index = index * mesh.shape[a] + coord[a]
        return index


def split(length: int, ways: int) -> list[Interval]:
    """``ways`` tiles of a dimension of ``length``: ``ceil(length / ways)`` elements each, the
    last ones shorter."""
    step = -(-length // ways)
    return [(min(i * step, length), min((i + 1) * step, length)) for i in range(ways)]


def tiles(mesh: DeviceMesh, spec: ShardingSpec, shape: Sequence[int]
          ) -> dict[int, tuple[Interval, ...]]:
    """Device → the region of the tensor it holds (one interval per dimension)."""
    spec.check(mesh, shape)
    cuts = [split(n, spec.ways(mesh, d)) for d, n in enumerate(shape)]
    out: dict[int, tuple[Interval, ...]] = {}
    for coord, dev in mesh.coords():
        out[dev] = tuple(cuts[d][spec.tile_index(mesh, coord, d)] for d in range(len(shape)))
    return out


__all__ = ["DeviceMesh", "Interval", "ShardingError", "ShardingSpec", "split", "tiles"]
