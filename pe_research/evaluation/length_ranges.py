"""A curve over task lengths split at the longest training length: in training and beyond."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def range_means(curve: Any, lengths: Sequence[int], high: int) -> tuple[float, float]:
    """Mean of ``curve`` ``[L]`` over the ``lengths`` up to ``high``, and over those beyond."""
    curve, lengths = np.asarray(curve, float), np.asarray(lengths)
    return float(curve[lengths <= high].mean()), float(curve[lengths > high].mean())


def lengths_text(lengths: Sequence[int]) -> str:
    """``12-14`` for a run of consecutive lengths, else ``8, 12, 16``."""
    values = sorted(int(n) for n in lengths)
    if len(values) > 1 and values == list(range(values[0], values[-1] + 1)):
        return f"{values[0]}-{values[-1]}"
    return ", ".join(str(n) for n in values)
