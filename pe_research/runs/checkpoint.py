"""Orbax checkpoints of a run: params, optimizer state, step + data position, config.

Layout: ``RUN_DIR/checkpoints/<step>/{params, opt_state, meta, config}`` written by an Orbax
``CheckpointManager`` (args API, asynchronous). The latest ``keep`` steps are kept, plus the best
one by an eval metric. A step that cannot be read back (a file truncated, garbled or missing) is
skipped in favour of the previous good one, with one line on stderr: which step, a short reason,
which step is used instead (``--debug``, i.e. ``PE_RESEARCH_DEBUG=1``, shows everything).
"""

from __future__ import annotations

import contextlib
import errno
import gc
import logging
import os
import shutil
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import jax
import ml_collections
import orbax.checkpoint as ocp
from orbax.checkpoint import checkpoint_managers as policies

from pe_research.config import best_mode
from pe_research.core.errors import ConfigError
from pe_research.runs.run_dir import CORRUPT_DIR, RunDir

# Orbax's message when a checkpoint is readable but its tree differs from the restore target.
STRUCTURE_MISMATCH = "tree structures do not match"
DEBUG_ENV = "PE_RESEARCH_DEBUG"


class SavedWithoutMetrics(logging.Filter):
    """Drops Orbax's warning that a step was saved without metrics while a best one is tracked:
    steps between evaluations (and a preemption's) are saved so on purpose, kept as latest and
    never ranked best."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "did not provide metrics" not in record.getMessage()


SAVED_WITHOUT_METRICS = SavedWithoutMetrics()


def debugging() -> bool:
    """Whether the user asked for everything (``--debug`` or ``PE_RESEARCH_DEBUG=1``)."""
    return os.environ.get(DEBUG_ENV, "") not in ("", "0", "false")


def short_reason(error: BaseException) -> str:
    """The exception's type and first line, without TensorStore's spec dump."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {text.split('. See full')[0]}"[:160]


def warn_unreadable(directory: Path, step: int, reason: str, instead: str) -> None:
    """The one line a skipped checkpoint step gets on stderr."""
    print(f"warning: checkpoint step {step} in {directory} is unreadable ({reason}); {instead}",
          file=sys.stderr, flush=True)


def checkpoint_bytes(arrays: Any) -> int:
    """About what a checkpoint of ``arrays`` takes on disk: their bytes, a quarter more for
    Orbax's files and their blocks, and 256 KiB for metadata."""
    return int(1.25 * sum(leaf.nbytes for leaf in jax.tree.leaves(arrays))) + 256 * 1024


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (a full disk, most often); nothing older was touched,
    and Orbax's half-written temporary directory is removed when the run next opens."""


@contextlib.contextmanager
def write_errors(directory: Path) -> Iterator[None]:
    """Orbax's errors while writing, as one ``CheckpointWriteError`` naming ``directory``."""
    try:
        yield
    except CheckpointWriteError:
        raise
    except Exception as error:
        full = "No space left" in str(error) or "RESOURCE_EXHAUSTED" in str(error)
        code, reason = (errno.ENOSPC, os.strerror(errno.ENOSPC)) if full else (
            errno.EIO, f"a checkpoint could not be written: {short_reason(error)}")
        raise CheckpointWriteError(code, reason, str(directory)) from error


def abandoned_read(unraisable: sys.UnraisableHookArgs) -> bool:
    """Whether an unraisable report comes from an Orbax read abandoned after a failed one: one
    of its coroutines finalised unawaited, or one of TensorStore's reads finishing into the
    event loop Orbax has closed (``RuntimeError: Event loop is closed``, on a thread of its
    own, any time after the restore gave up)."""
    code = getattr(unraisable.object, "cr_code", None)
    if code is not None:
        return "orbax" in code.co_filename
    return (unraisable.object is None and unraisable.exc_type is RuntimeError
            and str(unraisable.exc_value) == "Event loop is closed")


