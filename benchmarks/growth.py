"""Growth exponents of measured costs, shared by the scale benchmarks."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def exponent(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Least-squares slope of log y over log x (cost ~ x^slope), from the points with both
    positive; ``None`` with fewer than two distinct x."""
    pts = [(x, y) for x, y in zip(xs, ys, strict=True) if x > 0 and y > 0]
    if len({x for x, _ in pts}) < 2:
        return None
    return float(np.polyfit(np.log([x for x, _ in pts]), np.log([y for _, y in pts]), 1)[0])
