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
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from jax.sharding import Mesh
from tqdm import tqdm

from pe_research import data
from pe_research.config import from_mapping, save_config, to_dict, validate_config
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


def flat_config(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``."""
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(flat_config(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def config_changes(config: ml_collections.ConfigDict, run_dir: Path) -> dict[str, list[Any]]:
    """``{key: [old, new]}`` of resumable keys changed since ``config.json``; ConfigError for any
    other change, naming the key the user most likely changed."""
    path = RunDir(run_dir).config
    if not path.exists():
        return {}
    # Completed with today's defaults, so keys added since the run was written are no change.
    old = flat_config(to_dict(from_mapping(RunDir(run_dir).read_config())))
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
    member = MemberRun(config, run_dir, task.vocabulary.size, checkpointer, writer,
                       PeriodicEvaluator(config, task, mesh, steps, run_dir), window)

    def batch(data_step: int) -> dict[str, jax.Array]:
        local = data.train_batch(task, config.data, config.seed, data_step,
                                 jax.process_index(), jax.process_count())
        return data.global_batch(local, mesh)

    loop = StepLoop([member], steps, batch)
    try:
        params, opt_state = loop.run(params, opt_state, start)
    finally:
        checkpointer.close()
        writer.finish()
    return TrainResult(run_dir=run_dir, step=config.train.steps,
                       compilations=steps.compilations, steps_per_second=loop.steps_per_second,
                       metrics=member.record, checkpoint_dir=checkpointer.directory,
                       wandb_run=getattr(writer, "wandb_run_path", None))


class MemberRun:
    """One run directory's side of a step loop: writer, checkpointer, evaluator, metric window.

    The metric window (sums since the last log) is saved in each checkpoint's meta, so the first
    average logged after a resume covers the same steps as in an uninterrupted run.
    """

    def __init__(self, config: ml_collections.ConfigDict, run_dir: Path, vocab_size: int,
                 checkpointer: Any, writer: Any, evaluator: Any,
                 window: Mapping[str, Any] | None = None):
        self.config, self.run_dir, self.vocab_size = config, run_dir, vocab_size
        self.checkpointer, self.writer, self.evaluator = checkpointer, writer, evaluator
        self.schedule = learning_rate_schedule(config.train)
        window = window or {}
        self.window: dict[str, float] = {k: float(v) for k, v in window.get("sums", {}).items()}
        self.window_steps = int(window.get("steps", 0))
        saved = checkpointer.steps()
        self.last_checkpoint: int | None = saved[-1] if saved else None
        self.diverged: str | None = None  # the message, once this member has diverged
        self.record: dict[str, float] = {}  # the last record logged

    def add(self, step: int, values: Mapping[str, float]) -> bool:
        """Add a step's metrics to the window; False (and the member stops) on NaN/Inf."""
        if not (math.isfinite(values["loss"]) and math.isfinite(values["grad_norm"])):
            self.writer.log(step, {"train/loss": values["loss"],
                                   "train/grad_norm": values["grad_norm"], "diverged": 1})
            self.diverged = (
                f"training diverged at step {step}: loss={values['loss']}, gradient norm="
                f"{values['grad_norm']}; stopped before checkpointing it ({self.kept()}). "
                + self.advice())
            return False
        for key, value in values.items():
            self.window[key] = self.window.get(key, 0.0) + value
        self.window_steps += 1
        return True

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

    def train_record(self, step: int, steps_per_second: float,
                     compilations: int) -> dict[str, float]:
        """The window's averages (then emptied), learning rate, speed and compile count."""
        record = {f"train/{key}": value / self.window_steps for key, value in self.window.items()}
        record["train/learning_rate"] = float(self.schedule(step - 1))
        record["train/steps_per_second"] = steps_per_second
        record["train/compilations"] = compilations
        self.window, self.window_steps = {}, 0
        return record

    def save(self, step: int, params: Any, opt_state: Any, finite: bool,
             eval_metrics: Mapping[str, float], compilations: int) -> bool:
        """Checkpoint ``step`` if the state is ``finite``; else the member stops (False)."""
        if not finite:
            self.writer.log(step, {"diverged": 1})
            self.diverged = (
                f"training diverged at step {step}: the parameters or optimizer state are not "
                f"finite; stopped before checkpointing it ({self.kept()}). " + self.advice())
            return False
        meta = {"step": step, "data_step": step, "seed": self.config.seed,
                "vocab_size": self.vocab_size, "compilations": compilations,
                "train_window": {"sums": dict(self.window), "steps": self.window_steps}}
        self.checkpointer.save(step, params=params, opt_state=opt_state, meta=meta,
                               config=to_dict(self.config), metrics=eval_metrics or None)
        self.last_checkpoint = step
        return True


class StepLoop:
    """The step loop over one run, or over an ensemble's members (``stacked``).

    ``batch(data_step)`` gives the global batch (member-stacked for an ensemble);
    ``member_state(tree, k)`` takes member k's part of stacked state. A single run stops with
    ``DivergedError`` on NaN/Inf; an ensemble stops only the member that diverged, and raises
    once every member has.
    """

    def __init__(self, members: list[MemberRun], steps: Any, batch: Any, *,
                 member_state: Any = None, stacked_finite: Any = None):
        self.members, self.steps, self.batch = members, steps, batch
        self.stacked = member_state is not None
        self.member_state = member_state or (lambda tree, k: tree)
        self.stacked_finite = stacked_finite
        self.steps_per_second = 0.0
        self.timed_steps = 0  # steps since the clock was last restarted
        self.train_cfg = members[0].config.train

    def live(self) -> list[tuple[int, MemberRun]]:
        return [(k, m) for k, m in enumerate(self.members) if m.diverged is None]

    def stop(self, member: MemberRun) -> None:
        """A member diverged: a single run raises; an ensemble goes on without it."""
        if not self.stacked:
            raise DivergedError(member.diverged)
        tqdm.write(f"{member.run_dir}: {member.diverged}", file=sys.stderr)
        if not self.live():
            raise DivergedError(f"every member of the ensemble diverged; {member.diverged}")

    def read(self, step: int, metrics: dict[str, jax.Array]) -> None:
        """Bring step ``step``'s metrics to the host; stop members on NaN/Inf."""
        values = {key: np.asarray(to_host(value), np.float64).reshape(-1)
                  for key, value in metrics.items()}
        for k, member in self.live():
            if not member.add(step, {key: float(v[k]) for key, v in values.items()}):
                self.stop(member)
        self.timed_steps += 1

    def run(self, params: Any, opt_state: Any, start: int) -> tuple[Any, Any]:
        total = self.train_cfg.steps
        progress = tqdm(total=total, initial=start, desc="train", unit="step", smoothing=0.1,
                        disable=jax.process_index() != 0, dynamic_ncols=True)
        window_start, pending = time.perf_counter(), None
        for step in range(start + 1, total + 1):
            # `step` counts updates; its batch is the data stream's entry `step - 1`.
            params, opt_state, metrics = self.steps.train(
                params, opt_state, self.batch(step - 1), step - 1)
            if pending is not None:
                self.read(*pending)
                progress.update(1)
            pending = (step, metrics)
            log_due = step % self.train_cfg.log_every == 0 or step == total
            eval_due = self.train_cfg.eval_every and (step % self.train_cfg.eval_every == 0
                                                      or step == total)
            save_due = step % self.train_cfg.checkpoint_every == 0 or step == total
            if not (log_due or eval_due or save_due):
                continue
            self.read(*pending)
            progress.update(1)
            pending = None
            if log_due:
                elapsed = time.perf_counter() - window_start
                self.steps_per_second = self.timed_steps / max(elapsed, 1e-9)
            self.log_eval_save(step, params, opt_state, log_due, eval_due, save_due, progress)
            # Evaluation and saving are not training speed.
            window_start, self.timed_steps = time.perf_counter(), 0
        progress.close()
        return params, opt_state

    def log_eval_save(self, step: int, params: Any, opt_state: Any, log_due: bool,
                      eval_due: bool, save_due: bool, progress: tqdm) -> None:
        finite = None
        if save_due:
            finite = (to_host(self.stacked_finite((params, opt_state))).reshape(-1)
                      if self.stacked else [bool(to_host(all_finite((params, opt_state))))])
        for k, member in self.live():
            record: dict[str, float] = {}
            if log_due:
                record = member.train_record(step, self.steps_per_second,
                                             self.steps.compilations)
            member_params = self.member_state(params, k) if eval_due or save_due else None
            eval_metrics = member.evaluator(member_params) if eval_due else {}
            record.update(eval_metrics)
            member.writer.log(step, record)
            member.record = record
            if save_due and not member.save(step, member_params,
                                            self.member_state(opt_state, k), bool(finite[k]),
                                            eval_metrics, self.steps.compilations):
                self.stop(member)
        if log_due and self.live():
            records = [m.record for _, m in self.live() if "train/loss" in m.record]
            if records:
                progress.set_postfix(
                    loss=f"{np.mean([r['train/loss'] for r in records]):.4f}",
                    acc=f"{np.mean([r['train/token_accuracy'] for r in records]):.3f}")
