"""Golden values of the recent schemes and options, from their formulas written out in NumPy:
scaled sinusoidal, dynamic position bias, FoX, DAPE, ALiBi on some heads / learned slopes,
partial RoPE, p-RoPE and HoPE."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from pe_research.core.errors import ConfigError
from pe_research.positional import (
    DECODER_SELF,
    alibi_slopes,
    build_scheme,
    check_pe_config,
    default_pe_config,
    sinusoidal,
)
from pe_research.positional.dape import dape_correction
from pe_research.positional.fox import forget_bias
from pe_research.positional.rope import rotate


def scheme(name: str, d_model: int = 16, num_heads: int = 2, **pe):
    return build_scheme({**default_pe_config(name), **pe}, d_model=d_model, num_heads=num_heads,
                        rngs=nnx.Rngs(0))


def positions(*values: int) -> jax.Array:
    return jnp.asarray([values], jnp.int32)


def test_scaled_sinusoidal_is_sinusoidal_times_a_learned_scale_starting_at_d_to_minus_half():
    module = scheme("scaled_sinusoidal", d_model=16)
    p = positions(0, 3, 7)
    np.testing.assert_allclose(float(module.scale[...]), 0.25)  # 16 ** -0.5
    np.testing.assert_allclose(module.input_vectors(p), 0.25 * sinusoidal(p, 16), rtol=1e-6)
    module.scale[...] = jnp.asarray(2.0)
    np.testing.assert_allclose(module.input_vectors(p), 2.0 * sinusoidal(p, 16), rtol=1e-6)


def numpy_mlp(module, x: np.ndarray) -> np.ndarray:
    """The distance MLP in NumPy: Linear, SiLU, ..., Linear."""
    silu = lambda z: z / (1 + np.exp(-z))  # noqa: E731
    h = x[..., None]
    for layer in module.mlp.hidden:
        h = silu(h @ np.asarray(layer.kernel[...]) + np.asarray(layer.bias[...]))
    out = module.mlp.out
    return h @ np.asarray(out.kernel[...]) + np.asarray(out.bias[...])


@pytest.mark.parametrize("log_distance", [False, True])
def test_dynamic_bias_is_an_mlp_of_the_signed_distance(log_distance):
    module = scheme("dynamic_bias", d_model=16, log_distance=log_distance)
    assert module.mlp.hidden[0].kernel[...].shape == (1, 4)  # width d_model // 4, depth 2
    assert len(module.mlp.hidden) == 2
    module.mlp.hidden[0].bias[...] = jnp.full((4,), 0.3)  # biases start at 0: make MLP(0) != 0
    q, k = positions(5, 9), positions(0, 5, 9, 20)
    bias = module.logit_bias(None, None, q, k, DECODER_SELF)
    delta = np.asarray([[5 - 0, 5 - 5, 5 - 9, 5 - 20], [9, 4, 0, -11]], np.float32)
    if log_distance:
        delta = np.sign(delta) * np.log(np.abs(delta) + 1)
    expected = np.moveaxis(numpy_mlp(module, delta), -1, 0)[None]  # [1, H, T, S]
    np.testing.assert_allclose(bias, expected, rtol=1e-5, atol=1e-6)
    # distance 0 gives the same (non-zero) bias wherever it is
    assert float(jnp.max(jnp.abs(bias[0, :, 0, 1]))) > 1e-3
    np.testing.assert_allclose(bias[0, :, 0, 1], bias[0, :, 1, 2], rtol=1e-6)


def test_fox_bias_sums_the_log_forget_gates_between_key_and_query():
    log_f = np.log(np.asarray([[[0.9], [0.5], [0.8], [0.7]]], np.float32))  # [B=1, S=4, H=1]
    causal = np.tril(np.ones((4, 4), bool))[None]
    bias = np.asarray(forget_bias(jnp.asarray(log_f), jnp.asarray(causal)))[0, 0]
    f = log_f[0, :, 0]
    for i in range(4):
        for j in range(i + 1):
            np.testing.assert_allclose(bias[i, j], f[j + 1:i + 1].sum(), atol=1e-6)
    assert bias[2, 2] == 0.0 and np.isclose(bias[3, 0], np.log(0.5 * 0.8 * 0.7))


def test_fox_bias_ignores_padding_and_empty_cache_slots():
    log_f = jnp.log(jnp.asarray([[[0.9], [0.5], [0.8], [0.1], [0.2]]]))  # slots 3-4: padding
    mask = jnp.asarray(np.tril(np.ones((5, 5), bool)) & (np.arange(5) < 3))[None]
    short = forget_bias(log_f[:, :3], mask[:, :3, :3])
    np.testing.assert_allclose(forget_bias(log_f, mask)[:, :, :3, :3], short, atol=1e-6)
    # padding before the tokens (a single-stack model's source slots): the same exact sums
    leading = jnp.log(jnp.asarray([[[0.1], [0.2], [0.9], [0.5], [0.8]]]))
    late = jnp.asarray(np.tril(np.ones((5, 5), bool)) & (np.arange(5) >= 2))[None]
    np.testing.assert_allclose(forget_bias(leading, late)[:, :, 2:, 2:], short, atol=1e-6)
    # one decoding step: the query is slot 2 of a 5-slot cache (3 filled)
    step = forget_bias(log_f, jnp.asarray([[[True, True, True, False, False]]]))
    np.testing.assert_allclose(step[0, 0, 0, :3], short[0, 0, 2], atol=1e-6)


def test_fox_gate_starts_at_the_authors_initialisation_and_reads_the_keys():
    module = scheme("fox", d_model=16, num_heads=2)
    assert module.gate.kernel[...].shape == (16, 2)
    np.testing.assert_array_equal(module.gate.bias[...], 0.0)
    assert 0.01 < float(jnp.std(module.gate.kernel[...])) < 0.03
    k = jax.random.normal(jax.random.key(0), (1, 3, 2, 8))
    expected = jax.nn.log_sigmoid(k.reshape(1, 3, 16) @ module.gate.kernel[...])
    np.testing.assert_allclose(module.log_forget(k), expected, rtol=1e-5)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_fox_keys_carry_their_float32_gates_and_leave_q_dot_k_unchanged(dtype):
    """The transformed keys hold log f (decoding caches them); q'.k' = q.k; a bfloat16 model
    recovers the float32 gate to about 16 bits, a float32 one exactly."""
    module = scheme("fox", d_model=16, num_heads=2)
    module.gate.kernel[...] = 3 * jax.random.normal(jax.random.key(3), (16, 2))
    q = jax.random.normal(jax.random.key(0), (2, 3, 2, 8)).astype(dtype)
    k = jax.random.normal(jax.random.key(1), (2, 5, 2, 8)).astype(dtype)
    q2, k2 = module.transform_qk(q, k, None, None, DECODER_SELF)
    assert q2.dtype == k2.dtype == dtype and k2.shape == (2, 5, 2, 10)
    product = lambda a, b: jnp.einsum("bthd,bshd->bhts", a.astype(jnp.float32),  # noqa: E731
                                      b.astype(jnp.float32))
    np.testing.assert_array_equal(product(q2, k2), product(q, k))
    mask = jnp.tril(jnp.ones((5, 5), bool))[None].repeat(2, 0)
    decay = module.extra_logits(q2, k2, None, mask, None, None, DECODER_SELF)["forget_decay"]
    expected = forget_bias(module.log_forget(k), mask)
    tolerance = 0 if dtype == jnp.float32 else 2e-5
    np.testing.assert_allclose(decay, expected, rtol=tolerance, atol=tolerance)


def test_fox_is_refused_where_no_causal_attention_exists():
    from pe_research.model import ModelConfig
    fields = dict(vocab_size=13, d_model=16, num_heads=2, num_encoder_layers=1,
                  num_decoder_layers=1, d_ff=32, pe=default_pe_config("fox"),
                  architecture="encoder_only")
    with pytest.raises(ConfigError, match="model.pe.type=.fox.*decoder_self"):
        ModelConfig.from_mapping(fields).check_scheme_acts()


def test_alibi_on_some_heads_uses_their_own_slopes_and_leaves_the_rest_without_positions():
    module = scheme("alibi", d_model=32, num_heads=4, heads=2)
    np.testing.assert_allclose(module.current_slopes(), [*alibi_slopes(2), 0.0, 0.0])
    np.testing.assert_allclose(alibi_slopes(2), [2 ** -4, 2 ** -8])
    bias = module.logit_bias(None, None, positions(3), positions(0, 3), DECODER_SELF)
    np.testing.assert_allclose(bias[0, :, 0, 0], [-3 * 2 ** -4, -3 * 2 ** -8, 0.0, 0.0])


def test_learnable_alibi_slopes_start_at_the_papers_and_move_with_their_log():
    module = scheme("alibi", d_model=32, num_heads=4, learnable_slopes=True)
    np.testing.assert_allclose(module.current_slopes(), alibi_slopes(4), rtol=1e-6)
    module.log_slopes[...] = jnp.log(jnp.asarray([1.0, 0.5, 0.25, 2.0]))
    bias = module.logit_bias(None, None, positions(4), positions(1), DECODER_SELF)
    np.testing.assert_allclose(bias[0, :, 0, 0], [-3.0, -1.5, -0.75, -6.0], rtol=1e-6)


@pytest.mark.parametrize("heads", [-1, 3, 1.5])
def test_alibi_heads_out_of_range_is_a_config_error(heads):
    pe = {**default_pe_config("alibi"), "heads": heads}
    with pytest.raises(ConfigError, match="model.pe.heads"):
        check_pe_config(pe, d_model=16, num_heads=2)


def test_partial_rope_rotates_the_first_channels_with_an_r_wide_rope_and_keeps_the_rest():
    module = scheme("rope", d_model=16, num_heads=1, rotary_fraction=0.5)  # head 16, R = 8
    x = jax.random.normal(jax.random.key(0), (1, 3, 1, 16))
    p = positions(0, 4, 9)
    q, _ = module.transform_qk(x, x, p, p, DECODER_SELF)
    np.testing.assert_array_equal(q[..., 8:], x[..., 8:])
    full8 = scheme("rope", d_model=8, num_heads=1)  # an 8-wide RoPE
    expected, _ = full8.transform_qk(x[..., :8], x[..., :8], p, p, DECODER_SELF)
    np.testing.assert_allclose(q[..., :8], expected, rtol=1e-6)


def test_p_rope_stops_rotating_the_lowest_frequencies():
    module = scheme("rope", d_model=8, num_heads=1, drop_lowest_frequencies=0.5)  # 4 freqs, 2 off
    angles = module.rotation_angles(positions(5))[0, 0]
    inverse = 10_000.0 ** (-2 * np.arange(4) / 8)
    np.testing.assert_allclose(angles, [5 * inverse[0], 5 * inverse[1], 0.0, 0.0], rtol=1e-6)
    x = jax.random.normal(jax.random.key(1), (1, 1, 1, 8))
    rotated = rotate(x, module.rotation_angles(positions(5)))
    # pairs (i, i + 4) with i = 2, 3 are the dropped (lowest) frequencies: unchanged
    np.testing.assert_allclose(rotated[..., [2, 3, 6, 7]], x[..., [2, 3, 6, 7]], rtol=1e-6)


def test_hope_rotates_only_the_frequencies_that_complete_a_period_in_the_training_length():
    # head 16: theta_i = 10000^(-i/8) = 1, 0.316, 0.1, ...; with L = 40, 2 pi / L = 0.157,
    # so theta_0 and theta_1 rotate and theta_2..7 (0.1 * 40 = 4 < 2 pi) stay still.
    module = scheme("rope", d_model=16, num_heads=1, hope_train_length=40)
    inverse = 10_000.0 ** (-2 * np.arange(8) / 16)
    assert list(inverse * 40 >= 2 * np.pi) == [True, True] + [False] * 6
    angles = module.rotation_angles(positions(0, 3, 100))[0]
    np.testing.assert_allclose(angles[:, :2], np.outer([0, 3, 100], inverse[:2]), rtol=1e-6)
    np.testing.assert_array_equal(angles[:, 2:], 0.0)
    x = jax.random.normal(jax.random.key(2), (1, 3, 1, 16))
    p = positions(0, 3, 100)
    q, k = module.transform_qk(x, x, p, p, DECODER_SELF)
    still = [2, 3, 4, 5, 6, 7, 10, 11, 12, 13, 14, 15]  # pairs (i, i + 8), i >= 2
    np.testing.assert_allclose(q[..., still], x[..., still], rtol=1e-6)
    assert not np.allclose(q[0, 1, 0, [0, 8]], x[0, 1, 0, [0, 8]])
    # a longer training length keeps more frequencies: L = 100 also keeps theta_2 = 0.1
    longer = scheme("rope", d_model=16, num_heads=1, hope_train_length=100)
    assert int(np.sum(np.asarray(longer.rotation_angles(positions(1))) != 0)) == 3


@pytest.mark.parametrize(("key", "value"), [("rotary_fraction", 0.0),
                                            ("rotary_fraction", 1.5),
                                            ("rotary_fraction", 0.05),
                                            ("drop_lowest_frequencies", 1.0),
                                            ("hope_train_length", 6),
                                            ("hope_train_length", 12.5)])
def test_rope_options_out_of_range_are_config_errors(key, value):
    pe = {**default_pe_config("rope"), key: value}
    with pytest.raises(ConfigError, match=f"model.pe.{key}"):
        check_pe_config(pe, d_model=16, num_heads=2)


def test_dape_adds_an_mlp_of_logits_and_bias_to_both():
    module = scheme("dape", d_model=16, num_heads=2)  # base alibi, MLP 4 -> 32 -> 2
    assert module.hidden.kernel[...].shape == (4, 32) and module.out.kernel[...].shape == (32, 2)
    bound = 4 ** -0.5  # PyTorch's nn.Linear default: U(+-1/sqrt(fan_in)), bias included
    assert float(jnp.max(jnp.abs(module.hidden.kernel[...]))) <= bound
    assert 0 < float(jnp.max(jnp.abs(module.hidden.bias[...]))) <= bound
    logits = jax.random.normal(jax.random.key(0), (1, 2, 3, 3))
    bias = module.logit_bias(None, None, positions(0, 1, 2), positions(0, 1, 2), DECODER_SELF)
    features = np.concatenate([np.asarray(logits), np.asarray(bias)], axis=1)  # [1, 4, 3, 3]
    h = np.moveaxis(features, 1, -1) @ np.asarray(module.hidden.kernel[...]) \
        + np.asarray(module.hidden.bias[...])
    h = np.where(h > 0, h, 0.01 * h)
    mlp = h @ np.asarray(module.out.kernel[...]) + np.asarray(module.out.bias[...])
    expected = np.asarray(logits) + np.asarray(bias) + np.moveaxis(mlp, -1, 1)
    dape_logits = logits + bias + dape_correction(logits, bias, module.hidden, module.out)
    np.testing.assert_allclose(dape_logits, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bias[0, 0, 2], [-2 * 2 ** -4, -(2 ** -4), 0.0], rtol=1e-6)


def test_dape_base_must_be_a_relative_bias_scheme():
    for base in ("rope", "sinusoidal", "dape"):
        pe = {**default_pe_config("dape"), "base": base}
        with pytest.raises(ConfigError, match="model.pe.base"):
            check_pe_config(pe, d_model=16, num_heads=2)


def test_pope_logits_are_magnitudes_times_the_cosine_of_the_phase_difference():
    module = scheme("pope", d_model=8, num_heads=2)  # head size 4: 4 frequencies
    module.phase[...] = jnp.asarray([[-0.5, -1.0, 0.0, -7.0], [0.0, 0.0, 0.0, 0.0]])
    q = jax.random.normal(jax.random.key(0), (1, 1, 2, 4))
    k = jax.random.normal(jax.random.key(1), (1, 1, 2, 4))
    q2, k2 = module.transform_qk(q, k, positions(9), positions(4), DECODER_SELF)
    assert q2.shape == (1, 1, 2, 8)
    theta = 10_000.0 ** (-np.arange(4) / 4)
    softplus = lambda z: np.log1p(np.exp(z))  # noqa: E731
    delta = np.clip(np.asarray(module.phase[...]), -2 * np.pi, 0)  # -7 is clamped to -2 pi
    expected = (softplus(np.asarray(q[0, 0])) * softplus(np.asarray(k[0, 0]))
                * np.cos(theta * (9 - 4) - delta)).sum(-1)
    np.testing.assert_allclose((q2 * k2).sum(-1)[0, 0], expected, rtol=1e-5)
    v = jax.random.normal(jax.random.key(2), (1, 1, 2, 4))
    out = module.explicit_attention(q2, k2, v, None, jnp.ones((1, 1, 1), bool), positions(9),
                                    positions(4), DECODER_SELF)
    np.testing.assert_allclose(out, v, rtol=1e-6)  # one key: all weight on it, D-wide values


def test_pope_attention_scales_by_the_value_width_and_respects_mask_and_bias():
    """Softmax of q'.k' / sqrt(D) (D the values' width, half of q' and k') plus the bias, over
    the keys the mask shows, weighting the D-wide values: written out in NumPy."""
    module = scheme("pope", d_model=8, num_heads=2)
    rng = np.random.default_rng(0)
    q2, k2 = rng.normal(size=(1, 2, 2, 8)), rng.normal(size=(1, 3, 2, 8))
    v, bias = rng.normal(size=(1, 3, 2, 4)), rng.normal(size=(1, 2, 2, 3))
    mask = np.asarray([[[True, True, False], [True, False, True]]])
    out = module.explicit_attention(*(jnp.asarray(x, jnp.float32) for x in (q2, k2, v, bias)),
                                    jnp.asarray(mask), positions(0, 1), positions(0, 1, 2),
                                    DECODER_SELF)
    logits = np.einsum("bthd,bshd->bhts", q2, k2) / np.sqrt(4) + bias
    logits = np.where(mask[:, None], logits, -np.inf)
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    np.testing.assert_allclose(out, np.einsum("bhts,bshd->bthd", weights, v), rtol=1e-5,
                               atol=1e-6)
