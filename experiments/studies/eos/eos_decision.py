"""The EOS decision per scheme: decoding freely, and at the oracle length, with and without EOS.

    python experiments/studies/eos/eos_decision.py runs/demo_seeds/pe.type=* \\
        runs/demo_reverse_seeds/pe.type=* runs/demo_eos/task.name=* --lengths 1:16 \\
        --out docs/figures/demo_eos.png --stops-out docs/figures/demo_eos_stops.png

Each positional argument is a sweep's grid point (its ``seed_*`` runs) or one run, trained with
``train.predict_eos`` True (+EOS) or False (-EOS). Every run is evaluated at ``--lengths`` with
``eval.oracle_length=True`` (as ``pe-research eval --config.eval.oracle_length=True``), a grid
point's seeds in one program, into ``RUN/eval/oracle.json`` (kept and reused on a rerun). For
each task and scheme it prints, in distribution and beyond the training lengths (mean over seeds
and lengths): +EOS decoded exact match, where the +EOS decodes stopped, +EOS and -EOS exact
match at the oracle length; and it draws a panel per task and scheme with those curves (mean
over seeds, band: min-max), training range marked. A second figure and table (``--stops-out``)
show where the +EOS decodes that end too early end, per length beyond training: at the longest
trained length whatever the true one (a length attractor), or near the true length. Newman et
al. (2020) find -EOS ahead of +EOS at the oracle length; this asks whether that holds per
positional scheme.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from pe_research.cli.eval import parse_lengths
from pe_research.cli.script import run_script, write_outputs
from pe_research.core.errors import UsageError
from pe_research.evaluation.members_eval import evaluate_members
from pe_research.evaluation.plots import mark_training_range
from pe_research.evaluation.results import read_rows, write_results
from pe_research.runs.restore import load_run
from pe_research.runs.run_dir import grid_point_runs, load_run_config

NAME = "oracle"
OVERRIDES = ("eval.oracle_length=True",)
NEEDED = ("exact_match", "oracle_exact_match", "stopped_early", "stopped_late", "missing_tokens")
PERCENT = ("exact_match", "oracle_exact_match", "stopped_early", "stopped_late")
# (arm, metric, label): the curves of a panel and the columns of the table.
CURVES = ((True, "exact_match", "+EOS, decoded freely"),
          (True, "oracle_exact_match", "+EOS, at the oracle length"),
          (False, "oracle_exact_match", "-EOS, at the oracle length"))


def point_rows(runs: list[Path], lengths: tuple[int, ...]) -> list[list[dict[str, float]]]:
    """Rows at ``lengths`` of each run of one grid point: cached, or evaluated together."""
    cached = [read_rows(run, NAME, lengths, OVERRIDES) for run in runs]
    if all(rows is not None and all(m in rows[0] for m in NEEDED) for rows in cached):
        return cached
    loaded = [load_run(run, None, list(OVERRIDES)) for run in runs]
    results = evaluate_members(loaded, lengths)
    for run, result in zip(loaded, results, strict=True):
        write_results(run, result, NAME, list(OVERRIDES))
    return [[row.as_dict() for row in result.rows] for result in results]


def collect(points: list[Path], lengths: tuple[int, ...]):
    """``{(task, scheme): {predict_eos: {metric: [seeds, L]}}}`` and each task's training range."""
    values: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    ranges: dict[str, tuple[int, int]] = {}
    for point in points:
        runs = grid_point_runs(point)
        config = load_run_config(runs[0], validate=False)
        task, scheme = config.task.name, config.model.pe.type
        train_range = tuple(int(n) for n in config.data.train_lengths)
        if ranges.setdefault(task, train_range) != train_range:
            raise UsageError(f"{point}: trained on {task} lengths {train_range}, other runs on "
                             f"{ranges[task]}; give runs of one training range per task")
        arm = values[task, scheme][bool(config.train.predict_eos)]
        for rows in point_rows(runs, lengths):
            for metric in NEEDED:
                arm[metric].append([row[metric] for row in rows])
    for (task, scheme), arms in values.items():
        if set(arms) != {True, False}:
            missing = "-EOS" if True in arms else "+EOS"
            raise UsageError(f"{task}, {scheme}: no {missing} runs given; give both arms "
                             "(train.predict_eos=True and False)")
    return values, ranges


def mean_over(curve: np.ndarray, mask: np.ndarray) -> float:
    """Mean of ``curve`` [L] where ``mask``; NaN where no length is (SCAN tests only beyond)."""
    return float(curve[mask].mean()) if mask.any() else float("nan")


def stop_lengths(arm: dict[str, list], x: np.ndarray) -> np.ndarray:
    """Mean length ``[L]`` at which the decodes that stopped early stopped, pooled over seeds
    (each seed scores the same number of examples per length); NaN where none did."""
    early = np.sum(arm["stopped_early"], axis=0)
    missing = np.sum(arm["missing_tokens"], axis=0)  # 0 for the decodes that did not stop early
    return np.where(early > 0, x - missing / np.maximum(early, 1e-12), np.nan)


