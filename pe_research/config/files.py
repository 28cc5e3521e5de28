"""Config files and ``config.json``: load ``configs/<name>.py``, save and reload a run's config.

A config file defines ``get_config() -> ml_collections.ConfigDict``, usually starting from
``base_config()``. Every key is validated (``pe_research.config.validate``) before anything is
compiled.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import ml_collections

from pe_research.config.overrides import apply_overrides
from pe_research.config.schema import complete
from pe_research.config.validate import validate_config
from pe_research.errors import ConfigError
from pe_research.runs.run_dir import RunDir


def _tuples(value: Any) -> Any:
    """Lists -> tuples, recursively (JSON and config files may write lists)."""
    if isinstance(value, Mapping):
        return {key: _tuples(v) for key, v in value.items()}
    if isinstance(value, list | tuple):
        return tuple(_tuples(v) for v in value)
    return value


def from_mapping(values: Mapping[str, Any]) -> ml_collections.ConfigDict:
    """A completed ConfigDict from nested plain values (e.g. a parsed config.json)."""
    return complete(ml_collections.ConfigDict(_tuples(dict(values))))


def load_config(path: str | Path, overrides: Sequence[str] = (), *,
                validate: bool = True) -> ml_collections.ConfigDict:
    """``get_config()`` of the file at ``path``, overrides applied, completed and validated."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError("--config", str(path), "no such config file (see configs/*.py)")
    spec = importlib.util.spec_from_file_location(f"pe_research_config_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not hasattr(module, "get_config"):
        raise ConfigError("--config", str(path), "the file must define get_config()")
    config = apply_overrides(from_mapping(module.get_config().to_dict()), overrides)
    if validate:
        validate_config(config)
    return config


def to_dict(config: ml_collections.ConfigDict) -> dict[str, Any]:
    """Plain nested dict (tuples as lists) for JSON, W&B and checkpoints."""
    return json.loads(config.to_json())


def save_config(config: ml_collections.ConfigDict, run_dir: str | Path) -> Path:
    """Write the run directory's ``config.json`` (atomically: readers never see half a file)."""
    path = RunDir(run_dir).config
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".json.partial")
    partial.write_text(json.dumps(to_dict(config), indent=2, sort_keys=True) + "\n")
    partial.replace(path)
    return path


def load_run_config(run_dir: str | Path, overrides: Sequence[str] = (), *,
                    validate: bool = True) -> ml_collections.ConfigDict:
    """The config saved in a run directory, completed, overridden and validated."""
    values = RunDir(run_dir).read_config()
    config = apply_overrides(from_mapping(values), overrides)
    if validate:
        validate_config(config)
    return config
