"""Kerple and FIRE logit biases: golden values, clamps, shift invariance, both directions."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from tiny_models import tiny_config

from pe_research.core.errors import ConfigError
from pe_research.positional import (
    DECODER_SELF,
    ENCODER_SELF,
    build_scheme,
    default_pe_config,
    fire_normalized_distance,
    kerple_log_bias,
    kerple_power_bias,
)


def scheme(name: str, num_heads: int = 2, seed: int = 0, **pe):
    return build_scheme({**default_pe_config(name), **pe}, d_model=8 * num_heads,
                        num_heads=num_heads, rngs=nnx.Rngs(seed))


def positions(*values: int) -> jax.Array:
    return jnp.asarray([values], jnp.int32)


# --- Kerple -----------------------------------------------------------------------------------

def test_kerple_log_golden():
    # r1 = 2, r2 = 0.5; distances |3 - (0, 3, 5)| = (3, 0, 2).
    bias = kerple_log_bias(jnp.asarray([2.0]), jnp.asarray([0.5]), positions(3), positions(0, 3, 5))
    np.testing.assert_allclose(bias[0, 0, 0], [-2 * math.log(2.5), 0.0, -2 * math.log(2.0)],
                               rtol=1e-6)


def test_kerple_power_golden_and_finite_gradient_at_zero_distance():
    # r1 = 0.5, r2 = 1.5; distances (4, 1, 0) -> -0.5 * (8, 1, 0).
    q_pos, k_pos = positions(4), positions(0, 3, 4)
    bias = kerple_power_bias(jnp.asarray([0.5]), jnp.asarray([1.5]), q_pos, k_pos)
    np.testing.assert_allclose(bias[0, 0, 0], [-4.0, -0.5, 0.0], rtol=1e-6)
    grad_r2 = jax.grad(lambda r2: jnp.sum(kerple_power_bias(jnp.asarray([0.5]), r2, q_pos,
                                                           k_pos)))(jnp.asarray([1.5]))
    # d/dr2 of -0.5 d^r2 = -0.5 d^r2 ln d: (4 -> -0.5 * 8 ln 4), (1 -> 0), (0 -> 0)
    np.testing.assert_allclose(grad_r2, [-4.0 * math.log(4.0)], rtol=1e-5)


@pytest.mark.parametrize("name", ["kerple_log", "kerple_power"])
def test_kerple_is_symmetric_and_shift_invariant(name):
    pe = scheme(name)
    q_pos, k_pos = positions(0, 2, 7), positions(1, 2, 3, 9)
    bias = pe.logit_bias(None, None, q_pos, k_pos, ENCODER_SELF)
    np.testing.assert_allclose(pe.logit_bias(None, None, q_pos + 500, k_pos + 500, ENCODER_SELF),
                               bias, atol=1e-5)
    np.testing.assert_allclose(pe.logit_bias(None, None, k_pos, q_pos, ENCODER_SELF),
                               jnp.swapaxes(bias, -1, -2), atol=1e-6)
    assert float(jnp.max(bias)) <= 0.0  # a penalty that grows with distance


def test_kerple_clamps_with_a_straight_through_gradient():
    pe = scheme("kerple_power", num_heads=2)
    pe.r1[...] = jnp.asarray([-1.0, 0.5])
    pe.r2[...] = jnp.asarray([3.0, 0.001])
    r1, r2 = pe.kernel_parameters()
    np.testing.assert_allclose(r1, [0.01, 0.5], rtol=1e-6)
    np.testing.assert_allclose(r2, [2.0, 0.01], rtol=1e-6)
    graph, params = nnx.split(pe, nnx.Param)

    def total(params):
        return jnp.sum(nnx.merge(graph, params).logit_bias(None, None, positions(5),
                                                           positions(0, 1, 2), DECODER_SELF))

    grads = nnx.state(nnx.merge(graph, jax.grad(total)(params)))
    # Every head, clamped or not, still gets a gradient and can move back into range.
    assert np.all(np.abs(np.asarray(grads.r1[...])) > 0)
    assert np.all(np.abs(np.asarray(grads.r2[...])) > 0)


def test_kerple_initialisation_follows_the_authors_ranges():
    log, power = scheme("kerple_log", num_heads=64), scheme("kerple_power", num_heads=64)
    for param, high in [(log.r1, 2.0), (log.r2, 1.0), (power.r1, 1.0), (power.r2, 2.0)]:
        values = np.asarray(param[...])
        assert values.min() >= 0.0 and values.max() <= high and values.max() > high / 2


# --- FIRE -------------------------------------------------------------------------------------

def test_fire_normalized_distance_golden():
    # c = 1, L = 2: psi(x) = log(x + 1). Queries at 1 and 3, keys at 0, 1, 3.
    x = fire_normalized_distance(positions(1, 3), positions(0, 1, 3), jnp.asarray(1.0),
                                 jnp.asarray(2.0), eps=0.0)
    log = math.log
    # Query 1: psi(1) / psi(max(L, 1) = 2); the key at 3 is after it: -psi(2) / psi(3).
    # Query 3: everything over psi(max(L, 3)) = log 4.
    expected = [[log(2) / log(3), 0.0, -log(3) / log(4)],
                [log(4) / log(4), log(3) / log(4), 0.0]]
    np.testing.assert_allclose(x[0], expected, rtol=1e-6)


def test_fire_bias_golden_through_its_mlp():
    # f(x) = relu(x) - relu(-x) = x for head 0 and 2x for head 1: the bias is x itself.
    pe = scheme("fire", num_heads=2, mlp_width=2, init_c=1.0, init_threshold=2.0)
    pe.function.hidden.kernel[...] = jnp.asarray([[1.0, -1.0]])
    pe.function.hidden.bias[...] = jnp.zeros(2)
    pe.function.out.kernel[...] = jnp.asarray([[1.0, 2.0], [-1.0, -2.0]])
    pe.function.out.bias[...] = jnp.zeros(2)
    bias = pe.logit_bias(None, None, positions(1, 3), positions(0, 1, 3), DECODER_SELF)
    x = fire_normalized_distance(positions(1, 3), positions(0, 1, 3), jnp.asarray(1.0),
                                 jnp.asarray(2.0), eps=1e-6)
    np.testing.assert_allclose(bias[0, 0], x[0], atol=1e-6)
    np.testing.assert_allclose(bias[0, 1], 2 * x[0], atol=1e-6)
    # Decoder entries (key not after query) are the paper's psi(i - j) / psi(max(L, i)).
    assert float(bias[0, 0, 1, 1]) == pytest.approx(math.log(3) / math.log(4), rel=1e-5)


def test_fire_is_relative_below_the_threshold_and_not_beyond():
    pe = scheme("fire")  # L = 512
    q_pos, k_pos = positions(3, 8, 20), positions(0, 3, 8, 20)
    bias = pe.logit_bias(None, None, q_pos, k_pos, DECODER_SELF)
    np.testing.assert_allclose(pe.logit_bias(None, None, q_pos + 100, k_pos + 100, DECODER_SELF),
                               bias, atol=1e-5)
    far = pe.logit_bias(None, None, q_pos + 5000, k_pos + 5000, DECODER_SELF)
    assert float(jnp.max(jnp.abs(far - bias))) > 1e-4  # normalised by psi(p_i) once p_i > L


def test_fire_encoder_tells_the_two_directions_apart():
    x = fire_normalized_distance(positions(5), positions(3, 7), jnp.asarray(0.1),
                                 jnp.asarray(512.0))
    assert float(x[0, 0, 0]) == pytest.approx(-float(x[0, 0, 1]), rel=1e-6)
    assert float(x[0, 0, 0]) > 0


def test_fire_gradients_reach_every_parameter():
    pe = scheme("fire", init_threshold=4.0)  # positions beyond L so the threshold matters too
    graph, params = nnx.split(pe, nnx.Param)
    q_pos, k_pos = positions(0, 2, 9), positions(0, 2, 9)

    def total(params):
        bias = nnx.merge(graph, params).logit_bias(None, None, q_pos, k_pos, ENCODER_SELF)
        return jnp.sum(jnp.sin(bias))

    for path, grad in jax.tree_util.tree_leaves_with_path(jax.grad(total)(params)):
        assert float(jnp.max(jnp.abs(grad))) > 0, path


# --- bad input --------------------------------------------------------------------------------

@pytest.mark.parametrize("name, pe, pattern", [
    ("fire", {"mlp_width": 0}, r"model.pe.mlp_width=0 .*>= 1"),
    ("fire", {"init_c": -0.1}, r"model.pe.init_c=-0.1 .*> 0"),
    ("fire", {"init_threshold": 0.0}, r"model.pe.init_threshold=0.0 .*> 0"),
    ("kerple_log", {"init_c": 0.1}, r"model.pe.init_c.*not a key of scheme 'kerple_log'"),
])
def test_bad_values_name_key_and_valid_range(name, pe, pattern):
    with pytest.raises(ConfigError, match=pattern) as error:
        tiny_config(name, pe=pe)
    assert "\n" not in str(error.value)
