"""Training one run: ``train(config, workdir)``. The CLI only parses arguments and calls it.

One jitted step over a ``data`` mesh (batch sharded, parameters replicated). Step N is dispatched
before step N-1's metrics are read, so the host prepares the next batch while the device works.
Every step's loss and gradient norm are checked, and the state about to be saved is checked
finite: NaN/Inf stops the run before any checkpoint of that step is written. Running again on the
same ``workdir`` resumes from the newest good checkpoint and reproduces an uninterrupted run bit
for bit. Process 0 holds the run directory's lock (``runs/lock.py``) while it trains.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import ml_collections
from jax.sharding import Mesh

from pe_research import data, runtime
from pe_research.config import flat_config, from_mapping, to_dict, validate_config
from pe_research.config.validate import steps_per_call
from pe_research.core.errors import ConfigError
from pe_research.model import model_line
from pe_research.runs import provenance
from pe_research.runs.checkpoint import abstract_like, run_checkpointer
from pe_research.runs.init_from import (
    InitSource,
    check_init_source,
    has_checkpoints,
    restore_source_params,
)
from pe_research.runs.lock import RunDirLock
from pe_research.runs.restore import run_task
from pe_research.runs.run_dir import RunDir, check_position_ids, save_config
from pe_research.runs.tracking import make_writer
from pe_research.runtime import check_batch_fits, data_mesh, replicated, sync_processes
from pe_research.training.periodic_eval import PeriodicEvaluator
from pe_research.training.step import initial_train_state
from pe_research.training.step_loop import MemberRun, StepLoop

# Keys that may change when an existing run directory is trained further. The learning rate
# and clipping may change so that a diverged run can go on from its last good checkpoint.
RESUMABLE_CHANGES = ("train.steps", "train.log_every", "train.eval_every",
                     "train.checkpoint_every", "train.learning_rate", "train.clip_norm",
                     "train.steps_per_call", "wandb.")
# Resumable changes that alter the trained model and are recorded in config.json's history.
RECORDED_CHANGES = ("train.steps", "train.learning_rate", "train.clip_norm")


@dataclasses.dataclass
class TrainResult:
    """Where a finished run lives and how it went."""

    run_dir: Path
    step: int
    compilations: int
    steps_per_second: float
    metrics: dict[str, float]
    checkpoint_dir: Path
    wandb_run: str | None


def config_changes(config: ml_collections.ConfigDict, run_dir: Path) -> dict[str, list[Any]]:
    """``{key: [old, new]}`` of resumable keys changed since ``config.json``; ConfigError for any
    other change, naming the key the user most likely changed."""
    path = RunDir(run_dir).config
    if not path.exists():
        return {}
    stored = RunDir(run_dir).read_config()
    check_position_ids(stored, run_dir)
    # Completed with today's defaults, so keys added since the run was written are no change.
    old = flat_config(to_dict(from_mapping(stored)))
    new = flat_config(to_dict(config))
    differing = [key for key in sorted(set(old) | set(new)) if old.get(key) != new.get(key)]
    refused = [key for key in differing if not key.startswith(RESUMABLE_CHANGES)]
    if refused:
        # A changed `.type`/`.name` brings other keys with it (their defaults); name the cause.
        key = min(refused, key=lambda k: (not k.endswith((".type", ".name")),
                                          old.get(k) is None or new.get(k) is None, k))
        raise ConfigError(key, new.get(key), f"{run_dir} was trained with {key}="
                          f"{old.get(key)!r}; use another --workdir to change it")
    return {key: [old.get(key), new.get(key)] for key in differing}


def init_source(config: ml_collections.ConfigDict, run_dir: Path, task: Any,
                ) -> InitSource | None:
    """The checked ``train.init_from`` source of a run that has no checkpoint of its own yet."""
    return None if has_checkpoints(run_dir) else check_init_source(config, task)


def start_from_source(config: ml_collections.ConfigDict, task: Any, source: InitSource | None,
                      params: Any, sharding: jax.sharding.Sharding, optimizer: Any,
                      ) -> tuple[Any, Any, dict[str, Any]]:
    """Parameters of the ``train.init_from`` checkpoint, a fresh ``optimizer`` state for them,
    and the record for config.json's history."""
    source = source or check_init_source(config, task)  # when the run's own steps were unreadable
    step, params = restore_source_params(source, config.train.init_checkpoint, params, sharding)
    opt_state = jax.device_put(optimizer.init(params), sharding)
    return params, opt_state, source.record(step, config)


