"""Eval at the protocol's lengths: compiled shapes, their memory, and batches split to a budget.

    python benchmarks/eval_memory.py                      # randomized-PE config, lengths 1..500
    python benchmarks/eval_memory.py --max-length 200 --budget-gb 4 --batch-size 128

The range evaluation of configs/randomized_pe_benchmark.py (duplicate_string, 5+5 layers,
d_model 64, 8 heads, Transformer-XL with randomized positions; eval batch 128), compiled and
not run: the numbers depend on shapes only, so fresh parameters stand in for a trained run.

1. Shapes: the (source, target, joint) widths the bucket plan gives lengths 1..L, against the pairs
   that padding each side to its own bucket gave before (one compile each).
2. Per shape: the rows per batch under the memory budget (``eval.memory_budget_gb``; default
   half the device's memory), the estimate ``evaluation/memory.py`` makes without compiling,
   and XLA's memory analysis of the compiled evaluation (arguments + outputs + temporaries)
   at the batch size the estimate chose and at the full batch; compile seconds.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import jax
import numpy as np
from flax import nnx
from step_timing import run, step_memory_gb

from pe_research import data
from pe_research.config import collect_overrides, load_config
from pe_research.core.errors import UsageError
from pe_research.evaluation import memory
from pe_research.evaluation.range_eval import RangeEvaluator
from pe_research.model import build_model
from pe_research.runtime import data_mesh
from pe_research.tasks import get_task

REPO = Path(__file__).resolve().parents[1]


def synthetic_batch(rows: int, source: int, target: int, joint: int) -> dict[str, np.ndarray]:
    """An all-real batch of these widths (the content does not change memory)."""
    ones = np.ones((rows, source), bool), np.ones((rows, target), bool)
    return {"source": np.full((rows, source), 3, np.int32), "source_mask": ones[0],
            "target_input": np.full((rows, target), 3, np.int32),
            "target_output": np.full((rows, target), 3, np.int32), "target_mask": ones[1],
            "lengths": np.full(rows, source, np.int32),
            "joint_mask": np.ones((rows, joint), bool)}


def compiled_gb(evaluator: RangeEvaluator, params, batch) -> tuple[float | None, float]:
    """XLA's memory for the compiled evaluation of ``batch`` (GiB) and the compile seconds."""
    start = time.perf_counter()
    compiled = evaluator.statistics_program.lower(
        params, data.global_batch(batch, evaluator.mesh), np.int32(0),  # the batch's first row
        evaluator.position_key)
    compiled = compiled.compile()
    return step_memory_gb(compiled), time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(REPO / "configs" / "randomized_pe_benchmark.py"))
    parser.add_argument("--max-length", type=int, default=500)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--budget-gb", type=float, default=0.0, help="0: half the device")
    overrides, rest = collect_overrides(sys.argv[1:])
    args = parser.parse_args(rest)
    if args.max_length < 1:
        raise UsageError(f"--max-length {args.max_length}: give a task length of at least 1")
    config = load_config(args.config, [f"--config.eval.batch_size={args.batch_size}",
                                       f"--config.eval.memory_budget_gb={args.budget_gb}",
                                       *overrides])
    task = get_task(config.task.to_dict(), config.data.to_dict())
    lengths = range(1, args.max_length + 1)
    buckets = tuple(config.data.buckets)
    natural = {}
    for n in lengths:
        source, target = task.widest([n])
        natural[n] = (data.bucket_length(source, buckets), target + 1, source + target + 1)
    planned = data.one_shape_per_source_bucket(natural, buckets)
    shapes = sorted(set(planned.values()))
    model = build_model(config, task.vocabulary.size)
    graphdef, params, rest_state = nnx.split(model, nnx.Param, ...)
    evaluator = RangeEvaluator(config, graphdef, rest_state, data_mesh())
    budget = memory.budget_bytes(config.eval.memory_budget_gb) / 2**30
    device = jax.devices()[0]
    print(f"device: {device.device_kind} ({jax.default_backend()}); {args.config}, lengths "
          f"1..{args.max_length}, eval batch {args.batch_size}, budget {budget:.1f} GB\n")
    print(f"compiled shapes: {len(shapes)} (one per source bucket) instead of "
          f"{len({(s, data.bucket_length(t, buckets)) for s, t, _ in natural.values()})} (one "
          "per source and target bucket pair)\n")
    print("| source x target x joint | lengths | rows under budget | estimate (GB) | XLA (GB) at "
          "those rows | XLA (GB) at full batch | compile (s) |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for source, target, joint in shapes:
        covered = [n for n, widths in planned.items() if widths == (source, target, joint)]
        full = synthetic_batch(args.batch_size, source, target, joint)
        rows = evaluator.rows_for(params, full, args.batch_size)
        estimate = memory.estimate_bytes(evaluator.unjitted_statistics, params, {
            key: jax.ShapeDtypeStruct((rows, *value.shape[1:]), value.dtype)
            for key, value in full.items()})
        at_rows, seconds = compiled_gb(evaluator, params,
                                       synthetic_batch(rows, source, target, joint))
        at_full = at_rows if rows == args.batch_size else compiled_gb(evaluator, params, full)[0]
        print(f"| {source} x {target} x {joint} | {covered[0]}-{covered[-1]} | {rows} | "
              f"{estimate / 2**30:.2f} | {at_rows:.2f} | {at_full:.2f} | {seconds:.1f} |",
              flush=True)


if __name__ == "__main__":
    run(main)
