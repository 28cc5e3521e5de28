"""Every config key with its default: the schema that validation checks against.

A config has top-level keys (``seed``, ``distributed``), fixed blocks (``data``, ``train``,
``eval``, ``wandb``), the ``model`` block with the scheme's ``model.pe`` block (keys from the
positional registry) and the ``task`` block (keys from the task registry).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import ml_collections

from pe_research.model.config import ModelConfig
from pe_research.positional.registry import COMMON_DEFAULTS, default_pe_config
from pe_research.tasks import default_task_config

SCHEDULES = ("constant", "cosine")
CHECKPOINT_CHOICES = ("best", "latest")
WANDB_MODES = ("offline", "online", "disabled")

# Blocks with a fixed set of keys.
BLOCK_DEFAULTS: dict[str, dict[str, Any]] = {
    "data": {
        "train_lengths": (1, 16),  # inclusive (min, max) task length seen in training
        "length_sampling": "per_batch",  # 'per_batch': one length per batch; 'mixed'
        "length_stream": "seed",  # 'seed': lengths drawn from the run's seed; 'shared': the same
        # for every run (members of a program then share each step's batch shape)
        "batch_size": 32,  # global, over all devices and processes
        "buckets": (16, 32, 64, 128, 256, 512),  # padded source lengths (one compile each;
        # the target follows; a task without a source pads its target to them)
        "scan_dir": "",  # local SCAN files (text tasks)
        "eval_samples": 64,  # evaluation examples per length
        "eval_cache_dir": "",  # '' -> <workdir>/eval_data
    },
    "train": {
        "steps": 1000,
        "learning_rate": 1e-3,
        "warmup_steps": 100,
        "schedule": "constant",  # or 'cosine' (to zero at the last step)
        "weight_decay": 0.0,  # AdamW; 0 is Adam
        "clip_norm": 1.0,  # global gradient norm; 0 disables clipping
        "log_every": 50,
        "eval_every": 250,  # 0 disables periodic evaluation
        "eval_batches": 4,  # held-out batches from the training distribution
        "checkpoint_every": 500,
        "keep_checkpoints": 2,  # latest K, plus the best by best_metric
        "best_metric": "eval/sequence_accuracy",  # '' (or eval_every 0): keep only the latest
        "eval_lengths": (),  # longer task lengths evaluated during training
        "steps_per_call": 0,  # train steps per jitted call (0: the largest divisor up to 10)
        # Memory an ensemble's train step may take (GiB: its compiled arguments, outputs and
        # temporaries at the widest training batch), checked before it trains; a sweep's job
        # whose members need more trains them as several programs that fit. 0 -> 90% of the
        # device's memory (a CPU's: as for eval.memory_budget_gb).
        "memory_budget_gb": 0.0,
        # False: the loss skips the end token, so the model never learns where to stop (-EOS of
        # Newman et al. 2020); range eval then also decodes at the oracle length.
        "predict_eos": True,
        # Fine-tuning: a run directory whose checkpoint's weights start this run ('{seed}' is
        # replaced by the seed); the optimizer, schedule and data start afresh. '' trains from
        # scratch.
        "init_from": "",
        "init_checkpoint": "best",  # of init_from: 'best' | 'latest' | a step number
    },
    "eval": {
        "lengths": (),  # task lengths for `pe-research eval`
        "batch_size": 64,  # at most: fewer where a length has fewer examples
        "checkpoint": "best",  # 'best' | 'latest' | a step number as a string
        # Estimated memory one eval batch may take (GiB); batches that would exceed it are
        # split into smaller ones of one shape. 0 -> half of the device's memory (a CPU's: the
        # RAM, or the process's memory cgroup limit, such as a SLURM job's --mem, if less;
        # divided among a local sweep's --jobs).
        "memory_budget_gb": 0.0,
        # Queries each attention takes at a time on xla (0: all): logits, bias and weights
        # [B, H, query_block, S] instead of [B, H, T, S]; the numbers do not change.
        "query_block": 64,
        # Also decode with the end token forced at the true length (oracle_exact_match;
        # Newman et al. 2020): what the model writes, apart from where it stops. Always on for
        # a run trained with train.predict_eos False.
        "oracle_length": False,
    },
    "wandb": {
        "mode": "offline",  # 'offline' | 'online' | 'disabled'; WANDB_MODE wins
        "project": "pe_research",
        "entity": "",
        "group": "",
        "tags": (),
        "name": "",  # '' -> the run directory's name
    },
}
TOP_LEVEL_DEFAULTS: dict[str, Any] = {
    "seed": 0,  # parameters, batches, dropout and random positions all derive from it
    "distributed": False,  # jax.distributed.initialize() for multi-host (docs/multihost.md)
}
# The model's keys and defaults are ModelConfig's fields (model/config.py), but for the
# vocabulary size, which the task sets, and the scheme's block, which the registry fills.
MODEL_DEFAULTS: dict[str, Any] = {
    field.name: field.default for field in dataclasses.fields(ModelConfig)
    if field.name not in ("vocab_size", "pe")}
# Keys older versions wrote to config.json that no longer exist: dropped when a run is read.
REMOVED_KEYS = ("train.optimizer_layout", "data.prefetch")
DEFAULT_TASK = "reverse_string"


def default_task_block(name: str) -> dict[str, Any]:
    """``config.task`` for task ``name`` with every default (ConfigError for unknown names)."""
    return dict(default_task_config(name))


def base_config(task: str = DEFAULT_TASK, pe: str = "rope") -> ml_collections.ConfigDict:
    """Every key with its default; config files start here and change what they need."""
    config = dict(TOP_LEVEL_DEFAULTS)
    config["task"] = default_task_block(task)
    config.update({name: dict(block) for name, block in BLOCK_DEFAULTS.items()})
    config["model"] = {**MODEL_DEFAULTS, "pe": default_pe_config(pe)}
    return ml_collections.ConfigDict(config)


def complete(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """Fill keys missing from an older or partial config with their defaults (in place)."""
    with config.unlocked():
        for key, value in TOP_LEVEL_DEFAULTS.items():
            if key not in config:
                config[key] = value
        for name, block in BLOCK_DEFAULTS.items():
            if name not in config:
                config[name] = {}
            _fill(config[name], block)
        if "task" not in config:
            config.task = default_task_block(DEFAULT_TASK)
        _fill(config.task, default_task_block(config.task.get("name", "")))
        if "model" not in config:
            config.model = {}
        _fill(config.model, MODEL_DEFAULTS)
        if "pe" not in config.model:
            config.model.pe = default_pe_config(COMMON_DEFAULTS["type"])
        _fill(config.model.pe, default_pe_config(config.model.pe.get("type", "")))
    return config


def _fill(block: ml_collections.ConfigDict, defaults: dict[str, Any]) -> None:
    """Add missing keys, also inside nested blocks (``model.pe.randomize``)."""
    for key, value in defaults.items():
        if key not in block:
            block[key] = value
        elif isinstance(value, dict) and isinstance(block[key], ml_collections.ConfigDict):
            _fill(block[key], value)
