"""The machine model's one route-cost rule, and the links as arrays for the timers.

A transfer crosses a route of links cut-through: it pays the links' α once each (their sum) and
moves at the narrowest link's bandwidth, holding a lane of every link; so a route carries at
most its narrowest multiplicity of transfers at once.  :func:`route_cost` is that rule on one
route; :meth:`LinkArrays.route_costs` the same rule on many routes at once (numpy), for the
simulator, the verifier's tables and the compiled solvers.  :class:`LinkArrays` is built once
per topology (``topology.link_arrays``) and shared by every vectorized or compiled timer.

This module imports nothing of the model: links are anything with ``alpha``, ``bandwidth`` and
``multiplicity`` (and ``src``/``dst``), so the topology can hold the view it caches.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


def route_cost(links: Iterable[Any]) -> tuple[float, float, int]:
    """``(Σ α, narrowest bandwidth, narrowest multiplicity)`` of a route's links, in order.

    A route's time for ``n`` bytes is ``Σ α + n / bandwidth``.  Raises ``ValueError`` for an
    empty route.
    """
    alpha, bandwidth, lanes = 0.0, float("inf"), None
    for lk in links:
        alpha += lk.alpha
        bandwidth = min(bandwidth, lk.bandwidth)
        lanes = lk.multiplicity if lanes is None else min(lanes, lk.multiplicity)
    if lanes is None:
        raise ValueError("a route has at least one link")
    return alpha, bandwidth, lanes


def route_time(links: Iterable[Any], nbytes: float) -> float:
    """Cut-through time of ``nbytes`` over ``links`` (:func:`route_cost`'s rule)."""
    alpha, bandwidth, _ = route_cost(links)
    return alpha + nbytes / bandwidth


@dataclass(frozen=True, eq=False)
class LinkArrays:
    """Per link: ``alpha`` (s) and ``bandwidth`` (B/s per lane) as ``float64`` arrays,
    ``multiplicity`` (lanes) as ``int64``, ``src``/``dst`` as ``int32``; read-only."""

    alpha: np.ndarray
    bandwidth: np.ndarray
    multiplicity: np.ndarray
    src: np.ndarray
    dst: np.ndarray

    @classmethod
    def of(cls, links: Sequence[Any]) -> LinkArrays:
        """The arrays of a topology's ``links``."""
        def column(attr: str, dtype: Any) -> np.ndarray:
            a = np.fromiter((getattr(lk, attr) for lk in links), dtype=dtype, count=len(links))
            a.flags.writeable = False
            return a

        return cls(column("alpha", np.float64), column("bandwidth", np.float64),
                   column("multiplicity", np.int64), column("src", np.int32),
                   column("dst", np.int32))

    def __len__(self) -> int:
        return len(self.alpha)

    def route_costs(self, owner: np.ndarray, link: np.ndarray, n: int
                    ) -> tuple[np.ndarray, np.ndarray]:
        """:func:`route_cost`'s Σ α and narrowest bandwidth for ``n`` routes given as pairs:
        route ``owner[k]`` crosses link ``link[k]``.

        Links out of range count as α 0 and bandwidth 1 B/s, and a route with no link gets
        bandwidth 1 B/s (so a checker can time a malformed schedule and report it).
        """
        m = len(self.alpha)
        alpha = np.append(self.alpha, 0.0)
        bw = np.append(self.bandwidth, 1.0)
        li = np.where((link >= 0) & (link < m), link, m)
        if len(owner) == n and np.array_equal(owner, np.arange(n)):  # one link each
            b = bw[li]
            b[~np.isfinite(b)] = 1.0
            return alpha[li], b
        a = np.bincount(owner, weights=alpha[li], minlength=n)
        b = np.full(n, np.inf)
        np.minimum.at(b, owner, bw[li])
        b[~np.isfinite(b)] = 1.0
        return a, b
