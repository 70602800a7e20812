"""Schedule pictures: a per-link Gantt timeline and link utilization (matplotlib, Agg).

:func:`plot_schedule` draws one row per link that carries at least one transfer: on the left
every transfer as a bar over its ``[start, end]`` (colour = the chunk's source NPU, with a
legend; hatched = reduce), on the
right the link's utilization (busy time / collective time / multiplicity).  matplotlib is
imported lazily; without it a :class:`~tacos.errors.TacosError` says how to install it.

>>> # plot_schedule(schedule, "plan.png")  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from tacos.atomic import check_writable, write_with
from tacos.errors import TacosError
from tacos.model.schedule import Schedule

_UNITS = ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns"))


@dataclass(frozen=True)
class PlotInfo:
    """What was drawn: the output path, the row labels (top to bottom) and counts."""

    path: Path
    rows: tuple[str, ...]
    links_used: int
    transfers: int
    utilization: tuple[float, ...]


FORMATS = ("png", "svg", "pdf")


def check_plot_path(path: str | Path) -> None:
    """Raise a :class:`TacosError` now if a plot cannot be written to ``path`` later.

    The suffix must name a supported format, matplotlib must be installed and the folder must
    exist and be writable (``tacosc --plot`` checks this before synthesizing).
    """
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix not in FORMATS:
        raise TacosError(f"cannot plot to {path}: unknown picture format {suffix or '(none)'!r}",
                         hint=f"name the file .{', .'.join(FORMATS)}")
    if importlib.util.find_spec("matplotlib") is None:
        _pyplot()  # raises with the install hint
    check_writable(path, "plot")


def _pyplot():
    try:
        mpl = importlib.import_module("matplotlib")
    except ImportError as exc:
        raise TacosError("plotting needs matplotlib, which is not installed",
                         hint="pip install matplotlib  (or: pip install 'tacos[plot]')") from exc
    mpl.use("Agg", force=True)
    return importlib.import_module("matplotlib.pyplot")


def _time_unit(span: float) -> tuple[float, str]:
    for scale, name in _UNITS:
        if span >= scale:
            return scale, name
    return _UNITS[-1]


def link_label(schedule: Schedule, index: int) -> str:
    """``src->dst`` by node name, with ``(via switch)`` for unwound or cut-through links."""
    topo = schedule.topology
    link = topo.links[index]
    text = f"{topo.node_name(link.src)}->{topo.node_name(link.dst)}"
    if link.via is not None:
        text += f" (via {topo.node_name(link.via)})"
    return text


def link_utilization(schedule: Schedule) -> dict[int, float]:
    """Busy fraction of every used link over the collective time (multiplicity counted)."""
    span = schedule.makespan
    out: dict[int, float] = {}
    for li, items in schedule.by_link().items():
        busy = sum(t.end - t.start for t in items)
        mult = max(1, schedule.topology.links[li].multiplicity)
        out[li] = busy / (span * mult) if span > 0 else 0.0
    return out


def chunk_sources(schedule: Schedule) -> dict[int, int]:
    """Chunk id -> the NPU it starts on (the lowest of its precondition): what the schedule
    plot colours by, so a reader can tell whose data each bar carries."""
    return {c.id: min(c.pre) if c.pre else -1 for c in schedule.collective.chunks}


def plot_schedule(schedule: Schedule, path: str | Path, *, title: str | None = None,
                  max_rows: int | None = 80, dpi: int = 120) -> PlotInfo:
    """Draw ``schedule`` to ``path`` (PNG, SVG or PDF by suffix) and say what was drawn.

    With more used links than ``max_rows`` only the busiest ``max_rows`` are drawn (the title
    says so); ``max_rows=None`` draws them all.
    """
    plt = _pyplot()
    path = Path(path)
    util = link_utilization(schedule)
    by_link = schedule.by_link()
    used = sorted(by_link)
    shown = used
    if max_rows is not None and len(used) > max_rows:
        shown = sorted(sorted(used, key=lambda li: (-util[li], li))[:max_rows])
    labels = [link_label(schedule, li) for li in shown]
    span = schedule.makespan
    scale, unit = _time_unit(span)
    n_rows = max(1, len(shown))
    height = min(40.0, 1.6 + 0.28 * n_rows)
    fig, (ax, ax_u) = plt.subplots(
        1, 2, figsize=(12, height), sharey=True,
        gridspec_kw={"width_ratios": [4, 1], "wspace": 0.04})
    cmap = plt.get_cmap("tab20")
    coll = schedule.collective
    source = chunk_sources(schedule)
    groups = sorted(set(source.values()))
    colour = {g: cmap(k % 20) for k, g in enumerate(groups)}
    for row, li in enumerate(shown):
        y = n_rows - 1 - row
        for op in ("copy", "reduce"):
            items = [t for t in by_link[li] if t.op == op]
            if not items:
                continue
            ax.broken_barh([(t.start / scale, (t.end - t.start) / scale) for t in items],
                           (y - 0.4, 0.8),
                           facecolors=[colour[source[t.chunks[0]]] for t in items],
                           edgecolor="black", linewidth=0.3,
                           hatch="///" if op == "reduce" else None)
        ax_u.barh(y, util[li] * 100, color="tab:blue", height=0.7)
    ticks = list(range(n_rows - 1, n_rows - 1 - len(shown), -1))
    ax.set_yticks(ticks, labels, fontsize=7 if n_rows > 30 else 9)
    ax.set_ylim(-0.6, n_rows - 0.4)
    ax.set_xlim(0, span / scale * 1.02 if span > 0 else 1)
    ax.set_xlabel(f"time ({unit})")
    ax.grid(axis="x", linestyle=":", linewidth=0.5)
    ax_u.set_xlim(0, 100)
    ax_u.set_xlabel("utilization (%)")
    ax_u.grid(axis="x", linestyle=":", linewidth=0.5)
    algorithm = schedule.meta.get("algorithm") or schedule.meta.get("solver")
    head = title or (f"{coll.label()} on {schedule.topology.name or 'topology'}"
                     + (f" by {algorithm}" if algorithm else "")
                     + f": {span / scale:.4g} {unit}, {len(schedule.transfers)} transfers")
    if len(shown) < len(used):
        head += f" (busiest {len(shown)} of {len(used)} links)"
    fig.suptitle(head, fontsize=10)
    from matplotlib.patches import Patch

    legend = [f"from {schedule.topology.node_name(g)}" if g >= 0 else "no source"
              for g in groups[:20]]
    if len(groups) > 20:
        legend[-1] = f"from {len(groups) - 19} more sources (colours repeat)"
    ax.legend([Patch(facecolor=colour[g], edgecolor="black", linewidth=0.3)
               for g in groups[:20]], legend, title="chunk's source NPU; hatched = reduce",
              fontsize=7, title_fontsize=7, loc="upper left", bbox_to_anchor=(1.33, 1.0),
              borderaxespad=0)
    path.parent.mkdir(parents=True, exist_ok=True)
    fmt = path.suffix.lower().lstrip(".") or "png"
    try:
        write_with(path, lambda tmp: fig.savefig(tmp, dpi=dpi, bbox_inches="tight", format=fmt))
    finally:
        plt.close(fig)
    return PlotInfo(path, tuple(labels), len(used), len(schedule.transfers),
                    tuple(util[li] for li in shown))
