"""Masked token losses and accuracies shared by training and evaluation."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax


def token_cross_entropy(logits_BxTxV: jax.Array, targets_BxT: jax.Array,
                        mask_BxT: jax.Array) -> jax.Array:
    """Mean cross-entropy (float32) over the real (mask=True) target tokens."""
    losses = optax.softmax_cross_entropy_with_integer_labels(
        logits_BxTxV.astype(jnp.float32), targets_BxT)
    weights = mask_BxT.astype(jnp.float32)
    return jnp.sum(losses * weights) / jnp.maximum(jnp.sum(weights), 1.0)


def token_accuracy(logits_BxTxV: jax.Array, targets_BxT: jax.Array,
                   mask_BxT: jax.Array) -> jax.Array:
    """Fraction of real target tokens whose argmax prediction is right."""
    correct = (jnp.argmax(logits_BxTxV, axis=-1) == targets_BxT) & mask_BxT
    return jnp.sum(correct) / jnp.maximum(jnp.sum(mask_BxT), 1)


def sequence_correct(predictions_BxT: jax.Array, targets_BxT: jax.Array,
                     mask_BxT: jax.Array) -> jax.Array:
    """Per-sequence exact match ``[B]``: every real target token right."""
    return jnp.all((predictions_BxT == targets_BxT) | ~mask_BxT, axis=-1)
