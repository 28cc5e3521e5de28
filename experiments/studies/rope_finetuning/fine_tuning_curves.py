"""Fine-tuned runs over their fine-tuning steps: accuracy on the source's lengths, the new ones,
and beyond.

    python experiments/studies/rope_finetuning/fine_tuning_curves.py \\
        runs/rope_ft/scaling.type=none \\
        runs/rope_ft/scaling.type=pi --steps 0,100,200,500,1000,2000 \\
        --out docs/figures/rope_scaling_finetune.png --json runs/rope_ft_curves.json

Each positional argument is a group: a grid-point directory of runs (``seed_*``) or one run,
trained with ``train.init_from``. Every run is evaluated over its evaluation lengths at each
step of ``--steps`` (default: every checkpoint of the first run), into ``RUN/eval/step_<S>.json``,
reused on a rerun. Step 0 is the source's checkpoint that the run started from, evaluated with
the run's test-time settings (RoPE scaling, randomized positions, ...), into
``SOURCE/eval/start_<hash>.json``: what the change does before any fine-tuning.

The lengths fall into three bands: the source's training lengths, the lengths the fine-tuning
added, and those beyond both. Prints per group and step the metric's mean over each band (mean
over seeds, and each seed); draws one panel per band against the step (a line per group, a dot
per seed) and one of the metric against length at the last step, both training ranges marked.
"""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from pe_research.cli.script import run_script, write_outputs
from pe_research.core.errors import UsageError
from pe_research.evaluation.plots import mark_training_ranges
from pe_research.evaluation.range_eval import default_lengths
from pe_research.evaluation.results import cached_rows
from pe_research.model.metrics import METRICS
from pe_research.runs.checkpoint import run_checkpointer
from pe_research.runs.init_from import InitSource
from pe_research.runs.restore import EVAL_SAFE_KEYS
from pe_research.runs.run_dir import RunDir, grid_point_runs, load_run_config

BANDS = ("source lengths", "added lengths", "beyond both")


def start_of(run: Path) -> dict:
    """``{"run": source directory, "step": its checkpoint}`` that ``run`` was initialised from."""
    for entry in RunDir(run).config_history():
        if "initialised_from" in entry:
            return entry["initialised_from"]
    raise UsageError(f"{run} was not fine-tuned (no 'initialised_from' in its config.json "
                     "history); give runs trained with train.init_from")


def start_overrides(run: Path, source: Path) -> list[str]:
    """The run's test-time model settings where they differ from the source's, as overrides;
    a UsageError when the run changed a model key that is not a test-time one."""
    changes = InitSource(source, load_run_config(source, validate=False)).model_changes(
        load_run_config(run, validate=False))
    safe = tuple(key for key in EVAL_SAFE_KEYS if key.startswith("model."))
    for key, (theirs, _) in changes.items():
        if not key.startswith(safe):
            raise UsageError(f"{run} changed {key} from the source's {theirs!r}; "
                             "step 0 cannot be evaluated: leave 0 out of --steps")
    return [f"{key}={mine}" for key, (_, mine) in changes.items()]


def scores(run: Path, step: int, metric: str, lengths: tuple[int, ...]) -> np.ndarray:
    """``metric`` ``[L]`` of ``run`` at checkpoint ``step`` (0: its source's starting point)."""
    if step:
        rows = cached_rows(run, f"step_{step}", lengths, step=step)
    else:
        start = start_of(run)
        source = Path(start["run"])
        overrides = start_overrides(run, source)
        name = "start_" + hashlib.sha1(" ".join(overrides).encode()).hexdigest()[:10]
        rows = cached_rows(source, name, lengths, overrides, step=int(start["step"]))
    return np.array([row[metric] for row in rows])


def bands(lengths: np.ndarray, source: tuple[int, int], tuned: tuple[int, int]) -> list[np.ndarray]:
    """Masks over ``lengths``: the source's training lengths, those fine-tuning added, beyond."""
    inside_source = (lengths >= source[0]) & (lengths <= source[1])
    inside_tuned = (lengths >= tuned[0]) & (lengths <= tuned[1])
    return [inside_source, inside_tuned & ~inside_source, ~inside_source & ~inside_tuned]


