"""Norms of position vectors: do they lie near a sphere past the first positions?"""

from __future__ import annotations

from typing import Any

import numpy as np

DEFAULT_OFFSET = 100


def vector_norms(vectors_PxD: Any) -> np.ndarray:
    """Euclidean norm of each row, ``[P]`` (float64 accumulation)."""
    return np.linalg.norm(np.asarray(vectors_PxD, np.float64), axis=-1)


def norm_profile(vectors_PxD: Any, offset: int = DEFAULT_OFFSET) -> dict[str, Any]:
    """Norm per position and its mean, std (population) and CV = std/mean over positions >= offset.

    Raises ValueError when no position is at or past ``offset``.
    """
    norms_P = vector_norms(vectors_PxD)
    if not 0 <= offset < norms_P.shape[0]:
        raise ValueError(f"offset {offset} leaves no positions out of {norms_P.shape[0]}")
    tail = norms_P[offset:]
    mean, std = float(np.mean(tail)), float(np.std(tail))
    return {
        "offset": int(offset),
        "num_positions": int(norms_P.shape[0]),
        "mean": mean,
        "std": std,
        "cv": std / mean if mean > 0 else float("nan"),
        "min": float(np.min(tail)),
        "max": float(np.max(tail)),
        "first_positions": [float(n) for n in norms_P[: min(offset, 8)]],
        "norms": [float(n) for n in norms_P],
    }


def effective_offset(requested: int, num_positions: int) -> int:
    """``requested`` when it leaves positions to average, else half of them (never below 0)."""
    return requested if requested < num_positions else num_positions // 2
