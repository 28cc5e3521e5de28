"""Experiment configs: load `configs/<name>.py`, apply dotted overrides, save/load config.json.

A config file defines ``get_config() -> ml_collections.ConfigDict``, usually starting from
``base_config()``. Overrides look like ``--config.model.pe.type=alibi``; each value is parsed by the
type of the value it replaces. Changing ``model.pe.type`` rebuilds ``model.pe`` from the scheme's
defaults (keeping the scheme-independent keys such as ``combine``), and changing ``task.name``
rebuilds ``task`` from the task's defaults, before the other overrides are applied.
Every key is validated (``pe_research.validation``) before anything is compiled.
"""

from __future__ import annotations

import ast
import importlib.util
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import ml_collections

from pe_research.errors import ConfigError
from pe_research.positional.registry import COMMON_DEFAULTS, default_pe_config

CONFIG_FILE = "config.json"
OVERRIDE_PREFIX = "--config."
REBUILT_BLOCKS = {"model.pe.type": "model.pe", "task.name": "task"}
TRUE_WORDS, FALSE_WORDS = ("true", "1", "yes", "on"), ("false", "0", "no", "off")

# Blocks with a fixed set of keys; their defaults are the schema that validation checks against.
BLOCK_DEFAULTS: dict[str, dict[str, Any]] = {
    "data": {
        "train_lengths": (1, 16),  # inclusive (min, max) task length seen in training
        "length_sampling": "per_batch",  # 'per_batch': one length per batch; 'mixed'
        "batch_size": 32,  # global, over all devices and processes
        "buckets": (16, 32, 64, 128, 256, 512),  # padded sequence lengths (one compile each)
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
    },
    "eval": {
        "lengths": (),  # task lengths for `pe-research eval`
        "batch_size": 64,
        "checkpoint": "best",  # 'best' | 'latest' | a step number as a string
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
MODEL_DEFAULTS: dict[str, Any] = {
    "d_model": 64, "num_heads": 4, "num_encoder_layers": 2, "num_decoder_layers": 2,
    "d_ff": 256, "dropout_rate": 0.0, "activation": "gelu", "norm": "pre",
    "scale_embedding": True, "tie_output": True, "dtype": "float32",
    "attention_implementation": "xla",
}


def default_task_block(name: str) -> dict[str, Any]:
    """``config.task`` for task ``name`` with every default (ConfigError for unknown names)."""
    from pe_research.tasks import default_task_config

    return dict(default_task_config(name))


def base_config(task: str = "reverse_string", pe: str = "rope") -> ml_collections.ConfigDict:
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
            for key, value in block.items():
                if key not in config[name]:
                    config[name][key] = value
        if "task" not in config:
            config.task = default_task_block("reverse_string")
        for key, value in default_task_block(config.task.get("name", "")).items():
            if key not in config.task:
                config.task[key] = value
        if "model" not in config:
            config.model = {}
        for key, value in MODEL_DEFAULTS.items():
            if key not in config.model:
                config.model[key] = value
        if "pe" not in config.model:
            config.model.pe = default_pe_config(COMMON_DEFAULTS["type"])
        for key, value in default_pe_config(config.model.pe.get("type", "")).items():
            if key not in config.model.pe:
                config.model.pe[key] = value
    return config


def _tuples(value: Any) -> Any:
    """Lists -> tuples, recursively (JSON and config files may write lists)."""
    if isinstance(value, Mapping):
        return {key: _tuples(v) for key, v in value.items()}
    if isinstance(value, list | tuple):
        return tuple(_tuples(v) for v in value)
    return value


def from_mapping(values: Mapping[str, Any]) -> ml_collections.ConfigDict:
    """A completed ConfigDict from nested plain values (e.g. a parsed config.json)."""
    return complete(ml_collections.ConfigDict(_tuples(dict(values))))


def load_config(path: str | Path, overrides: Sequence[str] = (), *,
                validate: bool = True) -> ml_collections.ConfigDict:
    """``get_config()`` of the file at ``path``, overrides applied, completed and validated."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError("--config", str(path), "no such config file (see configs/*.py)")
    spec = importlib.util.spec_from_file_location(f"pe_research_config_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not hasattr(module, "get_config"):
        raise ConfigError("--config", str(path), "the file must define get_config()")
    config = from_mapping(module.get_config().to_dict())
    config = apply_overrides(config, overrides)
    if validate:
        from pe_research.validation import validate_config

        validate_config(config)
    return config


def split_override(text: str) -> tuple[str, str]:
    """``'--config.a.b=v'`` or ``'a.b=v'`` -> ``('a.b', 'v')``."""
    body = text[len(OVERRIDE_PREFIX):] if text.startswith(OVERRIDE_PREFIX) else text
    key, sep, value = body.partition("=")
    if not sep or not key:
        raise ConfigError("--config", text, "overrides look like --config.train.steps=100")
    return key, value


def collect_overrides(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split command-line leftovers into config overrides (``--config.k=v`` or ``--config.k v``)
    and everything else."""
    overrides, rest = [], []
    args = list(argv)
    while args:
        arg = args.pop(0)
        if not arg.startswith(OVERRIDE_PREFIX):
            rest.append(arg)
        elif "=" in arg:
            overrides.append(arg)
        elif args and not args[0].startswith("--"):
            overrides.append(f"{arg}={args.pop(0)}")
        else:
            raise ConfigError(arg[len(OVERRIDE_PREFIX):], None, f"give a value: {arg}=VALUE")
    return overrides, rest


def apply_overrides(config: ml_collections.ConfigDict,
                    overrides: Sequence[str]) -> ml_collections.ConfigDict:
    """Apply ``key=value`` overrides; block-rebuilding keys (scheme, task) go first."""
    pairs = [split_override(text) for text in overrides]
    pairs.sort(key=lambda pair: pair[0] not in REBUILT_BLOCKS)  # stable: order kept otherwise
    with config.unlocked():
        for key, text in pairs:
            parent, leaf = _parent(config, key)
            value = parse_value(key, text, parent[leaf])
            if key == "model.pe.type" and value != parent[leaf]:
                common = {k: v for k, v in config.model.pe.items() if k in COMMON_DEFAULTS}
                config.model.pe = {**default_pe_config(value), **common, "type": value}
            elif key == "task.name" and value != parent[leaf]:
                config.task = default_task_block(value)
            else:
                parent[leaf] = value
    return config


def _parent(config: ml_collections.ConfigDict, key: str) -> tuple[Any, str]:
    node: Any = config
    parts = key.split(".")
    for depth, part in enumerate(parts):
        if not isinstance(node, Mapping | ml_collections.ConfigDict) or part not in node:
            where = ".".join(parts[:depth]) or "the config"
            valid = sorted(node) if isinstance(node, Mapping | ml_collections.ConfigDict) else []
            raise ConfigError(key, None, f"not a config key; keys of {where} are {valid}")
        if depth == len(parts) - 1:
            return node, part
        node = node[part]
    raise AssertionError("unreachable")


def parse_value(key: str, text: str, current: Any) -> Any:
    """Parse override text by the type of the value it replaces."""
    try:
        if isinstance(current, bool):
            word = text.strip().lower()
            if word not in TRUE_WORDS + FALSE_WORDS:
                raise ValueError(text)
            return word in TRUE_WORDS
        if isinstance(current, int):
            return int(text)
        if isinstance(current, float):
            return float(text)
        if isinstance(current, str):
            quoted = len(text) >= 2 and text[0] == text[-1] and text[0] in "'\""
            return text[1:-1] if quoted else text
        if isinstance(current, tuple):
            return _parse_tuple(text, current)
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        kind = type(current).__name__
        raise ConfigError(key, text, f"expected a value of type {kind} like {current!r}") from None


def _parse_tuple(text: str, current: tuple) -> tuple:
    stripped = text.strip()
    if stripped in ("", "()", "[]"):
        return ()
    if stripped[0] in "([":
        items = ast.literal_eval(stripped)
        items = items if isinstance(items, list | tuple) else (items,)
    else:
        items = [item.strip() for item in stripped.split(",") if item.strip()]
    element = current[0] if current else None
    if isinstance(element, str):
        return tuple(str(item) for item in items)
    if element is None:  # an empty default says nothing about the element type
        return tuple(_literal_or_text(item) for item in items)
    return tuple(parse_value("", str(item), element) for item in items)


def _literal_or_text(item: Any) -> Any:
    if not isinstance(item, str):
        return item
    try:
        return ast.literal_eval(item)
    except (ValueError, SyntaxError):
        return item


def to_dict(config: ml_collections.ConfigDict) -> dict[str, Any]:
    """Plain nested dict (tuples as lists) for JSON, W&B and checkpoints."""
    return json.loads(config.to_json())


def save_config(config: ml_collections.ConfigDict, run_dir: str | Path) -> Path:
    """Write ``run_dir/config.json``."""
    path = Path(run_dir) / CONFIG_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".json.partial")
    partial.write_text(json.dumps(to_dict(config), indent=2, sort_keys=True) + "\n")
    partial.replace(path)  # readers never see half a file
    return path


def load_run_config(run_dir: str | Path, overrides: Sequence[str] = (), *,
                    validate: bool = True) -> ml_collections.ConfigDict:
    """The config saved in ``run_dir/config.json``, completed, overridden and validated."""
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise ConfigError("run_dir", str(run_dir), f"no {CONFIG_FILE} here; is it a run directory?")
    config = apply_overrides(from_mapping(json.loads(path.read_text())), overrides)
    if validate:
        from pe_research.validation import validate_config

        validate_config(config)
    return config