def drop_abandoned_reads() -> None:
    """From now on, this process prints no report of an abandoned read (``abandoned_read``);
    every other report goes to the hook that was in place. Installed once."""
    previous = sys.unraisablehook
    if getattr(previous, "drops_abandoned_reads", False):
        return

    def hook(unraisable: sys.UnraisableHookArgs) -> None:
        if not abandoned_read(unraisable):
            previous(unraisable)

    hook.drops_abandoned_reads = True  # type: ignore[attr-defined]
    sys.unraisablehook = hook


@contextlib.contextmanager
def quiet_failed_reads() -> Iterator[list[tuple[int, str]]]:
    """Restore attempts whose failures leave nothing on the console; yields the list the caller
    appends each failed ``(step, reason)`` to.

    When one array of a step cannot be read, Orbax's asynchronous restore gives up on the
    step's other reads; Python would print a traceback for each of them, some while the block
    runs and some later, from TensorStore's threads (about 30 for the tiny test model). From a
    process's first restore on, reports of abandoned reads are dropped (all kept with
    ``--debug``); after a failure, Orbax's coroutines are finalised before the block ends.
    Without a failure nothing is collected: a full collection of a large process's heap costs
    more than the restore."""
    failed: list[tuple[int, str]] = []
    if debugging():
        yield failed
        return
    drop_abandoned_reads()
    clean = False
    try:
        yield failed
        clean = not failed
    finally:
        if not clean:
            with warnings.catch_warnings():  # "coroutine ... was never awaited", finalised here
                warnings.filterwarnings("ignore", "coroutine .* was never awaited",
                                        RuntimeWarning)
                gc.collect()

__all__ = ["CORRUPT_DIR", "Checkpointer", "abstract_like", "run_checkpointer"]


def abstract_like(tree: Any, sharding: jax.sharding.Sharding | None = None) -> Any:
    """Shape/dtype(/sharding) skeleton of ``tree`` for Orbax to restore into."""
    return jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype,
                                       sharding=sharding or getattr(x, "sharding", None)), tree)


