"""Tiny model builders and inputs shared by the model tests."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from pe_research.model import ModelConfig, Seq2SeqTransformer
from pe_research.model.masks import PrefixMask, prefix_masks
from pe_research.positional import default_pe_config

CORE_SCHEMES = ("none", "sinusoidal", "learned", "rope", "alibi", "t5")
RELATIVE_SCHEMES = ("rope", "alibi", "t5")
VOCAB = 13


def tiny_config(scheme: str = "rope", **overrides) -> ModelConfig:
    """A 1+1 layer, d_model 16, 2-head model config for ``scheme``."""
    pe = {**default_pe_config(scheme), **overrides.pop("pe", {})}
    fields = dict(vocab_size=VOCAB, d_model=16, num_heads=2, num_encoder_layers=1,
                  num_decoder_layers=1, d_ff=32, pe=pe)
    return ModelConfig.from_mapping({**fields, **overrides})


def tiny_model(scheme: str = "rope", seed: int = 0, **overrides) -> Seq2SeqTransformer:
    return Seq2SeqTransformer(tiny_config(scheme, **overrides), rngs=nnx.Rngs(seed))


def spread_parameters(model, seed: int = 0):
    """``(graphdef, state)`` of ``model`` with every parameter redrawn N(0, 1), so that greedy
    outputs vary by position (a fresh model's outputs hardly do)."""
    graphdef, state = nnx.split(model)
    leaves, treedef = jax.tree.flatten(state)
    keys = jax.random.split(jax.random.key(seed), len(leaves))
    leaves = [jax.random.normal(key, leaf.shape, leaf.dtype) if leaf.ndim else leaf
              for key, leaf in zip(keys, leaves, strict=True)]
    return graphdef, jax.tree.unflatten(treedef, leaves)


def arange_positions(batch: int, length: int, offset: int = 0) -> jax.Array:
    """``[B, T]`` positions ``offset .. offset + T - 1``."""
    return jnp.broadcast_to(jnp.arange(length) + offset, (batch, length))


def random_inputs(seed: int = 0, batch: int = 2, source_len: int = 6, target_len: int = 5):
    """Random non-special tokens (ids 3..VOCAB-1) for source and target input, all real."""
    rng = np.random.default_rng(seed)
    source = jnp.asarray(rng.integers(3, VOCAB, (batch, source_len)), jnp.int32)
    target = jnp.asarray(rng.integers(3, VOCAB, (batch, target_len)), jnp.int32)
    return source, target


def forward(model, source, target, source_offset=0, target_offset=0, key=None):
    """Teacher-forced logits with arange positions (optionally shifted) and no padding."""
    (batch, s_len), t_len = source.shape, target.shape[1]
    return model(source, target, arange_positions(batch, s_len, source_offset),
                 arange_positions(batch, t_len, target_offset), jnp.ones(source.shape, bool),
                 jnp.ones(target.shape, bool), dropout_key=key)


def prefix_inputs(T: int, S: int, causal: bool, bias_batch: int | None, head_dim: int = 8,
                  ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array | None, PrefixMask]:
    """q ``[3, T, 2, head_dim]``, k and v ``[3, S, 2, head_dim]``, a bias ``[bias_batch, 2, T,
    S]`` (or None) and a ``PrefixMask`` (encoder, causal or cross) whose rows see all keys, all
    but the last two, and none (a batch-padding row). Causal with T < S is a cached prefill's:
    query t sees keys 0..t."""
    keys = jax.random.split(jax.random.key(1), 4)
    q = jax.random.normal(keys[0], (3, T, 2, head_dim))
    k, v = (jax.random.normal(key, (3, S, 2, head_dim)) for key in keys[1:3])
    bias = None if bias_batch is None else jax.random.normal(keys[3], (bias_batch, 2, T, S))
    source_mask = jnp.arange(S)[None] < jnp.array([S, S - 2, 0])[:, None]
    if causal:  # the decoder's self-attention (T = S) or a prefill's (T < S)
        causal_TxS = jnp.tril(jnp.ones((T, S), bool))
        mask = PrefixMask(causal_TxS[None] & source_mask[:, None, :],
                          jnp.sum(source_mask, -1, dtype=jnp.int32), causal=True)
    elif T == S:
        mask = prefix_masks(source_mask)[0]
    else:
        mask = prefix_masks(source_mask, jnp.ones((3, T), bool))[1]
    return q, k, v, bias, mask


def forced_cached_logits(model, source, source_positions, source_mask, target_positions, tokens):
    """Logits ``[B, T, V]`` from ``decode_step`` fed the given tokens one at a time."""
    encoded = model.encode(source, source_positions, source_mask)

    def step(cache, inputs):
        tokens_B, positions_B = inputs
        logits, cache = model.decode_step(tokens_B[:, None], positions_B[:, None],
                                          source_positions, source_mask, cache)
        return cache, logits

    cache = model.init_cache(target_positions, encoded)
    _, logits_TxBxV = jax.lax.scan(step, cache, (tokens.T, target_positions.T))
    return jnp.swapaxes(logits_TxBxV, 0, 1)


def with_task_positions(batch: dict, pe: dict) -> dict:
    """``batch`` with the position IDs a scheme reads from its task (1, 2, ... on real tokens),
    for schemes such as position coupling; unchanged for the others."""
    from pe_research.positional import SCHEMES

    kind = SCHEMES[pe["type"]].task_positions
    if kind is None:
        return batch
    ids = {f"{side}_{kind}": jnp.where(mask, jnp.arange(1, mask.shape[1] + 1)[None, :], 0)
           for side, mask in (("source", batch["source_mask"]), ("target", batch["target_mask"]))}
    return {**batch, **ids}
