"""``pe-research table RUN_DIR...``: the papers' table of tasks x schemes (plain, randomized).

    pe-research table 'runs/rpe_table/*/*' --out runs/rpe_table/report
    pe-research table 'runs/nope/*/*' --metric exact_match

Rows are tasks grouped by Chomsky class (R, DCF, CS); columns are schemes, plain and
randomized; each cell is the best seed's score averaged over the test lengths (beyond training),
with mean ± std over seeds beside it. Writes ``paper_table.{md,csv,png}`` into ``--out`` and
prints the table. Run `pe-research eval` (or `pe-research sweep report`) on the runs first.
"""

from __future__ import annotations

import argparse
import os

from pe_research.cli.compare import expand_run_dirs
from pe_research.evaluation.paper_table import PAPER_METRIC, write_paper_table
from pe_research.model.metrics import METRICS
from pe_research.runs.run_dir import DEFAULT_EVAL_NAME


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR",
                        help="run directories or quoted globs, e.g. 'runs/sweep/*/*'")
    parser.add_argument("--metric", default=PAPER_METRIC, choices=list(METRICS),
                        help=f"a metric of the metric table (default {PAPER_METRIC}, the "
                             "papers' per-token accuracy on output tokens)")
    parser.add_argument("--name", default=DEFAULT_EVAL_NAME,
                        help=f"which eval results: RUN_DIR/eval/NAME.json (default "
                             f"{DEFAULT_EVAL_NAME!r})")
    parser.add_argument("--out", default=None, help="output folder (default: beside the runs)")


def run(args: argparse.Namespace) -> int:
    run_dirs = expand_run_dirs(args.run_dirs)
    out = args.out or os.path.join(
        os.path.commonpath([str(p.absolute().parent) for p in run_dirs]), "paper_table")
    paths = write_paper_table(run_dirs, out, metric=args.metric, eval_name=args.name)
    print(paths["markdown"].read_text())
    for kind, path in paths.items():
        print(f"{kind}: {path}")
    return 0
