"""Attention masks (True where a query may see a key) for the three attention kinds."""

from __future__ import annotations

import jax
import jax.numpy as jnp


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
