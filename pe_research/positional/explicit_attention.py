"""Softmax attention written out, for the few schemes that act on the mask or the weights.

It computes what ``jax.nn.dot_product_attention`` (XLA path) computes, step by step, so a scheme
can change one step (CoPE adds a term that needs the mask; Shaw adds a value term that needs the
weights). Everything runs in float32; the output is cast to the query dtype.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

# The value dot_product_attention puts on masked logits (large but finite, so no NaN on rows
# where every key is masked: they get uniform weights, exactly as on the fused path).
MASKED_LOGIT = -0.7 * float(np.finfo(np.float32).max)


def scaled_logits(q_BxTxHxD: jax.Array, k_BxSxHxD: jax.Array) -> jax.Array:
    """``q . k / sqrt(D)`` as float32 ``[B, H, T, S]``."""
    scale = 1.0 / np.sqrt(q_BxTxHxD.shape[-1])
    return jnp.einsum("bthd,bshd->bhts", q_BxTxHxD.astype(jnp.float32),
                      k_BxSxHxD.astype(jnp.float32)) * scale


def masked_softmax(logits_BxHxTxS: jax.Array, mask_BxTxS: jax.Array) -> jax.Array:
    """Attention weights ``[B, H, T, S]``: softmax over keys where ``mask`` is True."""
    logits = jnp.where(mask_BxTxS[:, None, :, :], logits_BxHxTxS, MASKED_LOGIT)
    return jax.nn.softmax(logits.astype(jnp.float32), axis=-1)


def weighted_values(probs_BxHxTxS: jax.Array, v_BxSxHxD: jax.Array) -> jax.Array:
    """``sum_j probs[i, j] v[j]`` as float32 ``[B, T, H, D]``."""
    return jnp.einsum("bhts,bshd->bthd", probs_BxHxTxS, v_BxSxHxD.astype(jnp.float32))


def softmax_attention(q_BxTxHxD: jax.Array, k_BxSxHxD: jax.Array, v_BxSxHxD: jax.Array,
                      bias_BxHxTxS: jax.Array | None, mask_BxTxS: jax.Array) -> jax.Array:
    """The plain attention output ``[B, T, H, D]`` (reference for the fused path)."""
    logits = scaled_logits(q_BxTxHxD, k_BxSxHxD)
    if bias_BxHxTxS is not None:
        logits = logits + bias_BxHxTxS
    probs = masked_softmax(logits, mask_BxTxS)
    return weighted_values(probs, v_BxSxHxD).astype(q_BxTxHxD.dtype)


def attention_over_values(q_BxTxHxE: jax.Array, k_BxSxHxE: jax.Array, v_BxSxHxD: jax.Array,
                          bias_BxHxTxS: jax.Array | None, mask_BxTxS: jax.Array) -> jax.Array:
    """Softmax attention ``[B, T, H, D]`` of queries and keys wider than the values (E >= D),
    scaled by ``1 / sqrt(D)``: products in the inputs' dtype with float32 logits and softmax, as
    the fused kernel's xla path computes them, which needs E = D."""
    logits = jnp.einsum("bthe,bshe->bhts", q_BxTxHxE, k_BxSxHxE,
                        preferred_element_type=jnp.float32) / np.sqrt(v_BxSxHxD.shape[-1])
    if bias_BxHxTxS is not None:
        logits = logits + bias_BxHxTxS
    probs = masked_softmax(logits, mask_BxTxS).astype(v_BxSxHxD.dtype)
    return jnp.einsum("bhts,bshd->bthd", probs, v_BxSxHxD).astype(q_BxTxHxE.dtype)
