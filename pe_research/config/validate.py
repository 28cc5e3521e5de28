"""Validate a whole config before anything is compiled: every key, type and value.

Each failure is one ``ConfigError`` naming the key, the bad value and what is valid.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import ml_collections
import numpy as np

from pe_research.config.schema import (
    BLOCK_DEFAULTS,
    CHECKPOINT_CHOICES,
    MODEL_DEFAULTS,
    SCHEDULES,
    TOP_LEVEL_DEFAULTS,
    WANDB_MODES,
    default_task_block,
)
from pe_research.core.errors import ConfigError, check_choice
from pe_research.data import (
    bucket_length,
    bucket_shape,
    check_data_block,
    check_data_config,
    train_shapes,
)
from pe_research.model.config import ModelConfig
from pe_research.model.metrics import get_metric, training_metrics
from pe_research.positional.abacus import check_abacus_ids, uses_abacus
from pe_research.positional.randomize import check_randomize
from pe_research.positional.registry import scheme_class
from pe_research.tasks import Task, get_task

# A chunk's metrics reach the host only after its last step, and the progress bar moves in
# chunks: 10 keeps both prompt while taking most of the gain.
STEPS_PER_CALL_LIMIT = 10
FLOAT32_MAX = float(np.finfo(np.float32).max)
STEPS_PER_CALL = "train.steps_per_call"


def best_metric_choices(train_cfg: Mapping[str, Any]) -> list[str]:
    """Metric names a checkpoint can be ranked by: in distribution, or at an eval length."""
    prefixes = ["eval"] + [f"eval_length_{n}" for n in train_cfg["eval_lengths"]]
    return [f"{prefix}/{m.name}" for prefix in prefixes for m in training_metrics()]


def best_mode(metric: str) -> str:
    """'max' or 'min' for a ``train.best_metric`` such as 'eval/loss' (the metric table says)."""
    return get_metric(metric.rsplit("/", 1)[-1], "train.best_metric").best_mode if metric \
        else "max"


def validate_config(config: ml_collections.ConfigDict) -> None:
    """Raise ``ConfigError`` for the first key that cannot work; return None if all is well."""
    _check_keys("", config, {**TOP_LEVEL_DEFAULTS, **{k: {} for k in BLOCK_DEFAULTS},
                             "task": {}, "model": {}})
    for key, default in TOP_LEVEL_DEFAULTS.items():
        _check_type(key, config[key], default)
    for name, defaults in BLOCK_DEFAULTS.items():
        _check_keys(name, config[name], defaults)
        for key, default in defaults.items():
            _check_type(f"{name}.{key}", config[name][key], default)
    if not 0 <= config.seed < 2**32:
        raise ConfigError("seed", config.seed, "a non-negative 32-bit integer (0 to 2**32 - 1)")
    check_data_block(config.data)
    _check_train(config.train)
    _check_eval(config.eval)
    _check_wandb(config.wandb)
    task = _check_task(config)
    if not task.decodes:
        _check_teacher_forced(config, task)
    _check_model(config, task.vocabulary.size)
    _check_lengths(config, task)
    _check_task_positions(config, task)


def _check_task_positions(config: ml_collections.ConfigDict, task: Task) -> None:
    """Schemes that read the task's position IDs: the task supplies them, the tables hold them."""
    pe = config.model.pe.to_dict()
    needs = {"coupled": scheme_class(pe["type"]).task_positions,
             "abacus": "abacus" if uses_abacus(pe) else None}
    for kind in filter(None, needs.values()):
        if kind not in task.position_kinds:
            setting = "model.pe.abacus" if kind == "abacus" else "model.pe.type"
            raise ConfigError(setting, pe["abacus"] if kind == "abacus" else pe["type"],
                              f"reads {kind!r} position IDs, which task {task.name!r} does not "
                              f"supply (it supplies {list(task.position_kinds) or 'none'})")
    if not any(needs.values()):
        return
    low, high = config.data.train_lengths
    longest = max([high, *config.train.eval_lengths, *config.eval.lengths])
    largest = task.eval_examples([longest], 1, config.seed).positions
    where = f"task length {longest}"
    if needs["coupled"]:
        scheme_class(pe["type"]).check_ids(
            pe, max(int(ids.max(initial=0)) for ids in largest["coupled"]), where)
    if needs["abacus"]:
        check_abacus_ids(pe, max(int(ids.max(initial=0)) for ids in largest["abacus"]), where)


