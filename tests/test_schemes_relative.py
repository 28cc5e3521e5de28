"""Shaw, Transformer-XL and xPos: golden values from the written-out formulas, shift invariance."""

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
    apply_rope,
    apply_xpos,
    build_scheme,
    default_pe_config,
    relative_sinusoid_logits,
    shaw_logit_bias,
    shaw_relative_index,
    shaw_value_term,
    xpos_scale,
)
from pe_research.positional.explicit_attention import attention, softmax_attention
from pe_research.positional.transformer_xl import pair_sinusoid_logits, pair_tensor_pays
from pe_research.positional.xpos import xpos_zeta


def scheme(name: str, d_model: int = 16, num_heads: int = 2, seed: int = 0, **pe):
    return build_scheme({**default_pe_config(name), **pe}, d_model=d_model, num_heads=num_heads,
                        rngs=nnx.Rngs(seed))


def normal(seed: int, *shape: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


def numpy_sinusoid(distance: float, dim: int) -> np.ndarray:
    """PE(d, 2i) = sin(d / 10000^(2i/dim)), PE(d, 2i+1) = cos(...), written out."""
    angles = distance / 10_000.0 ** (2 * np.arange(dim // 2) / dim)
    return np.stack([np.sin(angles), np.cos(angles)], axis=-1).reshape(dim)


def positions(*values: int) -> jax.Array:
    return jnp.asarray([values], jnp.int32)


# --- the explicit attention path (hook 4) -----------------------------------------------------

def test_explicit_softmax_attention_equals_the_fused_kernel():
    q, k, v = normal(0, 2, 4, 2, 8), normal(1, 2, 6, 2, 8), normal(2, 2, 6, 2, 8)
    bias = normal(3, 2, 2, 4, 6)
    mask = np.random.default_rng(4).random((2, 4, 6)) < 0.7
    mask[0, 1] = False  # a query that sees no key: uniform weights on both paths
    fused = jax.nn.dot_product_attention(q, k, v, bias=bias, mask=mask[:, None])
    np.testing.assert_allclose(softmax_attention(q, k, v, bias, mask), fused, atol=1e-5)
    # keys as wide as the values: PoPE's and FoX's written-out attention is the kernel's
    np.testing.assert_allclose(attention(q, k, v, bias, mask), fused, atol=1e-5)


# --- Shaw -------------------------------------------------------------------------------------

def test_shaw_relative_index_is_clipped_key_minus_query():
    index = shaw_relative_index(positions(0, 1, 2), positions(0, 1, 2), max_relative_position=1)
    np.testing.assert_array_equal(index[0], [[1, 2, 2], [0, 1, 2], [0, 0, 1]])


def test_shaw_logit_bias_golden():
    # q = [1, 2, 0, 0]; rows w[0] = e0, w[1] = 0, w[2] = e1; bias = q . w[r] / sqrt(4).
    q = jnp.broadcast_to(jnp.asarray([1.0, 2.0, 0.0, 0.0]), (1, 3, 1, 4))
    table = jnp.asarray([[1.0, 0, 0, 0], [0, 0, 0, 0], [0, 1.0, 0, 0]])
    index = shaw_relative_index(positions(0, 1, 2), positions(0, 1, 2), 1)
    np.testing.assert_allclose(shaw_logit_bias(q, table, index)[0, 0],
                               [[0.0, 1.0, 1.0], [0.5, 0.0, 1.0], [0.5, 0.5, 0.0]])


def test_shaw_value_term_matches_the_sum_over_keys():
    probs = np.asarray(jax.nn.softmax(normal(0, 2, 2, 3, 5), axis=-1))
    table = normal(1, 5, 4)
    index = np.asarray(shaw_relative_index(jnp.asarray([[0, 1, 2], [4, 9, 10]]),
                                           jnp.asarray([[0, 1, 2, 3, 4], [0, 5, 9, 11, 30]]), 2))
    expected = np.zeros((2, 3, 2, 4))
    for b, h, i, j in np.ndindex(2, 2, 3, 5):
        expected[b, i, h] += probs[b, h, i, j] * table[index[b, i, j]]
    np.testing.assert_allclose(shaw_value_term(probs, table, index), expected, atol=1e-5)


def test_shaw_attention_with_values_matches_the_paper_formula():
    pe = scheme("shaw", d_model=8, num_heads=2, max_relative_position=2, init_std=0.5)
    q, k, v = normal(0, 1, 4, 2, 4), normal(1, 1, 4, 2, 4), normal(2, 1, 4, 2, 4)
    pos = positions(0, 1, 2, 5)
    mask = jnp.ones((1, 4, 4), bool)
    bias = pe.logit_bias(q, k, pos, pos, ENCODER_SELF)
    out = pe.explicit_attention(q, k, v, bias, mask, pos, pos, ENCODER_SELF)
    wk, wv = np.asarray(pe.key_table[...]), np.asarray(pe.value_table[...])
    pos = np.asarray(pos)
    expected = np.zeros((4, 2, 4))
    for h, i in np.ndindex(2, 4):
        r = [int(np.clip(pos[0, j] - pos[0, i], -2, 2)) + 2 for j in range(4)]
        e = np.array([q[0, i, h] @ (k[0, j, h] + wk[r[j]]) / 2.0 for j in range(4)])
        a = np.exp(e - e.max()) / np.exp(e - e.max()).sum()
        expected[i, h] = sum(a[j] * (v[0, j, h] + wv[r[j]]) for j in range(4))
    np.testing.assert_allclose(out[0], expected, atol=1e-5)


def test_shaw_gradients_equal_the_formula_written_with_per_pair_vectors():
    # The scheme scores table rows and sums weights per row; the reference builds w[r_ij] for
    # every pair ([B, T, S, D]), as the paper writes it, with batch-shared positions.
    pe = scheme("shaw", d_model=8, num_heads=2, max_relative_position=2, init_std=0.5)
    q, k, v = normal(0, 3, 5, 2, 4), normal(1, 3, 5, 2, 4), normal(2, 3, 5, 2, 4)
    pos = positions(0, 1, 2, 5, 6)
    mask = jnp.broadcast_to(jnp.tril(jnp.ones((5, 5), bool)), (3, 5, 5))
    index = shaw_relative_index(pos, pos, 2)[0]  # [T, S]

    graphdef, state = nnx.split(pe)

    def ours(q, k, v, state):
        model = nnx.merge(graphdef, state)
        bias = model.logit_bias(q, k, pos, pos, DECODER_SELF)
        return jnp.sum(jnp.sin(model.explicit_attention(q, k, v, bias, mask, pos, pos,
                                                        DECODER_SELF)))

    def reference(q, k, v, wk, wv):
        logits = jnp.einsum("bthd,btshd->bhts", q, k[:, None] + wk[index][None, :, :, None]) / 2
        probs = jax.nn.softmax(jnp.where(mask[:, None], logits, -1e30), axis=-1)
        return jnp.sum(jnp.sin(jnp.einsum("bhts,btshd->bthd", probs,
                                          v[:, None] + wv[index][None, :, :, None])))

    *mine, tables = jax.grad(ours, argnums=(0, 1, 2, 3))(q, k, v, state)
    mine += [tables["key_table"][...], tables["value_table"][...]]
    expected = jax.grad(reference, argnums=(0, 1, 2, 3, 4))(
        q, k, v, pe.key_table[...], pe.value_table[...])
    for a, b in zip(mine, expected, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_shaw_without_values_keeps_the_fused_path():
    pe = scheme("shaw", value_embeddings=False)
    assert pe.value_table is None
    q = normal(0, 1, 3, 2, 8)
    pos = positions(0, 1, 2)
    assert pe.explicit_attention(q, q, q, None, jnp.ones((1, 3, 3), bool), pos, pos,
                                 DECODER_SELF) is None


# --- Transformer-XL ---------------------------------------------------------------------------

def test_transformer_xl_logits_golden():
    # E = D = 2, one head, W_R = I, R(d) = [sin d, cos d]; q = [1, 0], k = [3, 4] -> q.k = 3;
    # u = [1, 2] -> u.k = 11; v = [0, 1] -> (q + v) . R(d) = sin d + cos d; all / sqrt(2).
    pe = scheme("transformer_xl", d_model=2, num_heads=1)
    pe.u[...], pe.v[...] = jnp.asarray([[1.0, 2.0]]), jnp.asarray([[0.0, 1.0]])
    pe.w_r[...] = jnp.eye(2)[:, None, :]
    q = jnp.broadcast_to(jnp.asarray([1.0, 0.0]), (1, 2, 1, 2))
    k = jnp.broadcast_to(jnp.asarray([3.0, 4.0]), (1, 3, 1, 2))
    q_pos, k_pos = positions(0, 3), positions(0, 1, 3)
    for kind in (ENCODER_SELF, DECODER_SELF):
        q_u, k_same = pe.transform_qk(q, k, q_pos, k_pos, kind)
        np.testing.assert_array_equal(k_same, k)  # the keys are left as they are
        content = jnp.einsum("bthd,bshd->bhts", q_u, k_same) / math.sqrt(2)
        logits = (content + pe.logit_bias(q_u, k_same, q_pos, k_pos, kind))[0, 0]
        expected = [[(3 + 11 + math.sin(p_i - p_j) + math.cos(p_i - p_j)) / math.sqrt(2)
                     for p_j in (0, 1, 3)] for p_i in (0, 3)]
        np.testing.assert_allclose(logits, expected, atol=1e-5)


def test_relative_sinusoid_logits_match_a_table_of_signed_distances():
    query, w_r = normal(0, 2, 3, 2, 4), normal(1, 8, 2, 4)
    q_pos = np.asarray([[0, 4, 9], [2, 3, 30]])
    k_pos = np.asarray([[0, 1, 9, 12], [5, 7, 8, 40]])  # keys before and after the queries
    logits = relative_sinusoid_logits(query, w_r, q_pos, k_pos)
    expected = np.zeros((2, 2, 3, 4))
    for b, h, i, j in np.ndindex(2, 2, 3, 4):
        r = numpy_sinusoid(float(q_pos[b, i] - k_pos[b, j]), 8)
        expected[b, h, i, j] = query[b, i, h] @ w_r[:, h].T @ r
    np.testing.assert_allclose(logits, expected, atol=1e-4)


def sinusoid_table(query, w_r, q_pos_T, k_pos_S) -> np.ndarray:
    """``query_i . W_R R(p_i - p_j)`` ``[B, H, T, S]`` in float64, the distances' sinusoids
    written out."""
    rows, _, heads, _ = query.shape
    expected = np.zeros((rows, heads, len(q_pos_T), len(k_pos_S)))
    for i, j in np.ndindex(len(q_pos_T), len(k_pos_S)):
        r = numpy_sinusoid(float(q_pos_T[i] - k_pos_S[j]), w_r.shape[0])
        expected[:, :, i, j] = np.einsum("bhd,ehd,e->bh", query[:, i].astype(np.float64), w_r, r)
    return expected


def test_shared_positions_take_the_pair_tensor_and_give_the_table_of_distances():
    # 16 rows of randomized positions the batch shares (drawn once per batch from [0, 2048)):
    # the pair tensor's [1, T] path and the identity's (the same positions given per row) both
    # equal the written-out table; the pair path is the one a shared draw takes.
    rows, heads, head_dim, width = 16, 2, 4, 8
    assert pair_tensor_pays(rows, 5, 7, heads, head_dim, width)
    draw = np.sort(np.random.default_rng(3).choice(2048, 12, replace=False))
    q_pos, k_pos = draw[[0, 2, 5, 9, 11]], draw[[1, 3, 4, 6, 7, 8, 10]]
    query, w_r = normal(0, rows, 5, heads, head_dim), normal(1, width, heads, head_dim)
    expected = sinusoid_table(query, w_r, q_pos, k_pos)
    shared = relative_sinusoid_logits(query, w_r, q_pos[None], k_pos[None])
    per_row = relative_sinusoid_logits(query, w_r, np.tile(q_pos, (rows, 1)),
                                       np.tile(k_pos, (rows, 1)))
    pair = pair_sinusoid_logits(query, w_r, jnp.asarray(q_pos), jnp.asarray(k_pos))
    np.testing.assert_array_equal(shared, pair)
    scale = np.abs(expected).max()
    # both to float32's rounding of angles up to 2,048 radians (3e-6 of the largest here)
    for logits in (pair, per_row):
        np.testing.assert_allclose(logits, expected, atol=1e-5 * scale)


def test_pair_tensor_pays_from_twenty_rows_at_the_table_models_shape():
    # T = S = 128, H = D = 8, E = 64: pair 2 T S H D (E + B) <= identity B T H E (D + S) from
    # B = 20 (0.514 of the identity's multiply-adds at 19, 0.494 at 20)
    assert not pair_tensor_pays(19, 128, 128, 8, 8, 64)
    assert pair_tensor_pays(20, 128, 128, 8, 8, 64)
    assert not pair_tensor_pays(1, 1, 128, 8, 8, 64)  # a decode step of one row: the identity
    # decoder-only, batch 32, T = S = 512, 4 heads of 16: 0.73 of the multiply-adds, not half
    assert not pair_tensor_pays(32, 512, 512, 4, 16, 64)


def test_pair_tensor_cuts_the_position_terms_flops_at_the_table_models_shape():
    # batch 128, 128 x 128 tokens, 8 heads of 8, E = 64: the pair tensor's multiply-adds are
    # 128 * 128 * 64 * (64 + 128) against 128 * 128 * 8 * 64 * (8 + 128), 5.7x fewer
    query = jax.ShapeDtypeStruct((128, 128, 8, 8), jnp.float32)
    w_r = jax.ShapeDtypeStruct((64, 8, 8), jnp.float32)
    shared = jax.ShapeDtypeStruct((1, 128), jnp.int32)

    def flops(positions):
        return jax.jit(relative_sinusoid_logits).lower(query, w_r, positions, positions) \
            .compile().cost_analysis()["flops"]

    per_row = flops(jax.ShapeDtypeStruct((128, 128), jnp.int32))
    assert flops(shared) < per_row / 5


def test_transformer_xl_tells_the_two_directions_apart():
    pe = scheme("transformer_xl")
    q = normal(0, 1, 1, 2, 8)
    k = jnp.zeros((1, 2, 2, 8))  # no content term: only the position term differs
    bias = pe.logit_bias(q, k, positions(5), positions(3, 7), ENCODER_SELF)
    assert float(jnp.max(jnp.abs(bias[..., 0] - bias[..., 1]))) > 1e-3


@pytest.mark.parametrize("name", ["shaw", "transformer_xl"])
def test_relative_bias_is_shift_invariant(name):
    pe = scheme(name)
    q, k = normal(0, 2, 4, 2, 8), normal(1, 2, 6, 2, 8)
    q_pos = jnp.asarray([[0, 1, 2, 3], [3, 9, 11, 20]])
    k_pos = jnp.asarray([[0, 1, 2, 3, 4, 5]] * 2)
    for kind in (ENCODER_SELF, DECODER_SELF):
        reference = pe.logit_bias(q, k, q_pos, k_pos, kind)
        shifted = pe.logit_bias(q, k, q_pos + 113, k_pos + 113, kind)
        np.testing.assert_allclose(shifted, reference, atol=1e-4)


# --- xPos -------------------------------------------------------------------------------------

def test_xpos_zeta_and_scale_golden():
    np.testing.assert_allclose(xpos_zeta(8), np.array([0.4, 0.65, 0.9, 1.15]) / 1.4, rtol=1e-6)
    scale = xpos_scale(jnp.asarray([0, 512, 1024]), 8, scale_base=512.0)
    np.testing.assert_allclose(scale[1], np.array([0.4, 0.65, 0.9, 1.15]) / 1.4, rtol=1e-6)
    np.testing.assert_allclose(scale[2], (np.array([0.4, 0.65, 0.9, 1.15]) / 1.4) ** 2, rtol=1e-6)
    np.testing.assert_allclose(scale[0], 1.0)


def test_xpos_query_key_product_golden():
    # D = 2: one pair, zeta = 0.4 / 1.4 = 2/7; scale_base 1.
    # q at n = 2, k at m = 0 -> cos(2) zeta^2;  k at m = 1 -> zeta^(2-1) cos(1).
    zeta = 2.0 / 7.0
    x = jnp.asarray([1.0, 0.0]).reshape(1, 1, 1, 2)
    q = apply_xpos(x, positions(2), downscale=False, scale_base=1.0)
    for m, expected in [(0, math.cos(2) * zeta**2), (1, math.cos(1) * zeta)]:
        k = apply_xpos(x, positions(m), downscale=True, scale_base=1.0)
        assert float(jnp.sum(q * k)) == pytest.approx(expected, rel=1e-5)


def test_xpos_is_shift_invariant_in_the_decoder_and_plain_rope_in_the_encoder():
    pe = scheme("xpos", scale_base=64.0)
    q, k = normal(0, 1, 3, 2, 8), normal(1, 1, 3, 2, 8)
    pos = positions(0, 2, 7)

    def logits(offset, kind):
        q_t, k_t = pe.transform_qk(q, k, pos + offset, pos + offset, kind)
        return jnp.einsum("bthd,bshd->bhts", q_t, k_t)

    np.testing.assert_allclose(logits(50, DECODER_SELF), logits(0, DECODER_SELF), rtol=1e-4,
                               atol=1e-5)
    q_enc, k_enc = pe.transform_qk(q, k, pos, pos, ENCODER_SELF)
    np.testing.assert_allclose(q_enc, apply_rope(q, pos), atol=1e-6)
    np.testing.assert_allclose(k_enc, apply_rope(k, pos), atol=1e-6)
    # In the decoder the far past is damped relative to plain RoPE, never amplified.
    q_dec, k_dec = pe.transform_qk(q, k, pos, pos, DECODER_SELF)
    assert float(jnp.max(jnp.abs(q_dec))) <= float(jnp.max(jnp.abs(q_enc))) + 1e-6


# --- bad input --------------------------------------------------------------------------------

@pytest.mark.parametrize("name, overrides, pattern", [
    ("shaw", {"pe": {"max_relative_position": 0}}, r"model.pe.max_relative_position=0 .*>= 1"),
    ("shaw", {"pe": {"value_embeddings": "yes"}}, r"model.pe.value_embeddings='yes'"),
    ("transformer_xl", {"pe": {"max_wavelength": -1.0}}, r"model.pe.max_wavelength=-1.0"),
    ("xpos", {"d_model": 18, "num_heads": 2}, r"model.d_model=18 .*even.*head dim 9"),
    ("xpos", {"pe": {"scale_base": 0.0}}, r"model.pe.scale_base=0.0 .*> 0"),
])
def test_bad_values_name_key_and_valid_range(name, overrides, pattern):
    with pytest.raises(ConfigError, match=pattern) as error:
        tiny_config(name, **overrides)
    assert "\n" not in str(error.value)
