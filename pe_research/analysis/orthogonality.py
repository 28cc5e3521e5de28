"""Are position vectors orthogonal to token vectors? Cosines of every (token, position) pair."""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def cosine_matrix(a_NxD: Any, b_MxD: Any) -> np.ndarray:
    """Cosine similarity of every row of ``a`` with every row of ``b``, ``[N, M]`` (float64)."""
    a = np.asarray(a_NxD, np.float64)
    b = np.asarray(b_MxD, np.float64)
    a = a / np.maximum(np.linalg.norm(a, axis=-1, keepdims=True), 1e-12)
    b = b / np.maximum(np.linalg.norm(b, axis=-1, keepdims=True), 1e-12)
    return a @ b.T


def random_mean_abs_cosine(dim: int) -> float:
    """E|cos| of two independent isotropic Gaussian vectors in ``dim`` dimensions (a baseline).

    cos^2 ~ Beta(1/2, (dim-1)/2), so E|cos| = Gamma(dim/2) / (sqrt(pi) Gamma((dim+1)/2)).
    """
    return math.exp(math.lgamma(dim / 2) - math.lgamma((dim + 1) / 2)) / math.sqrt(math.pi)


def token_position_orthogonality(tokens_VxD: Any, positions_PxD: Any,
                                 num_bins: int = 50) -> dict[str, Any]:
    """Histogram of cos(token_v, position_p) over all pairs, max and mean |cos|, the argmax pair."""
    cos_VxP = cosine_matrix(tokens_VxD, positions_PxD)
    abs_cos = np.abs(cos_VxP)
    token, position = np.unravel_index(int(np.argmax(abs_cos)), abs_cos.shape)
    counts, edges = np.histogram(cos_VxP, bins=num_bins, range=(-1.0, 1.0))
    return {
        "num_tokens": int(cos_VxP.shape[0]),
        "num_positions": int(cos_VxP.shape[1]),
        "max_abs_cos": float(abs_cos[token, position]),
        "mean_abs_cos": float(np.mean(abs_cos)),
        "argmax": {"token_id": int(token), "position": int(position),
                   "cos": float(cos_VxP[token, position])},
        "random_baseline_mean_abs_cos": random_mean_abs_cosine(np.shape(tokens_VxD)[-1]),
        "histogram": {"counts": counts.tolist(), "edges": edges.tolist()},
    }
