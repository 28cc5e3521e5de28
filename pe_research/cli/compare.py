"""``pe-research compare RUN_DIR...``: overlay extrapolation curves grouped by a config key.

    pe-research compare runs/rope_s0 runs/rope_s1 runs/alibi_s0 --out runs/comparison
    pe-research compare 'runs/*' --group-by model.pe.type --metric exact_match --show max

Writes ``comparison.png``, ``comparison.md`` and ``comparison.csv`` into ``--out`` (default: a
``comparison`` folder beside the runs) and prints the table.
"""

from __future__ import annotations

import argparse
import glob
import os
from pathlib import Path

from pe_research.core.errors import ConfigError
from pe_research.evaluation.compare import compare_runs
from pe_research.model.metrics import HEADLINE, METRICS
from pe_research.runs.run_dir import DEFAULT_EVAL_NAME, RunDir


def expand_run_dirs(patterns: list[str]) -> list[Path]:
    """Run directories named directly or by glob (only directories holding a config.json)."""
    run_dirs: list[Path] = []
    for pattern in patterns:
        if glob.has_magic(pattern):
            matches = [Path(p) for p in sorted(glob.glob(pattern)) if RunDir(p).is_run()]
            if not matches:
                raise ConfigError("RUN_DIR", pattern, "the glob matches no run directory")
            run_dirs.extend(matches)
        else:
            run_dirs.append(Path(pattern))
    return list(dict.fromkeys(run_dirs))  # keep order, drop repeats


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR",
                        help="run directories or quoted globs, e.g. 'runs/*'")
    parser.add_argument("--group-by", default="model.pe.type",
                        help="config key that names a curve (default model.pe.type); several, "
                             "comma-separated, group by their combination")
    parser.add_argument("--metric", default=None, choices=list(METRICS),
                        help=f"a metric of the metric table (default {HEADLINE}, or "
                             "oracle_exact_match when every run was trained with "
                             "train.predict_eos=False); decoded ones come from `pe-research "
                             "eval`, the others also from training")
    parser.add_argument("--name", default=DEFAULT_EVAL_NAME,
                        help="which eval results: RUN_DIR/eval/NAME.json "
                             f"(default {DEFAULT_EVAL_NAME!r})")
    parser.add_argument("--threshold", type=float, default=0.9,
                        help="accuracy for 'longest length at or above' (default 0.9)")
    parser.add_argument("--show", default="both", choices=("both", "mean", "max"),
                        help="plot mean ± std over seeds, the best seed ('max'), or both")
    parser.add_argument("--out", default=None, help="output folder (default: beside the runs)")
    parser.add_argument("--allow-mixed", action="store_true",
                        help="overlay runs trained on different tasks or length ranges")


def run(args: argparse.Namespace) -> int:
    run_dirs = expand_run_dirs(args.run_dirs)
    out = args.out or os.path.join(
        os.path.commonpath([str(p.absolute().parent) for p in run_dirs]), "comparison")
    paths = compare_runs(run_dirs, out, group_by=args.group_by, metric=args.metric,
                         eval_name=args.name, threshold=args.threshold,
                         allow_mixed=args.allow_mixed, show=args.show).paths
    print(paths["markdown"].read_text())
    for kind, path in paths.items():
        print(f"{kind}: {path}")
    return 0
