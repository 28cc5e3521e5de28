"""Test-time RoPE scaling: the defining property of PI, NTK-aware scaling and YaRN."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from pe_research.config import apply_overrides, base_config
from pe_research.core.errors import ConfigError
from pe_research.positional.base import DECODER_SELF
from pe_research.positional.registry import default_pe_config
from pe_research.positional.rope import RoPE, rope_angles, rotate
from pe_research.positional.rope_scaling import (
    RopeScaling,
    attention_scale,
    rope_inverse_wavelengths,
    scaled_inverse_wavelengths,
    yarn_ramp,
)

HEAD_DIM, BASE = 32, 10_000.0


def rope_module(head_dim: int = HEAD_DIM, **scaling) -> RoPE:
    pe = {**default_pe_config("rope"), "scaling": {**default_pe_config("rope")["scaling"],
                                                   **scaling}}
    return RoPE(pe, d_model=head_dim, num_heads=1, rngs=nnx.Rngs(0))


def test_default_is_plain_rope():
    positions = jnp.arange(50)[None]
    np.testing.assert_array_equal(rope_module().rotation_angles(positions),
                                  rope_angles(positions, HEAD_DIM, BASE))


def test_pi_maps_the_longest_eval_position_into_the_trained_range():
    trained, evaluated = 40, 160
    factor = evaluated / trained
    positions = jnp.arange(evaluated)[None]
    angles = rope_module(type="pi", factor=factor).rotation_angles(positions)
    # Every angle equals the unscaled angle at position p / s, and (L_eval - 1) / s < L_train.
    np.testing.assert_allclose(angles, rope_angles(positions / factor, HEAD_DIM, BASE),
                               rtol=1e-6)
    effective_last = float(angles[0, -1, 0])  # pair 0 has frequency 1: angle = position
    assert effective_last == pytest.approx((evaluated - 1) / factor)
    assert effective_last < trained


def test_ntk_keeps_the_highest_frequency_and_divides_the_lowest_by_the_factor():
    factor = 8.0
    theta = np.asarray(rope_inverse_wavelengths(HEAD_DIM, BASE))
    scaled = np.asarray(scaled_inverse_wavelengths(HEAD_DIM, BASE,
                                                   RopeScaling(type="ntk", factor=factor)))
    assert scaled[0] == theta[0] == 1.0
    assert scaled[-1] == pytest.approx(theta[-1] / factor, rel=1e-5)
    # In between, each frequency is divided by s^(2i/(D-2)): strictly between 1 and s.
    ratios = theta[1:-1] / scaled[1:-1]
    expected = factor ** (2 * np.arange(1, HEAD_DIM // 2 - 1) / (HEAD_DIM - 2))
    np.testing.assert_allclose(ratios, expected, rtol=1e-5)
    assert np.all((ratios > 1) & (ratios < factor))


def test_yarn_keeps_high_frequencies_interpolates_low_ones_and_ramps_between():
    scaling = RopeScaling(type="yarn", factor=4.0, original_max_position=2048)
    theta = np.asarray(rope_inverse_wavelengths(HEAD_DIM, BASE))
    scaled = np.asarray(scaled_inverse_wavelengths(HEAD_DIM, BASE, scaling))
    rotations = 2048 * theta / (2 * math.pi)  # r_i: full turns within the trained context
    high, low = rotations > 32, rotations < 1
    middle = ~high & ~low
    assert high.any() and low.any() and middle.any()
    np.testing.assert_array_equal(scaled[high], theta[high])
    np.testing.assert_allclose(scaled[low], theta[low] / 4.0, rtol=1e-6)
    ramp = np.asarray(yarn_ramp(HEAD_DIM, BASE, scaling))
    np.testing.assert_allclose(ramp[middle], (rotations[middle] - 1) / 31, rtol=1e-5)
    np.testing.assert_allclose(scaled[middle], (1 - ramp[middle]) * theta[middle] / 4
                               + ramp[middle] * theta[middle], rtol=1e-6)


def test_yarn_attention_temperature_scales_logits_by_mscale_squared():
    factor = 4.0
    mscale = 0.1 * math.log(factor) + 1.0
    scaling = {"type": "yarn", "factor": factor, "original_max_position": 64}
    assert attention_scale(RopeScaling(**scaling)) == pytest.approx(mscale)
    assert attention_scale(RopeScaling(type="pi", factor=factor)) == 1.0
    module = rope_module(**scaling)
    q_key, k_key = jax.random.split(jax.random.key(0))
    q = jax.random.normal(q_key, (1, 5, 1, HEAD_DIM))
    k = jax.random.normal(k_key, (1, 7, 1, HEAD_DIM))
    q_pos, k_pos = jnp.arange(5)[None] + 90, jnp.arange(7)[None] + 80
    rq, rk = module.transform_qk(q, k, q_pos, k_pos, DECODER_SELF)
    logits = jnp.einsum("bthd,bshd->bts", rq, rk)
    plain_q = rotate(q, module.rotation_angles(q_pos))
    plain_k = rotate(k, module.rotation_angles(k_pos))
    reference = jnp.einsum("bthd,bshd->bts", plain_q, plain_k)
    np.testing.assert_allclose(logits, mscale**2 * reference, rtol=1e-5, atol=1e-5)


def test_scaled_rope_stays_relative():
    module = rope_module(type="ntk", factor=4.0)
    q_key, k_key = jax.random.split(jax.random.key(1))
    q = jax.random.normal(q_key, (1, 1, 1, HEAD_DIM))
    k = jax.random.normal(k_key, (1, 1, 1, HEAD_DIM))

    def score(q_pos: int, k_pos: int) -> float:
        rq, rk = module.transform_qk(q, k, jnp.full((1, 1), q_pos), jnp.full((1, 1), k_pos),
                                     DECODER_SELF)
        return float(jnp.sum(rq * rk))

    assert score(130, 100) == pytest.approx(score(30, 0), abs=1e-4)


@pytest.mark.parametrize("scaling, key", [
    ({"type": "linear"}, "model.pe.scaling.type"),
    ({"type": "pi", "factor": 0.5}, "model.pe.scaling.factor"),
    ({"type": "yarn", "factor": 2.0}, "model.pe.scaling.original_max_position"),
    ({"type": "yarn", "original_max_position": 8, "beta_slow": 40.0},
     "model.pe.scaling.beta_fast"),
    ({"alpha": 1.0}, "model.pe.scaling.alpha"),
])
def test_bad_scaling_is_a_config_error_naming_the_key(scaling, key):
    with pytest.raises(ConfigError) as error:
        RopeScaling.from_mapping(scaling)
    assert error.value.key == key


def test_scaling_is_an_eval_time_override_of_the_config():
    config = apply_overrides(base_config(pe="rope"), [
        "--config.model.pe.scaling.type=yarn", "--config.model.pe.scaling.factor=4",
        "--config.model.pe.scaling.original_max_position=32"])
    module = RoPE(config.model.pe, d_model=HEAD_DIM, num_heads=1, rngs=nnx.Rngs(0))
    assert module.scaling == RopeScaling(type="yarn", factor=4.0, original_max_position=32)
