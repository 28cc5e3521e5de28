"""Fine-tuning: a new run that starts from another run's weights (``train.init_from``).

``train.init_from`` names a run directory; ``{seed}`` in it is replaced by the run's seed, so a
sweep over seeds fine-tunes each seed from its own source. ``train.init_checkpoint`` picks the
step ('best', 'latest' or a number; unreadable steps fall back as in ``load_run``). Only the
parameters are taken: the optimizer, its schedule, the data stream and the step count start
afresh, as when Chen et al. (2023) fine-tune a pretrained model with position interpolation. The
config may differ from the source's in anything that keeps the parameter shapes (lengths,
positional scaling, randomized positions, learning rate, even a parameter-free scheme).

Everything is checked before anything is compiled: the source holds checkpoints, its vocabulary
is this task's, and its parameters have the shapes this config builds. Once the new run has a
checkpoint of its own it resumes from that; the source is not read again.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import jax
import ml_collections
from flax import nnx

from pe_research.config import flat_config, to_dict
from pe_research.core.errors import ConfigError
from pe_research.model import abstract_model
from pe_research.runs.checkpoint import abstract_like, run_checkpointer
from pe_research.runs.restore import candidate_steps, restore_params
from pe_research.runs.run_dir import RunDir, load_run_config
from pe_research.tasks import Task, Vocabulary

KEY = "train.init_from"


@dataclasses.dataclass(frozen=True)
class InitSource:
    """The run a fine-tuning run starts from, and its config."""

    run_dir: Path
    config: ml_collections.ConfigDict

    def model_changes(self, config: ml_collections.ConfigDict) -> dict[str, list[Any]]:
        """``{"model.key": [source's value, this run's]}`` for every model key ``config``
        changes: what makes the start differ from the source's model, besides the weights."""
        theirs = flat_config(to_dict(self.config.model), "model.")
        mine = flat_config(to_dict(config.model), "model.")
        return {key: [theirs.get(key), mine.get(key)]
                for key in sorted(set(theirs) | set(mine)) if theirs.get(key) != mine.get(key)}

    def record(self, step: int, config: ml_collections.ConfigDict) -> dict[str, Any]:
        """What config.json's history keeps: ``{"run", "step", "model_changes"}``."""
        return {"run": str(self.run_dir), "step": step,
                "model_changes": self.model_changes(config)}


def source_dir(config: ml_collections.ConfigDict) -> Path | None:
    """``train.init_from`` with ``{seed}`` filled in, absolute; None when it is empty."""
    text = str(config.train.init_from)
    if not text:
        return None
    return Path(text.replace("{seed}", str(config.seed))).expanduser().absolute()


def has_checkpoints(run_dir: str | Path) -> bool:
    """True when ``run_dir`` holds at least one finalized checkpoint step (it would resume)."""
    folder = RunDir(run_dir).checkpoints
    return folder.is_dir() and any(path.name.isdigit() for path in folder.iterdir())


def parameter_shapes(config: ml_collections.ConfigDict, vocab_size: int) -> dict[str, tuple]:
    """``{"path/to/param": shape}`` of the model ``config`` builds (no compute)."""
    _, params, _ = nnx.split(abstract_model(config, vocab_size), nnx.Param, ...)
    return {jax.tree_util.keystr(path): tuple(leaf.shape)
            for path, leaf in jax.tree_util.tree_leaves_with_path(params)}


def check_init_source(config: ml_collections.ConfigDict, task: Task) -> InitSource | None:
    """The source run of ``config``, checked against it; None without ``train.init_from``."""
    run_dir = source_dir(config)
    if run_dir is None:
        return None
    folder = RunDir(run_dir)
    if not folder.is_run():
        raise ConfigError(KEY, str(run_dir), "no config.json there; name a trained run "
                          "directory ('{seed}' is replaced by the seed)")
    if not has_checkpoints(run_dir):
        raise ConfigError(KEY, str(run_dir), "holds no checkpoint yet; train it first")
    source_config = load_run_config(run_dir, validate=False)
    if folder.vocabulary.exists():
        tokens = Vocabulary.load(folder.vocabulary).tokens
        if tokens != task.vocabulary.tokens:
            raise ConfigError(KEY, str(run_dir), f"its vocabulary ({len(tokens)} tokens) is not "
                              f"this task's ({task.vocabulary.size}); fine-tune on a task with "
                              "the same tokens")
    source = parameter_shapes(source_config, task.vocabulary.size)
    target = parameter_shapes(config, task.vocabulary.size)
    for name in sorted(set(source) | set(target)):
        if source.get(name) != target.get(name):
            raise ConfigError(KEY, str(run_dir), f"its parameter {name} has shape "
                              f"{source.get(name)}, this config builds {target.get(name)}; keep "
                              "the source's model sizes and layers")
    return InitSource(run_dir, source_config)


def restore_source_params(source: InitSource, checkpoint: str, abstract_params: Any,
                          sharding: jax.sharding.Sharding) -> tuple[int, Any]:
    """``(step, params)`` of the source's checkpoint, placed with ``sharding``."""
    checkpointer = run_checkpointer(source.config, source.run_dir, read_only=True)
    try:
        candidates = candidate_steps(checkpointer, checkpoint, key="train.init_checkpoint")
        return restore_params(checkpointer, candidates, abstract_like(abstract_params, sharding),
                              explicit=str(checkpoint).isdigit(), key="train.init_checkpoint")
    finally:
        checkpointer.close()
