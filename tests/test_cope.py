"""CoPE: gated counts as positions, interpolated embeddings, causal self-attention only."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from tiny_models import random_inputs, tiny_config, tiny_model

from pe_research.core.errors import ConfigError
from pe_research.positional import (
    CROSS,
    DECODER_SELF,
    ENCODER_SELF,
    build_scheme,
    cope_logits,
    cope_positions,
    default_pe_config,
)
from pe_research.positional.explicit_attention import softmax_attention

CAUSAL_2 = jnp.asarray([[[True, False], [True, True]]])


def cope(npos_max: int = 3, head_dim: int = 1):
    pe = {**default_pe_config("cope"), "npos_max": npos_max}
    return build_scheme(pe, d_model=head_dim, num_heads=1, rngs=nnx.Rngs(0))


def test_positions_are_reverse_cumulative_gate_sums_over_visible_keys():
    logits = jax.random.normal(jax.random.key(0), (1, 2, 4, 4))
    mask = jnp.tril(jnp.ones((4, 4), bool))[None]
    counts = np.asarray(cope_positions(logits, mask, npos_max=100))
    gates = 1 / (1 + np.exp(-np.asarray(logits)))
    for h, i in np.ndindex(2, 4):
        for j in range(i + 1):
            assert counts[0, h, i, j] == pytest.approx(gates[0, h, i, j:i + 1].sum(), rel=1e-5)
    assert float(jnp.max(cope_positions(logits, mask, npos_max=2))) == 1.0  # clamped to P - 1


def test_interpolated_position_logits_golden():
    # q = 1, e = (0, 10, 20): q . e[p] = 10 p between the integer positions.
    q = jnp.ones((1, 1, 1, 1))
    table = jnp.asarray([[0.0, 10.0, 20.0]])
    positions = jnp.asarray([0.0, 0.25, 1.0, 1.5, 2.0]).reshape(1, 1, 1, 5)
    np.testing.assert_allclose(cope_logits(q, table, positions)[0, 0, 0],
                               [0.0, 2.5, 10.0, 15.0, 20.0], rtol=1e-6)


def _authors_cope_logits(q, table, positions):
    """The authors' interpolation: two lookups, at floor and at ceil (take_along_axis)."""
    per_integer = jnp.einsum("bthd,dp->bhtp", q, table)
    floor, ceil = jnp.floor(positions), jnp.ceil(positions)
    at_floor = jnp.take_along_axis(per_integer, floor.astype(jnp.int32), axis=-1)
    at_ceil = jnp.take_along_axis(per_integer, ceil.astype(jnp.int32), axis=-1)
    weight = positions - floor
    return at_ceil * weight + at_floor * (1 - weight)


def test_interpolation_and_its_gradients_equal_the_authors_two_lookups():
    # Integer positions included (0, an interior one and the clamp P - 1 = 3), where the slope
    # in p is zero in the authors' code because ceil = floor.
    k_q, k_t, k_p = jax.random.split(jax.random.key(5), 3)
    q, table = jax.random.normal(k_q, (2, 3, 2, 4)), jax.random.normal(k_t, (4, 4))
    positions = jax.random.uniform(k_p, (2, 2, 3, 6), maxval=3.0)
    positions = positions.at[..., :3].set(jnp.asarray([0.0, 2.0, 3.0]))
    weights = jax.random.normal(jax.random.key(6), positions.shape)
    ours, theirs = (jax.grad(lambda *a, f=f: jnp.sum(weights * f(*a)), argnums=(0, 1, 2))(
        q, table, positions) for f in (cope_logits, _authors_cope_logits))
    np.testing.assert_allclose(cope_logits(q, table, positions),
                               _authors_cope_logits(q, table, positions), rtol=1e-6, atol=1e-6)
    for mine, reference in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(mine, reference, rtol=1e-5, atol=1e-5)
    assert float(jnp.max(jnp.abs(ours[2][..., :3]))) == 0.0  # no slope at integer positions


def test_attention_golden_by_hand():
    # q = 1, k = 0: every logit is 0, every gate 1/2. Query 1 counts p = (1, 1/2) for keys (0, 1),
    # so its logits are (10, 5); with v = (1, 0) the output is sigmoid(5). Query 0 sees only v_0.
    pe = cope()
    pe.table[...] = jnp.asarray([[0.0, 10.0, 20.0]])
    q, k = jnp.ones((1, 2, 1, 1)), jnp.zeros((1, 2, 1, 1))
    v = jnp.asarray([1.0, 0.0]).reshape(1, 2, 1, 1)
    pos = jnp.asarray([[0, 1]])
    out = pe.explicit_attention(q, k, v, None, CAUSAL_2, pos, pos, DECODER_SELF)
    np.testing.assert_allclose(out[0, :, 0, 0], [1.0, 1 / (1 + math.exp(-5))], rtol=1e-6)


