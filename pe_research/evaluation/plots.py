"""Figures: accuracy against task length, with the training range marked on every curve.

Every function builds a ``matplotlib.figure.Figure`` with the object API (no pyplot state, no
backend chosen at import, so a notebook keeps its own), draws into a given ``ax`` when asked,
and returns the figure; ``save_figure`` writes one whole.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib
import matplotlib.ticker
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from pe_research.core.atomic_files import atomic_savefig
from pe_research.model.metrics import METRICS


def metric_label(metric: str) -> str:
    """The metric table's label for ``metric`` (its name, spaced, for names not in the table)."""
    return METRICS[metric].label if metric in METRICS else metric.replace("_", " ")


def _scale(metric: str) -> float:
    """Fractions are drawn as percentages."""
    return 100.0 if metric not in METRICS or METRICS[metric].unit == "%" else 1.0


def _log_axis(metric: str) -> bool:
    return metric in METRICS and METRICS[metric].log_axis


def _axis_label(metric: str) -> str:
    return METRICS[metric].axis_label if metric in METRICS else f"{metric_label(metric)} (%)"


def mark_training_range(axes: Axes, train_lengths: Sequence[int]) -> None:
    """Shade the trained lengths and draw a line at the longest one."""
    mark_training_ranges(axes, [train_lengths])


def mark_training_ranges(axes: Axes, ranges: Sequence[Sequence[int]]) -> None:
    """Shade the lengths any of ``ranges`` trained on, with a line at each one's longest."""
    ranges = sorted({(int(low), int(high)) for low, high in ranges})
    names = ", ".join(f"{low}-{high}" if low != high else f"{low}" for low, high in ranges)
    plural = "" if len(ranges) == 1 and ranges[0][0] == ranges[0][1] else "s"
    axes.axvspan(min(low for low, _ in ranges) - 0.5, max(high for _, high in ranges) + 0.5,
                 color="0.9", zorder=0, label=f"training length{plural} {names}")
    for high in sorted({high for _, high in ranges}):
        axes.axvline(high + 0.5, color="0.4", linestyle=":", linewidth=1)


def _log_ticks(decades: float) -> tuple[float, ...]:
    """Mantissas labelled on a log axis spanning ``decades``: finer when it spans fewer."""
    if decades <= 1:
        return (1, 1.5, 2, 3, 5, 7)
    return (1, 2, 3, 5, 7) if decades <= 2 else (1, 2, 5) if decades <= 3 else (1,)


def _round_log(value: float, mantissas: Sequence[float], up: bool) -> float:
    """The nearest of ``mantissas`` x 10^k at or above (``up``) or below ``value`` (> 0)."""
    exponent = math.floor(math.log10(value))
    ticks = [m * 10.0 ** e for e in range(exponent - 1, exponent + 2) for m in mantissas]
    tolerance = 1e-9 * value
    return (min(t for t in ticks if t >= value - tolerance) if up
            else max(t for t in ticks if t <= value + tolerance))


def plain_numbers() -> matplotlib.ticker.Formatter:
    """Tick labels as plain numbers (5, 10, 20), not powers of ten."""
    return matplotlib.ticker.FuncFormatter(lambda value, _: f"{value:g}")


def label_log_axis(axes: Axes) -> None:
    """A log y axis whose ends are labelled ticks (``_log_ticks``: 1-1.5-2-3-5-7 down to powers
    of ten as the span grows), so the highest and lowest points lie between labelled values."""
    axes.set_yscale("log")
    low, high = axes.get_ylim()
    decades = math.log10(high / low)
    mantissas = _log_ticks(decades)
    axes.set_ylim(_round_log(low, mantissas, up=False), _round_log(high, mantissas, up=True))
    axes.yaxis.set_major_locator(matplotlib.ticker.LogLocator(base=10, subs=mantissas))
    axes.yaxis.set_major_formatter(plain_numbers())
    axes.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())


LEGEND_INSIDE = 6  # legend entries drawn inside the axes; more go beside them
LEGEND_ENTRY_INCHES = 0.18  # one legend row at fontsize 8 (12 pt of text and spacing) + margin
DEFAULT_COLORS = 10  # matplotlib's default cycle; more groups would repeat its colours
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def group_styles(count: int) -> list[dict[str, str]]:
    """Line styles for ``count`` curves: the default cycle for up to 10, else a distinct
    (tab20 colour, marker) pair for each, so no two curves are drawn alike."""
    if count <= DEFAULT_COLORS:
        return [{} for _ in range(count)]
    colors = matplotlib.colormaps["tab20"].colors
    return [{"color": colors[i % len(colors)], "marker": MARKERS[i % len(MARKERS)],
             "markersize": 4} for i in range(count)]


