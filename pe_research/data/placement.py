"""Batches placed on devices: one global array over the mesh's ``data`` axis, or every member's
batch of an ensemble stacked to one width."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import jax
import numpy as np
from jax.sharding import Mesh

from pe_research.runtime import batch_sharded, check_batch_fits

SOURCE_KEYS, TARGET_KEYS = ("source", "source_mask"), ("target_input", "target_output",
                                                       "target_mask")


def pad_to(batch: dict[str, np.ndarray], source_width: int,
           target_width: int) -> dict[str, np.ndarray]:
    """A batch padded with masked columns to ``[B, source_width]`` / ``[B, target_width]``."""
    out = dict(batch)
    for keys, width in ((SOURCE_KEYS, source_width), (TARGET_KEYS, target_width)):
        for key in keys:
            extra = width - batch[key].shape[1]
            out[key] = np.pad(batch[key], ((0, 0), (0, extra))) if extra else batch[key]
    return out

def stack_batches(batches: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """``[M, B, ...]``: every member's batch padded to the widest member's widths."""
    source = max(b["source"].shape[1] for b in batches)
    target = max(b["target_input"].shape[1] for b in batches)
    padded = [pad_to(b, source, target) for b in batches]
    return {key: np.stack([b[key] for b in padded]) for key in batches[0]}

def global_batch(local_batch: Mapping[str, np.ndarray], mesh: Mesh) -> dict[str, jax.Array]:
    """Each key -> one ``jax.Array`` over all processes, batch axis sharded on mesh axis 'data'."""
    sharding = batch_sharded(mesh)
    rows = next(iter(local_batch.values())).shape[0] * jax.process_count()
    check_batch_fits("data.batch_size", rows, mesh)
    return {key: jax.make_array_from_process_local_data(sharding, np.asarray(value))
            for key, value in local_batch.items()}