def saved_steps(run: Path) -> list[int]:
    """The checkpoint steps on disk of ``run``."""
    checkpointer = run_checkpointer(load_run_config(run, validate=False), run, read_only=True)
    try:
        return checkpointer.steps()
    finally:
        checkpointer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("groups", nargs="+", type=Path, help="grid-point or run directories")
    parser.add_argument("--steps", default="",
                        help="comma-separated steps (0: the source); default 0 and every saved one")
    parser.add_argument("--metric", default="exact_match",
                        choices=sorted(name for name, metric in METRICS.items()
                                       if metric.unit == "%"))
    parser.add_argument("--out", type=Path, default=Path("fine_tuning_curves.png"))
    parser.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    args = parser.parse_args()
    groups = {group: grid_point_runs(group) for group in args.groups}
    for runs in groups.values():
        for run in runs:
            start_of(run)
    first = next(iter(groups.values()))[0]
    steps = ([int(s) for s in args.steps.split(",")] if args.steps
             else [0, *saved_steps(first)])
    config = load_run_config(first, validate=False)
    tuned = tuple(int(n) for n in config.data.train_lengths)
    source_config = load_run_config(start_of(first)["run"], validate=False)
    source = tuple(int(n) for n in source_config.data.train_lengths)
    lengths = default_lengths(config)
    x = np.array(lengths)
    masks = bands(x, source, tuned)

    figure = Figure(figsize=(19, 4.3), layout="constrained")
    panels = figure.subplots(1, 4)
    record: dict = {"steps": steps, "lengths": list(lengths), "bands": {}, "groups": {}}
    table = ["| group | step | " + " | ".join(f"{band} {_span(x, mask)} (mean; seeds)"
                                              for band, mask in zip(BANDS, masks, strict=True))
             + " |", "|---|---|" + "---|" * len(BANDS)]
    for band, mask in zip(BANDS, masks, strict=True):
        record["bands"][band] = x[mask].tolist()
    for group, runs in groups.items():
        curves = np.array([[100 * scores(run, step, args.metric, lengths) for step in steps]
                           for run in runs])  # [seeds, steps, lengths]
        means = np.stack([curves[..., mask].mean(-1) if mask.any()
                          else np.full(curves.shape[:2], np.nan) for mask in masks])
        record["groups"][str(group)] = {"runs": [str(run) for run in runs],
                                        "curves": curves.tolist(), "band_means": means.tolist()}
        for index, step in enumerate(steps):
            cells = [f"{m[:, index].mean():.1f}; " + " / ".join(f"{v:.0f}" for v in m[:, index])
                     for m in means]
            table.append(f"| {group.name} | {step} | " + " | ".join(cells) + " |")
        for axes, band_means in zip(panels[:3], means, strict=True):
            line, = axes.plot(steps, band_means.mean(0), marker="o", label=group.name)
            for seed_means in band_means:
                axes.plot(steps, seed_means, linestyle="none", marker=".", alpha=0.5,
                          color=line.get_color())
        panels[3].plot(x, curves[:, -1].mean(0), marker=".", label=group.name)
    for axes, band, mask in zip(panels[:3], BANDS, masks, strict=True):
        axes.set(title=f"{band}: lengths {_span(x, mask)}", xlabel="fine-tuning step (0: source)",
                 ylim=(-2, 102))
    panels[0].set_ylabel(f"{METRICS[args.metric].label} (%), mean over the band")
    mark_training_ranges(panels[3], [source, tuned])
    panels[3].set(title=f"step {steps[-1]}, by length (dotted: longest trained)",
                  xlabel="task length n (tokens)",
                  ylabel=f"{METRICS[args.metric].label} (%)", ylim=(-2, 102))
    panels[0].legend(fontsize=7)
    panels[3].legend(fontsize=7)
    figure.suptitle(f"{config.task.name}: fine-tuned from lengths {source[0]}-{source[1]} to "
                    f"{tuned[0]}-{tuned[1]} (line: mean over seeds; dots: seeds)")
    print("\n" + "\n".join(table))
    write_outputs(figure, args.out, record, args.json)


def _span(x: np.ndarray, mask: np.ndarray) -> str:
    return f"{x[mask].min()}-{x[mask].max()}" if mask.any() else "(none)"


if __name__ == "__main__":
    run_script(main)
