"""Attention masks (True where a query may see a key) for the three attention kinds."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct


@struct.dataclass
class PrefixMask:
    """A mask whose visible keys are a prefix of each row, under a causal mask or not.

    The encoder-decoder's masks are of this form (data.py pads every row at its end). ``dense``
    serves every path; cuDNN takes ``key_lengths`` and ``causal`` instead (model/attention.py):
    its own padding and causal masks need no mask tensor.
    """

    dense: jax.Array  # [B, T, S]
    key_lengths: jax.Array  # [B] int32: the visible keys of each row, 0..S
    causal: bool = struct.field(pytree_node=False, default=False)


def dense_mask(mask: jax.Array | PrefixMask) -> jax.Array:
    """``[B, T, S]`` booleans of a mask given either way."""
    return mask.dense if isinstance(mask, PrefixMask) else mask


def prefix_masks(source_mask_BxS: jax.Array, target_mask_BxT: jax.Array | None = None,
                 ) -> tuple[PrefixMask, ...]:
    """The encoder's self-attention mask; with ``target_mask``, the decoder's self-attention
    and cross-attention masks instead. Both masks must be True on a prefix of each row."""
    source_lengths = jnp.sum(source_mask_BxS, axis=-1, dtype=jnp.int32)
    if target_mask_BxT is None:
        return (PrefixMask(encoder_self_mask(source_mask_BxS), source_lengths),)
    target_lengths = jnp.sum(target_mask_BxT, axis=-1, dtype=jnp.int32)
    return (PrefixMask(decoder_self_mask(target_mask_BxT), target_lengths, causal=True),
            PrefixMask(cross_mask(target_mask_BxT, source_mask_BxS), source_lengths))


def cache_mask(index: jax.Array, batch: int, max_length: int) -> PrefixMask:
    """``[B, 1, max_length]``: one new query per row sees the cache's first ``index + 1`` keys
    (those written so far, its own included): key lengths, no causal flag."""
    lengths_B = jnp.full((batch,), index + 1, jnp.int32)
    return PrefixMask(jnp.arange(max_length)[None, None, :] < lengths_B[:, None, None], lengths_B)


def encoder_self_mask(source_mask_BxS: jax.Array) -> jax.Array:
    """``[B, S, S]``: every query sees every real source token."""
    batch, length = source_mask_BxS.shape
    return jnp.broadcast_to(source_mask_BxS[:, None, :], (batch, length, length))


def decoder_self_mask(target_mask_BxT: jax.Array) -> jax.Array:
    """``[B, T, T]``: query t sees real target tokens at indices <= t (causal by index)."""
    length = target_mask_BxT.shape[1]
    causal_TxT = jnp.tril(jnp.ones((length, length), bool))
    return causal_TxT[None] & target_mask_BxT[:, None, :]


def cross_mask(target_mask_BxT: jax.Array, source_mask_BxS: jax.Array) -> jax.Array:
    """``[B, T, S]``: every target query sees every real source token."""
    (batch, target_length), source_length = target_mask_BxT.shape, source_mask_BxS.shape[1]
    return jnp.broadcast_to(source_mask_BxS[:, None, :], (batch, target_length, source_length))
