"""``pe-research analyze``: geometry of positions, the attention decomposition and weights.

    pe-research analyze RUN_DIR [--step best|latest|N] [--out DIR] [--length N] [--examples N]
                                [--config.KEY=VALUE ...]   (eval-time keys, e.g. model.pe.scaling)
    pe-research analyze --scheme sinusoidal --dim 512 --positions 2048 [--out DIR]
    pe-research analyze --embeddings gpt2.safetensors --key wpe [--token-embeddings wte]
                        [--ln-scale h.0.ln_1.weight --ln-bias h.0.ln_1.bias] [--out DIR]

The first reads a trained run and writes ``RUN_DIR/analysis/step_<N>/`` (PNGs, among them
attention_weights.png: every layer's and head's weights on one example of task length
``--length``; analysis.json; analysis_arrays.npz; decomposition.md), then logs it to the run's
W&B run. The second (analytic
mode) needs no run: it draws a fixed scheme's position vectors and writes their geometry. The
third reads a position-embedding matrix trained elsewhere (and optionally the token embeddings and
the first LayerNorm) from a ``.safetensors`` or ``.npz`` file and writes the same geometry.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pe_research.core.errors import ConfigError
from pe_research.runs.run_dir import RunDir

DEFAULT_OFFSET = 100  # the analysis package's default, repeated so --help does not import JAX


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", nargs="?", metavar="RUN_DIR",
                        help="a run directory written by `pe-research train`")
    parser.add_argument("--step", default="",
                        help="checkpoint: 'best', 'latest' or a step (default: the run's "
                             "eval.checkpoint)")
    parser.add_argument("--out", metavar="DIR", help="output directory (default: "
                        "RUN_DIR/analysis/step_<N>, or runs/analysis/<scheme>_d<dim>_p<positions>)")
    parser.add_argument("--scheme", help="analytic mode: a scheme with position vectors")
    parser.add_argument("--dim", type=int, default=512, help="analytic mode: vector width")
    parser.add_argument("--embeddings", metavar="FILE",
                        help="a .safetensors or .npz file holding a position-embedding matrix")
    parser.add_argument("--key", help="with --embeddings: the [positions, width] matrix's name")
    parser.add_argument("--token-embeddings", default="", metavar="KEY",
                        help="with --embeddings: the [vocabulary, width] token matrix's name")
    parser.add_argument("--ln-scale", default="", metavar="KEY",
                        help="with --embeddings: the first LayerNorm's scale (fold it in)")
    parser.add_argument("--ln-bias", default="", metavar="KEY",
                        help="with --embeddings: that LayerNorm's bias (apply the whole norm)")
    parser.add_argument("--positions", type=int, default=0,
                        help="positions 0..N-1 to draw (analytic default 2048; run default: "
                             "twice the trained range, at least 64, within the learned table, "
                             "the randomized range or the top bucket)")
    parser.add_argument("--offset", type=int, default=DEFAULT_OFFSET,
                        help="norm statistics skip positions below it, when training reached "
                             "at least twice as far (else a quarter of the trained range)")
    parser.add_argument("--length", type=int, default=0,
                        help="task length of the examples decomposed (default: the longest "
                             "trained)")
    parser.add_argument("--examples", type=int, default=8, help="examples decomposed")
    parser.add_argument("--no-wandb", action="store_true", help="do not log to the run's W&B")


def check_arguments(args: argparse.Namespace) -> None:
    """One-line ConfigErrors for impossible argument combinations, before any work."""
    sources = [value for value in (args.run_dir, args.scheme, args.embeddings) if value]
    if len(sources) != 1:
        raise ConfigError("RUN_DIR/--scheme/--embeddings", ", ".join(sources) or None,
                          "give exactly one: a run directory, --scheme (analytic mode) or "
                          "--embeddings FILE --key NAME")
    if args.embeddings and not args.key:
        raise ConfigError("--key", args.key, "name the position-embedding matrix in "
                                             f"{args.embeddings}, e.g. --key wpe")
    extra = [f"--{n.replace('_', '-')}" for n in ("key", "token_embeddings", "ln_scale",
                                                  "ln_bias") if getattr(args, n)]
    if extra and not args.embeddings:
        raise ConfigError(extra[0], getattr(args, extra[0][2:].replace("-", "_")),
                          "only with --embeddings FILE")
    for name in ("dim", "examples"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name}", getattr(args, name), "a positive integer")
    for name in ("positions", "offset", "length"):
        if getattr(args, name) < 0:
            raise ConfigError(f"--{name}", getattr(args, name), "an integer >= 0")
    if args.run_dir is not None and not Path(args.run_dir).is_dir():
        raise ConfigError("RUN_DIR", args.run_dir, "no such directory")


def analytic_pe_overrides(scheme: str, overrides: Sequence[str]) -> dict[str, Any]:
    """``--config.model.pe.KEY=VALUE`` overrides of the scheme's defaults, for analytic mode."""
    from pe_research.config.overrides import parse_value, split_override
    from pe_research.positional.registry import scheme_class

    defaults = scheme_class(scheme).default_config()  # the scheme's own keys only
    values = {}
    for text in overrides:
        key, value = split_override(text)
        leaf = key.removeprefix("model.pe.")
        if not key.startswith("model.pe.") or leaf not in defaults:
            raise ConfigError(key, value, f"analytic mode takes only the model.pe keys of "
                                          f"{scheme}: {sorted(defaults)}")
        values[leaf] = parse_value(key, value, defaults[leaf])
    return values


