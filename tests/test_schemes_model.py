"""The added schemes inside the full Seq2SeqTransformer: training, cached decoding, invariances."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from tiny_models import arange_positions, random_inputs, tiny_model

from pe_research.evaluation.metrics import token_cross_entropy
from pe_research.positional import DECODER_SELF, ENCODER_SELF, SCHEMES, random_positions

ADDED_SCHEMES = ("shaw", "transformer_xl", "kerple_log", "kerple_power", "fire", "xpos", "cope")


def batch(batch_size: int = 2, source_len: int = 6, target_len: int = 5, seed: int = 0):
    source, target = random_inputs(seed, batch_size, source_len, target_len)
    return source, target, jnp.ones(source.shape, bool), jnp.ones(target.shape, bool)


def scheme_parameters_that_must_learn(name, grads):
    """Gradient leaves of the scheme instances that the model actually calls."""
    pe = SCHEMES[name]
    required = []
    for path, grad in jax.tree_util.tree_leaves_with_path(grads):
        keys = [getattr(k, "key", None) for k in path]
        in_encoder = keys[0] == "encoder_layers" and "own_pe" in keys
        in_decoder = keys[0] == "decoder_layers" and "own_pe" in keys
        if ((in_encoder and ENCODER_SELF in pe.acts_in)
                or (in_decoder and DECODER_SELF in pe.acts_in)
                or (keys[0] == "pe" and pe.shared_across_layers)):
            required.append((jax.tree_util.keystr(path), grad))
    return required


@pytest.mark.parametrize("name", ADDED_SCHEMES)
def test_trains_and_gradients_reach_every_scheme_parameter(name):
    model = tiny_model(name)
    source, target, s_mask, t_mask = batch()
    s_pos, t_pos = arange_positions(2, 6), arange_positions(2, 5)
    graph, params, rest = nnx.split(model, nnx.Param, ...)
    optimizer = optax.adam(1e-2)

    def loss(params):
        logits = nnx.merge(graph, params, rest)(source, target, s_pos, t_pos, s_mask, t_mask)
        return token_cross_entropy(logits, target, t_mask)

    @jax.jit
    def train_step(params, opt_state):
        value, grads = jax.value_and_grad(loss)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, value, grads

    opt_state = optimizer.init(params)
    losses = []
    for step in range(3):
        params, opt_state, value, grads = train_step(params, opt_state)
        losses.append(float(value))
        if step == 0:
            required = scheme_parameters_that_must_learn(name, grads)
            assert required or name == "xpos"  # xPos has no parameters
            for path, grad in required:
                assert float(jnp.max(jnp.abs(grad))) > 0, f"no gradient reaches {path}"
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0]


def teacher_forced_fn(model):
    """Jitted ``(state, source, target, positions, masks) -> (encoded, logits)``."""
    graph = nnx.graphdef(model)

    @jax.jit
    def teacher_forced(state, source, target, s_pos, t_pos, s_mask, t_mask):
        model = nnx.merge(graph, state)
        encoded = model.encode(source, s_pos, s_mask)
        return encoded, model.decode(target, t_pos, encoded, s_pos, s_mask, t_mask)

    return teacher_forced


@pytest.mark.parametrize("name", ADDED_SCHEMES)
def test_cached_decoding_matches_teacher_forcing_and_shifts_change_nothing(name):
    model = tiny_model(name)
    graph, state = nnx.split(model)
    decode_step = jax.jit(lambda state, *args: nnx.merge(graph, state).decode_step(*args))
    source, target, s_mask, t_mask = batch()
    # Randomized (gapped) positions: the cache must carry them, not assume 0, 1, 2, ...
    # Rows 2-3 repeat rows 0-1 with every position shifted by 37.
    s_pos = random_positions(jax.random.key(1), s_mask, 48)
    t_pos = random_positions(jax.random.key(2), t_mask, 48)
    s_pos, t_pos = jnp.concatenate([s_pos, s_pos + 37]), jnp.concatenate([t_pos, t_pos + 37])
    source, target, s_mask, t_mask = (jnp.concatenate([x, x])
                                      for x in (source, target, s_mask, t_mask))
    encoded, full = teacher_forced_fn(model)(state, source, target, s_pos, t_pos, s_mask, t_mask)
    np.testing.assert_allclose(full[2:], full[:2], atol=2e-4)  # relative: the shift is invisible

    cache = model.init_cache(4, 8)  # longer than the target: 3 slots stay empty
    for t in range(target.shape[1]):
        logits, cache = decode_step(state, target[:, t:t + 1], t_pos[:, t:t + 1], encoded,
                                    s_pos, s_mask, cache)
        np.testing.assert_allclose(logits, full[:, t], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["shaw", "cope"])  # the two that compute attention themselves
def test_padding_does_not_change_real_outputs(name):
    model = tiny_model(name)
    state = nnx.state(model)
    teacher_forced = teacher_forced_fn(model)
    source, target, s_mask, t_mask = batch()
    _, reference = teacher_forced(state, source, target, arange_positions(2, 6),
                                  arange_positions(2, 5), s_mask, t_mask)
    pad = lambda x, n: jnp.pad(x, ((0, 0), (0, n)))  # noqa: E731
    _, padded = teacher_forced(state, pad(source, 4), pad(target, 3), arange_positions(2, 10),
                               arange_positions(2, 8), pad(s_mask, 4), pad(t_mask, 3))
    np.testing.assert_allclose(padded[:, :5], reference, atol=1e-5)


def test_per_layer_schemes_build_their_own_instances():
    model = tiny_model("transformer_xl", num_encoder_layers=2)
    first, second = (layer.own_pe for layer in model.encoder_layers)
    assert first is not None and second is not None
    assert not np.allclose(first.u[...], second.u[...])
