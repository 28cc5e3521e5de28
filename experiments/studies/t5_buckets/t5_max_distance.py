"""T5's max_distance changed at test time: which distances share a trained bucket, no retraining.

    python experiments/studies/t5_buckets/t5_max_distance.py runs/t5_buckets_copy/num_buckets=16 \\
        runs/t5_buckets/num_buckets=16 runs/demo_reverse_seeds/pe.type=t5 \\
        --max-distances 32,128,1024,524288 --lengths 1:32 --out docs/figures/t5_max_distance.png

Each positional argument is a group: a directory of trained T5 runs (``seed_*``, as a sweep
writes them) or one run. Every run is evaluated (decoded exact match, as ``pe-research eval``)
at ``--lengths`` once per max_distance M, into ``RUN/eval/max_distance_<M>.json`` (kept and
reused on a rerun). T5's bias table is ``[num_buckets, H]`` whatever M is; M only decides which
distances share a bucket (``positional/t5.py``). Prints per group and M the in-distribution and
beyond-training means over seeds and the steepest one-length fall of the mean beyond training
(where the curve breaks), and writes one figure: a panel per group, a curve per M (mean over
seeds, band: min-max), training range marked.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from pe_research.cli.eval import parse_lengths
from pe_research.cli.script import run_script, write_outputs
from pe_research.core.errors import UsageError
from pe_research.data import covering_buckets
from pe_research.evaluation.plots import mark_training_range
from pe_research.evaluation.results import cached_exact_match
from pe_research.runs.run_dir import grid_point_runs, load_run_config


def group_runs(group: Path) -> list[Path]:
    """The T5 runs of ``group`` (its ``seed_*`` directories, or the run itself)."""
    runs = grid_point_runs(group)
    for run in runs:
        scheme = load_run_config(run, validate=False).model.pe.type
        if scheme != "t5":
            raise UsageError(f"{run} was trained with model.pe.type={scheme!r}; max_distance "
                             "is T5's: give T5 runs")
    return runs


def exact_match(run: Path, max_distance: int, lengths: tuple[int, ...]) -> np.ndarray:
    """Decoded exact match [L] of ``run`` at ``lengths`` with T5's max_distance set to M."""
    # A bucket wide enough for the longest length (sources, and targets up to twice as long).
    buckets = covering_buckets(load_run_config(run, validate=False).data.buckets,
                               2 * max(lengths) + 1)
    return cached_exact_match(run, f"max_distance_{max_distance}", lengths, [
        f"model.pe.max_distance={max_distance}", f"data.buckets={buckets}"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("groups", nargs="+", type=Path, help="grid-point or run directories")
    parser.add_argument("--max-distances", default="32,128,1024",
                        help="values of model.pe.max_distance, comma-separated")
    parser.add_argument("--lengths", default="1:32", help="task lengths: 1:32 or 1,2,8,16")
    parser.add_argument("--out", type=Path, default=Path("t5_max_distance.png"))
    args = parser.parse_args()
    lengths = parse_lengths(args.lengths)
    try:
        distances = sorted({int(m) for m in args.max_distances.split(",") if m.strip()})
    except ValueError:
        distances = []
    if not distances:
        raise UsageError(f"--max-distances {args.max_distances}: give integers, e.g. 32,128")
    groups = {group: group_runs(group) for group in args.groups}
    figure = Figure(figsize=(5.2 * len(groups), 4.2), layout="constrained")
    panels = figure.subplots(1, len(groups), squeeze=False)[0]
    x = np.array(lengths)
    for axes, (group, runs) in zip(panels, groups.items(), strict=True):
        config = load_run_config(runs[0], validate=False)
        low, high = (int(v) for v in config.data.train_lengths)
        trained_with = int(config.model.pe.max_distance)
        buckets = int(config.model.pe.num_buckets)
        title = f"{config.task.name}, {buckets} buckets ({len(runs)} seeds)"
        print(f"\n{group}: {title}, trained with max_distance {trained_with}")
        print(f"| max_distance | in-dist {low}-{high} (%) | beyond {high} (%) | steepest fall |")
        print("|---:|---:|---:|---|")
        for max_distance in distances:
            values = 100 * np.stack([exact_match(run, max_distance, lengths) for run in runs])
            mean = values.mean(axis=0)
            inside, beyond = (x >= low) & (x <= high), x > high
            fall = int(np.argmax(np.where(beyond[1:], mean[:-1] - mean[1:], -np.inf))) + 1
            label = f"{max_distance}" + (" (trained)" if max_distance == trained_with else "")
            print(f"| {label} | {mean[inside].mean():.1f} | {mean[beyond].mean():.1f} | "
                  f"n={x[fall]}: {mean[fall - 1]:.0f} → {mean[fall]:.0f} |")
            line, = axes.plot(x, mean, marker=".", label=f"max_distance {label}")
            axes.fill_between(x, values.min(axis=0), values.max(axis=0), alpha=0.15,
                              color=line.get_color(), linewidth=0)
        mark_training_range(axes, (low, high))
        axes.set(title=title, xlabel="task length n (tokens)", ylim=(-2, 102),
                 ylabel="decoded exact match (%)")
        axes.legend(fontsize=8)
    figure.suptitle("T5 bias with max_distance changed at evaluation (mean over seeds, "
                    "band: min-max)")
    write_outputs(figure, args.out)


if __name__ == "__main__":
    run_script(main)
