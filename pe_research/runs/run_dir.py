"""A run directory and every path in it, named in this one place; its ``config.json``.

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
      provenance.json        versions, device, git commit and command of every start
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import ml_collections

from pe_research.config import apply_overrides, from_mapping, to_dict, validate_config
from pe_research.core.atomic_files import atomic_write_text
from pe_research.core.errors import ConfigError, UsageError
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
    def provenance(self) -> Path:
        return self.root / "provenance.json"

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


def save_config(config: ml_collections.ConfigDict, run_dir: str | Path,
                history: Sequence[Mapping[str, Any]] = ()) -> Path:
    """Write the run directory's ``config.json`` atomically, with its resume ``history``."""
    path = RunDir(run_dir).config
    path.parent.mkdir(parents=True, exist_ok=True)
    values = to_dict(config)
    if history:
        values[HISTORY_KEY] = list(history)
    return atomic_write_text(path, json.dumps(values, indent=2, sort_keys=True) + "\n")


def check_position_ids(values: Mapping[str, Any], run_dir: str | Path) -> None:
    """ConfigError for a run trained on task-supplied position IDs that this version assigns
    otherwise: position coupling before its IDs followed the authors' code (the addition task
    gained ``reversed_operands`` with that change, so its stored config lacks the key)."""
    task, pe = values.get("task", {}), values.get("model", {}).get("pe", {})
    if (task.get("name") == "addition" and pe.get("type") == "position_coupling"
            and "reversed_operands" not in task):
        raise ConfigError("model.pe.type", "position_coupling",
                          f"{run_dir} was trained on coupled IDs mirrored from the authors' "
                          "(s + 1 + i), which this version no longer assigns; train it again")


def read_run_config(run_dir: str | Path) -> dict[str, Any]:
    """A run's ``config.json`` as plain values, completed with today's defaults: keys added
    since the run was written read as their defaults, so old and new runs compare."""
    return to_dict(from_mapping(RunDir(run_dir).read_config()))


def load_run_config(run_dir: str | Path, overrides: Sequence[str] = (), *,
                    validate: bool = True) -> ml_collections.ConfigDict:
    """The config saved in a run directory, completed, overridden and validated."""
    values = RunDir(run_dir).read_config()
    check_position_ids(values, run_dir)
    config = apply_overrides(from_mapping(values), overrides)
    if validate:
        validate_config(config)
    return config
