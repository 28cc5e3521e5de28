"""The seq2seq Transformer beyond the scheme contract: absolute shifts, reversal, dropout, add vs
concat, norms, bfloat16 (causality, padding, jit and shifts: test_scheme_contract.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from tiny_models import (
    CORE_SCHEMES,
    forward,
    random_inputs,
    tiny_model,
)

from pe_research.model.layers import DRAWS, dropout, keep_mask
from pe_research.model.metrics import token_cross_entropy


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


def test_dropout_key_changes_outputs_and_none_is_deterministic():
    model = tiny_model("rope", dropout_rate=0.3)
    source, target = random_inputs()
    np.testing.assert_array_equal(forward(model, source, target), forward(model, source, target))
    a = forward(model, source, target, key=jax.random.key(0))
    b = forward(model, source, target, key=jax.random.key(1))
    assert float(jnp.max(jnp.abs(a - b))) > 1e-3


@pytest.mark.parametrize("rate", [0.1, 0.5])
def test_dropout_drops_the_rate_and_keeps_the_expectation(rate):
    x = jnp.ones((64, 33, 129))  # odd widths: the last word's high half is cut off
    y = dropout(x, rate, jax.random.key(3))
    dropped = round(rate * DRAWS)
    kept = np.asarray(y != 0)
    # Binomial: 6 standard deviations of the kept fraction over 272,448 elements.
    tolerance = 6 * np.sqrt(rate * (1 - rate) / x.size)
    assert abs(kept.mean() - (1 - dropped / DRAWS)) < tolerance
    np.testing.assert_allclose(np.asarray(y)[kept], DRAWS / (DRAWS - dropped), rtol=1e-6)
    assert abs(float(jnp.mean(y)) - 1.0) < tolerance / (1 - rate)
    # Neighbours share a random word (low and high halves): their masks are independent.
    pairs = kept[..., :128].reshape(64, 33, 64, 2)
    both_dropped = np.mean(~pairs[..., 0] & ~pairs[..., 1])
    assert abs(both_dropped - rate**2) < 6 * np.sqrt(rate**2 * (1 - rate**2) / pairs[..., 0].size)
    assert dropout(x, rate, None) is x and dropout(x, 0.0, jax.random.key(3)) is x


@pytest.mark.parametrize("rate", [0.0, 1e-6, 0.1, 0.5])
def test_a_traced_rate_drops_as_the_number_does(rate):
    """An ensemble member's own rate, an argument of the program: the same values, bit for
    bit (a rate below one draw in 2^16 drops one draw, as the number does)."""
    x = jax.random.normal(jax.random.key(1), (8, 5, 33))
    traced = jax.jit(dropout)(x, jnp.float32(rate), jax.random.key(3))
    np.testing.assert_array_equal(traced, dropout(x, rate, jax.random.key(3)))
    assert (rate == 0.0) == bool(jnp.all(traced == x))


@pytest.mark.parametrize("dropped", [1, 6_554, 1 << 15, 60_000, DRAWS - 1])
def test_keep_mask_keeps_draws_at_or_above_the_threshold(dropped):
    keep = np.asarray(keep_mask(jax.random.key(0), (512, 1023), dropped))
    expected = 1 - dropped / DRAWS  # the draws are uniform over 16 bits, in both word halves
    for half in (keep[:, 0::2], keep[:, 1::2]):
        sigma = np.sqrt(max(expected * (1 - expected), 1 / DRAWS) / half.size)
        assert abs(half.mean() - expected) < 6 * sigma


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
