"""PaTH attention against a brute-force product of Householder matrices."""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from pe_research.positional import default_pe_config
from pe_research.positional.path import PaTH, causal_depthwise_conv, path_logits

B, T, H, D = 2, 6, 2, 4


def householder_inputs(seed: int = 0):
    keys = jax.random.split(jax.random.key(seed), 4)
    q, k, w = (jax.random.normal(key, (B, T, H, D)) for key in keys[:3])
    w = w / jnp.linalg.norm(w, axis=-1, keepdims=True)
    beta = jax.random.uniform(keys[3], (B, T, H), minval=0.0, maxval=2.0)
    return q, k, w, beta


def brute_force(q, k, w, beta, first_real):
    """``q_i^T H_i ... H_{j+1} k_j / sqrt(D)`` with every H written out, float64
    ``[B, H, T, T]``, for rows whose real tokens start at ``first_real[b]`` (NaN elsewhere)."""
    q, k, w, beta = (np.asarray(x, np.float64) for x in (q, k, w, beta))
    out = np.full((B, H, T, T), np.nan)
    for b in range(B):
        for h in range(H):
            for i in range(first_real[b], T):
                for j in range(first_real[b], i + 1):
                    carry = np.eye(D)
                    for s in range(j + 1, i + 1):  # H_i ... H_{j+1}: H_s applied after H_{s-1}
                        carry = (np.eye(D) - beta[b, s, h] * np.outer(w[b, s, h], w[b, s, h])
                                 ) @ carry
                    out[b, h, i, j] = q[b, i, h] @ carry @ k[b, j, h] / np.sqrt(D)
    return out


def causal_mask(first_real):
    """Causal ``[B, T, T]`` with each row's first ``first_real[b]`` slots padding."""
    slots = np.arange(T)
    real = slots[None, :] >= np.asarray(first_real)[:, None]
    return jnp.asarray(np.tril(np.ones((T, T), bool))[None] & real[:, None, :] & real[:, :, None])


def test_scanned_logits_equal_the_product_of_householder_matrices_with_leading_padding():
    q, k, w, beta = householder_inputs()
    first_real = [0, 2]
    mask = causal_mask(first_real)
    got = np.asarray(path_logits(q, k, w, beta, mask))
    expected = brute_force(q, k, w, beta, first_real)
    visible = ~np.isnan(expected)
    assert visible.sum() == H * (21 + 10)
    np.testing.assert_allclose(got[visible], expected[visible], rtol=1e-5, atol=1e-5)
    # Query i's logit on its own key is the plain q . k: no transform between them.
    diagonal = np.einsum("bthd,bthd->bht", q, k) / np.sqrt(D)
    np.testing.assert_allclose(np.diagonal(got, axis1=2, axis2=3), diagonal, rtol=1e-5)


def test_zero_gain_is_plain_attention_and_gain_two_reflects():
    q, k, w, beta = householder_inputs(1)
    mask = causal_mask([0, 0])
    plain = np.einsum("bthd,bshd->bhts", q, k) / np.sqrt(D)
    np.testing.assert_allclose(path_logits(q, k, w, jnp.zeros_like(beta), mask), plain,
                               rtol=1e-5, atol=1e-6)
    # beta = 2: each H is a reflection, so the carried key keeps its norm: |q^T R k| <= |q||k|.
    reflected = np.asarray(path_logits(q, k, w, jnp.full_like(beta, 2.0), mask))
    bound = np.einsum("bth,bsh->bhts", np.linalg.norm(q, axis=-1), np.linalg.norm(k, axis=-1))
    lower = np.tril(np.ones((T, T), bool))
    assert np.all(np.abs(reflected)[..., lower] <= bound[..., lower] / np.sqrt(D) + 1e-5)


def test_vectors_are_unit_gains_in_range_and_the_convolution_is_causal():
    pe = default_pe_config("path")
    scheme = PaTH(pe, d_model=H * D, num_heads=H, rngs=nnx.Rngs(0))
    _, k, _, _ = householder_inputs(2)
    mask = causal_mask([0, 2])
    w, beta = scheme.householder_vectors(k, mask)
    norms = np.linalg.norm(w, axis=-1)  # [B, T, H]
    np.testing.assert_allclose(norms[0], 1.0, rtol=1e-5)
    np.testing.assert_allclose(norms[1, 2:], 1.0, rtol=1e-5)
    # Padding's w (a zero input to the convolution, silu(0) = 0) is 0: its H is the identity.
    np.testing.assert_array_equal(norms[1, :2], 0.0)
    assert np.all((np.asarray(beta) > 0) & (np.asarray(beta) < 2))
    # At init the gain is 2 sigmoid(~0): about 1.
    np.testing.assert_allclose(beta, 1.0, atol=0.15)
    x = jax.random.normal(jax.random.key(3), (1, T, 3))
    kernel = jnp.asarray([[1.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 3.0]])
    y = causal_depthwise_conv(x, kernel)
    np.testing.assert_allclose(y[0, :, 2], 3 * x[0, :, 2], rtol=1e-6)  # tap 2: the token itself
    np.testing.assert_allclose(y[0, 1:, 1], 2 * x[0, :-1, 1], rtol=1e-6)  # tap 1: one back
    np.testing.assert_allclose(y[0, :2, 0], 0.0)  # tap 0: two back, zeros before the start
    np.testing.assert_allclose(y[0, 2:, 0], x[0, :-2, 0], rtol=1e-6)