def test_the_position_logit_is_divided_by_sqrt_head_dim_as_in_the_authors_code():
    # head size 4, q = 1, k = 0, e[p] = 10 p in every channel: q . e[p] = 40 p, over sqrt(4) = 20 p.
    # Query 1 counts p = (1, 1/2): logits (20, 10), so with v = (1, 0) the output is sigmoid(10).
    pe = cope(head_dim=4)
    pe.table[...] = jnp.tile(jnp.asarray([[0.0, 10.0, 20.0]]), (4, 1))
    q, k = jnp.ones((1, 2, 1, 4)), jnp.zeros((1, 2, 1, 4))
    v = jnp.zeros((1, 2, 1, 4)).at[0, 0].set(1.0)
    pos = jnp.asarray([[0, 1]])
    out = pe.explicit_attention(q, k, v, None, CAUSAL_2, pos, pos, DECODER_SELF)
    np.testing.assert_allclose(out[0, 1, 0], 1 / (1 + math.exp(-10)), rtol=1e-6)


def test_unfilled_cache_slots_do_not_count():
    pe = cope(npos_max=8, head_dim=4)
    pe.table[...] = jax.random.normal(jax.random.key(1), (4, 8))
    q, k, v = (jax.random.normal(jax.random.key(i), (1, 3, 1, 4)) for i in (2, 3, 4))
    pos = jnp.asarray([[0, 1, 2]])
    mask = jnp.tril(jnp.ones((3, 3), bool))[None]
    reference = pe.explicit_attention(q, k, v, None, mask, pos, pos, DECODER_SELF)
    # The last query against a cache of 6 slots of which 3 are filled (garbage in the rest).
    garbage = jax.random.normal(jax.random.key(5), (1, 3, 1, 4))
    cache_k, cache_v = jnp.concatenate([k, garbage], 1), jnp.concatenate([v, garbage], 1)
    visible = (jnp.arange(6) < 3)[None, None]
    step = pe.explicit_attention(q[:, 2:], cache_k, cache_v, None, visible, pos[:, 2:],
                                 jnp.zeros((1, 6), jnp.int32), DECODER_SELF)
    np.testing.assert_allclose(step[0, 0], reference[0, 2], atol=1e-6)


def test_acts_only_in_causal_self_attention_and_refuses_other_kinds():
    pe = cope()
    assert pe.acts_in == frozenset({DECODER_SELF})
    x = jnp.ones((1, 2, 1, 1))
    pos = jnp.asarray([[0, 1]])
    for kind in (ENCODER_SELF, CROSS):
        with pytest.raises(ConfigError, match=r"model.pe.type='cope' .*causal decoder") as error:
            pe.explicit_attention(x, x, x, None, CAUSAL_2, pos, pos, kind)
        assert "\n" not in str(error.value)


def test_zero_table_is_plain_causal_attention():
    pe = cope(npos_max=8, head_dim=4)
    q, k, v = (jax.random.normal(jax.random.key(i), (2, 5, 1, 4)) for i in (0, 1, 2))
    mask = jnp.broadcast_to(jnp.tril(jnp.ones((5, 5), bool)), (2, 5, 5))
    pos = jnp.broadcast_to(jnp.arange(5), (2, 5))
    np.testing.assert_allclose(pe.explicit_attention(q, k, v, None, mask, pos, pos, DECODER_SELF),
                               softmax_attention(q, k, v, None, mask), atol=1e-6)


def test_the_encoder_gets_no_positions():
    graph, state = nnx.split(tiny_model("cope"))
    encode = jax.jit(lambda state, *args: nnx.merge(graph, state).encode(*args))
    source, _ = random_inputs()
    mask = jnp.ones(source.shape, bool)
    arange = jnp.broadcast_to(jnp.arange(6), source.shape)
    encoded = encode(state, source, arange, mask)
    np.testing.assert_array_equal(encode(state, source, arange * 7 + 3, mask), encoded)
    permutation = jnp.asarray([3, 1, 5, 0, 2, 4])
    np.testing.assert_allclose(encode(state, source[:, permutation], arange, mask),
                               encoded[:, permutation], atol=1e-5)


def test_bad_config():
    with pytest.raises(ConfigError, match=r"model.pe.npos_max=1 .*>= 2"):
        tiny_config("cope", pe={"npos_max": 1})
    with pytest.raises(ConfigError, match=r"model.pe.randomize.max_position=64 .*'cope' does not"):
        tiny_config("cope", pe={"randomize": {"max_position": 64}})
