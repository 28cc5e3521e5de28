"""Norms of position vectors: do they lie near a sphere past the first positions?"""

from __future__ import annotations

from typing import Any

import numpy as np

DEFAULT_OFFSET = 100


def vector_norms(vectors_PxD: Any) -> np.ndarray:
    """Euclidean norm of each row, ``[P]`` (float64 accumulation)."""
    return np.linalg.norm(np.asarray(vectors_PxD, np.float64), axis=-1)


def norm_profile(vectors_PxD: Any, offset: int = DEFAULT_OFFSET,
                 end: int | None = None) -> dict[str, Any]:
    """Norm per position (all ``P``) and its mean, std (population) and CV = std/mean over the
    positions ``offset <= p < end`` (``end`` defaults to ``P``: e.g. the trained positions).

    Raises ValueError when that range is empty.
    """
    norms_P = vector_norms(vectors_PxD)
    end = norms_P.shape[0] if end is None else min(int(end), norms_P.shape[0])
    if not 0 <= offset < end:
        raise ValueError(f"offset {offset} leaves no positions below {end}")
    tail = norms_P[offset:end]
    mean, std = float(np.mean(tail)), float(np.std(tail))
    return {
        "offset": int(offset),
        "end": int(end),
        "num_positions": int(norms_P.shape[0]),
        "mean": mean,
        "std": std,
        "cv": std / mean if mean > 0 else float("nan"),
        "min": float(np.min(tail)),
        "max": float(np.max(tail)),
        "first_positions": [float(n) for n in norms_P[: min(offset, 8)]],
        "norms": [float(n) for n in norms_P],
    }


def effective_offset(requested: int, num_trained: int) -> int:
    """``requested`` when the trained range reaches well past it (at least twice as far), else a
    quarter of the trained positions: the first positions of any range are special (BOS, the
    start of every sequence), so the summary skips them in proportion to the range."""
    return requested if 2 * requested <= num_trained else num_trained // 4
