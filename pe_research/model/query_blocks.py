"""Attention over blocks of query rows, one block at a time: inference's bounded memory.

Every positional scheme's logit bias and its own attention are row-local: query i's output
needs i's query, position and mask row, and every key (FoX reads its own slot off the mask
row). So evaluating ``rows`` queries at a time gives the outputs of all at once, while the
``[B, H, T, S]`` logits, bias and weights shrink to ``[B, H, rows, S]``. Only for inference:
training keeps the written-out backward of the whole rows (explicit_attention.attention).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp


def _blocks(x_BxTx: jax.Array, rows: int, mode: str) -> jax.Array:
    """``[b, T, ...]`` -> ``[T / rows, b, rows, ...]``, T padded up to a multiple of ``rows``
    (zeros, or copies of the last row)."""
    count = -(-x_BxTx.shape[1] // rows)
    widths = [(0, 0), (0, count * rows - x_BxTx.shape[1])] + [(0, 0)] * (x_BxTx.ndim - 2)
    padded = jnp.pad(x_BxTx, widths, mode=mode)
    return jnp.moveaxis(padded.reshape(x_BxTx.shape[0], count, rows, *x_BxTx.shape[2:]), 1, 0)


def in_query_blocks(attend: Callable[[jax.Array, jax.Array, jax.Array], jax.Array], rows: int,
                    q_BxTxHxD: jax.Array, q_positions_BxT: jax.Array, mask_BxTxS: jax.Array,
                    ) -> jax.Array:
    """``attend(q, q_positions, mask)`` (``[B, T, H, Dv]``) computed ``rows`` queries at a time.

    The padded rows of the last block are zero queries with copies of the last row's position
    and mask (never a row that sees no key); their outputs are dropped.
    """
    batch, length = q_BxTxHxD.shape[:2]
    mask_BxTxS = jnp.broadcast_to(mask_BxTxS, (mask_BxTxS.shape[0], length, mask_BxTxS.shape[2]))
    blocks = (_blocks(q_BxTxHxD, rows, "constant"), _blocks(q_positions_BxT, rows, "edge"),
              _blocks(mask_BxTxS, rows, "edge"))
    encoded_NxBxRxHxD = jax.lax.map(lambda block: attend(*block), blocks)
    encoded = jnp.moveaxis(encoded_NxBxRxHxD, 0, 1)
    return encoded.reshape(batch, -1, *encoded.shape[3:])[:, :length]
