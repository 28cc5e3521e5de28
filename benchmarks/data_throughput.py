"""Examples per second of every generated task through ``train_batch`` (one CPU process), or
the host's time per step for the batches of one program of a sweep.

    .venv/bin/python benchmarks/data_throughput.py [--batch-size 256] [--lengths 40 500]
        [--seconds 1.0] [--scan-dir data/scan]
    .venv/bin/python benchmarks/data_throughput.py --sweep configs/sweeps/randomized_pe_table.py
        [--members 1,8,32] [--point NAME] [--steps 20] [--eval]

Each cell times whole padded batches (generation, bucket padding, BOS/EOS, masks) of one
task length for about ``--seconds`` after one warm-up batch, and prints a markdown table.
An accelerator step on a small model takes milliseconds, so a task far below 10k examples/s
at length 40 would leave it waiting.

With ``--sweep``: the batches of M members of one program (the members of every grid point that
stacks with ``--point``, the first by default, as ``sweep_throughput.py --stack points`` draws
them), drawn and stacked to one width as the ensemble trainer does before each step, over
``--steps`` steps in each of three blocks (the fastest block counts). The training loop draws
them while the device runs the previous step, so a program whose step is shorter than this waits
on the host.

With ``--sweep --eval``: the same members' evaluation data instead, as a sweep's report reads it
for one program (``evaluate_members``): the seconds to freeze their eval sets, then the host's
ms per evaluated length for each member's first batch and the members' batches stacked, over
the point's eval lengths. The device evaluates a length while the host waits for its numbers, so
this adds to every length's time.
"""

from __future__ import annotations

import argparse
import copy
import os
import platform
import tempfile
import time
from typing import Any

import numpy as np
from step_timing import batch_drawer, draw_seconds, run
from sweep_throughput import chosen_point, member_configs, member_counts

from pe_research.config import from_mapping
from pe_research.data import eval_batches, eval_dataset, eval_widths, train_batch
from pe_research.evaluation.members_eval import stacked_eval_batches
from pe_research.evaluation.range_eval import default_lengths
from pe_research.sweeps.spec import load_sweep
from pe_research.tasks import GENERATED_TASKS, TASKS, default_task_config, get_task

BUCKETS = (16, 32, 64, 128, 256, 512, 1024, 2048)
TARGET_RATE = 10_000


def examples_per_second(task, data_cfg: dict, seconds: float) -> float:
    """Batches of ``data_cfg`` generated back to back for about ``seconds``."""
    train_batch(task, data_cfg, seed=0, step=0)
    batches, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        train_batch(task, data_cfg, seed=0, step=batches + 1)
        batches += 1
    return batches * data_cfg["batch_size"] / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--lengths", type=int, nargs="+", default=[40, 500])
    parser.add_argument("--seconds", type=float, default=1.0, help="time per cell")
    parser.add_argument("--scan-dir", default="", help="also time SCAN (mixed lengths)")
    parser.add_argument("--sweep", default="", help="time one program's stacked batches of "
                        "this sweep file instead (host ms per step)")
    parser.add_argument("--members", default="1,8,32", help="with --sweep: member counts")
    parser.add_argument("--point", default=None, help="with --sweep: the grid point (its name)")
    parser.add_argument("--steps", type=int, default=20, help="with --sweep: steps per block")
    parser.add_argument("--eval", action="store_true",
                        help="with --sweep: the members' evaluation batches instead")
    args = parser.parse_args()
    if args.sweep:
        (program_eval_batches if args.eval else program_batches)(args)
        return

    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"numpy {np.__version__}; batch {args.batch_size}; examples/s")
    print()
    print("| task | family | " + " | ".join(f"n={n}" for n in args.lengths) + " |")
    print("|---|---|" + "---:|" * len(args.lengths))
    slow = []
    for name in GENERATED_TASKS:
        task = get_task(default_task_config(name))
        cells = []
        for n in args.lengths:
            cfg = {"batch_size": args.batch_size, "train_lengths": (n, n),
                   "length_sampling": "per_batch", "buckets": BUCKETS}
            rate = examples_per_second(task, cfg, args.seconds)
            cells.append(f"{rate:,.0f}")
            if n <= 40 and rate < TARGET_RATE:
                slow.append(name)
        print(f"| {name} | {TASKS[name].family} | " + " | ".join(cells) + " |")
    if args.scan_dir:
        task = get_task({"name": "scan"}, {"scan_dir": args.scan_dir})
        cfg = {"batch_size": args.batch_size, "train_lengths": (1, 48),
               "length_sampling": "mixed", "buckets": BUCKETS}
        rate = examples_per_second(task, cfg, args.seconds)
        print(f"| scan (length split, mixed) | text | {rate:,.0f} |"
              + " |" * (len(args.lengths) - 1))
    print()
    print(f"tasks under {TARGET_RATE:,} examples/s at n <= 40: {slow or 'none'}")


