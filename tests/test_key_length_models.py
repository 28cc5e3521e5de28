"""Models hand attention key lengths wherever each row's visible keys are a prefix: the encoder-
decoder's cached decoding, and the single-stack models (packed rows: a language model without
source slots, decoder-only and encoder-only with a source) in training and in cached decoding's
steps. Run through XLA's own key-length path with cuDNN's even-length padding (what cuDNN takes
on a GPU), they give what the dense masks give."""

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
)

from pe_research.model import Seq2SeqTransformer, SingleStackTransformer
from pe_research.model import attention as attention_module
from pe_research.model.decoding import greedy_decode
from pe_research.model.masks import PrefixMask
from pe_research.tasks.vocabulary import PAD_ID

TARGET_LENGTHS = (7, 4, 1)  # real target tokens per row; the third row is nearly all padding


def attend_by_key_lengths(monkeypatch) -> list[bool]:
    """From now on attention runs as for cuDNN (key lengths, even lengths) on XLA; the returned
    list records, per attention call, whether its mask came as a ``PrefixMask``."""
    seen, original = [], attention_module.fused_attention

    def by_key_lengths(q, k, v, bias, mask, implementation, pad_to_even=None, by_lengths=None):
        seen.append(isinstance(mask, PrefixMask))
        return original(q, k, v, bias, mask, implementation, pad_to_even=True, by_lengths=True)

    monkeypatch.setattr(attention_module, "fused_attention", by_key_lengths)
    return seen


def language_model(scheme: str, seed: int = 0, architecture: str = "decoder_only"):
    """``(graphdef, state)`` of a tiny single-stack model, parameters redrawn N(0, 1)."""
    config = tiny_config(scheme, architecture=architecture, tie_output=False,
                         scale_embedding=False)
    return spread_parameters(SingleStackTransformer(config, rngs=nnx.Rngs(seed)), seed)


def text_batch() -> tuple[jax.Array, ...]:
    """A language model's batch: no source, right-padded target rows of ``TARGET_LENGTHS``."""
    batch, length = len(TARGET_LENGTHS), max(TARGET_LENGTHS)
    _, target = random_inputs(seed=2, batch=batch, target_len=length)
    target_mask = jnp.arange(length)[None] < jnp.asarray(TARGET_LENGTHS)[:, None]
    empty = jnp.zeros((batch, 0), jnp.int32)
    return (empty, jnp.where(target_mask, target, PAD_ID), empty, arange_positions(batch, length),
            empty.astype(bool), target_mask)


def source_batch() -> tuple[jax.Array, ...]:
    """Rows with 5, 2 and 0 source tokens and ``TARGET_LENGTHS`` target tokens, padded: packed,
    every row's target side starts at another index."""
    batch, length = len(TARGET_LENGTHS), max(TARGET_LENGTHS)
    source, target = random_inputs(seed=4, batch=batch, source_len=5, target_len=length)
    source_mask = jnp.arange(5)[None] < jnp.asarray([5, 2, 0])[:, None]
    target_mask = jnp.arange(length)[None] < jnp.asarray(TARGET_LENGTHS)[:, None]
    return (jnp.where(source_mask, source, PAD_ID), jnp.where(target_mask, target, PAD_ID),
            arange_positions(1, 5), arange_positions(1, length) + 5, source_mask, target_mask)


@pytest.mark.parametrize(("scheme", "architecture", "inputs"), [
    ("rope", "decoder_only", text_batch), ("alibi", "decoder_only", text_batch),
    ("t5", "decoder_only", text_batch), ("t5", "decoder_only", source_batch),
    ("fire", "decoder_only", source_batch), ("alibi", "encoder_only", source_batch),
    ("rope", "encoder_only", source_batch)])
