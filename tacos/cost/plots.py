"""Plots of the design-space answers (matplotlib, Agg; ``pip install 'tacos[plot]'``).

:func:`plot_allocation` draws the predicted workload time against the bandwidth split: a
curve for two dimensions, a map over (b_1, b_2) for three, and for more one curve per
dimension (that dimension's share varied, the others kept in the optimum's proportions).
The optimum, the best grid point and any confirmed (simulated) candidates are marked.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tacos.atomic import write_with
from tacos.backends.plot import _pyplot
from tacos.cost.allocate import GB, Allocation
from tacos.cost.terms import Terms


def _value(terms: Terms, b: np.ndarray, prices) -> np.ndarray:
    t = terms.time(b)
    return t if prices is None else t * (b @ np.asarray(prices) / GB)


def plot_allocation(alloc: Allocation, terms: Terms, path: str | Path, *,
                    prices: Sequence[float] | None = None, confirmed: Sequence[dict] = (),
                    title: str = "") -> Path:
    """Write the picture to ``path`` (PNG) and return the path."""
    plt = _pyplot()
    d, budget = len(alloc.dims), alloc.budget
    lo = min(float(alloc.bandwidth.min()), budget / (10 * d))
    unit = "time x $" if prices is not None else "time (ms)"
    scale = 1.0 if prices is not None else 1e3
    if confirmed:
        fig, (ax, bars) = plt.subplots(1, 2, figsize=(12, 4.8),
                                       gridspec_kw={"width_ratios": [3, 2]})
        _bars(bars, terms, confirmed, prices, scale, unit)
    else:
        fig, ax = plt.subplots(figsize=(7.5, 4.8))
    best = alloc.bandwidth / GB
    if d == 2:
        x = np.linspace(lo, budget - lo, 400)
        b = np.stack([x, budget - x], axis=1)
        ax.plot(x / GB, _value(terms, b, prices) * scale, color="tab:blue", label="model")
        ax.set_xlabel(f"dimension {alloc.dims[0]} bandwidth (GB/s); "
                      f"dimension {alloc.dims[1]} gets the rest")
        ax.set_ylabel(unit)
        ax.axvline(best[0], color="tab:green", ls="--", label=f"optimum {best[0]:.1f} GB/s")
        if alloc.grid_best is not None:
            ax.plot(alloc.grid_best[0] / GB, alloc.grid_time * scale, "s", color="tab:orange",
                    label=f"best of the {alloc.grid_step / GB:g} GB/s grid")
        for row in confirmed:
            if row.get("synthesized") is not None and prices is None:
                ax.plot(row["bandwidth"][0], row["synthesized"] * scale, "^", color="tab:red")
            if row.get("baseline") is not None and prices is None:
                ax.plot(row["bandwidth"][0], row["baseline"] * scale, "v", color="tab:purple")
        if confirmed and prices is None:
            ax.plot([], [], "^", color="tab:red", label="synthesized (simulated)")
            ax.plot([], [], "v", color="tab:purple", label="baseline (simulated)")
        ax.legend(fontsize=8)
    elif d == 3:
        n = 120
        x = np.linspace(lo, budget - 2 * lo, n)
        xx, yy = np.meshgrid(x, x)
        zz = budget - xx - yy
        ok = zz >= lo
        pts = np.stack([xx[ok], yy[ok], zz[ok]], axis=1)
        val = np.full(xx.shape, np.nan)
        val[ok] = _value(terms, pts, prices) * scale
        from matplotlib.colors import LogNorm

        im = ax.pcolormesh(x / GB, x / GB, val, shading="auto", cmap="viridis_r",
                           norm=LogNorm(vmin=np.nanmin(val), vmax=np.nanmax(val)))
        fig.colorbar(im, ax=ax, label=unit)
        ax.plot(best[0], best[1], "*", color="white", ms=14, mec="black",
                label="optimum " + "/".join(f"{v:.0f}" for v in best))
        if alloc.grid_best is not None:
            g = alloc.grid_best / GB
            ax.plot(g[0], g[1], "s", color="tab:orange", mec="black", label="best grid point")
        for row in confirmed:
            ax.plot(row["bandwidth"][0], row["bandwidth"][1], "^", color="tab:red", mec="black")
        if confirmed:
            ax.plot([], [], "^", color="tab:red", label="confirmed by simulation")
        ax.set_xlabel(f"dimension {alloc.dims[0]} (GB/s)")
        ax.set_ylabel(f"dimension {alloc.dims[1]} (GB/s); dimension {alloc.dims[2]} the rest")
        ax.legend(fontsize=8, loc="upper right")
    else:
        share = alloc.bandwidth / budget
        for k in range(d):
            x = np.linspace(lo, budget - (d - 1) * lo, 300)
            rest = np.delete(share, k)
            rest = rest / rest.sum()
            b = np.empty((len(x), d))
            b[:, k] = x
            others = [j for j in range(d) if j != k]
            b[:, others] = (budget - x)[:, None] * rest[None, :]
            ax.plot(x / GB, _value(terms, b, prices) * scale,
                    label=f"vary dimension {alloc.dims[k]}")
            ax.plot(best[k], _value(terms, alloc.bandwidth, prices)[0] * scale, "*",
                    color="black")
        ax.set_xlabel("bandwidth of the varied dimension (GB/s); "
                      "the others keep the optimum's proportions")
        ax.set_ylabel(unit)
        ax.legend(fontsize=8)
    ax.set_title(title or f"bandwidth split, budget {budget / GB:g} GB/s per NPU", fontsize=10)
    fig.tight_layout()
    out = Path(path)
    try:  # atomically: the previous picture or the whole new one
        write_with(out, lambda tmp: fig.savefig(tmp, dpi=110,
                                                format=out.suffix.lstrip(".").lower() or None))
    finally:
        plt.close(fig)
    return out


def _bars(ax, terms: Terms, confirmed: Sequence[dict], prices, scale: float, unit: str) -> None:
    """Model, baseline and synthesized time of every confirmed split, side by side."""
    names = [row["name"] for row in confirmed]
    x = np.arange(len(names))
    model = [_value(terms, np.asarray(row["bandwidth"]) * GB, prices)[0] * scale
             for row in confirmed]
    series = [("model", model, "tab:blue")]
    if prices is None:
        series += [("baseline (sim)", [r["baseline"] * scale if r["baseline"] is not None
                                       else np.nan for r in confirmed], "tab:purple"),
                   ("synthesized (sim)", [r["synthesized"] * scale
                                          if r["synthesized"] is not None else np.nan
                                          for r in confirmed], "tab:red")]
    width = 0.8 / len(series)
    for i, (label, vals, color) in enumerate(series):
        ax.bar(x + (i - (len(series) - 1) / 2) * width, vals, width, label=label, color=color)
    ax.set_xticks(x, ["\n".join([n, "/".join(f"{v:.0f}" for v in r["bandwidth"])])
                      for n, r in zip(names, confirmed, strict=True)], fontsize=8)
    ax.set_ylabel(unit)
    ax.set_title("confirmed splits (GB/s per dimension)", fontsize=10)
    ax.legend(fontsize=8)
