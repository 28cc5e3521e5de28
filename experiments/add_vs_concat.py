"""Add vs concat: the same model with position vectors added to, or concatenated with, tokens.

    python experiments/add_vs_concat.py --workdir runs/add_vs_concat --cpu           # minutes
    python experiments/add_vs_concat.py --workdir runs/add_vs_concat                 # full
    python experiments/add_vs_concat.py --workdir runs/add_vs_concat_quick --quick   # CI-sized

Trains ``model.pe.combine=add``, ``=concat`` (``[token; position]`` projected back to d_model)
and ``=split`` (d_model / 2 token + d_model / 2 position, no projection: the width-matched
variant), so everything after the input is identical, for each seed. The output projection is
untied in all three (a split model's half-width embedding cannot read out), so parameter counts
differ only at the input; from ``--config`` (default
``configs/default.py``) with ``--scheme`` (sinusoidal or learned) and any ``--config.KEY=VALUE``
overrides; evaluates every run over ``eval.lengths`` (decoded exact match, `pe-research eval`)
unless ``--metric`` names a teacher-forced metric already in metrics.jsonl; then writes
``WORKDIR/comparison/``: ``add_vs_concat.png`` (accuracy against length, mean +- std and max
over seeds, beside the parameter counts), ``add_vs_concat.{json,md}`` and the standard
``comparison.{png,md,csv}`` of `pe-research compare` grouped by ``model.pe.combine``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import ml_collections
import numpy as np
from flax import nnx
from matplotlib.figure import Figure

from pe_research.config import collect_overrides, load_config
from pe_research.evaluation.compare import aggregate, compare_runs, load_curve
from pe_research.evaluation.group_summary import summarize_group
from pe_research.evaluation.plots import mark_training_range, metric_label
from pe_research.evaluation.results import evaluate_and_write
from pe_research.model import abstract_model
from pe_research.model.metrics import METRICS
from pe_research.tasks import get_task
from pe_research.training.loop import train

COMBINES = ("add", "concat", "split")
GROUP_BY = "model.pe.combine"
QUICK = {  # seconds of training per run: checks the pipeline, not the science
    "data.train_lengths": (1, 6), "data.batch_size": 8, "data.buckets": (8, 16),
    "data.eval_samples": 8, "model.d_model": 16, "model.num_heads": 2, "model.d_ff": 32,
    "model.num_encoder_layers": 1, "model.num_decoder_layers": 1, "train.steps": 8,
    "train.warmup_steps": 1, "train.log_every": 4, "train.eval_every": 8,
    "train.checkpoint_every": 8, "train.eval_batches": 1, "train.eval_lengths": (3, 6, 9),
    "eval.lengths": (3, 6, 9), "eval.batch_size": 8,
}


# Minutes on a 2-core CPU, long enough for every variant to learn copy in distribution.
CPU = {"data.train_lengths": (1, 8), "data.buckets": (16, 32, 64), "train.steps": 1500,
       "train.eval_every": 500, "train.checkpoint_every": 500, "train.eval_lengths": (12,),
       "eval.lengths": (1, 2, 4, 6, 8, 9, 10, 12, 14, 16)}


def run_config(base: ml_collections.ConfigDict, combine: str,
               seed: int) -> ml_collections.ConfigDict:
    """``base`` with this run's combine and seed."""
    config = ml_collections.ConfigDict(base.to_dict())
    with config.unlocked():
        config.model.pe.combine = combine
        config.model.tie_output = False  # the same readout for all three variants
        config.seed = seed
        config.wandb.group = config.wandb.group or "add_vs_concat"
        config.wandb.tags = (*config.wandb.tags, f"combine={combine}")
    return config


def parameter_count(config: ml_collections.ConfigDict) -> int:
    """Trainable parameters of the model ``config`` builds (shapes only, nothing computed)."""
    model = abstract_model(config, get_task(config.task).vocabulary.size)
    return int(sum(np.prod(leaf.shape) for leaf in jax.tree.leaves(nnx.state(model, nnx.Param))))


def comparison_figure(groups: dict[str, Any], parameters: dict[str, int], metric: str,
                      train_lengths: Sequence[int], scheme: str) -> Figure:
    """Accuracy against length (mean +- std band, max dashed) beside the parameter counts."""
    figure = Figure(figsize=(11, 4.3), layout="constrained")
    curves, bars = figure.subplots(1, 2, width_ratios=(2, 1))
    mark_training_range(curves, train_lengths)
    for index, (combine, group) in enumerate(groups.items()):
        x, mean, std = group["lengths"], 100 * group["mean"], 100 * group["std"]
        label = f"{scheme}, combine={combine} ({group['runs']} seeds)"
        curves.plot(x, mean, marker="o", color=f"C{index}", label=f"{label}: mean +- std")
        curves.fill_between(x, np.clip(mean - std, 0, 100), np.clip(mean + std, 0, 100),
                            color=f"C{index}", alpha=0.2)
        curves.plot(x, 100 * group["best"], ls="--", color=f"C{index}", label=f"{label}: max")
    curves.set_xlabel("task length n (tokens)")
    curves.set_ylabel(f"{metric_label(metric)} (%)")
    curves.set_ylim(-2, 102)
    curves.set_title("accuracy against length over seeds (std with ddof=1)", fontsize=10)
    curves.legend(fontsize=7)
    names = list(parameters)
    bars.bar(names, [parameters[n] for n in names], color=[f"C{i}" for i in range(len(names))])
    for i, name in enumerate(names):
        bars.annotate(f"{parameters[name]:,}", (i, parameters[name]), ha="center", va="bottom")
    bars.set_xlabel(GROUP_BY)
    bars.set_ylabel("trainable parameters (count)")
    bars.set_title("parameters", fontsize=10)
    figure.suptitle(f"add vs concat vs split, {scheme} positions")
    return figure


