"""How many train steps one call runs (``train.steps_per_call``): chosen, or checked.

K steps in one call are one program over K batches (``steps.chained``), so K batches must share
a shape, and logging, evaluation and checkpoints, which happen between calls, must fall on
multiples of K. ``train.steps_per_call = 0`` picks the largest K up to ``AUTO_LIMIT`` that
divides them all (1 when the training batches take more than one shape).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import ml_collections

from pe_research import data
from pe_research.errors import ConfigError
from pe_research.tasks import Task

# A chunk's metrics reach the host only after its last step, and the progress bar moves in
# chunks: 10 keeps both prompt while taking most of the gain (benchmarks/RESULTS.md).
AUTO_LIMIT = 10
KEY = "train.steps_per_call"


def intervals(train_cfg: Mapping[str, Any]) -> dict[str, int]:
    """The step counts a chunk must divide: ``train.steps`` and every interval in use."""
    keys = ("steps", "log_every", "checkpoint_every", "eval_every")
    return {f"train.{key}": int(train_cfg[key]) for key in keys if int(train_cfg[key]) > 0}


def shape_count(config: ml_collections.ConfigDict, task: Task) -> int:
    """How many shapes the run's training batches can take."""
    return len(data.train_shapes(task, config.data.to_dict()))


def check_steps_per_call(config: ml_collections.ConfigDict, task: Task) -> None:
    """ConfigError unless an explicit ``train.steps_per_call`` can group the run's steps."""
    requested = int(config.train.steps_per_call)
    if requested <= 1:
        return
    for key, value in intervals(config.train).items():
        if value % requested:
            raise ConfigError(KEY, requested, f"must divide {key} ({value}): logging, "
                              "evaluation and checkpoints happen between calls; set a divisor "
                              f"of it, or 0 to have one chosen")
    check_one_shape(config, task, requested)


def check_one_shape(config: ml_collections.ConfigDict, task: Task, requested: int) -> None:
    """ConfigError if ``requested`` > 1 steps per call meet training batches of several
    shapes (one call's batches are stacked)."""
    shapes = shape_count(config, task)
    if requested > 1 and shapes > 1:
        raise ConfigError(KEY, requested, f"needs training batches of one shape, but "
                          f"data.train_lengths pad to {shapes} shapes over data.buckets; set "
                          "it to 0 or 1, or choose data.buckets so that one bucket holds "
                          "every training length")


def steps_per_call(config: ml_collections.ConfigDict, task: Task) -> int:
    """K for the run of ``config`` on ``task`` (0 in the config: chosen)."""
    requested = int(config.train.steps_per_call)
    if requested > 0:
        return requested
    if shape_count(config, task) > 1:
        return 1
    common = math.gcd(*intervals(config.train).values())
    return max(k for k in range(1, AUTO_LIMIT + 1) if common % k == 0)
