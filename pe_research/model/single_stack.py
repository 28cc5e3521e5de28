"""Encoder-only and decoder-only Transformers: one stack over the source followed by the target.

Both read the same batches as the encoder-decoder (source, target_input, their positions and
masks) and return teacher-forced logits ``[B, T, V]`` for the target slots, so training, metrics
and evaluation do not change with the architecture.

* **encoder-only** (the Chomsky-hierarchy / randomized-PE model, Deletang et al. 2023, Ruoss et
  al. 2023): the source, then one slot token per output token (``SLOT_ID``, whatever the target
  is), bidirectional attention, and the output read at the slots in one pass.
* **decoder-only** (the NoPE paper's causal LM, Kazemnejad et al. 2023): ``source SEP target``
  under a causal mask, the loss on target tokens only; greedy decoding prefills the source and
  SEP into a key/value cache, then generates.

The joint sequence is ``[source, left-aligned in its S slots; target side, T slots]``: every
row's target side starts at index S, and a row's real tokens are contiguous, so positions run
on without a gap from the source into the target (positions come from ``joint_positions``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from pe_research.model.config import ModelConfig
from pe_research.model.layers import EncoderLayer, split_key
from pe_research.model.masks import PrefixMask
from pe_research.model.transformer import (
    TokenModel,
    input_modules,
    output_projection,
    stack_norm,
)
from pe_research.special_tokens import BOS_ID, PAD_ID

SLOT_ID = BOS_ID  # encoder-only output slots; decoder-only's SEP is target_input's BOS


def left_align(x_BxS: jax.Array, count_B: jax.Array, fill: int | bool) -> jax.Array:
    """Each row's first ``count`` entries moved to the end of the row, ``fill`` before them."""
    width = x_BxS.shape[1]
    index_BxS = jnp.arange(width)[None, :] - (width - count_B)[:, None]
    moved = jnp.take_along_axis(x_BxS, jnp.clip(index_BxS, 0, width - 1), axis=1)
    return jnp.where(index_BxS >= 0, moved, jnp.asarray(fill, x_BxS.dtype))


def self_visible(real_BxW: jax.Array, causal: bool) -> jax.Array:
    """``[B, W, W]``: which keys each query sees (real ones; earlier ones if causal).

    A padding query also sees itself, so that no softmax row is empty.
    """
    width = real_BxW.shape[1]
    visible = jnp.broadcast_to(real_BxW[:, None, :], (real_BxW.shape[0], width, width))
    if causal:
        visible = visible & jnp.tril(jnp.ones((width, width), bool))[None]
    return visible | (jnp.eye(width, dtype=bool)[None] & ~real_BxW[:, :, None])


def joint_mask(visible_BxLxW: jax.Array, width: int, lengths_B: jax.Array | int,
               causal: bool) -> jax.Array | PrefixMask:
    """``visible``, with each row's key lengths when there are no source slots (``width`` 0, a
    language model's rows): then the visible keys are a prefix of the row, which cuDNN takes as
    lengths and a causal flag instead of a mask tensor (model/masks.py). A padding query then
    sees the real keys instead of itself; its output is never scored."""
    if width:
        return visible_BxLxW
    lengths_B = jnp.broadcast_to(jnp.asarray(lengths_B, jnp.int32), visible_BxLxW.shape[:1])
    return PrefixMask(visible_BxLxW, lengths_B, causal)


class SingleStackTransformer(TokenModel):
    """Token embedding (+ positional input), one self-attention stack, output projection."""

    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
        self.config = config
        self.causal = config.architecture == "decoder_only"
        self.pe, self.embed, self.input_projection = input_modules(config, rngs)
        self.layers = nnx.List([EncoderLayer(config, rngs=rngs, kind=config.stack_kind, index=i)
                                for i in range(config.num_layers)])
        self.final_norm = stack_norm(config, rngs)
        self.output_projection = output_projection(config, rngs)

    def joint_inputs(self, source_BxS: jax.Array, second_BxT: jax.Array,
                     source_positions_BxS: jax.Array, target_positions_BxT: jax.Array,
                     source_mask_BxS: jax.Array, target_mask_BxT: jax.Array,
                     ) -> tuple[jax.Array, jax.Array, jax.Array]:
        """Tokens, positions and the real-token mask of the joint sequence, ``[B, S + T]``."""
        count_B = jnp.sum(source_mask_BxS, axis=-1)
        # Left-aligning shifts each row by its own source length: positions become per row.
        source_positions_BxS = jnp.broadcast_to(source_positions_BxS, source_BxS.shape)
        target_positions_BxT = jnp.broadcast_to(target_positions_BxT, second_BxT.shape)
        tokens = jnp.concatenate([left_align(source_BxS, count_B, PAD_ID), second_BxT], 1)
        positions = jnp.concatenate([left_align(source_positions_BxS, count_B, 0),
                                     target_positions_BxT], 1)
        real = jnp.concatenate([left_align(source_mask_BxS, count_B, False),
                                target_mask_BxT.astype(bool)], 1)
        return tokens, positions, real

    def target_side(self, target_input_BxT: jax.Array) -> jax.Array:
        """What fills the T target slots: the shifted target (decoder-only) or slot tokens."""
        if self.causal:
            return target_input_BxT
        return jnp.full_like(target_input_BxT, SLOT_ID)

    def __call__(self, source_BxS: jax.Array, target_input_BxT: jax.Array,
                 source_positions_BxS: jax.Array, target_positions_BxT: jax.Array,
                 source_mask_BxS: jax.Array, target_mask_BxT: jax.Array,
                 dropout_key: jax.Array | None = None) -> jax.Array:
        """Logits ``[B, T, V]`` at the target slots; dropout only when ``dropout_key`` is given."""
        width = source_BxS.shape[1]
        tokens, positions, real = self.joint_inputs(
            source_BxS, self.target_side(target_input_BxT), source_positions_BxS,
            target_positions_BxT, source_mask_BxS, target_mask_BxT)
        keys = split_key(dropout_key, 1 + len(self.layers))
        x = self.embed_inputs(tokens, positions, keys[0])
        visible = joint_mask(self_visible(real, self.causal), width,
                             jnp.sum(real, axis=-1, dtype=jnp.int32), self.causal)
        for layer, layer_key in zip(self.layers, keys[1:], strict=True):
            x = layer(x, positions, visible, self.pe, layer_key)
        return self.logits(x[:, width:])

    def run_cached(self, tokens_BxL: jax.Array, positions_BxL: jax.Array,
                   visible_BxLxW: jax.Array | PrefixMask, cache: list[dict[str, jax.Array]],
                   ) -> tuple[jax.Array, list[dict[str, jax.Array]]]:
        """Decoder-only: L new tokens through the stack with the cache; logits of the last."""
        x = self.embed_inputs(tokens_BxL, positions_BxL, None)
        new_cache = []
        for layer, layer_cache in zip(self.layers, cache, strict=True):
            layer_cache = dict(layer_cache)  # updated in place by the layer
            x = layer(x, positions_BxL, visible_BxLxW, self.pe, None, cache=layer_cache)
            new_cache.append(layer_cache)
        return self.logits(x[:, -1:])[:, 0], new_cache
