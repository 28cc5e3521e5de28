"""Train configs/default.py once per positional scheme and show where everything went.

    python experiments/demo.py                      # rope, alibi, sinusoidal -> runs/demo/<scheme>
    python experiments/demo.py --schemes rope none --root runs/my_demo

Each run is an ordinary `pe-research train` run directory (config.json, metrics.jsonl,
checkpoints/, wandb/ offline). Running the demo again resumes the runs, so it finishes at once.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SCHEMES = ("rope", "alibi", "sinusoidal")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schemes", nargs="+", default=list(DEFAULT_SCHEMES),
                        help="values of model.pe.type to train")
    parser.add_argument("--root", type=Path, default=REPO / "runs" / "demo",
                        help="parent directory of the run directories")
    parser.add_argument("--config", type=Path, default=REPO / "configs" / "default.py")
    parser.add_argument("overrides", nargs="*", metavar="--config.KEY=VALUE",
                        help="applied to every run (after --)")
    return parser.parse_args(argv)


def last_eval(records: list[dict]) -> dict:
    """The most recent record that holds evaluation metrics."""
    return next((r for r in reversed(records) if "eval/sequence_accuracy" in r), {})


def evaluate_and_compare(run_dirs: list[Path], out_dir: Path) -> dict[str, Path]:
    """Decode every run over its config's eval lengths, then overlay the curves."""
    from pe_research.evaluation.compare import compare_runs
    from pe_research.evaluation.results import evaluate_and_write

    for run_dir in run_dirs:
        print(f"\n== evaluating {run_dir.name} (greedy decoding with the key/value cache)",
              flush=True)
        _, _, paths = evaluate_and_write(run_dir, checkpoint="latest")
        print(f"    curve: {paths['png']}")
    return compare_runs(run_dirs, out_dir)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from pe_research.config import load_config
    from pe_research.runs.tracking import read_metrics
    from pe_research.training.loop import train

    started = time.perf_counter()
    rows = []
    for scheme in args.schemes:
        overrides = [f"--config.model.pe.type={scheme}", "--config.wandb.group=demo",
                     f"--config.wandb.name=demo-{scheme}", *args.overrides]
        config = load_config(args.config, overrides)
        print(f"\n== {scheme}: training {config.train.steps} steps of {config.task.name} "
              f"(lengths {config.data.train_lengths[0]}-{config.data.train_lengths[1]})",
              flush=True)
        run_started = time.perf_counter()
        result = train(config, args.root / scheme)
        rows.append((scheme, result, last_eval(read_metrics(result.run_dir)),
                     time.perf_counter() - run_started))

    lengths = list(config.train.eval_lengths)
    low, high = config.data.train_lengths
    print(f"\nAt the last evaluation (teacher forced): exact match on lengths {low}-{high}, "
          "then token accuracy on lengths never trained on:")
    trained = f"{low}-{high}"
    print(f"{'scheme':<12}{'exact ' + trained:>12}{'token ' + trained:>12}"
          + "".join(f"{f'token n={n}':>13}" for n in lengths))
    for scheme, _, record, _ in rows:
        cells = [record.get("eval/sequence_accuracy", float("nan")),
                 record.get("eval/token_accuracy", float("nan"))]
        cells += [record.get(f"eval_length_{n}/token_accuracy", float("nan")) for n in lengths]
        print(f"{scheme:<12}{cells[0]:>12.3f}{cells[1]:>12.3f}"
              + "".join(f"{c:>13.3f}" for c in cells[2:]))

    print("\nWhere everything is:")
    for scheme, result, _, seconds in rows:
        if result.compilations:
            print(f"  {scheme}: {seconds:.0f} s, {result.compilations} train-step compilations "
                  f"(one per length bucket used), {result.steps_per_second:.1f} steps/s")
        else:
            print(f"  {scheme}: already trained (the run was resumed at its last step)")
        print(f"    run directory: {result.run_dir}")
        print(f"    checkpoints:   {result.checkpoint_dir}")
        print(f"    metrics:       {result.run_dir / 'metrics.jsonl'}")
        print(f"    W&B (offline): {result.wandb_run or 'disabled'}")
    comparison = evaluate_and_compare([result.run_dir for _, result, _, _ in rows],
                                      args.root / "comparison")
    print("\nDecoded exact match over lengths (pe-research eval, then pe-research compare):")
    print(comparison["markdown"].read_text())
    print(f"  comparison plot:  {comparison['png']}")
    print(f"  comparison table: {comparison['markdown']} and {comparison['csv']}")
    print("\nSync the W&B runs later with `wandb sync <W&B path>`.")
    print(f"Demo wall time: {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
