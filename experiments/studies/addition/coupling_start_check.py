"""python experiments/studies/addition/coupling_start_check.py RUN_DIR [--length 9] [--shifts ...]

Exact match of a position-coupling run on its frozen evaluation examples of one length, with
every coupled position ID shifted by each of ``--shifts`` (training drew the start at random, so
a model that reads the IDs relatively scores alike at every shift).
"""

from __future__ import annotations

import argparse

import jax.numpy as jnp

from pe_research import data
from pe_research.evaluation.batch_statistics import example_statistics
from pe_research.model.inputs import eval_position_key
from pe_research.runs.restore import load_run
from pe_research.runs.run_dir import RunDir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--length", type=int, default=9)
    parser.add_argument("--shifts", default="0,29,80")
    args = parser.parse_args()
    run = load_run(args.run_dir, "best")
    samples = int(run.config.data.eval_samples)
    dataset = data.eval_dataset(run.task, [args.length], samples, run.config.seed,
                                str(RunDir(run.run_dir).eval_data(run.config.data)))
    batch = next(data.eval_batches(dataset, args.length, samples, tuple(run.config.data.buckets)))
    for shift in (int(s) for s in args.shifts.split(",")):
        shifted = {key: jnp.asarray(value) for key, value in batch.items()}
        for key in ("source_coupled", "target_coupled"):
            shifted[key] = jnp.where(shifted[key] > 0, shifted[key] + shift, 0)
        sums = example_statistics(run.model, shifted, eval_position_key(run.config.seed))
        exact = float(jnp.sum(sums["exact_match"]) / jnp.sum(sums["sequences"]))
        print(f"shift {shift}: exact match {100 * exact:.1f} % at length {args.length} "
              f"({int(jnp.sum(sums['sequences']))} examples)")


if __name__ == "__main__":
    main()
