"""The shape traced by the position vectors: their cosine matrix and a 3-component PCA."""

from __future__ import annotations

from typing import Any

import numpy as np

from pe_research.analysis.orthogonality import cosine_matrix


def position_cosines(positions_PxD: Any) -> np.ndarray:
    """Cosine similarity between every pair of positions, ``[P, P]`` (float64)."""
    return cosine_matrix(positions_PxD, positions_PxD)


def principal_components(vectors_PxD: Any, num_components: int = 3,
                         project: Any = None) -> dict[str, Any]:
    """PCA over positions (rows centred on their mean): coordinates ``[P, k]`` and variance ratios.

    With ``project`` (``[Q, D]``), the coordinates are those of ``project``'s rows on the
    components fitted to ``vectors_PxD`` (e.g. every drawn position on the trained ones' axes).

    ``explained_variance_ratio[i]`` is the fraction of the total variance of the centred vectors
    along component i; components come from the SVD, signs fixed so each has a positive first
    coordinate at position 0 (or the first nonzero one).
    """
    x = np.asarray(vectors_PxD, np.float64)
    mean_1xD = x.mean(axis=0, keepdims=True)
    centred = x - mean_1xD
    _, singular, components_KxD = np.linalg.svd(centred, full_matrices=False)
    k = min(num_components, components_KxD.shape[0])
    if project is not None:
        centred = np.asarray(project, np.float64) - mean_1xD
    coords_PxK = centred @ components_KxD[:k].T
    for i in range(k):
        nonzero = np.flatnonzero(np.abs(coords_PxK[:, i]) > 1e-12)
        if nonzero.size and coords_PxK[nonzero[0], i] < 0:
            coords_PxK[:, i] *= -1
    variance = singular**2
    total = float(variance.sum())
    ratios = (variance[:k] / total) if total > 0 else np.zeros(k)
    return {
        "coordinates": coords_PxK,
        "explained_variance_ratio": [float(r) for r in ratios],
        "cumulative_explained_variance": float(np.sum(ratios)),
    }


def cosine_summary(cos_PxP: np.ndarray, offsets: tuple[int, ...] = (1, 2, 4, 16, 64, 256),
                   ) -> dict[str, float]:
    """Mean cosine between positions ``offset`` apart, for each offset shorter than ``P``."""
    size = cos_PxP.shape[0]
    return {str(k): float(np.mean(np.diagonal(cos_PxP, offset=k))) for k in offsets if k < size}