def markdown(groups: dict[str, Any], summaries: dict[str, Any], parameters: dict[str, int],
             metric: str) -> str:
    """Per combine: parameters, in-distribution and beyond-training accuracy, per-length means."""
    lengths = next(iter(groups.values()))["lengths"]
    lines = [f"Metric: {metric_label(metric)}; mean (std) over seeds, in %.", "",
             "| combine | parameters | seeds | in-dist | OOD | "
             + " | ".join(f"n={n}" for n in lengths) + " |",
             "|---|---|---|---|---|" + "---|" * len(lengths)]
    for combine, group in groups.items():
        s = summaries[combine]
        cells = [f"{100 * m:.1f} ({100 * d:.1f})" for m, d in zip(group["mean"], group["std"],
                                                                  strict=True)]
        lines.append(f"| {combine} | {parameters[combine]:,} | {group['runs']} | "
                     f"{100 * s['in_dist_mean']:.1f} | {100 * s['ood_mean']:.1f} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_comparison(run_dirs: Sequence[Path], parameters: dict[str, int], out: Path,
                     metric: str, scheme: str) -> dict[str, Any]:
    """The one comparison of these runs (grouped by combine) in ``out``; returns its JSON."""
    curves = [load_curve(run_dir, metric, group_by=GROUP_BY) for run_dir in run_dirs]
    groups = aggregate(curves, metric)
    summaries = {name: summarize_group(group, 0.9) for name, group in groups.items()}
    train_lengths = curves[0].train_lengths
    out.mkdir(parents=True, exist_ok=True)
    compare_runs(run_dirs, out, group_by=GROUP_BY, metric=metric)
    comparison_figure(groups, parameters, metric, train_lengths, scheme).savefig(
        out / "add_vs_concat.png", dpi=110)
    (out / "add_vs_concat.md").write_text(markdown(groups, summaries, parameters, metric))
    result = {
        "scheme": scheme, "metric": metric, "train_lengths": list(train_lengths),
        "parameters": parameters, "summaries": summaries,
        "curves": {name: {"lengths": g["lengths"].tolist(), "mean": g["mean"].tolist(),
                          "std": g["std"].tolist(), "max": g["best"].tolist(),
                          "runs": [str(m.run_dir) for m in g["members"]]}
                   for name, g in groups.items()},
    }
    (out / "add_vs_concat.json").write_text(json.dumps(result, indent=1))
    return result


def run_experiment(base: ml_collections.ConfigDict, workdir: Path, seeds: Sequence[int],
                   scheme: str, metric: str = "exact_match") -> dict[str, Any]:
    """Train (and evaluate) every (combine, seed), then write the comparison."""
    run_dirs, parameters = [], {}
    for combine in COMBINES:
        parameters[combine] = parameter_count(run_config(base, combine, seeds[0]))
        for seed in seeds:
            run_dir = workdir / f"{scheme}_{combine}_seed{seed}"
            train(run_config(base, combine, seed), run_dir)
            if METRICS[metric].decoded:
                evaluate_and_write(run_dir)
            run_dirs.append(run_dir)
    return write_comparison(run_dirs, parameters, workdir / "comparison", metric, scheme)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--workdir", required=True, type=Path)
    parser.add_argument("--config", default=str(Path(__file__).parents[1] / "configs/default.py"))
    parser.add_argument("--scheme", default="sinusoidal", choices=("sinusoidal", "learned"))
    parser.add_argument("--seeds", type=int, default=0,
                        help="seeds 0..N-1 per combine (default 3; 2 with --quick)")
    parser.add_argument("--metric", default="exact_match", choices=list(METRICS),
                        help="decoded metrics run `pe-research eval` on each run; teacher-forced "
                             "ones read the evaluation during training")
    parser.add_argument("--quick", action="store_true", help="tiny model, a few steps")
    parser.add_argument("--cpu", action="store_true",
                        help="minutes on a 2-core CPU: copy of lengths 1-8, 1500 steps")
    args, rest = parser.parse_known_args(argv)
    user_overrides, unknown = collect_overrides(rest)
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    overrides = [f"--config.model.pe.type={args.scheme}"]
    preset = QUICK if args.quick else CPU if args.cpu else {}
    overrides += [f"--config.{k}={','.join(map(str, v)) if isinstance(v, tuple) else v}"
                  for k, v in preset.items()]
    base = load_config(args.config, overrides + user_overrides)
    seeds = list(range(args.seeds or (2 if args.quick else 3)))
    result = run_experiment(base, args.workdir, seeds, args.scheme, args.metric)
    print((args.workdir / "comparison" / "add_vs_concat.md").read_text(), end="")
    print(f"parameters: {result['parameters']}; comparison in {args.workdir / 'comparison'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