def plot_stops(values, ranges, x: np.ndarray) -> dict:
    """A panel per task: where +EOS decodes that stop early stop, per scheme, beyond training;
    prints it as a table (stop length, and the share that stopped early)."""
    tasks = sorted(ranges)
    figure = Figure(figsize=(5.2 * len(tasks), 4.2), layout="constrained")
    panels = figure.subplots(1, len(tasks), squeeze=False)[0]
    numbers = {}
    for axes, task in zip(panels, tasks, strict=True):
        low, high = ranges[task]
        beyond = x > high
        print(f"\n{task}, +EOS decodes beyond {high}: mean length where those that stopped early "
              "stopped (share that stopped early, %)")
        print("| scheme | " + " | ".join(f"n={n}" for n in x[beyond]) + " |")
        print("|---|" + "---|" * int(beyond.sum()))
        for (name, scheme), arms in sorted(values.items()):
            if name != task:
                continue
            stops = stop_lengths(arms[True], x)
            share = 100 * np.mean(arms[True]["stopped_early"], axis=0)
            numbers[f"{task}/{scheme}"] = {int(n): [float(stop), float(part)] for n, stop, part
                                           in zip(x[beyond], stops[beyond], share[beyond],
                                                  strict=True)}
            print(f"| {scheme} | " + " | ".join(
                "-" if np.isnan(stop) else f"{stop:.1f} ({part:.0f})"
                for stop, part in zip(stops[beyond], share[beyond], strict=True)) + " |")
            axes.plot(x[beyond], stops[beyond], marker=".", label=scheme)
        axes.plot(x[beyond], x[beyond], color="black", linestyle=":", label="the true length")
        axes.axhline(high, color="grey", linestyle="--", linewidth=1,
                     label=f"longest trained length ({high})")
        axes.set(title=f"{task}: +EOS models, trained on lengths {low}-{high}",
                 xlabel="task length n (tokens)",
                 ylabel="where early stops stop (mean decoded length)")
        axes.legend(fontsize=8)
    figure.suptitle("Where +EOS decodes that end too early end\n(pooled over seeds)")
    return {"figure": figure, "numbers": numbers}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("points", nargs="+", type=Path, help="grid-point or run directories")
    parser.add_argument("--lengths", default="1:16", help="task lengths: 1:16 or 1,2,8,16")
    parser.add_argument("--out", type=Path, default=Path("eos_decision.png"))
    parser.add_argument("--stops-out", type=Path, default=Path("eos_stops.png"),
                        help="the figure of where +EOS decodes stop")
    parser.add_argument("--numbers", type=Path, default=None, help="also write the means here")
    args = parser.parse_args()
    lengths = parse_lengths(args.lengths)
    values, ranges = collect(args.points, lengths)
    tasks = sorted(ranges)
    schemes = sorted({scheme for _, scheme in values})
    x = np.array(lengths)
    figure = Figure(figsize=(3.4 * len(schemes), 3.0 * len(tasks) + 0.6), layout="constrained")
    panels = figure.subplots(len(tasks), len(schemes), squeeze=False, sharey=True)
    record = {}
    print("| task | scheme | seeds +/- | +EOS decoded in / out | +EOS stopped early out | "
          "+EOS oracle out | -EOS oracle in / out |")
    print("|---|---|---|---|---|---|---|")
    for row, task in enumerate(tasks):
        low, high = ranges[task]
        inside, beyond = (x >= low) & (x <= high), x > high
        for column, scheme in enumerate(schemes):
            if (task, scheme) not in values:
                panels[row, column].set_visible(False)
                continue
            arms = {arm: {m: (100 if m in PERCENT else 1) * np.array(v)
                          for m, v in metrics.items()}
                    for arm, metrics in values[task, scheme].items()}
            means = {f"{'+' if arm else '-'}EOS {metric} {where}":
                     mean_over(arms[arm][metric].mean(axis=0), mask)
                     for arm in (True, False) for metric in PERCENT
                     for where, mask in (("in", inside), ("out", beyond))}
            record[f"{task}/{scheme}"] = means
            seeds = f"{len(arms[True]['exact_match'])}/{len(arms[False]['exact_match'])}"
            print(f"| {task} | {scheme} | {seeds} | {means['+EOS exact_match in']:.1f} / "
                  f"{means['+EOS exact_match out']:.1f} | "
                  f"{means['+EOS stopped_early out']:.1f} | "
                  f"{means['+EOS oracle_exact_match out']:.1f} | "
                  f"{means['-EOS oracle_exact_match in']:.1f} / "
                  f"{means['-EOS oracle_exact_match out']:.1f} |")
            axes = panels[row, column]
            for arm, metric, label in CURVES:
                curves = arms[arm][metric]
                line, = axes.plot(x, curves.mean(axis=0), marker=".", label=label,
                                  linestyle="-" if metric.startswith("oracle") else "--")
                axes.fill_between(x, curves.min(axis=0), curves.max(axis=0), alpha=0.15,
                                  color=line.get_color(), linewidth=0)
            mark_training_range(axes, (low, high))
            axes.set(title=f"{task}, {scheme}", xlabel="task length n (tokens)", ylim=(-2, 102))
            if column == 0:
                axes.set_ylabel("exact match (%)")
            axes.legend(fontsize=7, loc="lower left")
    figure.suptitle("The EOS decision per scheme: +EOS decoded freely and at the oracle "
                    "length, -EOS at the oracle length\n(mean over seeds, band: min-max)")
    write_outputs(figure, args.out)
    stops = plot_stops(values, ranges, x)
    record["+EOS early stop length"] = stops["numbers"]
    write_outputs(stops["figure"], args.stops_out, record, args.numbers)


if __name__ == "__main__":
    run_script(main)
