"""Evaluation during training: teacher-forced loss and accuracy in distribution and beyond.

In distribution: ``train.eval_batches`` held-out batches drawn like training batches but from
another seed. Longer lengths: the frozen evaluation set at each of ``train.eval_lengths``.
Metric names: ``eval/<metric>`` and ``eval_length_<n>/<metric>``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax
import ml_collections
import numpy as np
from jax.sharding import Mesh

from pe_research import data
from pe_research.runs.run_dir import RunDir
from pe_research.runtime import sync_processes, to_host
from pe_research.training.step import summarize

HELD_OUT_SEED_OFFSET = 7_919  # held-out in-distribution batches never share the training stream


class PeriodicEvaluator:
    """Evaluates parameters with ``evaluate(params, batch) -> sums`` on fixed data, built once,
    at construction."""

    def __init__(self, config: ml_collections.ConfigDict, task: Any, mesh: Mesh,
                 evaluate: Callable[[Any, Any], dict[str, jax.Array]], run_dir: str | Path):
        self.config, self.task, self.mesh, self.evaluate = config, task, mesh, evaluate
        self.held_out = [
            data.train_batch(task, config.data, config.seed + HELD_OUT_SEED_OFFSET, step,
                             jax.process_index(), jax.process_count())
            for step in range(config.train.eval_batches)
        ]
        self.lengths: tuple[int, ...] = ()
        self.dataset = None
        if config.train.eval_lengths:
            arguments = (task, tuple(config.train.eval_lengths), config.data.eval_samples,
                         config.seed, str(RunDir(run_dir).eval_data(config.data)))
            if jax.process_index() == 0:  # one process freezes the set, the others read it
                data.eval_dataset(*arguments)
            sync_processes("pe_research_eval_dataset")
            self.dataset = data.eval_dataset(*arguments)
            present = set(data.eval_lengths_of(self.dataset))
            self.lengths = tuple(n for n in config.train.eval_lengths if n in present)
            self.widths = data.eval_widths(self.dataset, self.lengths,
                                           tuple(config.data.buckets))
            missing = sorted(set(config.train.eval_lengths) - present)
            if missing:  # dataset tasks hold only some lengths in their eval split
                warnings.warn(f"train.eval_lengths {missing} have no {task.name} evaluation "
                              f"examples and are skipped (present: {sorted(present)})",
                              stacklevel=2)

    def _length_batches(self, length: int) -> Iterator[dict[str, np.ndarray]]:
        yield from data.eval_batches(self.dataset, length, self.config.eval.batch_size,
                                     tuple(self.config.data.buckets), jax.process_index(),
                                     jax.process_count(), self.widths[length])

    def _run(self, params: Any, local_batches) -> dict[str, float]:
        totals: dict[str, float] = {}
        pending = [self.evaluate(params, data.global_batch(batch, self.mesh))
                   for batch in local_batches]
        for sums in pending:
            for key, value in sums.items():
                totals[key] = totals.get(key, 0.0) + float(to_host(value))
        return summarize(totals)

    def __call__(self, params: Any) -> dict[str, float]:
        """``{'eval/loss': ..., 'eval_length_<n>/sequence_accuracy': ..., ...}``."""
        metrics = {f"eval/{k}": v for k, v in self._run(params, self.held_out).items()}
        for length in self.lengths:
            results = self._run(params, self._length_batches(length))
            metrics.update({f"eval_length_{length}/{k}": v for k, v in results.items()})
        return metrics