def save_figure(figure: Figure, path: str | Path, dpi: int = 120) -> Path:
    """Write ``figure`` to ``path`` whole (a temporary file moved into place)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_savefig(figure, path, dpi=dpi)
    return path


def _axes(ax: Axes | None, figsize: tuple[float, float]) -> tuple[Figure, Axes, bool]:
    """The figure and axes to draw into: ``ax``'s, or a new figure's; and whether it is new."""
    if ax is not None:
        return ax.figure, ax, False
    figure = Figure(figsize=figsize)
    return figure, figure.add_subplot(), True


def _finish(figure: Figure, axes: Axes, title: str, ylabel: str, percent: bool = True,
            log: bool = False, own: bool = True) -> Figure:
    axes.set_xlabel("task length n (tokens)")
    axes.set_ylabel(textwrap.fill(ylabel, int(9 * figure.get_size_inches()[1])))
    if percent:
        axes.set_ylim(-2, 102)
    if log:
        label_log_axis(axes)
    width, height = figure.get_size_inches()
    entries = len(axes.get_legend_handles_labels()[1])
    if entries > LEGEND_INSIDE and own:  # a long legend would hide the curves: beside them
        figure.set_size_inches(width + 4.5, max(height, LEGEND_ENTRY_INCHES * entries + 0.6))
        axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    else:
        axes.legend(fontsize=8, loc="best")
    characters = int(12 * width)  # about what fits over the axes at fontsize 10
    axes.set_title("\n".join(textwrap.fill(line, characters) for line in title.split("\n")),
                   fontsize=10)
    axes.grid(alpha=0.3)
    if own:
        figure.tight_layout()
    return figure


def plot_eval_curve(lengths: Sequence[int], curves: dict[str, Sequence[float]],
                    interval: tuple[Sequence[float], Sequence[float]] | None,
                    train_lengths: Sequence[int], title: str, ax: Axes | None = None) -> Figure:
    """One run: each metric against length (fractions as %, or one metric in its own unit, such
    as perplexity); ``interval`` bands the first metric."""
    figure, axes, own = _axes(ax, (7, 4))
    mark_training_range(axes, train_lengths)
    x = np.asarray(lengths)
    first = next(iter(curves))
    scale = _scale(first)
    for index, (metric, values) in enumerate(curves.items()):
        line, = axes.plot(x, scale * np.asarray(values), marker="o", markersize=3,
                          linewidth=2 if index == 0 else 1, label=metric_label(metric))
        if index == 0 and interval is not None:
            axes.fill_between(x, scale * np.asarray(interval[0]), scale * np.asarray(interval[1]),
                              color=line.get_color(), alpha=0.2,
                              label=f"{metric_label(metric)}: 95% Wilson interval")
    ylabel = "accuracy (%)" if scale == 100.0 else _axis_label(first)
    return _finish(figure, axes, title, ylabel, percent=scale == 100.0, log=_log_axis(first),
                   own=own)


def plot_comparison(groups: dict[str, dict[str, np.ndarray]],
                    train_ranges: Sequence[Sequence[int]], metric: str, title: str,
                    show: str = "both", ax: Axes | None = None) -> Figure:
    """Curves per group: mean over seeds with a ±1 std band and/or the best seed; every
    training range of ``train_ranges`` ([(low, high), ...]) marked.

    ``groups[name]`` holds ``lengths``, ``mean``, ``std``, ``best`` (the metric's values) and
    ``runs``; the best seed is the max (the min for metrics where lower is better).
    """
    scale = _scale(metric)
    best = "max" if metric not in METRICS or METRICS[metric].higher_is_better else "min"
    figure, axes, own = _axes(ax, (8, 4.5))
    mark_training_ranges(axes, train_ranges)
    styles = group_styles(len(groups))
    if all(int(group["runs"]) == 1 for group in groups.values()):
        for style, (name, group) in zip(styles, groups.items(), strict=True):
            # one seed: no band and no best-seed line to draw
            axes.plot(group["lengths"], scale * group["mean"], linewidth=2,
                      **({"marker": "."} | style), label=f"{name} (1 seed)")
        return _finish(figure, axes, f"{title}\none seed per group", _axis_label(metric),
                       percent=scale == 100.0, log=_log_axis(metric), own=own)
    for style, (name, group) in zip(styles, groups.items(), strict=True):
        x, runs = group["lengths"], int(group["runs"])
        seeds = f"{runs} seed{'s' if runs != 1 else ''}"
        color = style.get("color")
        if show in ("mean", "both"):
            line, = axes.plot(x, scale * group["mean"], linewidth=2, **style,
                              label=f"{name} ({seeds}): mean ± std")
            color = line.get_color()
            band = np.array([group["mean"] - group["std"], group["mean"] + group["std"]])
            band = np.clip(band, 0, 1) if scale == 100.0 else band
            axes.fill_between(x, scale * band[0], scale * band[1], color=color, alpha=0.2)
        if show in ("max", "both"):
            axes.plot(x, scale * group["best"], linestyle="--", linewidth=1.2,
                      **(style | {"color": color}), label=f"{name} ({seeds}): {best} over seeds")
    shown = {"both": f"mean ± std (solid, band) and {best} over seeds (dashed)",
             "mean": "mean ± std over seeds", "max": f"{best} over seeds"}[show]
    return _finish(figure, axes, f"{title}\n{shown}", _axis_label(metric),
                   percent=scale == 100.0, log=_log_axis(metric), own=own)


def curve_figure(rows: Sequence[Mapping[str, float]], headline: str,
                 train_lengths: Sequence[int], title: str, ax: Axes | None = None) -> Figure:
    """One run's evaluation rows (one per length): the headline metric, with its 95% interval
    where the metric table gives one, and every other accuracy (%) beside it."""
    plotted = [headline]
    if METRICS[headline].unit == "%":  # with every other '%' accuracy on one axis
        plotted += [name for name, metric in METRICS.items() if metric.unit == "%"
                    and metric.higher_is_better and name != headline and name in rows[0]]
    curves = {metric: [row[metric] for row in rows] for metric in plotted}
    interval = None
    if METRICS[headline].interval:
        interval = ([row[f"{headline}_low"] for row in rows],
                    [row[f"{headline}_high"] for row in rows])
    return plot_eval_curve([row["length"] for row in rows], curves, interval, train_lengths,
                           title, ax)