def prepare_run_dir(config: ml_collections.ConfigDict, run_dir: Path, task: Any,
                    changes: Mapping[str, list[Any]], step: int,
                    initialised_from: Mapping[str, Any] | None = None) -> None:
    """Write config.json (with the resume history: resumed with changes, or initialised from
    another run's checkpoint) and vocabulary.json on process 0."""
    recorded = {key: value for key, value in changes.items() if key.startswith(RECORDED_CHANGES)}
    if jax.process_index() == 0:
        history = RunDir(run_dir).config_history()
        if initialised_from:
            history.append({"step": 0, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                            "initialised_from": dict(initialised_from)})
            changes = initialised_from.get("model_changes", {})
            changed = "; ".join(f"{key} {old!r} -> {new!r}" for key, (old, new) in changes.items())
            print(f"{run_dir.name}: starting from the weights of {initialised_from['run']} "
                  f"(step {initialised_from['step']}); model settings changed from it: "
                  f"{changed or 'none'}", flush=True)
        if recorded:
            history.append({"step": step, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                            "changed": recorded})
            for key, (before, after) in recorded.items():
                print(f"{key} changed from {before} to {after} at step {step} "
                      "(recorded in config.json)")
        save_config(config, run_dir, history)
        task.vocabulary.save(RunDir(run_dir).vocabulary)
        changed = provenance.record(RunDir(run_dir).provenance, step)
        if changed:
            print(f"{run_dir.name}: resumed under other library versions than its last start: "
                  f"{changed} (recorded in provenance.json)", flush=True)
    sync_processes("pe_research_run_dir_written")


def train(config: ml_collections.ConfigDict, workdir: str | Path, *,
          mesh: Mesh | None = None) -> TrainResult:
    """Train (or resume) the run in ``workdir``; returns when ``train.steps`` are done.

    Nothing is written to ``workdir`` before the config has been validated and checked against
    the one already there.
    """
    validate_config(config)
    runtime.initialize_distributed(config.distributed)
    run_dir = Path(workdir).absolute()
    if run_dir.exists() and not run_dir.is_dir():
        raise ConfigError("--workdir", str(workdir), "is a file, not a directory; choose a "
                          "directory (it is created if missing)")
    task = run_task(config, run_dir)
    mesh = mesh or data_mesh()
    check_batch_fits("data.batch_size", config.data.batch_size, mesh)
    check_batch_fits("eval.batch_size", config.eval.batch_size, mesh)
    changes = config_changes(config, run_dir)
    source = init_source(config, run_dir, task)
    sync_processes("pe_research_run_dir_checked")  # every process has read before any writes
    lock = RunDirLock(run_dir).acquire() if jax.process_index() == 0 else None
    try:
        return _train_locked(config, run_dir, task, mesh, changes, source)
    finally:
        if lock is not None:
            lock.release()


def _train_locked(config: ml_collections.ConfigDict, run_dir: Path, task: Any, mesh: Mesh,
                  changes: Mapping[str, list[Any]], source: InitSource | None) -> TrainResult:
    steps, params, opt_state = initial_train_state(config, task.vocabulary.size, mesh)
    checkpointer = run_checkpointer(config, run_dir)
    initialised = None
    try:
        restored = checkpointer.restore_latest_good(
            params=abstract_like(params, replicated(mesh)),
            opt_state=abstract_like(opt_state, replicated(mesh)), quarantine=True)
        if restored is None and config.train.init_from:
            params, opt_state, initialised = start_from_source(
                config, task, source, params, replicated(mesh), steps.optimizer)
    except BaseException:
        checkpointer.close()
        raise
    start, window = 0, None
    if restored is not None:
        start, items = restored
        params, opt_state = items["params"], items["opt_state"]
        window = items["meta"].get("train_window")
        if jax.process_index() == 0:
            print(f"resuming {run_dir} from step {start} (of {config.train.steps})", flush=True)
    prepare_run_dir(config, run_dir, task, changes, start, initialised)
    if jax.process_index() == 0:
        print(model_line(config, task.vocabulary.size, params), flush=True)

    writer = make_writer(config.wandb, run_dir, process_index=jax.process_index(),
                         resume_step=start if restored else None,
                         hparams={**to_dict(config), "provenance": provenance.environment()})
    evaluator = PeriodicEvaluator(config, task, mesh, steps.evaluator(config.seed), run_dir)
    member = MemberRun(config, run_dir, task.vocabulary.size, checkpointer, writer, evaluator,
                       window)

    def batch(data_step: int) -> dict[str, jax.Array]:
        local = data.train_batch(task, config.data, config.seed, data_step,
                                 jax.process_index(), jax.process_count())
        return data.global_batch(local, mesh)

    loop = StepLoop([member], steps, batch, steps_per_call=steps_per_call(config, task))
    try:
        params, opt_state = loop.run(params, opt_state, start)
    finally:
        checkpointer.close()
        writer.finish()
    return TrainResult(run_dir=run_dir, step=config.train.steps,
                       compilations=steps.compilations, steps_per_second=loop.steps_per_second,
                       metrics=member.record, checkpoint_dir=checkpointer.directory,
                       wandb_run=getattr(writer, "wandb_run_path", None))
