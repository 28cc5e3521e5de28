"""``load_run``: the one way to restore a trained run, for evaluation, analysis and comparison.

It reads the run's config (with test-time overrides only), rebuilds its task with the stored
vocabulary, picks a checkpoint ('best', 'latest' or a step) and restores the parameters straight
onto the devices present, whatever devices the run was trained on. For 'best' and 'latest' an
unreadable step is skipped with a warning in favour of the previous good one; an unreadable step
asked for by number is a one-line error. Restoring never writes to the run directory.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import ml_collections
from flax import nnx
from jax.sharding import Mesh

from pe_research.config import split_override
from pe_research.core.errors import ConfigError
from pe_research.model import TokenModel, abstract_model, build_model
from pe_research.runs.checkpoint import (
    Checkpointer,
    abstract_like,
    quiet_failed_reads,
    run_checkpointer,
    short_reason,
    warn_unreadable,
)
from pe_research.runs.run_dir import RunDir, load_run_config
from pe_research.runtime import data_mesh, replicated
from pe_research.tasks import Task, Vocabulary, get_task, task_class

CHECKPOINT_CHOICES = ("best", "latest")
# Keys a saved run may change when restored: test-time settings, never the model or the task
# (beyond these, a task's own test_time_keys, which change what is tested, not the vocabulary).
# model.pe.max_distance is T5's map from distances to its trained buckets, not a weight shape;
# model.ablated_heads zeroes heads' outputs, also without touching a weight.
# model.pe.randomize.max_position is the range test positions are drawn from (a learned table
# still bounds it): moving it tests where in the range a randomized model's heads look.
# model.pe.randomize.eval_per is how many position draws the test examples are scored on.
EVAL_SAFE_KEYS = ("model.pe.scaling", "model.pe.self_extend", "model.pe.attention_sinks",
                  "model.pe.randomize.eval_policy",
                  "model.pe.randomize.eval_per", "model.pe.randomize.max_position",
                  "model.pe.max_distance", "model.ablated_heads", "model.dtype",
                  "model.attention_implementation", "data.buckets", "data.eval_samples",
                  "data.eval_cache_dir", "eval", "wandb")


@dataclasses.dataclass
class LoadedRun:
    """A run's config, task and restored parameters, placed replicated on ``mesh``."""

    run_dir: Path
    config: ml_collections.ConfigDict
    task: Task
    step: int
    graphdef: Any
    params: Any
    rest: Any
    mesh: Mesh

    @property
    def model(self) -> TokenModel:
        """The restored model as an NNX module (parameters shared with ``params``)."""
        return nnx.merge(self.graphdef, self.params, self.rest)


def run_task(config: ml_collections.ConfigDict, run_dir: str | Path) -> Task:
    """The run's task, with the vocabulary stored in the run when there is one.

    Dataset tasks build their vocabulary from the training split, so a resumed or restored run
    must keep the stored one.
    """
    path = RunDir(run_dir).vocabulary
    vocabulary = Vocabulary.load(path) if path.exists() else None
    return get_task(config.task.to_dict(), config.data.to_dict(), vocabulary=vocabulary)


def check_eval_overrides(overrides: Sequence[str], task_keys: Sequence[str] = ()) -> None:
    """ConfigError for an override that would change what was trained (weights, task, data);
    ``task_keys``: the run's task's test-time keys, allowed as ``task.KEY``."""
    safe_keys = (*EVAL_SAFE_KEYS, *(f"task.{key}" for key in task_keys))
    for text in overrides:
        key, value = split_override(text)
        if not any(key == safe or key.startswith(safe + ".") for safe in safe_keys):
            raise ConfigError(key, value, "cannot change at evaluation (the checkpoint was "
                              "trained with the stored value); eval-time keys are "
                              + ", ".join(safe_keys))