def test_a_single_stack_by_key_lengths_gives_the_dense_masks_logits_and_gradients(
        scheme, architecture, inputs, monkeypatch):
    graphdef, state = language_model(scheme, architecture=architecture)
    inputs = inputs()
    target_mask = np.asarray(inputs[-1])

    def loss_and_logits(state):
        logits = nnx.merge(graphdef, state)(*inputs)
        return jnp.sum(jnp.where(inputs[-1][..., None], logits, 0) ** 2), logits

    run = jax.jit(jax.value_and_grad(loss_and_logits, has_aux=True))
    (_, dense_logits), dense_grads = run(state)
    seen = attend_by_key_lengths(monkeypatch)
    (_, length_logits), length_grads = jax.jit(
        jax.value_and_grad(loss_and_logits, has_aux=True))(state)
    assert seen and all(seen)  # every layer's mask came with its key lengths
    np.testing.assert_allclose(np.asarray(length_logits)[target_mask],
                               np.asarray(dense_logits)[target_mask], rtol=1e-5, atol=1e-5)
    # Parameters N(0, 1): gradients run large, and a parameter whose gradient nearly cancels
    # (FIRE's scalars: 1e-5 of the largest) keeps only the rounding of the large ones.
    scale = max(float(np.max(np.abs(g))) for g in jax.tree.leaves(dense_grads))
    for dense, by_lengths in zip(jax.tree.leaves(dense_grads), jax.tree.leaves(length_grads),
                                 strict=True):
        np.testing.assert_allclose(by_lengths, dense, rtol=1e-4, atol=1e-6 * scale)


def decoded_tokens(graphdef, state, inputs) -> np.ndarray:
    """Greedy tokens ``[B, T]`` of the cached decoder (all T steps: no EOS is ever chosen)."""
    source, _, source_positions, target_positions, source_mask, _ = inputs
    return np.asarray(jax.jit(lambda state: greedy_decode(
        nnx.merge(graphdef, state), source, source_positions, source_mask, target_positions,
        eos_id=-1))(state))


def test_a_language_models_cached_decoding_by_key_lengths_gives_the_same_tokens(monkeypatch):
    graphdef, state = language_model("rope", seed=15)  # a seed whose greedy tokens vary
    inputs = text_batch()
    dense = decoded_tokens(graphdef, state, inputs)
    seen = attend_by_key_lengths(monkeypatch)
    np.testing.assert_array_equal(decoded_tokens(graphdef, state, inputs), dense)
    assert seen and all(seen)  # the prefill's and every step's mask
    assert len(np.unique(dense)) > 2  # the tokens vary, so a wrong key would show


def test_decoding_with_a_source_by_key_lengths_gives_the_same_tokens(monkeypatch):
    """Packed rows write their caches at their own indices; every mask is key lengths, the
    prefill's (S + 1 queries over S + T keys, a causal flag aligned at the first key) too."""
    graphdef, state = language_model("rope", seed=7)  # a seed whose greedy tokens vary
    inputs = source_batch()
    dense = decoded_tokens(graphdef, state, inputs)
    seen = attend_by_key_lengths(monkeypatch)
    np.testing.assert_array_equal(decoded_tokens(graphdef, state, inputs), dense)
    layers = len(nnx.merge(graphdef, state).layers)
    assert seen == [True] * (2 * layers)  # traced once: the prefill, the step
    assert len(np.unique(dense)) > 2


@pytest.mark.parametrize("scheme", ["alibi", "t5"])
def test_encoder_decoder_cached_steps_by_key_lengths_give_the_teacher_forced_logits(
        scheme, monkeypatch):
    config = tiny_config(scheme, tie_output=False, scale_embedding=False)
    graphdef, state = spread_parameters(Seq2SeqTransformer(config, rngs=nnx.Rngs(0)), 0)
    source, forced = random_inputs(seed=3, batch=3, source_len=6, target_len=7)
    source_mask = jnp.arange(6)[None] < jnp.asarray([6, 3, 1])[:, None]
    args = (jnp.where(source_mask, source, PAD_ID), arange_positions(3, 6), source_mask,
            arange_positions(3, 7) * 2 + 3)

    def teacher_forced(state):
        model = nnx.merge(graphdef, state)
        encoded = model.encode(args[0], args[1], source_mask)
        return model.decode(forced, args[3], encoded, args[1], source_mask,
                            jnp.ones(forced.shape, bool))

    dense = jax.jit(teacher_forced)(state)
    seen = attend_by_key_lengths(monkeypatch)
    steps = jax.jit(lambda state: forced_cached_logits(nnx.merge(graphdef, state), *args,
                                                       forced))(state)
    assert seen and all(seen)  # the encoder's, and each step's self- and cross-attention
    np.testing.assert_allclose(steps, dense, rtol=1e-4, atol=1e-4)
    assert float(np.std(dense)) > 0.1
