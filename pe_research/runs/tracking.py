"""Metric writers behind one interface: JSONL (always, the source of truth), W&B, null.

Only process 0 writes. W&B is optional at run time and quiet: one line says where its run is.
If an online run cannot start within 30 s (no network, no key, bad entity), one warning is
printed and the run is logged offline to disk, so ``wandb sync`` can upload it later. If W&B
cannot run at all, one warning is printed and the run goes on with the JSONL writer alone.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from pe_research.core.atomic_files import atomic_write_text
from pe_research.runs.run_dir import RunDir

WANDB_INIT_TIMEOUT_S = 30.0


class Writer(Protocol):
    """What the training loop and evaluators write metrics through."""

    def log(self, step: int, metrics: Mapping[str, float]) -> None: ...

    def log_hparams(self, hparams: Mapping[str, Any]) -> None: ...

    def finish(self) -> None: ...


class NullWriter:
    """Writes nothing (non-zero processes)."""

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        pass

    def log_hparams(self, hparams: Mapping[str, Any]) -> None:
        pass

    def finish(self) -> None:
        pass


def _json_value(value: Any) -> Any:
    """Plain JSON: floats stay floats, NaN/Inf become strings so the file stays valid JSON."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


class JsonlWriter:
    """One JSON object per ``log`` call in ``metrics.jsonl``: ``{"step", "time", **metrics}``.

    ``resume_step`` drops records written after it by an interrupted run, so a resumed run's
    file has each step once.
    """

    def __init__(self, path: str | Path, resume_step: int | None = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_step is not None and self.path.exists():
            kept = [line for line in self.path.read_text().splitlines()
                    if line.strip() and json.loads(line).get("step", 0) <= resume_step]
            atomic_write_text(self.path, "".join(line + "\n" for line in kept))
        elif resume_step is None and self.path.exists():
            self.path.unlink()
        self.file = self.path.open("a")

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        record = {"step": int(step), "time": time.time()}
        record.update({key: _json_value(value) for key, value in metrics.items()})
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()

    def log_hparams(self, hparams: Mapping[str, Any]) -> None:
        pass  # config.json beside the metrics holds them

    def finish(self) -> None:
        self.file.close()


class WandbWriter:
    """A W&B run (offline by default) in ``run_dir/wandb``; any W&B failure disables it once."""

    def __init__(self, run_dir: str | Path, mode: str, project: str, entity: str = "",
                 group: str = "", tags: Sequence[str] = (), name: str = "",
                 config: Mapping[str, Any] | None = None):
        self.run = None
        try:
            import wandb

            run_dir = Path(run_dir)
            run_dir.mkdir(parents=True, exist_ok=True)
            id_file = RunDir(run_dir).wandb_id
            run_id = id_file.read_text().strip() if id_file.exists() else secrets.token_hex(4)
            settings = wandb.Settings(silent=True, quiet=True, show_info=False,
                                      console="off", init_timeout=WANDB_INIT_TIMEOUT_S)
            options = dict(
                project=project, entity=entity or None, group=group or None,
                tags=list(tags) or None, name=name or run_dir.name, config=dict(config or {}),
                dir=str(run_dir), id=run_id, resume="allow", reinit="create_new",
                settings=settings)
            try:
                self.run = wandb.init(mode=mode, **options)
            except Exception as error:  # noqa: BLE001 - fall back to a run on disk
                if mode != "online":
                    raise
                warnings.warn(f"W&B could not start online ({type(error).__name__}: "
                              f"{_first_line(error)}); logging offline to {run_dir / 'wandb'} "
                              "instead", stacklevel=2)
                try:
                    self.run = wandb.init(mode="offline", **options)
                except Exception:  # noqa: BLE001 - the failed online run still holds the id
                    wandb.teardown()
                    self.run = wandb.init(mode="offline", **options)
            atomic_write_text(id_file, run_id)
            print(self.describe(), flush=True)
        except Exception as error:  # noqa: BLE001 - W&B must never stop training
            self._fail(error)

    def describe(self) -> str:
        """One line: where the W&B run is, and how to upload it if it is offline."""
        if self.run is None:
            return "W&B: off"
        if self.run.settings.mode == "online" and not self.run.offline:
            return f"W&B: {self.run.url}"
        return f"W&B: offline run in {self.run_path}; upload with: wandb sync {self.run_path}"

    @property
    def run_path(self) -> str | None:
        """The local W&B run directory (what ``wandb sync`` takes), or None if W&B is off."""
        return None if self.run is None else str(Path(self.run.dir).parent)

    def _fail(self, error: Exception) -> None:
        warnings.warn(f"W&B disabled for this run ({type(error).__name__}: "
                      f"{_first_line(error)}); "
                      "metrics are still written to metrics.jsonl", stacklevel=3)
        self.run = None

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        if self.run is None:
            return
        try:
            self.run.log({key: value.item() if hasattr(value, "item") else value
                          for key, value in metrics.items()}, step=step)
        except Exception as error:  # noqa: BLE001
            self._fail(error)

    def log_hparams(self, hparams: Mapping[str, Any]) -> None:
        if self.run is None:
            return
        try:
            self.run.config.update(dict(hparams), allow_val_change=True)
        except Exception as error:  # noqa: BLE001
            self._fail(error)

    def finish(self) -> None:
        if self.run is None:
            return
        try:
            self.run.finish()
        except Exception as error:  # noqa: BLE001
            self._fail(error)


def _first_line(error: Exception) -> str:
    lines = str(error).strip().splitlines()
    return lines[0][:300] if lines else ""


class MultiWriter:
    """Fans every call out to several writers."""

    def __init__(self, writers: Sequence[Writer]):
        self.writers = list(writers)

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        for writer in self.writers:
            writer.log(step, metrics)

    def log_hparams(self, hparams: Mapping[str, Any]) -> None:
        for writer in self.writers:
            writer.log_hparams(hparams)

    def finish(self) -> None:
        for writer in self.writers:
            writer.finish()

    @property
    def wandb_run_path(self) -> str | None:
        """The local W&B run directory if a W&B writer is active."""
        for writer in self.writers:
            if isinstance(writer, WandbWriter):
                return writer.run_path
        return None


def wandb_mode(configured: str) -> str:
    """``WANDB_MODE`` from the environment wins over the config (W&B's own convention)."""
    mode = os.environ.get("WANDB_MODE", "").strip().lower() or configured
    # W&B also accepts 'dryrun'/'run'; map them onto the three modes we document.
    return {"dryrun": "offline", "run": "online"}.get(mode, mode)


def wandb_writer(wandb_cfg: Mapping[str, Any], run_dir: str | Path, *, process_index: int = 0,
                 config: Mapping[str, Any] | None = None) -> WandbWriter | None:
    """The run's W&B run (created, or resumed by its stored id) on process 0; None when off.

    None also when W&B failed to start (after its one warning). Evaluation and analysis use this
    to add tables and figures to the run that training logged into.
    """
    mode = wandb_mode(wandb_cfg.get("mode", "offline"))
    if mode == "disabled" or process_index != 0:
        return None
    writer = WandbWriter(run_dir, mode, project=wandb_cfg.get("project", "pe_research"),
                         entity=wandb_cfg.get("entity", ""), group=wandb_cfg.get("group", ""),
                         tags=tuple(wandb_cfg.get("tags", ())), name=wandb_cfg.get("name", ""),
                         config=config)
    return writer if writer.run is not None else None


def make_writer(wandb_cfg: Mapping[str, Any], run_dir: str | Path, *, process_index: int = 0,
                resume_step: int | None = None,
                hparams: Mapping[str, Any] | None = None) -> MultiWriter | NullWriter:
    """JSONL (+ W&B unless disabled) on process 0; a NullWriter elsewhere."""
    if process_index != 0:
        return NullWriter()
    writers: list[Writer] = [JsonlWriter(RunDir(run_dir).metrics, resume_step)]
    if wandb_mode(wandb_cfg["mode"]) != "disabled":
        # Kept even if W&B failed to start: it then ignores every call, after one warning.
        writers.append(WandbWriter(
            run_dir, wandb_mode(wandb_cfg["mode"]), project=wandb_cfg["project"],
            entity=wandb_cfg["entity"], group=wandb_cfg["group"], tags=tuple(wandb_cfg["tags"]),
            name=wandb_cfg["name"], config=hparams))
    return MultiWriter(writers)


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """Every record of a run's ``metrics.jsonl``, in order."""
    path = RunDir(run_dir).metrics
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
