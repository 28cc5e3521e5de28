"""The step loop shared by a single run and an ensemble: metric windows, logging, evaluation,
finiteness checks and checkpoints per member (``MemberRun``), steps and progress (``StepLoop``).

Steps run ``steps_per_call`` at a time, one call of the ``CompiledStep`` each
(``train.steps_per_call``). A call is dispatched before the previous call's metrics are read, so
the host makes the next batches while the device works. NaN/Inf in the loss, the gradient norm
or the state about to be saved stops a member before any checkpoint of that step is written:
checkpoints are written between calls, after every step's metrics up to them have been read.
SIGTERM or SIGUSR1 checkpoints the step reached at the end of the call in flight and stops
(``preemption``).
"""

from __future__ import annotations

import math
import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from tqdm import tqdm

from pe_research.config import to_dict
from pe_research.model.metrics import training_metrics
from pe_research.runtime import to_host
from pe_research.training import preemption
from pe_research.training.optimizer import learning_rate_schedule


class DivergedError(RuntimeError):
    """Loss, gradients or the updated state became NaN/Inf; the last good checkpoint stays."""


@jax.jit
def all_finite(tree: Any) -> jax.Array:
    """One fused reduction: True when every floating-point leaf of ``tree`` is finite."""
    leaves = [jnp.all(jnp.isfinite(leaf)) for leaf in jax.tree.leaves(tree)
              if jnp.issubdtype(leaf.dtype, jnp.inexact)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.bool_(True)


def shapes(batch: Mapping[str, Any]) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """The shape of every array of a batch, by key."""
    return tuple(sorted((key, tuple(value.shape)) for key, value in batch.items()))


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
        # The steps give perplexity's ratio, the mean loss; its transform (e to it) comes here.
        for metric in training_metrics():
            if metric.transform and f"train/{metric.name}" in record:
                record[f"train/{metric.name}"] = metric.transform(record[f"train/{metric.name}"])
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
    ``member_state(tree, k)`` takes member k's part of stacked state; ``steps_per_call`` steps
    run per call of ``steps.train`` wherever a call starts on a multiple of it. A single
    run stops with ``DivergedError`` on NaN/Inf; an ensemble stops only the member that
    diverged, and raises once every member has.
    """

    def __init__(self, members: list[MemberRun], steps: Any, batch: Any, *,
                 member_state: Any = None, stacked_finite: Any = None, steps_per_call: int = 1):
        self.members, self.steps, self.batch = members, steps, batch
        self.steps_per_call = steps_per_call
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

    def read(self, first: int, count: int, metrics: dict[str, jax.Array]) -> None:
        """Bring the metrics of steps ``first .. first + count - 1`` to the host (leading axis
        ``[count]``); stop members on NaN/Inf."""
        values = {key: np.asarray(to_host(value), np.float64).reshape(count, -1)
                  for key, value in metrics.items()}
        for index in range(count):
            for k, member in self.live():
                if not member.add(first + index,
                                  {key: float(v[index, k]) for key, v in values.items()}):
                    self.stop(member)
            self.timed_steps += 1

    def call_length(self, done: int, total: int) -> int:
        """Steps the next call runs after ``done`` of ``total``: ``steps_per_call`` when aligned."""
        k = self.steps_per_call
        return k if k > 1 and done % k == 0 and done + k <= total else 1

    def run(self, params: Any, opt_state: Any, start: int) -> tuple[Any, Any]:
        """Train from step ``start`` to ``train.steps``; the final ``(params, opt_state)``.
        On SIGTERM, SIGUSR1 or Ctrl-C the step reached is checkpointed and ``PreemptedError``
        raised."""
        with preemption.watch() as flag:
            return self._run(params, opt_state, start, flag)

    def _run(self, params: Any, opt_state: Any, start: int,
             flag: preemption.Flag) -> tuple[Any, Any]:
        progress = tqdm(total=self.train_cfg.steps, initial=start, desc="train", unit="step",
                        smoothing=0.1, disable=jax.process_index() != 0, dynamic_ncols=True)
        self.steps.train.hold(params, opt_state)
        try:  # the bar ends its line before anything else is printed, errors included
            return self._steps(start, flag, progress)
        finally:
            progress.close()

    def _steps(self, start: int, flag: preemption.Flag, progress: tqdm) -> tuple[Any, Any]:
        total = self.train_cfg.steps
        window_start, pending, step = time.perf_counter(), None, start
        train = self.steps.train
        while step < total:
            # Update `step + 1` trains on the data stream's entry `step`.
            count = self.call_length(step, total)
            batches = [self.batch(s) for s in range(step, step + count)]
            if count > 1 and len({shapes(b) for b in batches}) > 1:
                # train_shapes (which chose K) says this cannot happen; if it does, run them
                # one per call rather than fail.
                count, batches = 1, batches[:1]
            metrics = train(batches, step)
            if pending is not None:
                self.read(*pending)
                progress.update(pending[1])
            pending, step = (step + 1, count, metrics), step + count
            log_due = step % self.train_cfg.log_every == 0 or step == total
            eval_due = self.train_cfg.eval_every and (step % self.train_cfg.eval_every == 0
                                                      or step == total)
            stop = flag.raised()
            save_due = step % self.train_cfg.checkpoint_every == 0 or step == total or stop
            if not (log_due or eval_due or save_due):
                continue
            self.read(*pending)
            progress.update(count)
            pending = None
            if log_due:
                elapsed = time.perf_counter() - window_start
                self.steps_per_second = self.timed_steps / max(elapsed, 1e-9)
            self.log_eval_save(step, *train.state(), log_due, eval_due, save_due, progress)
            if stop and step < total:
                for _, member in self.live():
                    member.checkpointer.wait()
                raise preemption.PreemptedError(step, flag.received or signal.SIGTERM)
            # Evaluation and saving are not training speed.
            window_start, self.timed_steps = time.perf_counter(), 0
        return train.state()

    def log_eval_save(self, step: int, params: Any, opt_state: Any, log_due: bool,
                      eval_due: bool, save_due: bool, progress: tqdm) -> None:
        finite = None
        if save_due:
            finite = (to_host(self.stacked_finite((params, opt_state))).reshape(-1)
                      if self.stacked else [bool(to_host(all_finite((params, opt_state))))])
        live = self.live()
        for index, (k, member) in enumerate(live):
            if eval_due:  # evaluation takes seconds (a compile at first): the bar says so
                progress.set_description_str(
                    "train: evaluating" + (f" member {index + 1}/{len(live)}"
                                           if len(live) > 1 else ""), refresh=True)
            record: dict[str, float] = {}
            if log_due:
                record = member.train_record(step, self.steps_per_second,
                                             self.steps.compilations)
            member_params = self.member_state(params, k) if eval_due or save_due else None
            eval_metrics = member.evaluator(member_params) if eval_due else {}
            record.update(eval_metrics)
            if record:  # a save alone (a preemption) logs nothing
                member.writer.log(step, record)
            member.record = record
            if save_due and not member.save(step, member_params,
                                            self.member_state(opt_state, k), bool(finite[k]),
                                            eval_metrics, self.steps.compilations):
                self.stop(member)
        if eval_due:
            progress.set_description_str("train", refresh=False)
        if log_due and self.live():
            records = [m.record for _, m in self.live() if "train/loss" in m.record]
            if records:
                progress.set_postfix(
                    loss=f"{np.mean([r['train/loss'] for r in records]):.4f}",
                    acc=f"{np.mean([r['train/token_accuracy'] for r in records]):.3f}")
