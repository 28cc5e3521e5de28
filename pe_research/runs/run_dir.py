"""A run directory and every path in it, named in this one place.

    RUN_DIR/
      config.json            the full, validated config (+ "history": changes made on resume)
      .lock                  held by the process training here (see runs/lock.py)
      vocabulary.json        the task's vocabulary
      metrics.jsonl          every logged metric (the source of truth for `compare`)
      checkpoints/<step>/    Orbax: params, opt_state, meta, config
      corrupt_checkpoints/   unreadable steps moved aside by training
      eval/<name>.{json,csv,png}   curves written by `pe-research eval`
      eval_data/             frozen evaluation sets (unless data.eval_cache_dir says otherwise)
      analysis/step_<N>/     what `pe-research analyze` writes
      wandb/, wandb_run_id   the W&B run and the id that resumes it
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pe_research.errors import ConfigError, UsageError
from pe_research.tasks.vocabulary import VOCABULARY_FILE

HISTORY_KEY = "history"  # in config.json, beside the config: what changed on each resume
EVAL_NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
DEFAULT_EVAL_NAME = "eval"
CORRUPT_DIR = "corrupt_checkpoints"  # beside the checkpoints folder


def check_eval_name(name: str) -> str:
    """A results name usable as a file name."""
    if not EVAL_NAME_PATTERN.match(name):
        raise ConfigError("--name", name, "letters, digits, '_', '.', '-' (a file name)")
    return name


def grid_point_runs(group: str | Path) -> list[Path]:
    """The runs of a sweep's grid point (its ``seed_*`` directories), or ``[group]`` when it is
    itself a run; a one-line UsageError when it is neither."""
    group = Path(group)
    runs = [group] if (group / "config.json").exists() else sorted(group.glob("seed_*"))
    if not runs:
        raise UsageError(f"{group}: no run here (neither config.json nor seed_*/); give a run "
                         "directory or a sweep's grid-point directory")
    return runs


@dataclasses.dataclass(frozen=True)
class RunDir:
    """The paths of one run directory (nothing is created by asking for a path)."""

    root: Path

    def __init__(self, root: str | Path):
        object.__setattr__(self, "root", Path(root).absolute())

    @property
    def config(self) -> Path:
        return self.root / "config.json"

    @property
    def vocabulary(self) -> Path:
        return self.root / VOCABULARY_FILE

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def corrupt_checkpoints(self) -> Path:
        return self.root / CORRUPT_DIR

    @property
    def eval_dir(self) -> Path:
        return self.root / "eval"

    def eval_results(self, name: str = DEFAULT_EVAL_NAME) -> Path:
        """``eval/<name>.json``; its ``.csv`` and ``.png`` siblings hold the same curve."""
        return self.eval_dir / f"{check_eval_name(name)}.json"

    def eval_data(self, data_cfg: Mapping[str, Any]) -> Path:
        """Where frozen evaluation sets live: ``data.eval_cache_dir``, else ``eval_data/``."""
        return Path(data_cfg["eval_cache_dir"] or self.root / "eval_data")

    def analysis(self, step: int) -> Path:
        return self.root / "analysis" / f"step_{step}"

    @property
    def wandb_id(self) -> Path:
        return self.root / "wandb_run_id"

    @property
    def lock(self) -> Path:
        return self.root / ".lock"

    def is_run(self) -> bool:
        """True when the directory holds a ``config.json`` (training has started here)."""
        return self.config.is_file()

    def read_config(self) -> dict[str, Any]:
        """The stored ``config.json`` as plain values; ConfigError if this is not a run."""
        if not self.is_run():
            raise ConfigError("run_dir", str(self.root),
                              f"no {self.config.name} here; is it a run directory?")
        values = json.loads(self.config.read_text())
        values.pop(HISTORY_KEY, None)
        return values

    def config_history(self) -> list[dict[str, Any]]:
        """What changed on each resume: ``[{"step", "time", "changed": {key: [old, new]}}]``."""
        if not self.is_run():
            return []
        return list(json.loads(self.config.read_text()).get(HISTORY_KEY, []))
