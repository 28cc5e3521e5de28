"""The seq2seq Transformer: causality, padding, shift invariance, jit equality, add vs concat."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from tiny_models import (
    CORE_SCHEMES,
    RELATIVE_SCHEMES,
    arange_positions,
    forward,
    random_inputs,
    tiny_model,
)

from pe_research.evaluation.metrics import token_cross_entropy


@pytest.mark.parametrize("scheme", RELATIVE_SCHEMES)
def test_relative_schemes_are_shift_invariant(scheme):
    model = tiny_model(scheme)
    source, target = random_inputs()
    reference = forward(model, source, target)
    shifted = forward(model, source, target, source_offset=37, target_offset=37)
    np.testing.assert_allclose(shifted, reference, atol=2e-4)


@pytest.mark.parametrize("scheme", ["sinusoidal", "learned"])
def test_absolute_schemes_see_the_shift(scheme):
    model = tiny_model(scheme)
    source, target = random_inputs()
    shifted = forward(model, source, target, source_offset=5, target_offset=5)
    assert float(jnp.max(jnp.abs(shifted - forward(model, source, target)))) > 1e-3


@pytest.mark.parametrize("scheme", CORE_SCHEMES)
def test_only_symmetric_encoders_cannot_tell_a_source_from_its_reverse(scheme):
    # ALiBi's |i - j| (like no positions at all) makes the encoder reversal-equivariant, and
    # cross-attention reads its states as a set: the decoder sees x and reverse(x) alike.
    model = tiny_model(scheme)
    source, target = random_inputs()
    same = np.allclose(forward(model, source, target), forward(model, source[:, ::-1], target),
                       atol=1e-5)
    assert same == (scheme in ("none", "alibi"))


@pytest.mark.parametrize("scheme", CORE_SCHEMES)
def test_decoder_is_causal(scheme):
    """Logits at step t have zero gradient w.r.t. the embeddings of target tokens after t."""
    model = tiny_model(scheme, tie_output=False)
    source, _ = random_inputs()
    # Each target position holds a distinct token that appears nowhere else.
    target = jnp.asarray([[3, 4, 5, 6, 7]], jnp.int32)
    source = jnp.full((1, 6), 12, jnp.int32)
    graph, params, rest = nnx.split(model, nnx.Param, ...)
    t = 2

    def logit_at_t(params):
        return jnp.sum(forward(nnx.merge(graph, params, rest), source, target)[:, t])

    grad_table = nnx.state(nnx.merge(graph, jax.grad(logit_at_t)(params), rest)).embed.embedding
    row_norms = jnp.linalg.norm(grad_table[...], axis=-1)
    assert float(jnp.max(row_norms[target[0, t + 1:]])) == 0.0
    assert float(jnp.min(row_norms[target[0, : t + 1]])) > 0.0


@pytest.mark.parametrize("scheme", CORE_SCHEMES)
def test_padding_does_not_change_real_outputs(scheme):
    model = tiny_model(scheme)
    source, target = random_inputs(batch=2, source_len=6, target_len=5)
    reference = forward(model, source, target)
    padded_source = jnp.pad(source, ((0, 0), (0, 4)))
    padded_target = jnp.pad(target, ((0, 0), (0, 3)))
    logits = model(padded_source, padded_target, arange_positions(2, 10), arange_positions(2, 8),
                   jnp.arange(10)[None].repeat(2, 0) < 6, jnp.arange(8)[None].repeat(2, 0) < 5)
    np.testing.assert_allclose(logits[:, :5], reference, atol=1e-5)


@pytest.mark.parametrize("scheme", CORE_SCHEMES)
def test_forward_and_backward_equal_with_and_without_jit(scheme):
    model = tiny_model(scheme, dropout_rate=0.1)
    source, target = random_inputs()
    graph, params, rest = nnx.split(model, nnx.Param, ...)
    key = jax.random.key(3)

    def loss(params):
        logits = forward(nnx.merge(graph, params, rest), source, target, key=key)
        return token_cross_entropy(logits, target, jnp.ones(target.shape, bool))

    eager_loss, eager_grads = jax.value_and_grad(loss)(params)
    jit_loss, jit_grads = jax.jit(jax.value_and_grad(loss))(params)
    assert np.isfinite(float(eager_loss))
    np.testing.assert_allclose(jit_loss, eager_loss, rtol=1e-5)
    for eager, jitted in zip(jax.tree.leaves(eager_grads), jax.tree.leaves(jit_grads), strict=True):
        np.testing.assert_allclose(jitted, eager, rtol=1e-4, atol=1e-6)
    assert sum(float(jnp.sum(jnp.abs(g))) for g in jax.tree.leaves(eager_grads)) > 0


def test_dropout_key_changes_outputs_and_none_is_deterministic():
    model = tiny_model("rope", dropout_rate=0.3)
    source, target = random_inputs()
    np.testing.assert_array_equal(forward(model, source, target), forward(model, source, target))
    a = forward(model, source, target, key=jax.random.key(0))
    b = forward(model, source, target, key=jax.random.key(1))
    assert float(jnp.max(jnp.abs(a - b))) > 1e-3


@pytest.mark.parametrize("combine", ["add", "concat"])
@pytest.mark.parametrize("scheme", ["sinusoidal", "learned"])
def test_add_and_concat_train_one_step(scheme, combine):
    model = tiny_model(scheme, pe={"combine": combine})
    assert (model.input_projection is not None) == (combine == "concat")
    source, target = random_inputs()
    optimizer = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)

    def loss_fn(model):
        logits = forward(model, source, target)
        return token_cross_entropy(logits, target, jnp.ones(target.shape, bool))

    first, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    second = loss_fn(model)
    assert np.isfinite(float(first)) and np.isfinite(float(second))
    assert float(second) < float(first)


def test_post_ln_and_relu_and_untied_output_run():
    model = tiny_model("alibi", norm="post", activation="relu", tie_output=False,
                       scale_embedding=False)
    assert model.encoder_norm is None and model.output_projection is not None
    source, target = random_inputs()
    assert np.all(np.isfinite(forward(model, source, target)))


def test_bfloat16_compute_keeps_float32_params_and_logits():
    model = tiny_model("rope", dtype="bfloat16")
    source, target = random_inputs()
    logits = forward(model, source, target)
    assert logits.dtype == jnp.float32
    params = nnx.state(model, nnx.Param)
    assert {leaf.dtype for leaf in jax.tree.leaves(params)} == {jnp.dtype(jnp.float32)}
    reference = forward(tiny_model("rope"), source, target)
    np.testing.assert_allclose(logits, reference, atol=0.1)  # same weights, lower precision
