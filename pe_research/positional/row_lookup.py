"""Per-row table lookups along the last axis, as flat gathers and segment sums.

``jnp.take_along_axis`` is a gather with batch dimensions, and its gradient a scatter with
them, which XLA-CPU runs several times slower than the same work on flat indices. Both
functions here index the flattened table instead; their gradients are each other.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def _flat_index(lead_shape: tuple[int, ...], width: int, index: jax.Array) -> jax.Array:
    """``row * width + index`` for every row of ``lead_shape``: int32 ``[*lead, S]``."""
    rows = np.prod(lead_shape, dtype=np.int64)
    if rows * width >= np.iinfo(np.int32).max:  # the sentinel ``rows * width`` must fit too
        raise ValueError(f"a row lookup over {rows} x {width} entries overflows int32 indices; "
                         "split the batch")
    row_starts = (jnp.arange(rows, dtype=jnp.int32) * width).reshape(*lead_shape, 1)
    return row_starts + jnp.broadcast_to(index, (*lead_shape, index.shape[-1])).astype(jnp.int32)


def take_from_rows(table: jax.Array, index: jax.Array) -> jax.Array:
    """``table[..., index[..., s], ...]`` row by row: a ``[*lead, P, *item]`` table and a
    ``[*lead, S]`` index (same rank as ``[*lead, S]``, broadcast to the table's leading axes)
    -> ``[*lead, S, *item]``. Indices are clipped into the row's range, so a bad one (from a
    NaN) reads a wrong entry instead of other memory."""
    item_shape = table.shape[index.ndim:]
    lead_shape, width = table.shape[:index.ndim - 1], table.shape[index.ndim - 1]
    index = jnp.clip(index, 0, width - 1)
    return table.reshape(-1, *item_shape).at[_flat_index(lead_shape, width, index)].get(
        mode="promise_in_bounds")


def sum_into_rows(values: jax.Array, index: jax.Array, width: int) -> jax.Array:
    """``out[..., p] = sum of values[..., s] where index[..., s] == p``: ``[*lead, S]`` values
    and index (broadcast to the values' leading axes) -> ``[*lead, width]``; indices outside
    ``[0, width)`` are dropped."""
    lead_shape = values.shape[:-1]
    total = int(np.prod(lead_shape)) * width
    in_range = (index >= 0) & (index < width)
    flat = jnp.where(in_range, _flat_index(lead_shape, width, index), total)  # total: dropped
    sums = jax.ops.segment_sum(values.reshape(-1), flat.reshape(-1), num_segments=total)
    return sums.reshape(*lead_shape, width)
