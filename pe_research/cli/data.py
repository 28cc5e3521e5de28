"""``pe-research data``: list and show tasks, fetch SCAN, freeze evaluation sets.

    pe-research data tasks
    pe-research data show reverse_string --length 8 --count 4
    pe-research data scan --to data/scan
    pe-research data stdlib --to data/python_stdlib.txt
    pe-research data eval-set --config configs/default.py --lengths 20 40 80 --out eval_data
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from pe_research.core.errors import ConfigError
from pe_research.tasks import TASKS, default_task_config, get_task
from pe_research.tasks.corpora import write_stdlib_corpus
from pe_research.tasks.dataset_task import DatasetTask
from pe_research.tasks.scan import SCAN_BASE_URL, SCAN_FILES, download_scan


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="data_command", required=True, metavar="ACTION")
    sub.add_parser("tasks", help="list every task with its family, lengths and parameters")

    show = sub.add_parser("show", help="print a few generated examples of a task")
    show.add_argument("task", nargs="?", help="task name (default: the config's task)")
    show.add_argument("--config", metavar="FILE", help="take the task from this config file")
    show.add_argument("--length", type=int, default=8, help="task length n (default 8)")
    show.add_argument("--count", type=int, default=4, help="examples to print (default 4)")
    show.add_argument("--seed", type=int, default=0)
    show.add_argument("--scan-dir", default="", help="folder of the SCAN files")

    scan = sub.add_parser("scan", help="download the official SCAN tasks_*.txt files")
    scan.add_argument("--to", required=True, metavar="DIR", help="folder to write them to")
    scan.add_argument("--split", nargs="+", choices=sorted(SCAN_FILES),
                      default=sorted(SCAN_FILES), help="splits to fetch (default: all)")
    scan.add_argument("--url", default=SCAN_BASE_URL, help="base URL of the SCAN repository")

    stdlib = sub.add_parser("stdlib", help="write the Python standard library's source as one "
                                           "text file (a corpus for task language_model)")
    stdlib.add_argument("--to", required=True, metavar="FILE", help="the text file to write")

    freeze = sub.add_parser("eval-set", help="generate and freeze a config's evaluation set")
    freeze.add_argument("--config", required=True, metavar="FILE")
    freeze.add_argument("--lengths", type=int, nargs="+",
                        help="task lengths (default: eval.lengths, else train.eval_lengths)")
    freeze.add_argument("--out", metavar="DIR", help="folder (default: data.eval_cache_dir)")


def run(args: argparse.Namespace) -> int:
    return {"tasks": _tasks, "show": _show, "scan": _scan, "stdlib": _stdlib,
            "eval-set": _eval_set}[args.data_command](args)


def _tasks(args: argparse.Namespace) -> int:
    print(f"{'task':29s} {'family':8s} {'lengths':14s} parameters")
    for name, cls in TASKS.items():
        params = {k: v for k, v in default_task_config(name).items() if k != "name"}
        lengths = f">= {cls.min_length}" if cls.family != "text" else "from the data"
        print(f"{name:29s} {cls.family:8s} {lengths:14s} {params}")
    return 0


def _show(args: argparse.Namespace) -> int:
    overrides = getattr(args, "config_overrides", [])
    if args.config:
        from pe_research.config.files import load_config

        config = load_config(args.config, overrides)
        task_cfg, data_cfg = config.task.to_dict(), config.data.to_dict()
    elif args.task:  # the task's defaults, with any --config.task.KEY=VALUE applied
        from pe_research.config.overrides import apply_overrides
        from pe_research.config.schema import base_config

        config = apply_overrides(base_config(task=args.task), overrides)
        task_cfg, data_cfg = config.task.to_dict(), config.data.to_dict()
    else:
        raise ConfigError("task", None, f"name a task or pass --config; tasks: {sorted(TASKS)}")
    if args.scan_dir:
        data_cfg = {**data_cfg, "scan_dir": args.scan_dir}
    task = get_task(task_cfg, data_cfg)
    if task.family == "text":  # show rows (windows) of that length from its eval split
        examples = task.eval_examples([args.length], args.count, args.seed)
        examples = examples.take(np.arange(min(len(examples), args.count)))
    else:
        task.check_lengths([args.length], "--length")
        examples = task.examples_of_length(np.random.default_rng(args.seed), args.length,
                                           args.count)
    print(f"{task.name} (n = {args.length}; vocabulary of {task.vocabulary.size} tokens)")
    for row in range(len(examples)):
        print("  " + task.format_example(examples.source[row], examples.target[row]))
        for kind, (source_ids, target_ids) in examples.positions.items():
            source_ids = source_ids[row][:examples.source_lengths[row]]
            target_ids = target_ids[row][:examples.target_lengths[row] + 1]
            print(f"    {kind} IDs: {' '.join(map(str, source_ids))} | BOS, target: "
                  f"{' '.join(map(str, target_ids))}")
    return 0


def _scan(args: argparse.Namespace) -> int:
    target = Path(args.to)
    try:
        written = download_scan(target, args.split, base_url=args.url)
    except OSError as error:
        names = ", ".join(name for split in args.split for name in SCAN_FILES[split])
        print(f"pe-research data scan: cannot download from {args.url} ({error}); put {names} "
              f"from github.com/brendenlake/SCAN into {target.resolve()}", file=sys.stderr)
        return 1
    for path in written:
        print(f"wrote {path} ({path.stat().st_size:,} bytes)")
    print(f"use it with --config.data.scan_dir={target}")
    return 0


def _stdlib(args: argparse.Namespace) -> int:
    path, characters, version = write_stdlib_corpus(args.to)
    print(f"wrote {path} ({characters:,} characters of the Python {version} standard library)")
    print(f"use it with --config.task.path={path}")
    return 0


def _eval_set(args: argparse.Namespace) -> int:
    from pe_research.config.files import load_config
    from pe_research.data import eval_dataset, eval_set_path

    config = load_config(args.config, getattr(args, "config_overrides", []))
    lengths = tuple(args.lengths or config.eval.lengths or config.train.eval_lengths) or None
    out = args.out or config.data.eval_cache_dir
    if not out:
        raise ConfigError("data.eval_cache_dir", out, "a folder; or pass --out DIR")
    task = get_task(config.task.to_dict(), config.data.to_dict())
    if lengths is None and not isinstance(task, DatasetTask):
        raise ConfigError("eval.lengths", (), "task lengths to evaluate; or pass --lengths")
    dataset = eval_dataset(task, lengths, config.data.eval_samples, config.seed, out)
    path = eval_set_path(task, lengths, config.data.eval_samples, config.seed, out)
    counts = np.unique(np.asarray(dataset.with_format("arrow")["length"]), return_counts=True)
    print(f"{path}: {len(dataset)} examples")
    print("  " + ", ".join(f"n={n}: {c}" for n, c in zip(*counts, strict=True)))
    return 0
