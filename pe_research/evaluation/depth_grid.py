"""A length x depth grid: a retrieval task (passkey) scored with the key at each depth, and its
heatmap (one panel per scheme or test-time setting, the training length marked).

Each depth is an evaluation of its own, ``eval/<name>_d<depth>.json``, with the task's
test-time keys ``task.depth_min = task.depth_max = depth``; files that already hold the lengths
under the same settings are read, not recomputed (``cached_rows``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from pe_research.evaluation.plots import save_figure
from pe_research.evaluation.results import cached_rows


def depth_grid(run_dir: str | Path, lengths: Sequence[int], depths: Sequence[float],
               overrides: Sequence[str] = (), name: str = "depth",
               metric: str = "exact_match") -> np.ndarray:
    """``metric`` ``[len(depths), len(lengths)]`` of the run's evaluation checkpoint, the key
    at each depth (0: first, 1: last), under ``overrides`` (test-time settings)."""
    grid = np.zeros((len(depths), len(lengths)))
    for row, depth in enumerate(depths):
        at_depth = (*overrides, f"task.depth_min={depth}", f"task.depth_max={depth}")
        rows = cached_rows(run_dir, f"{name}_d{depth:g}", lengths, at_depth)
        by_length = {int(r["length"]): float(r[metric]) for r in rows}
        grid[row] = [by_length[int(n)] for n in lengths]
    return grid


def plot_depth_grids(grids: Mapping[str, np.ndarray], lengths: Sequence[int],
                     depths: Sequence[float], train_length: int, title: str,
                     path: str | Path | None = None, columns: int = 4) -> Figure:
    """One heatmap per entry of ``grids`` (name -> ``[depths, lengths]`` fractions), the value
    in % in each cell, a line after the longest training length; saved to ``path`` if given."""
    rows = -(-len(grids) // columns)
    columns = min(columns, len(grids))
    figure = Figure(figsize=(3.0 * columns + 1.2, 2.8 * rows + 0.8), layout="constrained")
    trained = sum(n <= train_length for n in lengths) - 0.5  # between two length columns
    for index, (name, grid) in enumerate(grids.items()):
        axes = figure.add_subplot(rows, columns, index + 1)
        image = axes.imshow(100 * grid, vmin=0, vmax=100, cmap="viridis", aspect="auto",
                            origin="upper")
        for (i, j), value in np.ndenumerate(100 * grid):
            axes.text(j, i, f"{value:.0f}", ha="center", va="center", fontsize=6,
                      color="white" if value < 60 else "black")
        axes.axvline(trained, color="red", linewidth=1.5)
        axes.set_xticks(range(len(lengths)), [str(n) for n in lengths], fontsize=7,
                        rotation=90)
        axes.set_yticks(range(len(depths)), [f"{d:g}" for d in depths], fontsize=7)
        axes.set_title(name, fontsize=9)
        axes.set_xlabel("length (filler characters for passkey)", fontsize=7)
        if index % columns == 0:
            axes.set_ylabel("key depth (0: first, 1: last)", fontsize=7)
    figure.colorbar(image, ax=figure.axes, label="exact match of the key (%)", shrink=0.8)
    figure.suptitle(f"{title}\nred line: the longest training length ({train_length})",
                    fontsize=10)
    if path is not None:
        save_figure(figure, path)
    return figure
