"""`make demo`: train four positional schemes on copy, compare them, say what the figure shows.

    python experiments/demo.py                          # configs/sweeps/demo.py -> runs/demo
    python experiments/demo.py --jobs 1 --root runs/my_demo -- --config.train.steps=5000

It runs `pe-research sweep configs/sweeps/demo.py --workdir runs/demo --jobs N` (a decoder-only
copy model per scheme: none, alibi, rope, sinusoidal), which trains, evaluates every run at
lengths 1-16 with greedy decoding and writes the comparison. It ends with one sentence of what
the comparison shows, computed from the measured curves: whether every scheme learned the
training lengths, and if so which curves hold up beyond them. Running it again resumes: finished
runs are skipped. Each run is an ordinary run directory (config.json, metrics.jsonl,
checkpoints/, wandb/ offline), so `pe-research eval`, `compare` and `analyze` work on it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SWEEP_FILE = REPO / "configs" / "sweeps" / "demo.py"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=REPO / "runs" / "demo",
                        help="the sweep directory (one run directory per scheme inside)")
    parser.add_argument("--jobs", type=int, default=min(4, os.cpu_count() or 1),
                        help="schemes trained at once, one process each (default: up to 4, "
                             "at most the number of CPU cores)")
    parser.add_argument("--sweep", type=Path, default=SWEEP_FILE,
                        help="the sweep file (configs/sweeps/demo.py)")
    parser.add_argument("overrides", nargs="*", metavar="--config.KEY=VALUE",
                        help="applied to every run (after --)")
    return parser.parse_args(argv)


def shown(path: Path) -> str:
    """``path`` relative to the working directory when it lies inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from pe_research.cli.app import main as cli_main
    from pe_research.evaluation.compare import comparison, comparison_finding
    from pe_research.model.metrics import HEADLINE, METRICS
    from pe_research.sweeps.state import SweepDir, refresh

    started = time.perf_counter()
    status = cli_main(["sweep", str(args.sweep), "--workdir", str(args.root),
                       "--jobs", str(args.jobs), *args.overrides])
    sweep_dir = SweepDir(args.root)
    if status not in (0, 1) or not sweep_dir.exists():  # the CLI printed its one-line error
        return status
    manifest = refresh(sweep_dir)
    done = sorted(sweep_dir.root / run for run, state in manifest["runs"].items()
                  if state["state"] == "done")
    root = shown(sweep_dir.root)
    print("\nWhere everything is:")
    for run_dir in done:
        print(f"  {shown(run_dir)}/: config.json, metrics.jsonl, checkpoints/, "
              "eval/eval.{json,csv,png}, wandb/ (offline)")
    for figure in sorted(sweep_dir.report.glob("*/comparison.png")):
        print(f"  comparison: {shown(figure)} (and .md, .csv beside it)")
    print(f"  every table: {shown(sweep_dir.report / 'summary.md')}")
    print(f"  upload the W&B runs later: wandb sync {root}/*/*/wandb/offline-run-*")
    print(f"Demo wall time: {time.perf_counter() - started:.0f} s")
    if not done:
        print("\nNo run finished, so there is nothing to compare; see the errors above.")
        return status or 1
    _, groups, summaries = comparison(done)
    finding = comparison_finding(groups, summaries, METRICS[HEADLINE], group_by="model.pe.type")
    print(f"\nWhat the figure shows: {finding}")
    return status


if __name__ == "__main__":
    sys.exit(main())