def _check_keys(prefix: str, block: Mapping[str, Any], defaults: Mapping[str, Any]) -> None:
    for key in block:
        if key not in defaults:
            where = f"{prefix}.{key}" if prefix else key
            raise ConfigError(where, block[key],
                              f"not a config key; valid keys here are {sorted(defaults)}")


def _check_type(key: str, value: Any, default: Any) -> None:
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif isinstance(default, tuple):
        ok = isinstance(value, tuple | list)
    else:
        ok = isinstance(value, type(default))
    if not ok:
        raise ConfigError(key, value, f"expected {type(default).__name__} like {default!r}")


def _positive_ints(key: str, values: Sequence[Any]) -> None:
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(key, tuple(values), "a tuple of positive integers")


def _at_least(key: str, value: float, minimum: float) -> None:
    if value < minimum:
        raise ConfigError(key, value, f"must be >= {minimum}")


def _check_train(train: Mapping[str, Any]) -> None:
    for key in ("steps", "log_every", "checkpoint_every", "keep_checkpoints", "eval_batches"):
        _at_least(f"train.{key}", train[key], 1)
    for key in ("warmup_steps", "eval_every", "weight_decay", "clip_norm", "steps_per_call",
                "memory_budget_gb"):
        _at_least(f"train.{key}", train[key], 0)
    if not 0 < train["learning_rate"] <= FLOAT32_MAX:  # the optimizer computes in float32
        raise ConfigError("train.learning_rate", train["learning_rate"],
                          f"must be > 0 and at most {FLOAT32_MAX:.4g} (float32's largest)")
    check_choice("train.schedule", train["schedule"], SCHEDULES)
    _positive_ints("train.eval_lengths", tuple(train["eval_lengths"]))
    check_checkpoint_choice("train.init_checkpoint", train["init_checkpoint"])
    if train["best_metric"]:  # ignored when train.eval_every is 0 (no metric to rank by)
        check_choice("train.best_metric", train["best_metric"], best_metric_choices(train) + [""])


def _check_eval(evaluation: Mapping[str, Any]) -> None:
    _positive_ints("eval.lengths", tuple(evaluation["lengths"]))
    _at_least("eval.batch_size", evaluation["batch_size"], 1)
    _at_least("eval.memory_budget_gb", evaluation["memory_budget_gb"], 0)
    _at_least("eval.query_block", evaluation["query_block"], 0)
    check_checkpoint_choice("eval.checkpoint", evaluation["checkpoint"])


def check_checkpoint_choice(key: str, checkpoint: str) -> None:
    """ConfigError unless ``checkpoint`` is 'best', 'latest' or a step number."""
    if checkpoint not in CHECKPOINT_CHOICES and not str(checkpoint).isdigit():
        raise ConfigError(key, checkpoint, "'best', 'latest' or a step number")


def _check_wandb(wandb_cfg: Mapping[str, Any]) -> None:
    check_choice("wandb.mode", wandb_cfg["mode"], WANDB_MODES)
    if not wandb_cfg["project"]:
        raise ConfigError("wandb.project", wandb_cfg["project"], "a non-empty project name")
    if not all(isinstance(tag, str) for tag in wandb_cfg["tags"]):
        raise ConfigError("wandb.tags", tuple(wandb_cfg["tags"]), "a tuple of strings")


def _check_task(config: ml_collections.ConfigDict) -> Task:
    defaults = default_task_block(config.task.get("name", ""))
    _check_keys("task", config.task, defaults)
    for key, default in defaults.items():
        _check_type(f"task.{key}", config.task[key], default)
    return get_task(config.task.to_dict(), config.data.to_dict())


