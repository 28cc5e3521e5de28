"""Config files: load ``configs/<name>.py`` into a completed, validated ConfigDict.

A config file defines ``get_config() -> ml_collections.ConfigDict``, usually starting from
``base_config()``. Every key is validated (``pe_research.config.validate``) before anything is
compiled.
"""

from __future__ import annotations

import importlib.util
import json
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import ml_collections

from pe_research.config.overrides import apply_overrides
from pe_research.config.schema import REMOVED_KEYS, complete
from pe_research.config.validate import validate_config
from pe_research.core.errors import ConfigError


def _tuples(value: Any) -> Any:
    """Lists -> tuples, recursively (JSON and config files may write lists)."""
    if isinstance(value, Mapping):
        return {key: _tuples(v) for key, v in value.items()}
    if isinstance(value, list | tuple):
        return tuple(_tuples(v) for v in value)
    return value


def from_mapping(values: Mapping[str, Any]) -> ml_collections.ConfigDict:
    """A completed ConfigDict from nested plain values (e.g. a parsed config.json); keys that
    older versions wrote and this one no longer has (``REMOVED_KEYS``) are dropped."""
    values = _tuples(dict(values))
    for key in REMOVED_KEYS:
        block, name = key.split(".")
        if isinstance(values.get(block), dict):
            values[block].pop(name, None)
    return complete(ml_collections.ConfigDict(values))


def load_config(path: str | Path, overrides: Sequence[str] = (), *,
                validate: bool = True) -> ml_collections.ConfigDict:
    """``get_config()`` of the file at ``path`` (or a run's ``config.json``), overrides applied,
    completed and validated."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError("--config", str(path), "no such config file (see configs/*.py)")
    if path.suffix not in (".py", ".json"):
        raise ConfigError("--config", str(path), "a config file (configs/*.py) or a run's "
                                                 "config.json")
    values = _read_json(path) if path.suffix == ".json" else _run_config_file(path)
    config = apply_overrides(from_mapping(values), overrides)
    if validate:
        validate_config(config)
    return config


def _read_json(path: Path) -> dict[str, Any]:
    """A run's ``config.json`` as a mapping; an unreadable one is one ConfigError."""
    try:
        values = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ConfigError("--config", str(path), f"cannot be read as JSON ({error})") from None
    if not isinstance(values, dict):
        raise ConfigError("--config", str(path), "must hold a JSON object (a run's config)")
    return values


def _run_config_file(path: Path) -> dict[str, Any]:
    """``get_config().to_dict()`` of the file; any failure in it is one ConfigError."""
    module = load_user_module(path)
    if not hasattr(module, "get_config"):
        raise ConfigError("--config", str(path), "the file must define get_config()")
    config = call_user_code(path, module.get_config)
    if not isinstance(config, ml_collections.ConfigDict):
        raise ConfigError("--config", str(path), "get_config() must return an "
                          f"ml_collections.ConfigDict, not {type(config).__name__}")
    return config.to_dict()


def load_user_module(path: str | Path) -> ModuleType:
    """The Python file at ``path`` run as a module (config and sweep files); errors as one line."""
    path = Path(path)
    spec = importlib.util.spec_from_file_location(f"pe_research_user_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    call_user_code(path, spec.loader.exec_module, module)
    return module


def call_user_code(path: Path, function: Callable[..., Any], *args: Any) -> Any:
    """``function(*args)``, code of the file at ``path``; anything it raises is one ConfigError
    naming the file, the line and the message."""
    try:
        return function(*args)
    except ConfigError:
        raise
    except SyntaxError as error:
        raise ConfigError("--config", str(path), f"syntax error at line {error.lineno}: "
                          f"{error.msg}; fix the file") from None
    except Exception as error:  # noqa: BLE001 - the user's code may raise anything
        lines = [f.lineno for f in traceback.extract_tb(error.__traceback__)
                 if Path(f.filename).resolve() == Path(path).resolve()]
        where = f" at line {lines[-1]}" if lines else ""
        raise ConfigError("--config", str(path), f"running it raised {type(error).__name__}"
                          f"{where}: {error}; fix the file") from None


def to_dict(config: ml_collections.ConfigDict) -> dict[str, Any]:
    """Plain nested dict (tuples as lists) for JSON, W&B and checkpoints."""
    return json.loads(config.to_json())


def flat_config(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``."""
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(flat_config(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out
