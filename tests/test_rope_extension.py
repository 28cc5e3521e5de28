"""RoPE's test-time extensions against their written-out definitions: Self-Extend's grouped
positions, and attention sinks as the authors' evicted cache with positions inside it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from tiny_models import forced_cached_logits, spread_parameters, tiny_model

from pe_research.core.errors import ConfigError
from pe_research.positional import DECODER_SELF, ENCODER_SELF, default_pe_config
from pe_research.positional.explicit_attention import softmax_attention
from pe_research.positional.rope import RoPE, apply_rope

T, H, D = 12, 2, 4


def rope_with(**blocks) -> RoPE:
    return RoPE({**default_pe_config("rope"), **blocks}, d_model=H * D, num_heads=H,
                rngs=nnx.Rngs(0))


def qkv(seed: int = 0):
    return tuple(jax.random.normal(key, (1, T, H, D)) for key in
                 jax.random.split(jax.random.key(seed), 3))


def attend(scheme, q, k, v, positions, mask):
    q, k = scheme.transform_qk(q, k, positions, positions, DECODER_SELF)
    out = scheme.explicit_attention(q, k, v, None, mask, positions, positions, DECODER_SELF)
    return softmax_attention(q, k, v, None, mask) if out is None else out


POSITIONS = jnp.arange(T)[None]
CAUSAL = jnp.tril(jnp.ones((T, T), bool))[None]


def test_self_extend_logits_are_neighbour_rope_near_and_grouped_rope_beyond():
    group, window = 3, 4
    scheme = rope_with(self_extend={"group_size": group, "neighbor_window": window})
    q, k, v = qkv()
    probs_out = attend(scheme, q, k, v, POSITIONS, CAUSAL)
    expected = np.zeros((H, T, T))
    for i in range(T):
        for j in range(i + 1):
            if i - j < window:
                p_q, p_k = float(i), float(j)
            else:  # the authors' shift W - W / G is a float
                p_q, p_k = i // group + window - window / group, float(j // group)
            rq = apply_rope(q[:, i:i + 1], jnp.asarray([[p_q]]))
            rk = apply_rope(k[:, j:j + 1], jnp.asarray([[p_k]]))
            expected[:, i, j] = np.einsum("hd,hd->h", rq[0, 0], rk[0, 0]) / np.sqrt(D)
    weights = np.where(np.tril(np.ones((T, T), bool)), np.exp(expected - expected.max(-1,
                       keepdims=True, where=np.tril(np.ones((T, T), bool)), initial=-np.inf)), 0)
    weights /= weights.sum(-1, keepdims=True)
    written = np.einsum("hts,shd->thd", weights, np.asarray(v[0]))
    np.testing.assert_allclose(probs_out[0], written, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("blocks", [{"self_extend": {"group_size": 4, "neighbor_window": T}},
                                    {"attention_sinks": {"sinks": 4, "window": T}}],
                         ids=["self_extend", "attention_sinks"])
def test_a_window_as_long_as_the_sequence_is_plain_rope(blocks):
    q, k, v = qkv(1)
    extended = rope_with(**blocks)
    assert not extended.uses_fused_attention
    np.testing.assert_allclose(attend(extended, q, k, v, POSITIONS, CAUSAL),
                               attend(rope_with(), q, k, v, POSITIONS, CAUSAL), rtol=1e-5,
                               atol=1e-6)
    # Encoder self-attention is left as it is: rotated there, on the fused kernel.
    rotated = extended.transform_qk(q, k, POSITIONS, POSITIONS, ENCODER_SELF)
    assert extended.explicit_attention(*rotated, v, None, CAUSAL, POSITIONS, POSITIONS,
                                       ENCODER_SELF) is None


def test_sinks_attend_as_the_evicted_cache_with_positions_inside_it():
    sinks, window = 2, 4
    scheme = rope_with(attention_sinks={"sinks": sinks, "window": window})
    q, k, v = qkv(2)
    out = attend(scheme, q, k, v, POSITIONS, CAUSAL)
    plain = rope_with()
    for i in range(T):
        kept = sorted(set(range(min(sinks, i + 1))) | set(range(max(0, i - window + 1), i + 1)))
        # StreamingLLM's cache: the kept keys at positions 0 .. len(kept) - 1, the query last.
        cache_positions = jnp.arange(len(kept))[None]
        rk = apply_rope(k[:, kept], cache_positions)
        rq = apply_rope(q[:, i:i + 1], cache_positions[:, -1:])
        expected = softmax_attention(rq, rk, v[:, kept], None, jnp.ones((1, 1, len(kept)), bool))
        np.testing.assert_allclose(out[:, i], expected[:, 0], rtol=1e-5, atol=1e-6)
    assert not np.allclose(out, attend(plain, q, k, v, POSITIONS, CAUSAL), atol=1e-3)


@pytest.mark.parametrize("blocks", [{"self_extend": {"group_size": 2, "neighbor_window": 3}},
                                    {"attention_sinks": {"sinks": 4, "window": 3}}],
                         ids=["self_extend", "attention_sinks"])
def test_cached_decoding_equals_teacher_forcing_under_an_extension(blocks):
    """Step by step through the key/value cache (positions and keys as stored there) equals one
    teacher-forced pass, and both differ from plain RoPE's."""
    batch, source_len, target_len = 3, 5, 9
    source = jax.random.randint(jax.random.key(4), (batch, source_len), 3, 12)
    forced = jax.random.randint(jax.random.key(5), (batch, target_len), 3, 12)
    source_positions = jnp.broadcast_to(jnp.arange(source_len), (batch, source_len))
    target_positions = jnp.broadcast_to(jnp.arange(target_len), (batch, target_len))
    mask = jnp.ones((batch, source_len), bool)

    def logits(pe):
        graphdef, state = spread_parameters(tiny_model("rope", pe=pe, tie_output=False,
                                                       scale_embedding=False), 0)

        @jax.jit
        def run(state):
            model = nnx.merge(graphdef, state)
            encoded = model.encode(source, source_positions, mask)
            full = model.decode(forced, target_positions, encoded, source_positions, mask,
                                jnp.ones(forced.shape, bool))
            return full, forced_cached_logits(model, source, source_positions, mask,
                                              target_positions, forced)

        return run(state)

    full, cached = logits(blocks)
    np.testing.assert_allclose(cached, full, rtol=1e-4, atol=1e-4)
    plain, _ = logits({})
    assert float(np.max(np.abs(plain - full))) > 0.1


@pytest.mark.parametrize(("blocks", "message"), [
    ({"self_extend": {"group_size": 4}}, "set both group_size"),
    ({"self_extend": {"group_size": 1, "neighbor_window": 4}}, "plain RoPE"),
    ({"self_extend": {"group_size": 2, "neighbor_window": 4},
      "attention_sinks": {"window": 8}}, "one test-time extension at a time"),
    ({"attention_sinks": {"window": -1}}, "an integer >= 0"),
    ({"attention_sinks": {"recent": 8}}, "not a key of attention_sinks"),
])
def test_bad_settings_are_one_line_errors(blocks, message):
    with pytest.raises(ConfigError, match=message):
        rope_with(**blocks)
