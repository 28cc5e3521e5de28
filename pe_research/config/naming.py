"""Short readable names for config keys and values (sweep directories, comparison groups)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

UNSAFE_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.+-]+")


def value_name(value: Any) -> str:
    """A value as it appears in a directory name: ``(1, 40)`` -> ``1-40``."""
    if isinstance(value, list | tuple):
        return "-".join(value_name(v) for v in value) or "none"
    if isinstance(value, bool):
        return str(value).lower()
    text = f"{value:g}" if isinstance(value, float) else str(value)
    return UNSAFE_NAME_CHARS.sub("_", text) or "none"


def short_keys(keys: Sequence[str]) -> dict[str, str]:
    """A short label per swept key: its last part (two for ``.type``/``.name``), longer when
    two keys would share a label."""
    labels = {}
    for key in keys:
        parts = key.split(".")
        for depth in range(1, len(parts) + 1):
            if depth == 1 and parts[-1] in ("type", "name") and len(parts) > 1:
                continue
            label = ".".join(parts[-depth:])
            clashes = [k for k in keys if k != key and
                       (k == label or k.endswith("." + label))]
            if not clashes:
                break
        labels[key] = label
    return labels
