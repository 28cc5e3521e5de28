"""The papers' table: tasks grouped by Chomsky class, schemes plain and randomized, over seeds.

Each cell scores one (task, scheme, plain | randomized) group of runs on the test lengths, the
lengths beyond training (``metric.over_lengths`` of the evaluated lengths > the training
maximum): the best seed (max, the randomized-PE and Chomsky-hierarchy papers' choice) with
mean ± std (ddof=1) over seeds beside it, and the in-distribution score (mean over seeds) so an
undertrained cell shows. The papers average uniformly over every test length; where the runs
were evaluated on a sparse grid the table says so and adds the uniform average interpolated
between evaluated lengths (``group_summary.uniform_mean``). A randomized cell is marked above
(or below) its plain scheme only where every seed of one beats every seed of the other; else
the two are level. Rows are the tasks grouped R (regular), DCF (deterministic context-free), CS
(context-sensitive), then any other task; written as markdown, CSV and a heatmap of the best
seeds.
"""

from __future__ import annotations

import csv
import dataclasses
import textwrap
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from pe_research.core.atomic_files import atomic_open, atomic_savefig, atomic_write_text
from pe_research.core.errors import ConfigError
from pe_research.evaluation.compare import RunCurve, load_curve
from pe_research.evaluation.finding import seed_order
from pe_research.evaluation.group_summary import lengths_text, run_scores
from pe_research.model.metrics import get_metric
from pe_research.runs.run_dir import DEFAULT_EVAL_NAME
from pe_research.tasks import TASKS

CLASSES = (("regular", "R"), ("dcf", "DCF"), ("cs", "CS"))  # task family -> the papers' label
PAPER_METRIC = "output_token_accuracy"


@dataclasses.dataclass(frozen=True)
class Cell:
    """One group's test-length score per seed and its summary."""

    values: tuple[float, ...]
    best: float
    mean: float
    std: float
    uniform: float  # mean over seeds of the uniform (interpolated) average over test lengths
    in_dist: float  # mean over seeds of the mean over the training lengths
    dense: bool  # every test length evaluated: ``mean`` is the papers' uniform average


def chomsky_class(task: str) -> str:
    """'R', 'DCF', 'CS' for the benchmark tasks; 'other' for the rest."""
    family = getattr(TASKS.get(task), "family", "")
    return dict(CLASSES).get(family, "other")


def column_of(curve: RunCurve) -> str:
    """``<scheme>`` or ``<scheme> randomized``: the table's column for a run."""
    pe = curve.config["model"]["pe"]
    randomized = int((pe.get("randomize") or {}).get("max_position", 0)) > 0
    return f"{pe['type']}{' randomized' if randomized else ''}"


def versus_plain(cells: dict[tuple[str, str], Cell], task: str, column: str,
                 higher_is_better: bool = True) -> str:
    """``above``, ``below`` or ``level``: a randomized cell against its plain scheme's, by
    whether every seed of one beats every seed of the other; ``""`` for a plain cell or one
    without its plain counterpart."""
    plain_column = column.removesuffix(" randomized")
    if plain_column == column or (task, plain_column) not in cells:
        return ""
    randomized, plain = cells[(task, column)].values, cells[(task, plain_column)].values
    order = seed_order(randomized, plain)
    if higher_is_better or order == "level":
        return order
    return "below" if order == "above" else "above"


def build_cells(curves: Sequence[RunCurve], metric_name: str,
                ) -> dict[tuple[str, str], Cell]:
    """``{(task, column): Cell}`` over the given runs."""
    metric = get_metric(metric_name)
    grouped: dict[tuple[str, str], list[RunCurve]] = {}
    for curve in curves:
        grouped.setdefault((curve.config["task"]["name"], column_of(curve)), []).append(curve)
    cells = {}
    for key, members in grouped.items():
        scores = [run_scores(metric, c.lengths, c.values, c.train_lengths) for c in members]
        array = np.asarray([s.beyond for s in scores], float)
        std = float(np.std(array, ddof=1)) if len(members) > 1 else float("nan")
        cells[key] = Cell(
            tuple(float(v) for v in array), float(metric.best(array)), float(np.mean(array)),
            std, float(np.mean([s.uniform for s in scores])),
            float(np.mean([s.in_dist for s in scores])), all(s.dense for s in scores))
    return cells


def ordered(cells: dict[tuple[str, str], Cell]) -> tuple[list[str], list[str]]:
    """Task rows (by class, then registry order) and scheme columns (plain before randomized)."""
    tasks = sorted({task for task, _ in cells},
                   key=lambda t: ([label for _, label in CLASSES] + ["other"]).index(
                       chomsky_class(t)) * 1000 + (list(TASKS).index(t) if t in TASKS else 999))
    columns = sorted({column for _, column in cells},
                     key=lambda c: (c.replace(" randomized", ""), c.endswith("randomized")))
    return tasks, columns