def _check_teacher_forced(config: ml_collections.ConfigDict, task: Task) -> None:
    """A language-modelling task: one causal stack, and no end of text to learn."""
    if config.model.architecture != "decoder_only":
        raise ConfigError("model.architecture", config.model.architecture,
                          f"task {task.name!r} has no source to encode: use 'decoder_only'")
    if config.train.predict_eos:
        raise ConfigError("train.predict_eos", True, f"task {task.name!r} has no end of text to "
                          "predict (it would learn the training length): set it to False")


def _check_model(config: ml_collections.ConfigDict, vocab_size: int) -> None:
    if "vocab_size" in config.model:
        raise ConfigError("model.vocab_size", config.model.vocab_size,
                          "set by the task's vocabulary; remove this key")
    _check_keys("model", config.model, {**MODEL_DEFAULTS, "pe": {}})
    for key, default in MODEL_DEFAULTS.items():
        _check_type(f"model.{key}", config.model[key], default)
    ModelConfig.from_mapping({**config.model.to_dict(), "vocab_size": vocab_size})


def _check_lengths(config: ml_collections.ConfigDict, task: Task) -> None:
    """Lengths the task can make, buckets that hold them, positions the scheme can encode."""
    if config.train.eval_lengths:
        task.check_lengths(config.train.eval_lengths, "train.eval_lengths")
    if config.eval.lengths:
        task.check_lengths(config.eval.lengths, "eval.lengths")
    lengths = sorted({*config.train.eval_lengths, *config.eval.lengths})
    check_data_config(task, config.data.to_dict(), lengths)
    low, high = config.data.train_lengths
    source, target = task.widest(range(low, max([high, *lengths]) + 1))
    source_width, target_width, joint = bucket_shape(
        bucket_length(source, config.data.buckets), target + 1, source + target + 1,
        config.data.buckets)
    if config.model.architecture == "encoder_decoder":
        longest = max(source, target + 1)  # the target side carries BOS/EOS
        padded = max(source_width, target_width)
    else:  # one sequence: the source, then the target side, cut to its joint width
        longest, padded = source + target + 1, joint
    pe = config.model.pe.to_dict()
    scheme_class(pe["type"]).check_positions(pe, padded)
    check_randomize(pe, longest)
    check_steps_per_call(config, task)


def _intervals(train_cfg: Mapping[str, Any]) -> dict[str, int]:
    """The step counts a call's K steps must divide: ``train.steps`` and every interval in use."""
    keys = ("steps", "log_every", "checkpoint_every", "eval_every")
    return {f"train.{key}": int(train_cfg[key]) for key in keys if int(train_cfg[key]) > 0}


def check_steps_per_call(config: ml_collections.ConfigDict, task: Task) -> None:
    """ConfigError unless an explicit ``train.steps_per_call`` K > 1 can group the run's steps:
    logging, evaluation and checkpoints happen between calls, and one call's K batches are
    stacked, so they must share one shape."""
    requested = int(config.train.steps_per_call)
    if requested <= 1:
        return
    for key, value in _intervals(config.train).items():
        if value % requested:
            raise ConfigError(STEPS_PER_CALL, requested, f"must divide {key} ({value}): "
                              "logging, evaluation and checkpoints happen between calls; set a "
                              "divisor of it, or 0 to have one chosen")
    shapes = len(train_shapes(task, config.data.to_dict()))
    if shapes > 1:
        raise ConfigError(STEPS_PER_CALL, requested, f"needs training batches of one shape, "
                          f"but data.train_lengths pad to {shapes} shapes over data.buckets; "
                          "set it to 0 or 1, or choose data.buckets so that one bucket holds "
                          "every training length")


def steps_per_call(config: ml_collections.ConfigDict, task: Task) -> int:
    """K for the run of ``config`` on ``task``: ``train.steps_per_call``, or (0) the largest K up
    to ``STEPS_PER_CALL_LIMIT`` that divides ``train.steps`` and every interval, 1 when the
    training batches take more than one shape."""
    requested = int(config.train.steps_per_call)
    if requested > 0:
        return requested
    if len(train_shapes(task, config.data.to_dict())) > 1:
        return 1
    common = math.gcd(*_intervals(config.train).values())
    return max(k for k in range(1, STEPS_PER_CALL_LIMIT + 1) if common % k == 0)
