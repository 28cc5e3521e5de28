"""Stick-breaking attention against its written-out product form."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pe_research.positional.stick_breaking import stick_breaking_attention, stick_breaking_weights

B, T, H, D = 2, 6, 2, 4


def inputs(seed: int = 0):
    keys = jax.random.split(jax.random.key(seed), 3)
    return tuple(jax.random.normal(key, (B, T, H, D)) for key in keys)


@pytest.mark.parametrize("attend_current", [False, True])
def test_log_space_weights_are_the_product_form_and_rows_sum_to_at_most_one(attend_current):
    q, k, v = inputs()
    causal = jnp.broadcast_to(jnp.tril(jnp.ones((T, T), bool)), (B, T, T))
    logits = jnp.einsum("bthd,bshd->bhts", q, k) / math.sqrt(D)
    weights, leftover = stick_breaking_weights(logits, causal, attend_current)
    beta = 1 / (1 + np.exp(-np.asarray(logits, np.float64)))
    expected = np.zeros((B, H, T, T))
    for i in range(T):
        last = i if attend_current else i - 1  # the nearest key that may take a share
        for j in range(last + 1):
            expected[:, :, i, j] = beta[:, :, i, j] * np.prod(
                1 - beta[:, :, i, j + 1:last + 1], axis=-1)
    np.testing.assert_allclose(weights, expected, rtol=1e-5, atol=1e-7)
    assert np.all(np.asarray(weights) >= 0)
    assert np.all(np.asarray(weights).sum(-1) <= 1 + 1e-6)
    np.testing.assert_allclose(leftover, 1 - expected.sum(-1), rtol=1e-5, atol=1e-6)

    out = stick_breaking_attention(q, k, v, None, causal, attend_current)
    values = np.moveaxis(np.asarray(v, np.float64), 1, 2)  # [B, H, T, D]
    written = expected @ values + (1 - expected.sum(-1))[..., None] * values
    np.testing.assert_allclose(out, np.moveaxis(written, 1, 2), rtol=1e-5, atol=1e-5)
    if not attend_current:  # the first query has no earlier key: its own value, whole
        np.testing.assert_allclose(out[:, 0], v[:, 0], rtol=1e-6)