class Checkpointer:
    """A run's ``CheckpointManager``: save every N steps, resume from the newest good step."""

    def __init__(self, directory: str | Path, *, keep: int = 2, best_metric: str = "",
                 best_mode: str = "max", async_save: bool = True, read_only: bool = False):
        self.directory = Path(directory).absolute()
        self.best_metric = best_metric
        self.read_only = read_only
        preserve: list[Any] = [policies.LatestN(n=keep)]
        best_fn = None
        if best_metric:
            best_fn = _metric_getter(best_metric)
            preserve.append(policies.BestN(get_metric_fn=best_fn, reverse=best_mode == "min",
                                           n=1, keep_checkpoints_without_metrics=False))
        options = ocp.CheckpointManagerOptions(
            best_fn=best_fn, best_mode=best_mode,
            preservation_policy=policies.AnyPreservationPolicy(preserve),
            enable_async_checkpointing=async_save, cleanup_tmp_directories=not read_only,
            create=not read_only)  # read-only is enforced in save(), without Orbax's warnings
        self.manager = ocp.CheckpointManager(self.directory, options=options)
        logging.getLogger("absl").addFilter(SAVED_WITHOUT_METRICS)  # added once

    def steps(self) -> list[int]:
        """Finalized steps on disk, oldest first (in-progress temporary directories excluded)."""
        self.manager.reload()
        return sorted(self.manager.all_steps())

    def best_step(self) -> int | None:
        """The step with the best ``best_metric`` (the latest when no metric is tracked)."""
        self.manager.reload()
        return self.manager.best_step()

    def save(self, step: int, *, params: Any, opt_state: Any, meta: Mapping[str, Any],
             config: Mapping[str, Any], metrics: Mapping[str, float] | None = None) -> None:
        """Start an asynchronous save of ``step``; arrays are copied off device before returning."""
        if self.read_only:
            raise PermissionError(f"{self.directory} was opened read-only")
        if metrics is not None and self.best_metric not in metrics:
            metrics = None
        needed = checkpoint_bytes((params, opt_state))
        free = shutil.disk_usage(self.directory).free
        if free < needed:  # refused here, before Orbax's writer threads start and fail noisily
            raise CheckpointWriteError(
                errno.ENOSPC, f"{os.strerror(errno.ENOSPC)}: step {step}'s checkpoint needs about "
                f"{needed // 1024:,} KiB and {free // 1024:,} KiB are free", str(self.directory))
        with write_errors(self.directory):
            self._save(step, params, opt_state, meta, config, metrics)

    def _save(self, step: int, params: Any, opt_state: Any, meta: Mapping[str, Any],
              config: Mapping[str, Any], metrics: Mapping[str, float] | None) -> None:
        self.manager.save(
            step,
            args=ocp.args.Composite(
                params=ocp.args.StandardSave(params),
                opt_state=ocp.args.StandardSave(opt_state),
                meta=ocp.args.JsonSave(dict(meta)),
                config=ocp.args.JsonSave(dict(config)),
            ),
            metrics=None if metrics is None else {k: float(v) for k, v in metrics.items()},
            force=True,
        )

    def restore(self, step: int, *, params: Any = None, opt_state: Any = None) -> dict[str, Any]:
        """Items of ``step``: ``meta`` and ``config`` always, ``params``/``opt_state`` when an
        abstract target (see ``abstract_like``) is given."""
        items: dict[str, Any] = {"meta": ocp.args.JsonRestore(),
                                 "config": ocp.args.JsonRestore()}
        if params is not None:
            items["params"] = ocp.args.StandardRestore(params)
        if opt_state is not None:
            items["opt_state"] = ocp.args.StandardRestore(opt_state)
        restored = self.manager.restore(step, args=ocp.args.Composite(**items))
        return {name: restored[name] for name in items}

    def restore_latest_good(self, *, params: Any = None, opt_state: Any = None,
                            quarantine: bool = False) -> tuple[int, dict[str, Any]] | None:
        """Newest step that restores cleanly, or None if there is none.

        Each step that fails gets one line on stderr; with ``quarantine`` it is moved to
        ``run_dir/corrupt_checkpoints`` so that training can write that step again.
        """
        restored = None
        with quiet_failed_reads() as failed:
            for step in reversed(self.steps()):
                try:
                    restored = step, self.restore(step, params=params, opt_state=opt_state)
                    break
                except ValueError as error:
                    if STRUCTURE_MISMATCH in str(error):
                        # Readable, but not what this code builds: never move such a step aside.
                        raise ConfigError(
                            "checkpoint", step, f"step {step} in {self.directory} holds a "
                            "different parameter or optimizer-state structure than this version "
                            "builds for this config; evaluate it with the version that wrote it, "
                            "or train in another --workdir") from None
                    failed.append((step, short_reason(error)))
                except Exception as error:  # noqa: BLE001 - any unreadable step is skipped
                    failed.append((step, short_reason(error)))
                if quarantine:
                    self._quarantine(step)
        instead = f"using step {restored[0]} instead" if restored else "no readable step is left"
        for step, reason in failed:
            warn_unreadable(self.directory, step, reason, instead)
        return restored

    def _quarantine(self, step: int) -> None:
        if jax.process_index() == 0:
            target = self.directory.parent / CORRUPT_DIR / f"{step}-{int(time.time())}"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(self.directory / str(step)), str(target))
        ocp.multihost.sync_global_processes(f"pe_research_quarantine_{step}")
        self.manager.reload()

    def wait(self) -> None:
        """Block until every pending asynchronous save is on disk; a save that failed is an
        ``OSError`` naming the checkpoint directory (the previous steps stay as they were)."""
        with write_errors(self.directory):
            self.manager.wait_until_finished()

    def close(self) -> None:
        try:
            self.wait()
        finally:
            self.manager.close()


def _metric_getter(name: str) -> Callable[[Mapping[str, float]], float]:
    return lambda metrics: float(metrics[name])


def run_checkpointer(config: ml_collections.ConfigDict, run_dir: str | Path, *,
                     read_only: bool = False) -> Checkpointer:
    """The checkpointer of a run directory, ranking steps by ``train.best_metric``.

    No metric is tracked when periodic evaluation is off (``train.eval_every`` 0): 'best' is
    then the latest step.
    """
    metric = config.train.best_metric if config.train.eval_every else ""
    return Checkpointer(RunDir(run_dir).checkpoints, keep=config.train.keep_checkpoints,
                        best_metric=metric, best_mode=best_mode(metric), read_only=read_only)
