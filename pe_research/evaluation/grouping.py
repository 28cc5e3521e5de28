"""Runs grouped by config keys: a dotted key's value, a group's label, names sorted as people
read them."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pe_research.config.naming import short_keys
from pe_research.core.errors import ConfigError


def config_value(config: Mapping[str, Any], dotted: str) -> Any:
    """``config['a']['b']`` for ``'a.b'``; ConfigError naming the missing key."""
    if not has_key(config, dotted):
        raise ConfigError("--group-by", dotted, "a dotted key of config.json, e.g. "
                          "model.pe.type, seed or model.pe.scaling.type")
    node: Any = config
    for part in dotted.split("."):
        node = node[part]
    return node


def has_key(config: Mapping[str, Any], dotted: str) -> bool:
    """Whether ``config`` holds the dotted key ``dotted``."""
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    return True


def group_keys(group_by: str) -> list[str]:
    """The comma-separated keys of ``group_by``, stripped."""
    return [key.strip() for key in group_by.split(",") if key.strip()]


def group_label(config: Mapping[str, Any], group_by: str) -> str:
    """The group a run belongs to: the value of ``group_by``, or ``k=v, ...`` for several
    comma-separated keys (``model.pe.type,model.pe.randomize.max_position``).

    Of several keys, those this run's config lacks are left out of its label: a scheme's own
    key (``model.pe.max_len``, learned positions only) then names only that scheme's runs.
    """
    keys = group_keys(group_by)
    if len(keys) == 1:
        return str(config_value(config, keys[0]))
    labels = short_keys(keys)
    present = [key for key in keys if has_key(config, key)]
    if not present:
        config_value(config, keys[0])  # raises, naming the key
    return ", ".join(f"{labels[key]}={config_value(config, key)}" for key in present)


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that orders the numbers inside names by value: max_position=128 before 1024."""
    return tuple((0, int(part)) if part.isdigit() else (1, part)
                 for part in re.split(r"(\d+)", name) if part)
