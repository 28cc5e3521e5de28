"""What ``analyze RUN_DIR`` needs from a run: the model at a checkpoint, and real examples.

The run is restored by ``pe_research.runs.restore.load_run`` (config, task with the run's
vocabulary, checkpoint choice with its fallback past unreadable steps, parameters on the devices
present) with ``model.dtype=float32`` and the XLA attention path: parameters are float32 in every
run, so a bfloat16 or cuDNN run is analysed at full precision on any device.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pe_research import data
from pe_research.core.errors import ConfigError
from pe_research.model.inputs import batch_positions, eval_position_key
from pe_research.positional.abacus import uses_abacus
from pe_research.positional.randomize import evaluation_keys, randomize_settings
from pe_research.runs.restore import LoadedRun, load_run
from pe_research.runs.run_dir import RunDir

ANALYSIS_OVERRIDES = ("model.dtype=float32", "model.attention_implementation=xla")


def load_analysis_run(run_dir: str | Path, step: str = "",
                      overrides: Sequence[str] = ()) -> LoadedRun:
    """The run of ``run_dir`` at ``step`` ('best', 'latest', a step; default: the run's
    ``eval.checkpoint``), in float32; ``overrides`` are eval-time config changes."""
    run = load_run(run_dir, step or None, [*ANALYSIS_OVERRIDES, *overrides])
    if uses_abacus(run.config.model.pe):
        raise ConfigError("model.pe.abacus", True, "the analyses read the model without the "
                          "task's Abacus IDs; score this run with `pe-research eval`")
    return run


def example_batch(run: LoadedRun, length: int | None = None,
                  count: int = 8) -> dict[str, np.ndarray]:
    """``count`` examples of task length ``length`` (default: the longest trained) from the
    run's frozen evaluation set (built with the run's seed, so the same examples as eval)."""
    length = int(run.config.data.train_lengths[1]) if length is None else int(length)
    dataset = data.eval_dataset(run.task, [length], count, run.config.seed,
                                str(RunDir(run.run_dir).eval_data(run.config.data)))
    batch = next(iter(data.eval_batches(dataset, length, count,
                                        tuple(run.config.data.buckets))))
    return {key: np.asarray(value) for key, value in batch.items()}


def evaluation_positions(run: LoadedRun, batch: dict[str, np.ndarray]) -> tuple[Any, Any]:
    """Source and target positions exactly as range evaluation draws them for the first rows
    of a length."""
    pe = run.config.model.pe.to_dict()
    position_key = evaluation_keys(pe, eval_position_key(run.config.seed), 0,
                                   batch["source"].shape[0])
    return batch_positions(pe, batch, position_key, training=False,
                           architecture=run.config.model.architecture)


def default_num_positions(run: LoadedRun) -> int:
    """Positions to draw: the trained range and as much again past it (at least 64), within the
    learned table's size, the randomized range, else the top bucket."""
    pe = run.config.model.pe.to_dict()
    max_position, _ = randomize_settings(pe)
    if "max_len" in pe:
        limit = int(pe["max_len"])
    else:
        limit = max_position or int(max(run.config.data.buckets))
    trained, _ = trained_positions(run)
    return min(limit, max(2 * trained, 64))


def trained_positions(run: LoadedRun) -> tuple[int, str]:
    """How many positions training used (``0 .. N-1``), and why, from the run's config.

    Randomized positions draw from ``[0, max_position)``; otherwise the longest training
    sequence sets it: the widest source, or the target plus its BOS/EOS slot.
    """
    max_position, _ = randomize_settings(run.config.model.pe.to_dict())
    if max_position > 0:
        return max_position, (f"model.pe.randomize.max_position={max_position}: training draws "
                              "positions below it")
    low, high = (int(n) for n in run.config.data.train_lengths)
    source, target = run.task.widest(range(low, high + 1))
    if run.config.model.architecture != "encoder_decoder":  # one sequence: source, then target
        longest = source + target + 1
        return longest, (f"data.train_lengths=({low}, {high}): the longest training sequence "
                         f"has {longest} tokens (source {source} followed by target {target} "
                         "+ SEP/EOS)")
    longest = max(source, target + 1)
    return longest, (f"data.train_lengths=({low}, {high}): the longest training sequence has "
                     f"{longest} tokens (source {source}, target {target} + BOS/EOS)")