def write_paper_table(run_dirs: Sequence[str | Path], out_dir: str | Path, *,
                      metric: str = PAPER_METRIC,
                      eval_name: str = DEFAULT_EVAL_NAME) -> dict[str, Path]:
    """``paper_table.{md,csv,png}`` in ``out_dir`` from the runs' eval results."""
    definition = get_metric(metric)
    if not run_dirs:
        raise ConfigError("RUN_DIR", (), "give at least one run directory (or a glob)")
    curves = [load_curve(run_dir, metric, eval_name) for run_dir in run_dirs]
    cells = build_cells(curves, metric)
    tasks, columns = ordered(cells)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"markdown": out_dir / "paper_table.md", "csv": out_dir / "paper_table.csv",
             "png": out_dir / "paper_table.png"}
    best = "max" if definition.higher_is_better else "min"
    show = definition.display
    sparse = not all(cell.dense for cell in cells.values())
    grids = sorted({lengths_text([int(n) for n in c.lengths if n > c.train_lengths[1]])
                    for c in curves})
    averaging = (f"the mean over the evaluated test lengths, a sparse grid ({'; '.join(grids)}), "
                 "not the papers' uniform average over every test length; 'uniform' gives that "
                 "average interpolated linearly between evaluated lengths" if sparse else
                 f"none, one test length ({'; '.join(grids)})" if all(map(str.isdigit, grids))
                 else f"uniform over every test length ({'; '.join(grids)}), as the papers "
                 "average")
    lines = [f"# {definition.label}, averaged over the test lengths (beyond training)", "",
             f"Each cell: the best seed ({best} over seeds), then mean ± std over seeds "
             "(std ddof=1) and the number of seeds"
             + (", the uniform average (mean over seeds)" if sparse else "")
             + ", and the in-distribution score (mean over seeds, over the training lengths; "
             "a low one marks an undertrained cell). A randomized cell says 'above' or 'below' "
             "its plain scheme where every seed of one beats every seed of the other. "
             f"Averaging over lengths: {averaging}. Metric: `{metric}`, from "
             f"`eval/{eval_name}.json`.", "",
             "| class | task | " + " | ".join(columns) + " |",
             "|---|---|" + "---:|" * len(columns)]
    verdicts = {(task, column): versus_plain(cells, task, column, definition.higher_is_better)
                for task, column in cells}
    for task in tasks:
        row = []
        for column in columns:
            cell = cells.get((task, column))
            row.append("-" if cell is None else f"**{show(cell.best)}** ({show(cell.mean)} ± "
                       f"{show(cell.std)}, n={len(cell.values)}"
                       + (f"; uniform {show(cell.uniform)}" if sparse else "")
                       + f"; in-dist {show(cell.in_dist)})"
                       + _marked(verdicts[(task, column)]))
        lines.append(f"| {chomsky_class(task)} | {task} | " + " | ".join(row) + " |")
    atomic_write_text(paths["markdown"], "\n".join(lines) + "\n")
    with atomic_open(paths["csv"], newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["class", "task", "column", f"{best}", "mean", "std", "seeds",
                         "uniform_mean", "dense_grid", "in_dist_mean", "per_seed",
                         "vs_plain"])
        for task in tasks:
            for column in columns:
                if (task, column) in cells:
                    cell = cells[(task, column)]
                    writer.writerow([chomsky_class(task), task, column, cell.best, cell.mean,
                                     cell.std, len(cell.values), cell.uniform, cell.dense,
                                     cell.in_dist, " ".join(f"{v:.6g}" for v in cell.values),
                                     verdicts[(task, column)]])
    trained = sorted({lengths_text(list(range(c.train_lengths[0], c.train_lengths[1] + 1)))
                      for c in curves})
    plot_heatmap(cells, tasks, columns, heatmap_title(definition, grids, trained), definition,
                 paths["png"])
    return paths


def _marked(verdict: str) -> str:
    return f" {verdict}" if verdict in ("above", "below") else ""


def heatmap_title(definition, test_grids: Sequence[str], trained: Sequence[str]) -> str:
    """What the heatmap's cells are: metric, test lengths, training lengths, best seed."""
    over = (f"at test length {test_grids[0]}" if len(test_grids) == 1
            and test_grids[0].isdigit() else f"mean over the test lengths {'; '.join(test_grids)}")
    return f"{definition.label}, {over} (trained on {'; '.join(trained)}); best of the seeds"


def plot_heatmap(cells, tasks: list[str], columns: list[str], title: str, definition,
                 path: Path) -> None:
    """Best-seed scores as a task x scheme heatmap, values written in the cells."""
    grid = np.full((len(tasks), len(columns)), np.nan)
    for i, task in enumerate(tasks):
        for j, column in enumerate(columns):
            if (task, column) in cells:
                grid[i, j] = cells[(task, column)].best
    scale = 100.0 if definition.unit == "%" else 1.0
    width = max(6.5, 2.5 + 1.2 * len(columns))  # room for the title with few columns
    figure = Figure(figsize=(width, max(3.0, 1.4 + 0.45 * len(tasks))))
    axes = figure.add_subplot()
    image = axes.imshow(grid * scale, cmap="viridis", vmin=0, aspect="auto",
                        vmax=100 if definition.unit == "%" else None)
    axes.set_xticks(range(len(columns)), columns, rotation=30, ha="right")
    axes.set_yticks(range(len(tasks)), [f"{chomsky_class(t)}: {t}" for t in tasks])
    for i in range(len(tasks)):
        for j in range(len(columns)):
            if not np.isnan(grid[i, j]):
                axes.text(j, i, f"{grid[i, j] * scale:.0f}", ha="center", va="center",
                          color="white" if grid[i, j] * scale < 60 else "black", fontsize=8)
    figure.colorbar(image, ax=axes, label=f"best seed ({definition.unit})")
    axes.set_title(textwrap.fill(title, width=int(7 * width)), fontsize=10)
    figure.tight_layout()
    atomic_savefig(figure, path)
