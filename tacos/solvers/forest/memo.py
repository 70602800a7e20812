"""Packings kept across solves of the same shape, so that a sweep over sizes packs once.

The rate, the switch splitting, the tree packing and the integer-program candidates
(:mod:`~tacos.solvers.forest.timed`, :mod:`~tacos.solvers.forest.shallow`) depend on the
topology, the group, the collective's kind and root and the options that shape the trees, never
on the size: :func:`shape_caches` hands the solver the same dictionaries for the same shape,
the :data:`MAX_SHAPES` most recent shapes kept (least recently used dropped first).  Only the
slice search and the schedules, which depend on the size, are redone.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from tacos.model.topology import Topology

MAX_SHAPES = 4
"""Shapes whose packings are kept (a 256-GPU system's forests take tens of MB)."""

_SHAPES: OrderedDict[tuple, dict[str, dict]] = OrderedDict()


def shape_caches(topology: Topology, group: tuple[int, ...], kind: str, root: Any,
                 options: tuple) -> dict[str, dict]:
    """The caches of this shape: ``plans`` (tree count and island order → forests),
    ``stepped`` and ``deep`` (the integer programs' trees, see
    :class:`~tacos.solvers.forest.candidates.Context`), ``packs`` (Lovász packings by their
    inputs, :func:`~tacos.solvers.forest.pack.pack_cached`); new empty ones for a new shape."""
    key = (topology, group, kind, root, options)
    found = _SHAPES.get(key)
    if found is None:
        found = _SHAPES[key] = {"plans": {}, "stepped": {}, "deep": {}, "packs": {}}
        while len(_SHAPES) > MAX_SHAPES:
            _SHAPES.popitem(last=False)
    else:
        _SHAPES.move_to_end(key)
    return found


def clear() -> None:
    """Forget every shape (tests, and callers that want a cold solve)."""
    _SHAPES.clear()
