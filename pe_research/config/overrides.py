"""Dotted command-line overrides: ``--config.model.pe.type=alibi``, parsed by the replaced type.

Changing ``model.pe.type`` rebuilds ``model.pe`` from the scheme's defaults (keeping the
scheme-independent keys such as ``combine``), and changing ``task.name`` rebuilds ``task`` from
the task's defaults, before the other overrides are applied.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from typing import Any

import ml_collections

from pe_research.config.schema import default_task_block
from pe_research.core.arguments import split_override
from pe_research.core.errors import ConfigError
from pe_research.positional.registry import COMMON_DEFAULTS, default_pe_config

REBUILT_BLOCKS = {"model.pe.type": "model.pe", "task.name": "task"}
TRUE_WORDS, FALSE_WORDS = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def apply_overrides(config: ml_collections.ConfigDict,
                    overrides: Sequence[str]) -> ml_collections.ConfigDict:
    """Apply ``key=value`` overrides; block-rebuilding keys (scheme, task) go first."""
    pairs = [split_override(text) for text in overrides]
    pairs.sort(key=lambda pair: pair[0] not in REBUILT_BLOCKS)  # stable: order kept otherwise
    with config.unlocked():
        for key, text in pairs:
            parent, leaf = _parent(config, key)
            value = parse_value(key, text, parent[leaf])
            if key == "model.pe.type" and value != parent[leaf]:
                common = {k: v for k, v in config.model.pe.items() if k in COMMON_DEFAULTS}
                config.model.pe = {**default_pe_config(value), **common, "type": value}
            elif key == "task.name" and value != parent[leaf]:
                config.task = default_task_block(value)
            elif isinstance(value, float) and type(parent[leaf]) is int:
                with parent.ignore_type():  # validation checks the type against the schema
                    parent[leaf] = value
            else:
                parent[leaf] = value
    return config


def _parent(config: ml_collections.ConfigDict, key: str) -> tuple[Any, str]:
    node: Any = config
    parts = key.split(".")
    for depth, part in enumerate(parts):
        if not isinstance(node, Mapping | ml_collections.ConfigDict) or part not in node:
            where = ".".join(parts[:depth]) or "the config"
            valid = sorted(node) if isinstance(node, Mapping | ml_collections.ConfigDict) else []
            raise ConfigError(key, None, f"not a config key; keys of {where} are {valid}")
        if depth == len(parts) - 1:
            return node, part
        node = node[part]
    raise AssertionError("unreachable")


def override_text(value: Any) -> str:
    """The override text that ``parse_value`` reads back as ``value`` (sweep grids)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, list | tuple):
        return repr(tuple(value))
    return repr(value)


def parse_value(key: str, text: str, current: Any) -> Any:
    """Parse override text by the type of the value it replaces."""
    try:
        if isinstance(current, bool):
            word = text.strip().lower()
            if word not in TRUE_WORDS + FALSE_WORDS:
                raise ValueError(text)
            return word in TRUE_WORDS
        if isinstance(current, int):
            try:
                return int(text)
            except ValueError:  # a float key that a config file set to an int, e.g. 1 for 1.0:
                return float(text)  # validation refuses a float where the schema wants an int
        if isinstance(current, float):
            return float(text)
        if isinstance(current, str):
            quoted = len(text) >= 2 and text[0] == text[-1] and text[0] in "'\""
            return text[1:-1] if quoted else text
        if isinstance(current, tuple):
            return _parse_tuple(text, current)
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        if isinstance(current, ml_collections.ConfigDict):
            first = "type" if "type" in current else next(iter(current.keys()), "KEY")
            raise ConfigError(key, text, f"a block of settings: set one of its keys, e.g. "
                                         f"--config.{key}.{first}=VALUE") from None
        kind, example = type(current).__name__, repr(current)
        example = example if len(example) <= 60 else f"{example[:57]}..."
        raise ConfigError(key, text, f"expected a value of type {kind} like {example}") from None


def _parse_tuple(text: str, current: tuple) -> tuple:
    stripped = text.strip()
    if stripped in ("", "()", "[]"):
        return ()
    if stripped[0] in "([":
        items = ast.literal_eval(stripped)
        items = items if isinstance(items, list | tuple) else (items,)
    else:
        items = [item.strip() for item in stripped.split(",") if item.strip()]
    element = current[0] if current else None
    if isinstance(element, str):
        return tuple(str(item) for item in items)
    if element is None:  # an empty default says nothing about the element type
        return tuple(_literal_or_text(item) for item in items)
    return tuple(parse_value("", str(item), element) for item in items)


def _literal_or_text(item: Any) -> Any:
    if not isinstance(item, str):
        return item
    try:
        return ast.literal_eval(item)
    except (ValueError, SyntaxError):
        return item
