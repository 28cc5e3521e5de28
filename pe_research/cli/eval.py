"""``pe-research eval RUN_DIR``: restore a checkpoint and evaluate it over a grid of lengths.

    pe-research eval runs/default --step best --lengths 1:64 --name long
    pe-research eval runs/default --lengths 8,16,32 --name ntk4 \\
        --config.model.pe.scaling.type=ntk --config.model.pe.scaling.factor=4
    pe-research eval runs/t5 --lengths 1:32 --name far --config.model.pe.max_distance=1024

Only test-time keys may be overridden (``runs.restore.EVAL_SAFE_KEYS``, plus the run's task's own
``test_time_keys`` such as selective copy's ``task.blanks_per_token``); anything that would change
the trained model or task is refused. Results: ``RUN_DIR/eval/<name>.{json,csv,png}``.
"""

from __future__ import annotations

import argparse

from pe_research import runtime
from pe_research.core.errors import ConfigError
from pe_research.evaluation.range_eval import EvalResult
from pe_research.evaluation.results import evaluate_and_write
from pe_research.model.metrics import HEADLINE, METRICS
from pe_research.runs.run_dir import DEFAULT_EVAL_NAME, check_eval_name


def parse_lengths(text: str) -> tuple[int, ...]:
    """``'1:500'`` (inclusive), ``'1:500:10'`` (with a step), ``'1,2,5'`` or a mix, sorted."""
    lengths: set[int] = set()
    try:
        for part in (p.strip() for p in text.split(",") if p.strip()):
            if ":" in part:
                bounds = [int(v) for v in part.split(":")]
                if len(bounds) not in (2, 3) or bounds[0] > bounds[1]:
                    raise ValueError(part)
                step = bounds[2] if len(bounds) == 3 else 1
                if step < 1:
                    raise ValueError(part)
                lengths.update(range(bounds[0], bounds[1] + 1, step))
            else:
                lengths.add(int(part))
    except ValueError:
        lengths = set()
    if not lengths or min(lengths) < 1:
        raise ConfigError("--lengths", text, "positive lengths like 1:500, 1:500:10 or 1,2,5")
    return tuple(sorted(lengths))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", help="a run directory written by `pe-research train`")
    parser.add_argument("--step", default=None,
                        help="checkpoint: 'latest', 'best' or a step (default: eval.checkpoint)")
    parser.add_argument("--lengths", default=None,
                        help="task lengths: 1:500, 1:500:10 or 1,2,5 (default: eval.lengths)")
    parser.add_argument("--name", default=DEFAULT_EVAL_NAME,
                        help="results name: RUN_DIR/eval/NAME.json "
                             f"(default {DEFAULT_EVAL_NAME!r})")


def format_table(result: EvalResult) -> str:
    """The rows as a fixed-width text table: every metric of the table under its name (what
    ``compare --metric`` takes), fractions as %."""
    names = [name for name in METRICS if result.rows and name in result.rows[0].values]
    headers = {name: name + (" %" if METRICS[name].unit == "%" else "") for name in names}
    decoded = HEADLINE in names  # a task scored by teacher forcing alone decodes nothing
    interval = f"{HEADLINE} 95% interval"
    lines = ["  ".join([f"{'length':>6}", f"{'samples':>7}"]
                       + [f"{headers[n]:>{max(len(headers[n]), 7)}}" for n in names]
                       + ([f"{interval:>{len(interval)}}"] if decoded else []))]
    for row in result.rows:
        cells = [f"{row.length:>6}", f"{row.samples:>7}"]
        cells += [f"{METRICS[n].display(row.values[n]):>{max(len(headers[n]), 7)}}"
                  for n in names]
        if decoded:
            low, high = row.values[f"{HEADLINE}_low"], row.values[f"{HEADLINE}_high"]
            cells.append(f"{f'[{100 * low:5.1f}, {100 * high:5.1f}]':>{len(interval)}}")
        lines.append("  ".join(cells))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    name = check_eval_name(args.name)
    lengths = parse_lengths(args.lengths) if args.lengths else None
    overrides = list(getattr(args, "config_overrides", []))
    loaded, result, paths = evaluate_and_write(args.run_dir, checkpoint=args.step,
                                               lengths=lengths, name=name, overrides=overrides)
    print(format_table(result))
    print(f"step {loaded.step} on {loaded.mesh.size} device(s): {len(result.rows)} lengths in "
          f"{result.seconds:.1f}s, {result.compilations} compilation(s) "
          f"(one per padded batch shape{runtime.cache_note()})")
    for kind, path in paths.items():
        print(f"{kind}: {path}")
    return 0