def sweep_program(args: argparse.Namespace) -> tuple[list[int], Any, Any]:
    """(``--members`` counts, the sweep's plan, the measured point)."""
    plan = load_sweep(args.sweep, [])
    return member_counts(args.members), plan, chosen_point(plan.points, args.point)


def print_header(args: argparse.Namespace, point: Any, measured: str) -> None:
    """The machine, the sweep and the measured program, then what is measured."""
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, numpy "
          f"{np.__version__}; {args.sweep}, the program of {point.name} (--stack points); "
          f"{measured}")
    print()


def program_batches(args: argparse.Namespace) -> None:
    """The host's ms per step for the stacked batches of ``--members`` members of a program."""
    counts, plan, point = sweep_program(args)
    print_header(args, point, f"best of 3 blocks of {args.steps} steps")
    print("| members | host ms/step | examples/s |")
    print("|---:|---:|---:|")
    for members in counts:
        configs = member_configs(plan, point, members, "points")
        seconds = draw_seconds(batch_drawer(configs), args.steps)
        rows = sum(int(config.data.batch_size) for config in configs)
        print(f"| {members} | {seconds * 1e3:.2f} | {rows / seconds:,.0f} |")


def program_eval_batches(args: argparse.Namespace) -> None:
    """The host's ms per evaluated length for the eval batches of ``--members`` members."""
    counts, plan, point = sweep_program(args)
    lengths = default_lengths(from_mapping(copy.deepcopy(point.members[0].config)))
    print_header(args, point, f"{len(lengths)} eval lengths")
    print("| members | sets frozen (s) | host ms/length | examples/s |")
    print("|---:|---:|---:|---:|")
    for members in counts:
        configs = member_configs(plan, point, members, "points")
        with tempfile.TemporaryDirectory(prefix="data_throughput_") as root:
            start = time.perf_counter()
            tasks = [get_task(c.task.to_dict(), c.data.to_dict()) for c in configs]
            sets = [eval_dataset(task, lengths, c.data.eval_samples, c.seed, root)
                    for task, c in zip(tasks, configs, strict=True)]
            frozen = time.perf_counter() - start
            buckets, rows = tuple(configs[0].data.buckets), int(configs[0].eval.batch_size)
            plans = [eval_widths(dataset, lengths, buckets) for dataset in sets]
            examples, start = 0, time.perf_counter()
            for length in lengths:
                for dataset, widths in zip(sets, plans, strict=True):  # the rows' estimate
                    next(eval_batches(dataset, length, rows, buckets, widths=widths[length]))
                for batch in stacked_eval_batches(sets, plans, length, rows, buckets):
                    examples += int(np.count_nonzero(batch["lengths"]))
            seconds = (time.perf_counter() - start) / len(lengths)
        print(f"| {members} | {frozen:.1f} | {seconds * 1e3:.2f} | "
              f"{examples / len(lengths) / seconds:,.0f} |", flush=True)


if __name__ == "__main__":
    run(main)
