"""Batches placed on devices: one global array over the mesh's ``data`` axis, or every member's
batch of an ensemble stacked to one width."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import jax
import numpy as np
from jax.sharding import Mesh

from pe_research.runtime import batch_sharded, check_batch_fits


def pad_to(batch: dict[str, np.ndarray], source_width: int,
           target_width: int) -> dict[str, np.ndarray]:
    """A batch padded with masked columns to ``[B, source_width]`` / ``[B, target_width]``
    (every ``source*`` and ``target*`` key)."""
    out = dict(batch)
    for key, value in batch.items():
        width = (source_width if key.startswith("source") else
                 target_width if key.startswith("target") else None)
        if width is not None and width > value.shape[1]:
            out[key] = np.pad(value, ((0, 0), (0, width - value.shape[1])))
    return out

def stack_batches(batches: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """``[M, B, ...]``: every member's batch padded to the widest member's widths; a member
    whose task supplies no position IDs of a kind another's does gets zeros there."""
    source = max(b["source"].shape[1] for b in batches)
    target = max(b["target_input"].shape[1] for b in batches)
    padded = [pad_to(b, source, target) for b in batches]
    keys = dict.fromkeys(key for b in padded for key in b)
    return {key: np.stack([b[key] if key in b else np.zeros_like(
        b["source" if key.startswith("source") else "target_input"]) for b in padded])
        for key in keys}

def global_batch(local_batch: Mapping[str, np.ndarray], mesh: Mesh) -> dict[str, jax.Array]:
    """Each key -> one ``jax.Array`` over all processes, batch axis sharded on mesh axis 'data'."""
    sharding = batch_sharded(mesh)
    rows = next(iter(local_batch.values())).shape[0] * jax.process_count()
    check_batch_fits("data.batch_size", rows, mesh)
    return {key: jax.make_array_from_process_local_data(sharding, np.asarray(value))
            for key, value in local_batch.items()}
