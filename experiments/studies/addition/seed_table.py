"""python experiments/studies/addition/seed_table.py runs/addition_positions [...] \
    [--figure docs/figures/addition_exact_match.png]

Per arm of the addition sweep (``arithmetic_positions_cpu.ARMS``; a run belongs to the most
specific arm whose overrides its config holds, whichever sweep directory it is in), from each
run's ``eval/eval.json``: decoded exact match and output-token accuracy averaged with equal
weight over the training lengths (1-10), the lengths 15-25 and the lengths 30-40, mean ± std
over seeds (per seed); then each pair of arms (above / below where every seed is above / below
every seed of the other, else level: the claims table's rule). ``--figure``: both metrics by
length, each arm's mean over seeds with its range (min to max), the training lengths shaded.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import statistics
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from pe_research.config import flat_config
from pe_research.evaluation.finding import seed_order
from pe_research.evaluation.plots import mark_training_range, save_figure
from pe_research.evaluation.results import read_results
from pe_research.runs.run_dir import RunDir, read_run_config

SWEEP_FILE = Path(__file__).with_name("arithmetic_positions_cpu.py")

RANGES = {"1-10": (1, 10), "15-25": (15, 25), "30-40": (30, 40)}
METRICS = ("exact_match", "output_token_accuracy")
COLUMNS = [f"{metric} {name}" for metric in METRICS for name in RANGES]


def run_rows(run_dir: Path) -> list[dict[str, Any]]:
    """The rows (one per evaluated length) of a run's ``eval/eval.json``."""
    return read_results(RunDir(run_dir).eval_results())["rows"]


def run_scores(rows: list[dict[str, Any]]) -> dict[str, float]:
    """``{"metric range": %}`` of one run's rows."""
    return {f"{metric} {name}": 100 * statistics.mean(row[metric] for row in rows
                                                      if low <= row["length"] <= high)
            for metric in METRICS for name, (low, high) in RANGES.items()}


def draw(curves: dict[str, list[list[dict[str, Any]]]], path: Path) -> Path:
    """Each arm's mean over seeds (a band from the lowest to the highest seed) by length, one
    panel per metric, the training lengths 1-10 shaded."""
    figure = Figure(figsize=(12, 4.2), layout="constrained")
    panels = figure.subplots(1, len(METRICS), sharex=True)
    for metric, axes in zip(METRICS, panels, strict=True):
        for arm, runs in curves.items():
            lengths = [row["length"] for row in runs[0]]
            values = 100 * np.array([[row[metric] for row in rows] for rows in runs])
            line, = axes.plot(lengths, values.mean(axis=0), marker="o", markersize=3,
                              label=f"{arm} ({len(runs)} seeds)")
            axes.fill_between(lengths, values.min(axis=0), values.max(axis=0),
                              color=line.get_color(), alpha=0.12, linewidth=0)
        mark_training_range(axes, RANGES["1-10"])
        axes.set(xlabel="digits per operand n (two n-digit operands)", ylabel="%",
                 ylim=(-2, 102))
        axes.grid(alpha=0.3)
    panels[0].set_title("decoded exact match: the whole sum right", fontsize=10)
    panels[1].set_title("decoded output-token accuracy: each output token right\n"
                        "(with index hints, half of them are hint symbols)", fontsize=10)
    panels[1].legend(fontsize=8, loc="upper right")
    figure.suptitle("Addition, trained on 1-10 digits: 4-layer decoder-only, d_model 64, 5,000 "
                    "steps; mean over seeds, band from the lowest to the highest seed")
    return save_figure(figure, path)


def study_arms() -> dict[str, dict[str, Any]]:
    """The sweep file's ``ARMS``: name -> overrides."""
    spec = importlib.util.spec_from_file_location("arithmetic_positions_cpu", SWEEP_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ARMS


def arm_of(config: Mapping[str, Any], arms: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The arm with the most overrides of those whose every override ``config`` holds."""
    flat = flat_config(dict(config))
    holding = [name for name, overrides in arms.items()
               if all(flat.get(key) == wanted for key, wanted in overrides.items())]
    return max(holding, key=lambda name: len(arms[name]), default=None)


def main(sweep_dirs: list[str], figure: str | None = None) -> None:
    arms = study_arms()
    found: dict[str, list[list[dict[str, Any]]]] = defaultdict(list)
    for sweep_dir in sweep_dirs:
        for run_dir in sorted(Path(sweep_dir).glob("*/seed_*")):
            arm = arm_of(read_run_config(run_dir), arms)
            if arm is not None and RunDir(run_dir).eval_results().exists():
                found[arm].append(run_rows(run_dir))
    curves = {name: found[name] for name in arms if name in found}
    points = {name: [run_scores(rows) for rows in runs] for name, runs in curves.items()}
    print("mean ± std over seeds (per seed), %\n")
    print("| arm | " + " | ".join(COLUMNS) + " |")
    print("|---|" + "---:|" * len(COLUMNS))
    for point, runs in points.items():
        cells = [f"{statistics.mean(v):.1f} ± {statistics.stdev(v):.1f} "
                 f"({', '.join(f'{x:.1f}' for x in v)})"
                 for v in ([run[c] for run in runs] for c in COLUMNS)]
        print(f"| {point} | " + " | ".join(cells) + " |")
    print("\nevery seed against every seed:")
    for (a, runs_a), (b, runs_b) in itertools.combinations(points.items(), 2):
        marks = [f"{c} {seed_order([x[c] for x in runs_a], [x[c] for x in runs_b])}"
                 for c in COLUMNS]
        print(f"- {a} vs {b}: " + "; ".join(marks))
    if figure:
        print(f"\nfigure: {draw(curves, Path(figure))}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    parser.add_argument("sweep_dirs", nargs="+", help="sweep directories of the study's arms")
    parser.add_argument("--figure", help="where to draw the figure (PNG)")
    arguments = parser.parse_args()
    main(arguments.sweep_dirs, arguments.figure)
