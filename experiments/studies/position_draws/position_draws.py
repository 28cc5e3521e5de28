"""Randomized runs scored on one position draw per length, against one draw per example.

    python experiments/studies/position_draws/position_draws.py \\
        runs/rpe_neos/pe.type=rope,max_position=128,... \\
        runs/rpe_neos/pe.type=learned,max_position=128,... --metric output_token_accuracy \\
        --out docs/figures/position_draws.png

Each positional argument is a group: a directory of trained runs (``seed_*``, as a sweep writes
them) or one run, trained with randomized positions and evaluated with them
(``model.pe.randomize.eval_policy=randomized``). Every run is evaluated twice over its
evaluation lengths (``--lengths`` to choose others), into ``RUN/eval/one_draw.json``
(``model.pe.randomize.eval_per=batch``: all examples of a length on one draw, as the
randomized-PE paper's evaluation scores them) and ``RUN/eval/per_example.json`` (``eval_per =
example``, the default: each example on its own draw), each kept and reused on a rerun. Both
estimate the same accuracy (an example's positions have the same distribution either way); the
difference is what one draw adds by chance. Prints per run the metric's mean over the training
lengths and beyond them under each, and the largest difference at one length; writes one figure,
a panel per group (three to a row), a curve per seed and scoring, training range marked.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from pe_research.cli.eval import parse_lengths
from pe_research.cli.script import run_script, write_outputs
from pe_research.core.errors import UsageError
from pe_research.evaluation.plots import mark_training_range
from pe_research.evaluation.range_eval import default_lengths
from pe_research.evaluation.results import cached_rows
from pe_research.model.metrics import METRICS
from pe_research.positional.randomize import randomize_settings
from pe_research.runs.run_dir import grid_point_runs, load_run_config

SCORINGS = {"one_draw": ["model.pe.randomize.eval_per=batch"], "per_example": []}


def group_runs(group: Path) -> list[Path]:
    """The runs of ``group`` (its ``seed_*`` directories, or the run itself); each must draw
    its test positions."""
    runs = grid_point_runs(group)
    for run in runs:
        pe = load_run_config(run, validate=False).model.pe.to_dict()
        max_position, policy = randomize_settings(pe)
        if max_position == 0 or policy != "randomized":
            raise UsageError(f"{run} draws no test positions (model.pe.randomize.max_position="
                             f"{max_position}, eval_policy={policy!r}): give randomized runs")
    return runs


def scores(run: Path, scoring: str, metric: str, lengths: tuple[int, ...]) -> np.ndarray:
    """``metric`` ``[L]`` of ``run`` at ``lengths`` under ``scoring`` (a key of ``SCORINGS``),
    read from ``RUN/eval/<scoring>.json`` or evaluated into it."""
    rows = cached_rows(run, scoring, lengths, SCORINGS[scoring])
    return np.array([row[metric] for row in rows])


def summary(lengths: np.ndarray, one_draw: np.ndarray, per_example: np.ndarray,
            trained: tuple[int, int]) -> dict[str, float]:
    """Means over the training lengths and beyond them under each scoring, and the largest
    ``|one_draw - per_example|`` at one length beyond training with that length."""
    low, high = trained
    inside, beyond = (lengths >= low) & (lengths <= high), lengths > high
    gaps = np.where(beyond, np.abs(one_draw - per_example), -1.0)
    worst = int(np.argmax(gaps))
    return {"inside_one_draw": float(one_draw[inside].mean()),
            "inside_per_example": float(per_example[inside].mean()),
            "beyond_one_draw": float(one_draw[beyond].mean()),
            "beyond_per_example": float(per_example[beyond].mean()),
            "largest_gap": float(gaps[worst]), "largest_gap_length": int(lengths[worst])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("groups", nargs="+", type=Path, help="grid-point or run directories")
    parser.add_argument("--metric", default="output_token_accuracy",
                        choices=sorted(name for name, metric in METRICS.items()
                                       if metric.unit == "%"))
    parser.add_argument("--lengths", default="",
                        help="task lengths (1:40 or 1,2,8); default each run's eval lengths")
    parser.add_argument("--out", type=Path, default=Path("position_draws.png"))
    parser.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    args = parser.parse_args()
    groups = {group: group_runs(group) for group in args.groups}
    columns = min(3, len(groups))
    rows = -(-len(groups) // columns)
    figure = Figure(figsize=(5.2 * columns, 4.2 * rows), layout="constrained")
    panels = figure.subplots(rows, columns, squeeze=False).flatten()
    for unused in panels[len(groups):]:
        unused.set_visible(False)
    record = {}
    table = ["| run | in-dist, one draw / per example (%) | beyond, one draw / per example (%) "
             "| largest gap at one length (points) |", "|---|---|---|---|"]
    for index, (axes, runs) in enumerate(zip(panels[:len(groups)], groups.values(), strict=True)):
        config = load_run_config(runs[0], validate=False)
        trained = tuple(int(v) for v in config.data.train_lengths)
        lengths = tuple(parse_lengths(args.lengths)) if args.lengths else default_lengths(config)
        x = np.array(lengths)
        for run in runs:
            curves = {name: 100 * scores(run, name, args.metric, lengths) for name in SCORINGS}
            numbers = summary(x, curves["one_draw"], curves["per_example"], trained)
            record[str(run)] = {**numbers, "lengths": list(lengths),
                                **{name: curve.tolist() for name, curve in curves.items()}}
            table.append(f"| {run} | {numbers['inside_one_draw']:.1f} / "
                         f"{numbers['inside_per_example']:.1f} | {numbers['beyond_one_draw']:.1f}"
                         f" / {numbers['beyond_per_example']:.1f} | {numbers['largest_gap']:.1f} "
                         f"(n={numbers['largest_gap_length']}) |")
            line, = axes.plot(x, curves["per_example"], marker=".",
                              label=f"{run.name}, per example")
            axes.plot(x, curves["one_draw"], linestyle="--", color=line.get_color(),
                      label=f"{run.name}, one draw")
        mark_training_range(axes, trained)
        max_position, _ = randomize_settings(config.model.pe.to_dict())
        axes.set(title=f"{config.task.name}, {config.model.pe.type} over [0, {max_position})",
                 xlabel="task length n (tokens)", ylim=(-2, 102))
        if index % columns == 0:
            axes.set_ylabel(f"{args.metric.replace('_', ' ')} (%)")
        axes.legend(fontsize=7)
    figure.suptitle("Randomized positions at test time: each example on its own draw (solid) "
                    "or all examples of a length on one (dashed)")
    print("\n" + "\n".join(table))  # after the evaluations' own output
    write_outputs(figure, args.out, record, args.json)


if __name__ == "__main__":
    run_script(main)
