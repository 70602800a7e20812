"""Plot a message-size sweep: algbw against size for tacos's plan and every NCCL model.

One line per plan (log-log axes, sizes in binary units), markers where tacos's plan uses
in-switch operations, the speedup over the best NCCL model on a second axis.  matplotlib is
imported lazily through :func:`tacos.backends.plot._pyplot`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tacos.backends.plot import _pyplot

from tacos.atomic import write_with
from tacos.model.units import format_size

if TYPE_CHECKING:
    from tacos.sweep import Sweep


def plot_sweep(result: Sweep, path: Path) -> Path:
    """Draw ``result`` to ``path`` (PNG, SVG or PDF by suffix) and return the path."""
    plt = _pyplot()
    rows = sorted(result.rows, key=lambda r: r.size)
    sizes = [r.size for r in rows]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for model in result.models:
        pts = [(r.size, r.algbw(r.nccl[model]) / 1e9) for r in rows if model in r.nccl]
        if pts:
            ax.plot(*zip(*pts, strict=True), marker=".", linewidth=1, label=model)
    ax.plot(sizes, [r.algbw() / 1e9 for r in rows], color="black", marker="o", linewidth=2,
            label="tacos (auto)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ticks = sizes if len(sizes) <= 12 else sizes[::max(1, len(sizes) // 12)]
    ax.set_xticks(ticks, [format_size(s).replace(" ", "") for s in ticks], rotation=45,
                  fontsize=7)
    ax.set_xlabel("message size (nccl-tests convention)")
    ax.set_ylabel("algbw (GB/s)")
    speed = [(r.size, r.speedup) for r in rows if r.speedup]
    handles, labels = ax.get_legend_handles_labels()
    if speed:
        ax2 = ax.twinx()
        ax2.plot(*zip(*speed, strict=True), color="grey", linestyle=":", linewidth=1,
                 label="speedup vs best NCCL model (right axis)")
        ax2.set_ylabel("speedup over the best NCCL model", color="grey")
        ax2.set_ylim(bottom=0)
        more, more_labels = ax2.get_legend_handles_labels()
        handles, labels = handles + more, labels + more_labels
    # one legend for both axes, outside the plot: no line crosses it
    ax.legend(handles, labels, fontsize=7, loc="upper left", bbox_to_anchor=(1.12, 1.0),
              borderaxespad=0)
    name = result.topology.name or "topology"
    ax.set_title(f"{result.kind} on {name}: tacos vs NCCL models", fontsize=10)
    path = Path(path)
    try:  # atomically: the previous picture or the whole new one
        write_with(path, lambda tmp: fig.savefig(tmp, dpi=120, bbox_inches="tight",
                                                 format=path.suffix.lstrip(".").lower() or None))
    finally:
        plt.close(fig)
    return path
