"""The training loop: ``train(config, workdir)``. The CLI only parses arguments and calls it.

One jitted step over a ``data`` mesh (batch sharded, parameters replicated). Step N is dispatched
before step N-1's metrics are read, so the host prepares the next batch while the device works.
Every step's loss and gradient norm are checked, and the state about to be saved is checked
finite: NaN/Inf stops the run before any checkpoint of that step is written. Running again on the
same ``workdir`` resumes from the newest good checkpoint and reproduces an uninterrupted run bit
for bit. Process 0 holds the run directory's lock (``runs/lock.py``) while it trains.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
from jax.sharding import Mesh
from tqdm import tqdm

from pe_research import data
from pe_research.config import save_config, to_dict, validate_config
from pe_research.errors import ConfigError
from pe_research.mesh import (
    check_batch_fits,
    data_mesh,
    maybe_initialize_distributed,
    replicated,
    sync_processes,
    to_host,
)
from pe_research.runs.checkpoint import abstract_like, run_checkpointer
from pe_research.runs.lock import RunDirLock
from pe_research.runs.restore import run_task
from pe_research.runs.run_dir import RunDir
from pe_research.runs.tracking import make_writer
from pe_research.training.optimizer import learning_rate_schedule
from pe_research.training.periodic_eval import PeriodicEvaluator
from pe_research.training.steps import initial_train_state

# Keys that may change when an existing run directory is trained further. The learning rate
# and clipping may change so that a diverged run can go on from its last good checkpoint.
RESUMABLE_CHANGES = ("train.steps", "train.log_every", "train.eval_every",
                     "train.checkpoint_every", "train.learning_rate", "train.clip_norm",
                     "wandb.")
# Resumable changes that alter the trained model and are recorded in config.json's history.
RECORDED_CHANGES = ("train.steps", "train.learning_rate", "train.clip_norm")


class DivergedError(RuntimeError):
    """Loss, gradients or the updated state became NaN/Inf; the last good checkpoint stays."""


@jax.jit
def all_finite(tree: Any) -> jax.Array:
    """One fused reduction: True when every floating-point leaf of ``tree`` is finite."""
    leaves = [jnp.all(jnp.isfinite(leaf)) for leaf in jax.tree.leaves(tree)
              if jnp.issubdtype(leaf.dtype, jnp.inexact)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.bool_(True)


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


def _flat(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def config_changes(config: ml_collections.ConfigDict, run_dir: Path) -> dict[str, list[Any]]:
    """``{key: [old, new]}`` of resumable keys changed since ``config.json``; ConfigError for any
    other change, naming the key the user most likely changed."""
    path = RunDir(run_dir).config
    if not path.exists():
        return {}
    old, new = _flat(RunDir(run_dir).read_config()), _flat(to_dict(config))
    differing = [key for key in sorted(set(old) | set(new)) if old.get(key) != new.get(key)]
    refused = [key for key in differing if not key.startswith(RESUMABLE_CHANGES)]
    if refused:
        # A changed `.type`/`.name` brings other keys with it (their defaults); name the cause.
        key = min(refused, key=lambda k: (not k.endswith((".type", ".name")),
                                          old.get(k) is None or new.get(k) is None, k))
        raise ConfigError(key, new.get(key), f"{run_dir} was trained with {key}="
                          f"{old.get(key)!r}; use another --workdir to change it")
    return {key: [old.get(key), new.get(key)] for key in differing}


def prepare_run_dir(config: ml_collections.ConfigDict, run_dir: Path, task: Any,
                    changes: Mapping[str, list[Any]], step: int) -> None:
    """Write config.json (with the resume history) and vocabulary.json on process 0."""
    recorded = {key: value for key, value in changes.items() if key.startswith(RECORDED_CHANGES)}
    if jax.process_index() == 0:
        history = RunDir(run_dir).config_history()
        if recorded:
            history.append({"step": step, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                            "changed": recorded})
            for key, (before, after) in recorded.items():
                print(f"{key} changed from {before} to {after} at step {step} "
                      "(recorded in config.json)")
        save_config(config, run_dir, history)
        task.vocabulary.save(RunDir(run_dir).vocabulary)
    sync_processes("pe_research_run_dir_written")


def train(config: ml_collections.ConfigDict, workdir: str | Path, *,
          mesh: Mesh | None = None) -> TrainResult:
    """Train (or resume) the run in ``workdir``; returns when ``train.steps`` are done.

    Nothing is written to ``workdir`` before the config has been validated and checked against
    the one already there.
    """
    validate_config(config)
    maybe_initialize_distributed(config.distributed)
    run_dir = Path(workdir).absolute()
    if run_dir.exists() and not run_dir.is_dir():
        raise ConfigError("--workdir", str(workdir), "is a file, not a directory; choose a "
                          "directory (it is created if missing)")
    task = run_task(config, run_dir)
    mesh = mesh or data_mesh()
    check_batch_fits("data.batch_size", config.data.batch_size, mesh)
    check_batch_fits("eval.batch_size", config.eval.batch_size, mesh)
    changes = config_changes(config, run_dir)
    sync_processes("pe_research_run_dir_checked")  # every process has read before any writes
    lock = RunDirLock(run_dir).acquire() if jax.process_index() == 0 else None
    try:
        return _train_locked(config, run_dir, task, mesh, changes)
    finally:
        if lock is not None:
            lock.release()


def _train_locked(config: ml_collections.ConfigDict, run_dir: Path, task: Any, mesh: Mesh,
                  changes: Mapping[str, list[Any]]) -> TrainResult:
    steps, params, opt_state = initial_train_state(config, task.vocabulary.size, mesh)
    checkpointer = run_checkpointer(config, run_dir)
    try:
        restored = checkpointer.restore_latest_good(
            params=abstract_like(params, replicated(mesh)),
            opt_state=abstract_like(opt_state, replicated(mesh)), quarantine=True)
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
    prepare_run_dir(config, run_dir, task, changes, start)

    writer = make_writer(config.wandb, run_dir, process_index=jax.process_index(),
                         resume_step=start if restored else None, hparams=to_dict(config))
    evaluator = PeriodicEvaluator(config, task, mesh, steps, run_dir)
    loop = _Loop(config, task, mesh, steps, checkpointer, writer, evaluator, window)
    try:
        params, opt_state, metrics = loop.run(params, opt_state, start)
    finally:
        checkpointer.close()
        writer.finish()
    return TrainResult(run_dir=run_dir, step=config.train.steps,
                       compilations=steps.compilations, steps_per_second=loop.steps_per_second,
                       metrics=metrics, checkpoint_dir=checkpointer.directory,
                       wandb_run=getattr(writer, "wandb_run_path", None))


class _Loop:
    """The step loop's state: metric window, timing, progress bar.

    The metric window (sums since the last log) is saved in each checkpoint's meta, so the first
    average logged after a resume covers the same steps as in an uninterrupted run.
    """

    def __init__(self, config, task, mesh, steps, checkpointer, writer, evaluator,
                 window: Mapping[str, Any] | None = None):
        self.config, self.task, self.mesh, self.steps = config, task, mesh, steps
        self.checkpointer, self.writer, self.evaluator = checkpointer, writer, evaluator
        self.schedule = learning_rate_schedule(config.train)
        window = window or {}
        self.window: dict[str, float] = {k: float(v) for k, v in window.get("sums", {}).items()}
        self.window_steps, self.steps_per_second = int(window.get("steps", 0)), 0.0
        self.timed_steps = 0  # steps since the clock was last restarted
        self.last_checkpoint: int | None = None

    def batch(self, data_step: int) -> dict[str, jax.Array]:
        local = data.train_batch(self.task, self.config.data, self.config.seed, data_step,
                                 jax.process_index(), jax.process_count())
        return data.global_batch(local, self.mesh)

    def read(self, step: int, metrics: dict[str, jax.Array]) -> None:
        """Bring step ``step``'s metrics to the host; stop on NaN/Inf."""
        values = {key: float(to_host(value)) for key, value in metrics.items()}
        if not (math.isfinite(values["loss"]) and math.isfinite(values["grad_norm"])):
            self.writer.log(step, {"train/loss": values["loss"],
                                   "train/grad_norm": values["grad_norm"], "diverged": 1})
            raise DivergedError(
                f"training diverged at step {step}: loss={values['loss']}, gradient norm="
                f"{values['grad_norm']}; stopped before checkpointing it ({self.kept()}). "
                + self.advice())
        for key, value in values.items():
            self.window[key] = self.window.get(key, 0.0) + value
        self.window_steps += 1
        self.timed_steps += 1

    def kept(self) -> str:
        """Where the last checkpoint that passed the finiteness check is."""
        if self.last_checkpoint is None:
            return "no checkpoint was written"
        return (f"the last good checkpoint is step {self.last_checkpoint} in "
                f"{self.checkpointer.directory}")

    def advice(self) -> str:
        """How to go on: a smaller learning rate or clipping, on the same run directory."""
        train_cfg = self.config.train
        where = "goes on from it" if self.last_checkpoint is not None else "starts again"
        return (f"Rerun with a smaller --config.train.learning_rate (now "
                f"{train_cfg.learning_rate}) or --config.train.clip_norm > 0 (now "
                f"{train_cfg.clip_norm}) on the same --workdir; it {where}.")

    def run(self, params, opt_state, start: int):
        train_cfg = self.config.train
        total = train_cfg.steps
        last_checkpoint = self.checkpointer.steps()
        self.last_checkpoint = last_checkpoint[-1] if last_checkpoint else None
        progress = tqdm(total=total, initial=start, desc="train", unit="step", smoothing=0.1,
                        disable=jax.process_index() != 0, dynamic_ncols=True)
        record: dict[str, float] = {}
        window_start, pending = time.perf_counter(), None
        for step in range(start + 1, total + 1):
            # `step` counts updates; its batch is the data stream's entry `step - 1`.
            params, opt_state, metrics = self.steps.train(
                params, opt_state, self.batch(step - 1), step - 1)
            if pending is not None:
                self.read(*pending)
                progress.update(1)
            pending = (step, metrics)
            log_due = step % train_cfg.log_every == 0 or step == total
            eval_due = train_cfg.eval_every and (step % train_cfg.eval_every == 0
                                                 or step == total)
            save_due = step % train_cfg.checkpoint_every == 0 or step == total
            if not (log_due or eval_due or save_due):
                continue
            self.read(*pending)
            progress.update(1)
            pending = None
            record = {}
            if log_due:
                elapsed = time.perf_counter() - window_start
                self.steps_per_second = self.timed_steps / max(elapsed, 1e-9)
                record = self.train_record(step)
                progress.set_postfix(loss=f"{record['train/loss']:.4f}",
                                     acc=f"{record['train/token_accuracy']:.3f}")
            eval_metrics = self.evaluator(params) if eval_due else {}
            record.update(eval_metrics)
            self.writer.log(step, record)
            if save_due:
                self.save(step, params, opt_state, eval_metrics)
            # Evaluation and saving are not training speed.
            window_start, self.timed_steps = time.perf_counter(), 0
        progress.close()
        return params, opt_state, record

    def train_record(self, step: int) -> dict[str, float]:
        record = {f"train/{key}": value / self.window_steps for key, value in self.window.items()}
        record["train/learning_rate"] = float(self.schedule(step - 1))
        record["train/steps_per_second"] = self.steps_per_second
        record["train/compilations"] = self.steps.compilations
        self.window, self.window_steps = {}, 0
        return record

    def save(self, step: int, params, opt_state, eval_metrics: dict[str, float]) -> None:
        """Checkpoint ``step`` if its parameters and optimizer state are finite; else stop."""
        if not bool(to_host(all_finite((params, opt_state)))):
            self.writer.log(step, {"diverged": 1})
            raise DivergedError(
                f"training diverged at step {step}: the parameters or optimizer state are not "
                f"finite; stopped before checkpointing it ({self.kept()}). " + self.advice())
        meta = {"step": step, "data_step": step, "seed": self.config.seed,
                "vocab_size": self.task.vocabulary.size,
                "compilations": self.steps.compilations,
                "train_window": {"sums": dict(self.window), "steps": self.window_steps}}
        self.checkpointer.save(step, params=params, opt_state=opt_state, meta=meta,
                               config=to_dict(self.config), metrics=eval_metrics or None)
        self.last_checkpoint = step