def headline(results: dict[str, Any]) -> list[str]:
    """A few lines of the main numbers for the terminal."""
    lines = []
    if "positions" in results:
        info = results["positions"]
        lines.append(f"positions: {info['drawn']} drawn, statistics over "
                     f"{info['statistics_over']}; trained: {info['trained_source']}")
    for name, profile in results.get("norms", {}).items():
        if isinstance(profile, dict):
            lines.append(f"norm {name}: mean {profile['mean']:.6g}, std {profile['std']:.3g}, "
                         f"CV {profile['cv']:.3g} over positions {profile['offset']}-"
                         f"{profile['end'] - 1}")
    if "orthogonality" in results:
        o = results["orthogonality"]
        lines.append(f"token/position |cos|: mean {o['mean_abs_cos']:.4f} (random "
                     f"{o['random_baseline_mean_abs_cos']:.4f}), max {o['max_abs_cos']:.4f} at "
                     f"token {o['argmax']['token_id']}, position {o['argmax']['position']}")
    if "shape" in results:
        ratios = ", ".join(f"{r:.4f}" for r in results["shape"]["explained_variance_ratio"])
        lines.append(f"PCA explained variance ratio (PC1-3): {ratios}")
    for site in results.get("decomposition", {}).get("sites", []):
        shares = ", ".join(f"{k} {v:.1%}" for k, v in site["statistics"]["share_all_heads"].items())
        distances = ", ".join(f"{d:.1f}" for d in site["attention"]["mean_distance"])
        lines.append(f"{site['name']}: {shares}; mean distance attended per head: {distances}")
    return lines


def run(args: argparse.Namespace) -> int:
    check_arguments(args)
    from pe_research.analysis.report import (
        analytic_report,
        check_analytic_scheme,
        embedding_report,
        model_report,
        write_report,
    )

    overrides = getattr(args, "config_overrides", [])
    if args.embeddings:
        if overrides:
            raise ConfigError(overrides[0], "", "--config overrides do not apply to --embeddings")
        report = embedding_report(args.embeddings, args.key, token_key=args.token_embeddings,
                                  ln_scale_key=args.ln_scale, ln_bias_key=args.ln_bias,
                                  num_positions=args.positions, offset=args.offset)
        out = Path(args.out or f"runs/analysis/{Path(args.embeddings).stem}_{args.key}")
        paths = write_report(report, out)
        wandb_run = None
    elif args.scheme is not None:
        check_analytic_scheme(args.scheme)
        positions = args.positions or 2048
        report = analytic_report(args.scheme, args.dim, positions, offset=args.offset,
                                 pe_overrides=analytic_pe_overrides(args.scheme, overrides))
        out = Path(args.out or f"runs/analysis/{args.scheme}_d{args.dim}_p{positions}")
        paths = write_report(report, out)
        wandb_run = None
    else:
        from pe_research.analysis.publish import log_to_wandb
        from pe_research.analysis.run_inputs import (
            default_num_positions,
            evaluation_positions,
            example_batch,
            load_analysis_run,
            trained_positions,
        )

        loaded = load_analysis_run(args.run_dir, args.step, overrides)
        batch = example_batch(loaded, args.length or None, args.examples)
        title = f"{Path(args.run_dir).name} step {loaded.step}"
        trained, trained_source = trained_positions(loaded)
        report = model_report(loaded.model, batch,
                              num_positions=args.positions or default_num_positions(loaded),
                              offset=args.offset, title=title,
                              positions=evaluation_positions(loaded, batch), trained=trained,
                              trained_source=trained_source)
        report.results.update({"run_dir": str(loaded.run_dir), "step": loaded.step,
                               "examples": {"count": args.examples,
                                            "task_length": int(batch["lengths"].max())}})
        out = Path(args.out or RunDir(loaded.run_dir).analysis(loaded.step))
        paths = write_report(report, out)
        wandb_run = None if args.no_wandb else log_to_wandb(
            paths, report.results, loaded.run_dir, loaded.config.wandb, loaded.step)
    for line in headline(report.results):
        print(line)
    names = ", ".join(sorted(path.name for path in paths.values()))
    print(f"written to {out}: {names}")
    if args.run_dir is not None:
        print(f"W&B run: {wandb_run or 'not logged'}")
    return 0

