"""Logits scaled with the number of keys: log-n scaling and Scalable-Softmax (SSMax)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from tiny_models import tiny_config

from pe_research.core.errors import ConfigError
from pe_research.model.attention import MultiHeadAttention
from pe_research.positional import ENCODER_SELF, default_pe_config
from pe_research.positional.explicit_attention import softmax_attention
from pe_research.positional.length_scaling import logit_scale, scale_logits, visible_keys
from pe_research.positional.nope import NoPE

B, T, H, D = 2, 7, 2, 4


def qkv_bias(seed: int = 0):
    keys = jax.random.split(jax.random.key(seed), 4)
    q, k, v = (jax.random.normal(key, (B, T, H, D)) for key in keys[:3])
    return q, k, v, jax.random.normal(keys[3], (1, H, T, T))


def test_log_n_scaling_at_n_e_is_softmax():
    q, k, v, bias = qkv_bias()
    mask = jnp.ones((B, T, T), bool)
    scaled_q, scaled_bias = scale_logits(q, bias, logit_scale(jnp.full((B, T), math.e)))
    np.testing.assert_allclose(softmax_attention(scaled_q, k, v, scaled_bias, mask),
                               softmax_attention(q, k, v, bias, mask), rtol=1e-6, atol=1e-6)


def test_causal_log_n_scaling_is_the_written_out_formula():
    """Query i of a causal mask sees i + 1 keys: weights softmax_j(log(i + 1) (q_i.k_j / sqrt(D)
    + bias_ij)) over j <= i."""
    q, k, v, bias = qkv_bias(1)
    mask = jnp.broadcast_to(jnp.tril(jnp.ones((T, T), bool)), (B, T, T))
    np.testing.assert_array_equal(visible_keys(mask)[0], np.arange(1, T + 1))
    scaled_q, scaled_bias = scale_logits(q, bias, logit_scale(visible_keys(mask)))
    out = softmax_attention(scaled_q, k, v, scaled_bias, mask)
    qn, kn, vn, bn = (np.asarray(x, np.float64) for x in (q, k, v, bias))
    expected = np.zeros((B, T, H, D))
    for b in range(B):
        for h in range(H):
            for i in range(T):
                logits = math.log(i + 1) * (kn[b, :i + 1, h] @ qn[b, i, h] / math.sqrt(D)
                                            + bn[0, h, i, :i + 1])
                weights = np.exp(logits - logits.max())
                expected[b, i, h] = (weights / weights.sum()) @ vn[b, :i + 1, h]
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_ssmax_with_s_log_n_equal_to_1_is_softmax():
    def module(scaling):
        return MultiHeadAttention(H * D, H, ENCODER_SELF, dtype=jnp.float32,
                                  implementation="xla", rngs=nnx.Rngs(0), logit_scaling=scaling)

    plain, ssmax = module("none"), module("ssmax")
    np.testing.assert_array_equal(ssmax.ssmax_s[...], np.float32(0.43))  # the start value
    ssmax.ssmax_s[...] = jnp.full((H,), 1.0 / math.log(T))  # every query sees all T keys
    x = jax.random.normal(jax.random.key(2), (B, T, H * D))
    positions = jnp.arange(T)[None]
    mask = jnp.ones((B, T, T), bool)
    pe = NoPE(default_pe_config("none"), d_model=H * D, num_heads=H, rngs=nnx.Rngs(0))
    np.testing.assert_allclose(ssmax(x, x, positions, positions, mask, pe),
                               plain(x, x, positions, positions, mask, pe), rtol=1e-5, atol=1e-6)
    ssmax.ssmax_s[...] = jnp.full((H,), 2.0 / math.log(T))  # sharper: another output
    assert not np.allclose(ssmax(x, x, positions, positions, mask, pe),
                           plain(x, x, positions, positions, mask, pe), atol=1e-4)


@pytest.mark.parametrize(("pe", "fragment"), [
    ({"type": "cope", "logit_scaling": "ssmax"}, "computes its own attention"),
    ({"type": "rope", "logit_scaling": "log"}, "choose one of"),
    ({"type": "rope", "logit_scaling": "ssmax", "ssmax_init": 0}, "a positive number"),
])
def test_a_scaling_that_cannot_apply_is_one_config_error(pe, fragment):
    with pytest.raises(ConfigError, match="model.pe.") as error:
        tiny_config(pe["type"], pe=pe)
    assert fragment in str(error.value) and "\n" not in str(error.value)
