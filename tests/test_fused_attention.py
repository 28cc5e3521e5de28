"""What keeps bfloat16 and cuDNN on a GPU's fast paths, checked on any backend: attention padded
to even lengths (cuDNN's backward needs them) equals the unpadded one, and the token embedding's
gradient scatters into float32."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from tiny_models import forward, random_inputs, tiny_model

from pe_research.model.attention import fused_attention
from pe_research.positional.registry import SCHEMES


def attention_inputs(T: int, S: int, bias_batch: int | None, seed: int = 0):
    """q ``[2, T, 2, 8]``, k and v ``[2, S, 2, 8]``, a bias ``[bias_batch, 2, T, S]`` (or None)
    and a mask hiding the second row's last two keys."""
    keys = jax.random.split(jax.random.key(seed), 4)
    q = jax.random.normal(keys[0], (2, T, 2, 8))
    k = jax.random.normal(keys[1], (2, S, 2, 8))
    v = jax.random.normal(keys[2], (2, S, 2, 8))
    bias = None if bias_batch is None else jax.random.normal(keys[3], (bias_batch, 2, T, S))
    mask = np.ones((2, T, S), bool)
    mask[1, :, -2:] = False
    return q, k, v, bias, jnp.asarray(mask)


@pytest.mark.parametrize(("T", "S", "bias_batch"),
                         [(5, 7, 1), (5, 6, 2), (4, 7, None), (1, 9, 1), (6, 8, 1)])
def test_attention_padded_to_even_lengths_equals_the_unpadded_one(T, S, bias_batch):
    q, k, v, bias, mask = attention_inputs(T, S, bias_batch)

    def loss(pad, q, k, v, bias):
        out = fused_attention(q, k, v, bias, mask, "xla", pad_to_even=pad)
        return jnp.sum(out * jnp.cos(out)), out

    grads = {}
    for pad in (False, True):
        (value, out), grad = jax.jit(jax.value_and_grad(
            lambda *a, pad=pad: loss(pad, *a), argnums=(0, 1, 2, 3), has_aux=True,
            allow_int=True))(q, k, v, bias)
        assert out.shape == q.shape
        grads[pad] = (value, out, grad)
    (value, out, grad), (value_p, out_p, grad_p) = grads[False], grads[True]
    np.testing.assert_allclose(out_p, out, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(value_p, value, rtol=1e-5)
    for g, g_p in zip(grad, grad_p, strict=True):
        if g is not None:
            np.testing.assert_allclose(g_p, g, rtol=1e-4, atol=1e-6)


def test_attention_pads_only_for_cudnn_by_default():
    q, k, v, bias, mask = attention_inputs(5, 7, 1)
    text = jax.jit(lambda *a: fused_attention(*a, mask, "xla")).lower(q, k, v, bias).as_text()
    assert "stablehlo.pad" not in text
    padded = jax.jit(lambda *a: fused_attention(*a, mask, "xla", pad_to_even=True)).lower(
        q, k, v, bias).as_text()
    assert "stablehlo.pad" in padded


def scatter_types(text: str) -> set[str]:
    """Element types of every scatter's result in a StableHLO module's text."""
    types = set()
    for match in re.finditer(r"stablehlo\.scatter.*?\}\) : \(([^)]*)\)", text, re.DOTALL):
        types.add(re.search(r"tensor<[0-9x]*x?(\w+)>", match.group(1)).group(1))
    return types


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_bfloat16_gradients_scatter_into_float32_only(scheme):
    """The token embedding's gradient above all (before: a bfloat16 scatter-add, 28x slower on
    an H200); no scheme adds a bfloat16 scatter either (lowered only, nothing compiled)."""
    model = tiny_model(scheme, dtype="bfloat16")
    source, target = random_inputs()
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)

    def loss(params):
        return jnp.sum(forward(nnx.merge(graphdef, params, rest), source, target))

    text = jax.jit(jax.grad(loss)).lower(params).as_text()
    assert scatter_types(text) == {"f32"}
