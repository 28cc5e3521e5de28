"""Greedy decoding: the cached loop equals full recomputation for every registered scheme."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from tiny_models import (
    arange_positions,
    forced_cached_logits,
    random_inputs,
    spread_parameters,
    tiny_config,
    tiny_model,
)

from pe_research.model.decoding import (
    NEVER,
    PAD_ID,
    cache_widths,
    greedy_decode,
    naive_greedy_decode,
)
from pe_research.model.single_stack import SingleStackTransformer
from pe_research.positional.registry import SCHEMES

pytestmark = pytest.mark.battery  # every scheme (or architecture): make test runs it

BATCH, SOURCE_LEN, TARGET_LEN = 6, 7, 10
SEGMENTS = (2, 3, 7, TARGET_LEN)  # cache widths of a loop in segments (cache_widths: T >= 256)


def compiled(function, *args):
    """``function`` jitted and compiled for ``args`` (one program, at the suite's XLA settings)."""
    return jax.jit(function).lower(*args).compile()


def spread_model(scheme: str, seed: int = 0):
    """A tiny model with every parameter redrawn N(0, 1), so greedy outputs vary by position."""
    return spread_parameters(tiny_model(scheme, tie_output=False, scale_embedding=False), seed)


def inputs():
    """Sources with padding (different real lengths) and shifted, spaced target positions."""
    source, forced = random_inputs(seed=1, batch=BATCH, source_len=SOURCE_LEN,
                                   target_len=TARGET_LEN)
    source_mask = jnp.arange(SOURCE_LEN)[None] < jnp.asarray([7, 5, 7, 3, 6, 7])[:, None]
    source = jnp.where(source_mask, source, PAD_ID)
    target_positions = arange_positions(BATCH, TARGET_LEN) * 2 + 3
    return source, source_mask, arange_positions(BATCH, SOURCE_LEN), target_positions, forced


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_cached_decoding_equals_naive_decoding(scheme):
    graphdef, state = spread_model(scheme)
    source, source_mask, source_positions, target_positions, forced = inputs()

    def run(state):
        model = nnx.merge(graphdef, state)
        args = (source, source_positions, source_mask, target_positions)
        teacher_forced = model.decode(forced, target_positions,
                                      model.encode(source, source_positions, source_mask),
                                      source_positions, source_mask, jnp.ones(forced.shape, bool))
        return (greedy_decode(model, *args), naive_greedy_decode(model, *args),
                forced_cached_logits(model, *args, forced), teacher_forced,
                greedy_decode(model, *args, eos_id=NEVER),
                greedy_decode(model, *args, eos_id=NEVER, widths=SEGMENTS))

    cached, naive, step_logits, full_logits, whole, segmented = jax.device_get(
        compiled(run, state)(state))
    np.testing.assert_array_equal(cached, naive)
    np.testing.assert_array_equal(segmented, whole)  # every slot of every segment decoded
    # The cache reproduces full recomputation on arbitrary (not greedy) prefixes too.
    np.testing.assert_allclose(step_logits, full_logits, atol=1e-4, rtol=1e-4)
    assert float(np.std(full_logits)) > 0.1


@pytest.mark.parametrize("decode", [greedy_decode, naive_greedy_decode,
                                    functools.partial(greedy_decode, widths=SEGMENTS)],
                         ids=["cached", "naive", "cached_in_segments"])
def test_each_sequence_stops_at_its_own_eos(decode):
    graphdef, state = spread_model("rope")
    source, source_mask, source_positions, target_positions, _ = inputs()

    def run(state, eos_id):
        return decode(nnx.merge(graphdef, state), source, source_positions, source_mask,
                      target_positions, eos_id=eos_id)

    never, eos = jnp.int32(NEVER), jnp.int32(12)  # 12: emitted in some rows, not in others
    run = compiled(run, state, never)
    unstopped = np.asarray(run(state, never))
    has_eos = (unstopped == eos).any(axis=1)
    assert has_eos.any() and not has_eos.all()
    stopped = np.asarray(run(state, eos))
    for row, full in zip(stopped, unstopped, strict=True):
        end = int(np.argmax(full == eos)) + 1 if (full == eos).any() else TARGET_LEN
        np.testing.assert_array_equal(row[:end], full[:end])
        assert (row[end:] == PAD_ID).all()


def test_greedy_tokens_are_the_argmax_of_teacher_forcing_on_themselves():
    graphdef, state = spread_model("alibi", seed=3)
    source, source_mask, source_positions, target_positions, _ = inputs()

    def run(state):
        model = nnx.merge(graphdef, state)
        tokens = greedy_decode(model, source, source_positions, source_mask, target_positions,
                               eos_id=NEVER)
        inputs_BxT = jnp.concatenate([jnp.ones((BATCH, 1), jnp.int32), tokens[:, :-1]], axis=1)
        logits = model(source, inputs_BxT, source_positions, target_positions, source_mask,
                       jnp.ones(inputs_BxT.shape, bool))
        return tokens, jnp.argmax(logits, -1)

    tokens, teacher_forced_argmax = compiled(run, state)(state)
    assert len(np.unique(np.asarray(tokens))) > 2
    np.testing.assert_array_equal(teacher_forced_argmax, tokens)


@pytest.mark.parametrize("scheme", ["rope", "t5"])
def test_decoder_only_decodes_alike_in_segments(scheme):
    """After the prefill of S + 1 slots, segment i reads S + widths[i] slots (a full source row
    writes slot S + t at step t): one slot fewer loses a key and changes the tokens."""
    model = SingleStackTransformer(tiny_config(scheme, architecture="decoder_only"),
                                   rngs=nnx.Rngs(0))
    graphdef, state = spread_parameters(model, seed=2)
    source, source_mask, source_positions, target_positions, _ = inputs()

    def run(state):
        args = (nnx.merge(graphdef, state), source, source_positions, source_mask,
                target_positions)
        return (greedy_decode(*args, eos_id=NEVER), naive_greedy_decode(*args, eos_id=NEVER),
                greedy_decode(*args, eos_id=NEVER, widths=SEGMENTS))

    whole, naive, segmented = jax.device_get(compiled(run, state)(state))
    np.testing.assert_array_equal(whole, naive)
    np.testing.assert_array_equal(segmented, whole)
    assert len(np.unique(whole)) > 2


def test_cache_widths_halve_from_the_target_length_down_to_an_eighth():
    assert cache_widths(255) == (255,)
    assert cache_widths(256) == (32, 64, 128, 256)
    assert cache_widths(1024) == (128, 256, 512, 1024)
    assert cache_widths(1001) == (126, 251, 501, 1001)


@pytest.mark.parametrize("widths", [(3, 7), (7, 3, TARGET_LEN), (0, TARGET_LEN)])
def test_segment_widths_must_rise_to_the_target_length(widths):
    graphdef, state = spread_model("none")
    source, source_mask, source_positions, target_positions, _ = inputs()
    with pytest.raises(ValueError, match="increasing, from 1 up to the target length 10"):
        greedy_decode(nnx.merge(graphdef, state), source, source_positions, source_mask,
                      target_positions, widths=widths)
