"""How a symmetric plan cuts its buffer into parts and in which order a part visits the axes
(shared by :mod:`tacos.scale.synthesize` and :mod:`tacos.scale.shared`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tacos.model.schedule import Schedule
from tacos.model.symmetry import SymmetricSystem

Phases = list[tuple[int, str, Schedule]]


def rotates(system: SymmetricSystem) -> bool:
    """True when every axis has links of its own (a torus): all-gather parts then start on
    different axes."""
    return len({system.resource(a) for a in range(len(system.axes))}) == len(system.axes)


def axis_order(system: SymmetricSystem, kind: str, part: int) -> list[int]:
    """The axes a part visits.  Reductions go in system order (the fast NVSwitch first, so the
    rails carry an eighth of the buffer); all-gathers go the other way (the NVSwitch last), or
    rotated by the part index when every axis has links of its own."""
    n = len(system.axes)
    if kind != "allgather":
        return list(range(n))
    if rotates(system):
        return [(k + part) % n for k in range(n)]
    return list(reversed(range(n)))


def split(size: int, weights: Sequence[int], unit: int) -> tuple[int, ...]:
    """``size`` bytes cut in proportion to ``weights``, each part a multiple of ``unit``; the
    bytes left over by rounding go to the largest part (the total is ``size`` rounded down to a
    multiple of ``unit``)."""
    total = sum(weights)
    parts = [size * w // total // unit * unit for w in weights]
    big = max(range(len(parts)), key=lambda i: (weights[i], -i))
    parts[big] += (size // unit * unit) - sum(parts)
    return tuple(parts)


def busy(phases: Phases) -> float:
    """How long a part's phases keep their links busy in all: the sum of their templates' times."""
    return sum(t.makespan for _, _, t in phases)


def least_busy(candidates: Iterable[Phases]) -> Phases:
    """The least :func:`busy` of ``candidates`` (built lazily, in an order where the time first
    falls, then rises), stopping after two in a row that are no better."""
    best: Phases | None = None
    worse = 0
    for phases in candidates:
        if best is None or busy(phases) < busy(best):
            best, worse = phases, 0
        else:
            worse += 1
            if worse == 2:
                break
    assert best is not None
    return best