def candidate_steps(checkpointer: Checkpointer, checkpoint: str | int, key: str = "--step",
                    ) -> list[int]:
    """The step asked for first, then (for 'best'/'latest') every earlier step as a fallback;
    errors name ``key``, the option that asked."""
    steps = checkpointer.steps()
    if not steps:
        raise ConfigError(key, checkpoint, f"no checkpoints in {checkpointer.directory}; "
                          "train the run until its first checkpoint "
                          "(train.checkpoint_every), or give a run that has one")
    if str(checkpoint).isdigit():
        if int(checkpoint) not in steps:
            raise ConfigError(key, checkpoint,
                              f"'latest', 'best' or one of the saved steps {steps}")
        return [int(checkpoint)]
    if checkpoint not in CHECKPOINT_CHOICES:
        raise ConfigError(key, checkpoint,
                          f"'latest', 'best' or one of the saved steps {steps}")
    best = checkpointer.best_step() if checkpoint == "best" else None
    first = steps[-1] if best is None else best
    return [first] + [step for step in reversed(steps) if step != first]


def restore_params(checkpointer: Checkpointer, candidates: Sequence[int], target: Any,
                   explicit: bool, key: str = "--step") -> tuple[int, Any]:
    """The first candidate step that restores into ``target``; one line on stderr for each one
    skipped."""
    restored = None
    with quiet_failed_reads() as failed:
        for step in candidates:
            try:
                restored = step, checkpointer.restore(step, params=target)["params"]
                break
            except Exception as error:  # noqa: BLE001 - any unreadable step is skipped or reported
                failed.append((step, short_reason(error)))
                if explicit:
                    break
    if restored is None and explicit:
        raise ConfigError(key, failed[0][0], f"checkpoint step {failed[0][0]} in "
                          f"{checkpointer.directory} is unreadable ({failed[0][1]}); ask for "
                          "'latest' or 'best' to fall back to a good one")
    if restored is None:
        raise ConfigError(key, "latest", f"no readable checkpoint in {checkpointer.directory}; "
                          f"the last error was {failed[-1][1]}")
    for step, reason in failed:
        warn_unreadable(checkpointer.directory, step, reason, f"using step {restored[0]} instead")
    return restored


def load_run(run_dir: str | Path, checkpoint: str | int | None = None,
             overrides: Sequence[str] = (), mesh: Mesh | None = None,
             lengths: Sequence[int] | None = None) -> LoadedRun:
    """Restore a checkpoint of ``run_dir`` onto ``mesh`` (default: every device present).

    ``checkpoint``: 'latest', 'best' or a step; None takes ``eval.checkpoint`` of the config.
    ``overrides`` (``'model.pe.scaling.factor=2'`` ...) may change test-time keys only.
    ``lengths``: the lengths to be evaluated; they replace ``eval.lengths`` and the training-time
    ``train.eval_lengths`` in the checks, so a test-time setting (a denser task, narrower
    buckets) must fit only the lengths asked for.
    """
    run_dir = Path(run_dir).absolute()
    stored_task = task_class(load_run_config(run_dir, validate=False).task.name)
    check_eval_overrides(overrides, stored_task.test_time_keys)
    if lengths:
        overrides = [*overrides, f"eval.lengths={tuple(int(n) for n in lengths)}",
                     "train.eval_lengths=()"]
    config = load_run_config(run_dir, overrides)
    task = run_task(config, run_dir)
    mesh = mesh or data_mesh()
    checkpointer = run_checkpointer(config, run_dir, read_only=True)
    checkpoint = config.eval.checkpoint if checkpoint in (None, "") else checkpoint
    candidates = candidate_steps(checkpointer, checkpoint)
    graphdef, abstract_params, rest = nnx.split(
        abstract_model(config, task.vocabulary.size), nnx.Param, ...)
    if jax.tree.leaves(rest):  # non-parameter state is rebuilt, not restored
        _, _, rest = nnx.split(build_model(config, task.vocabulary.size), nnx.Param, ...)
    target = abstract_like(abstract_params, replicated(mesh))
    try:
        step, params = restore_params(checkpointer, candidates, target,
                                      explicit=str(checkpoint).isdigit())
    finally:
        checkpointer.close()
    return LoadedRun(run_dir, config, task, step, graphdef, params, rest, mesh)
