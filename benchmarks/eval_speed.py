"""Evaluation speed: compiling per length bucket vs per length, and cached vs naive decoding.

    python benchmarks/eval_speed.py                       # trains a tiny run first (~1 min)
    python benchmarks/eval_speed.py --run-dir runs/default --max-length 200

1. Evaluates one checkpoint at every length 1..L twice: with the batches padded to power-of-two
   buckets (one compilation per source bucket) and padded to the exact length (one compilation per
   length). Reports wall time (compilation included) and compilation counts, and checks that
   both give the same exact-match numbers.
2. Greedy decoding of one eval batch at length L with the key/value cache vs the naive decoder
   that recomputes the whole decoder each step: decoded tokens per second (compiled, warm,
   all L + 1 steps, no early stop).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import jax
import numpy as np
from flax import nnx
from step_timing import run

from pe_research import data
from pe_research.config import load_config
from pe_research.evaluation.range_eval import RangeEvaluator, eval_position_key
from pe_research.model.decoding import NEVER, greedy_decode, naive_greedy_decode
from pe_research.model.inputs import batch_positions
from pe_research.runs.restore import load_run
from pe_research.runs.run_dir import load_run_config
from pe_research.training.loop import train

REPO = Path(__file__).resolve().parents[1]
TINY = ["--config.data.train_lengths=(1, 8)", "--config.data.batch_size=16",
        "--config.data.buckets=(8, 16, 32)", "--config.data.eval_samples=16",
        "--config.model.d_model=16", "--config.model.num_heads=2",
        "--config.model.num_encoder_layers=1", "--config.model.num_decoder_layers=1",
        "--config.model.d_ff=32", "--config.train.steps=40", "--config.train.warmup_steps=5",
        "--config.train.eval_every=0", "--config.train.best_metric=",
        "--config.train.checkpoint_every=40", "--config.eval.batch_size=16",
        "--config.eval.lengths=(4, 8, 16)", "--config.train.eval_lengths=(16,)",
        "--config.wandb.mode=disabled"]


def power_of_two_buckets(longest: int) -> tuple[int, ...]:
    """8, 16, ... up to the first power of two that holds ``longest`` tokens."""
    buckets = [8]
    while buckets[-1] < longest:
        buckets.append(2 * buckets[-1])
    return tuple(buckets)


def time_range_eval(run, dataset, lengths, buckets) -> tuple[float, int, list]:
    """Wall seconds (compilation included), compilations and rows of one range evaluation."""
    evaluator = RangeEvaluator(run.config, run.graphdef, run.rest, run.mesh)
    start = time.perf_counter()
    result = evaluator(run.params, dataset, lengths, run.config.eval.batch_size, buckets)
    return time.perf_counter() - start, result.compilations, result.rows


def decode_speed(run, dataset, length: int, repeats: int) -> dict[str, float]:
    """Decoded tokens per second at task length ``length``, cached and naive."""
    batch = next(data.eval_batches(dataset, length, run.config.eval.batch_size,
                                   range(1, length + 2)))
    batch = data.global_batch(batch, run.mesh)
    source_positions, target_positions = batch_positions(
        run.config.model.pe, batch, eval_position_key(run.config.seed), training=False)
    rates = {}
    for name, decode in (("cached", greedy_decode), ("naive", naive_greedy_decode)):
        @jax.jit
        def run_decoder(params, decode=decode):
            model = nnx.merge(run.graphdef, params, run.rest)
            return decode(model, batch["source"], source_positions, batch["source_mask"],
                          target_positions, eos_id=NEVER)

        jax.block_until_ready(run_decoder(run.params))  # compile and warm up
        start = time.perf_counter()
        for _ in range(repeats):
            tokens = jax.block_until_ready(run_decoder(run.params))
        rates[name] = tokens.size * repeats / (time.perf_counter() - start)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run-dir", default=None, help="a trained run (default: train a tiny one)")
    parser.add_argument("--step", default="latest")
    parser.add_argument("--max-length", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5, help="timed decoding repeats")
    parser.add_argument("--skip-per-length", action="store_true",
                        help="leave out the (slow) one-compile-per-length reference")
    args = parser.parse_args()
    if args.run_dir is not None:
        report(args, Path(args.run_dir))
        return
    with tempfile.TemporaryDirectory(prefix="eval_speed_") as scratch:  # removed afterwards
        run_dir = Path(scratch) / "tiny"
        print(f"training a tiny run in {run_dir} ...", flush=True)
        train(load_config(REPO / "configs" / "default.py", TINY), run_dir)
        report(args, run_dir)


def report(args: argparse.Namespace, run_dir: Path) -> None:
    """Time range eval per bucket and per length, and cached vs naive decoding, on ``run_dir``."""
    lengths = tuple(range(1, args.max_length + 1))
    # The run's own buckets stay, so that its training lengths still fit whatever L is.
    saved = load_run_config(run_dir, validate=False).data.buckets
    buckets = tuple(sorted({*power_of_two_buckets(args.max_length + 1), *saved}))
    run = load_run(run_dir, args.step, [f"--config.data.buckets={buckets}",
                                        f"--config.eval.lengths={lengths}"])
    dataset = data.eval_dataset(run.task, lengths, run.config.data.eval_samples, run.config.seed,
                                str(run_dir))
    bucket_time, bucket_compiles, bucket_rows = time_range_eval(run, dataset, lengths, buckets)
    exact = tuple(range(1, args.max_length + 2))  # every width its own "bucket"
    length_time, length_compiles, length_rows = (
        time_range_eval(run, dataset, lengths, exact) if not args.skip_per_length
        else (float("nan"), 0, bucket_rows))
    same = all(a.exact_match == b.exact_match for a, b in zip(bucket_rows, length_rows,
                                                               strict=True))
    rates = decode_speed(run, dataset, args.max_length, args.repeats)
    params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(run.params))
    print(f"\ncheckpoint {run_dir} step {run.step}: {params} parameters, "
          f"{run.config.data.eval_samples} samples per length, batch {run.config.eval.batch_size}, "
          f"{jax.device_count()} {jax.default_backend()} device(s)\n")
    print(f"| eval of lengths 1..{args.max_length} | compilations | wall time (s) |")
    print("|---|---:|---:|")
    print(f"| per bucket {buckets} | {bucket_compiles} | {bucket_time:.1f} |")
    print(f"| per length | {length_compiles} | {length_time:.1f} |")
    print(f"\nper-length / per-bucket wall time: {length_time / bucket_time:.1f}x; "
          f"same exact-match numbers: {same}\n")
    print(f"| greedy decoding at length {args.max_length} | decoded tokens/s |")
    print("|---|---:|")
    print(f"| key/value cache | {rates['cached']:.0f} |")
    print(f"| naive (full recompute) | {rates['naive']:.0f} |")
    print(f"\ncache speed-up: {rates['cached'] / rates['naive']:.1f}x")


if __name__ == "__main__":
    run(main)
