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

The joint sequence is packed: each row's source, then its T target-side slots right after
it, then padding, ``[B, S + T]``. A row's real tokens are then a prefix of it, so the mask is
key lengths (and a causal flag) that cuDNN takes without a mask tensor (model/masks.py), and
the joint positions (``model.inputs.batch_positions``: ``source_positions`` are its first S,
``target_positions`` its last T) are one row ``[1, S + T]`` for the whole batch unless drawn
per example, so every bias scheme computes a batch-1 bias. Row b's target slot j sits at index
``n_b + j`` (n_b source tokens). Past the longest row there is padding alone, so the sequence
is cut to the batch's joint width W (``joint_mask``, ``data/batches.py``: one per source
bucket, as the target width), and every layer computes W rows, not S + T; a padding slot past
W reads the last row (never scored).

Only the target slots are scored, so the encoder-only model's last layer computes their T rows
alone, over every row's keys and values (``EncoderLayer.at_rows``): its attention is
``[B, H, T, W]`` and its feed-forward T rows, where the other layers compute all W. The
decoder-only model keeps every row: cuDNN takes its mask as key lengths and a causal flag,
which cannot say which keys a part of the rows sees, and a mask tensor instead would cost a
language model (no source, every row a slot) without saving it anything.
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
    abacus_table,
    input_modules,
    output_projection,
    stack_norm,
)
from pe_research.tasks.vocabulary import BOS_ID, PAD_ID

SLOT_ID = BOS_ID  # encoder-only output slots; decoder-only's SEP is target_input's BOS


def pack(source_BxS: jax.Array, second_BxT: jax.Array, count_B: jax.Array,
         fill: int | bool) -> jax.Array:
    """``[B, S + T]``: each row's first ``count`` source entries, its T ``second`` entries right
    after them, then ``fill``."""
    width, length = source_BxS.shape[1], second_BxT.shape[1]
    index_W = jnp.arange(width + length)[None, :]
    after_BxW = index_W - count_B[:, None]  # index within the target side
    joined = jnp.concatenate([source_BxS, second_BxT], 1)
    taken = jnp.where(after_BxW < 0, index_W, width + after_BxW)
    moved = jnp.take_along_axis(joined, jnp.clip(taken, 0, width + length - 1), axis=1)
    return jnp.where(after_BxW < length, moved, jnp.asarray(fill, joined.dtype))


def slot_indices(count_B: jax.Array, length: int, width: int) -> jax.Array:
    """``[B, T]``: the indices of the T target-side slots of each packed row (from ``count``)
    in a joint sequence ``width`` wide; padding slots past its end read its last token."""
    return jnp.minimum(count_B[:, None] + jnp.arange(length)[None, :], width - 1)


def target_slots(x_BxWxD: jax.Array, count_B: jax.Array, length: int) -> jax.Array:
    """``[B, T, D]``: the T target-side slots of each packed row (they start at ``count``)."""
    slots_BxT = slot_indices(count_B, length, x_BxWxD.shape[1])
    return jnp.take_along_axis(x_BxWxD, slots_BxT[:, :, None], axis=1)


def joint_positions(source_positions: jax.Array, target_positions: jax.Array) -> jax.Array:
    """``[1 or B, S + T]``: the packed joint sequence's positions (one row if both have one)."""
    rows = max(source_positions.shape[0], target_positions.shape[0])
    return jnp.concatenate(
        [jnp.broadcast_to(p, (rows, p.shape[1])) for p in (source_positions, target_positions)],
        axis=1)


def self_visible(real_BxW: jax.Array, causal: bool, rows_BxT: jax.Array | None = None,
                 ) -> jax.Array:
    """``[B, W, W]``: which keys each query sees (real ones; earlier ones if causal); with
    ``rows`` (indices ``[B, T]``), those queries' rows alone, ``[B, T, W]``.

    A padding query also sees itself, so that no softmax row is empty.
    """
    keys_1x1xW = jnp.arange(real_BxW.shape[1])[None, None, :]
    if rows_BxT is None:
        rows_BxT = jnp.broadcast_to(keys_1x1xW[0], real_BxW.shape)
        real_rows_BxT = real_BxW
    else:
        real_rows_BxT = jnp.take_along_axis(real_BxW, rows_BxT, axis=1)
    visible = real_BxW[:, None, :]
    if causal:
        visible = visible & (keys_1x1xW <= rows_BxT[:, :, None])
    return visible | ((keys_1x1xW == rows_BxT[:, :, None]) & ~real_rows_BxT[:, :, None])


def packed_mask(real_BxW: jax.Array, causal: bool, rows_BxT: jax.Array | None = None,
                ) -> PrefixMask:
    """The self-attention mask of packed rows (``real`` True on a prefix of each row): the dense
    form (``self_visible``) and each row's key lengths with a causal flag, which cuDNN takes
    instead of a mask tensor (there a padding query sees the real keys instead of itself; its
    output is never scored). ``rows``: the mask of those queries alone, bidirectional only
    (the key lengths hold for any query; cuDNN's causal flag means query i sees keys up to i).
    """
    if causal and rows_BxT is not None:
        raise ValueError("a causal mask holds every query row")
    return PrefixMask(self_visible(real_BxW, causal, rows_BxT),
                      jnp.sum(real_BxW, -1, dtype=jnp.int32), causal)


class SingleStackTransformer(TokenModel):
    """Token embedding (+ positional input), one self-attention stack, output projection."""

    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
        self.config, self.dropout_rate = config, config.dropout_rate
        self.causal = config.architecture == "decoder_only"
        self.pe, self.embed, self.input_projection = input_modules(config, rngs)
        self.layers = nnx.List([EncoderLayer(config, rngs=rngs, kind=config.stack_kind, index=i)
                                for i in range(config.num_layers)])
        self.final_norm = stack_norm(config, rngs)
        self.output_projection = output_projection(config, rngs)
        self.abacus = abacus_table(config, rngs)

    def joint_inputs(self, source_BxS: jax.Array, second_BxT: jax.Array,
                     source_positions_BxS: jax.Array, target_positions_BxT: jax.Array,
                     source_mask_BxS: jax.Array, target_mask_BxT: jax.Array,
                     joint_mask_BxW: jax.Array | None = None,
                     ) -> tuple[jax.Array, jax.Array, jax.Array]:
        """Tokens ``[B, W]``, positions ``[1 or B, W]`` and the real-token mask ``[B, W]`` of
        the packed joint sequence (the positions are given packed): W is the batch's joint
        width (``joint_mask``'s: padding alone lies past it), else S + T."""
        count_B = jnp.sum(source_mask_BxS, axis=-1)
        if joint_mask_BxW is None:
            joint_mask_BxW = pack(source_mask_BxS.astype(bool), target_mask_BxT.astype(bool),
                                  count_B, False)
        width = joint_mask_BxW.shape[1]
        tokens = pack(source_BxS, second_BxT, count_B, PAD_ID)[:, :width]
        positions = joint_positions(source_positions_BxS, target_positions_BxT)[:, :width]
        return tokens, positions, joint_mask_BxW.astype(bool)

    def joint_abacus_ids(self, abacus_ids: tuple[jax.Array, jax.Array] | None,
                         source_mask_BxS: jax.Array, width: int) -> jax.Array | None:
        """``[B, W]``: the Abacus IDs packed as the tokens are (encoder-only slots: 0)."""
        if abacus_ids is None:
            return None
        source_ids, target_ids = abacus_ids
        target_ids = target_ids if self.causal else jnp.zeros_like(target_ids)
        return pack(source_ids, target_ids, jnp.sum(source_mask_BxS, axis=-1), 0)[:, :width]

    def target_side(self, target_input_BxT: jax.Array) -> jax.Array:
        """What fills the T target slots: the shifted target (decoder-only) or slot tokens."""
        if self.causal:
            return target_input_BxT
        return jnp.full_like(target_input_BxT, SLOT_ID)

    def __call__(self, source_BxS: jax.Array, target_input_BxT: jax.Array,
                 source_positions_BxS: jax.Array, target_positions_BxT: jax.Array,
                 source_mask_BxS: jax.Array, target_mask_BxT: jax.Array,
                 dropout_key: jax.Array | None = None,
                 abacus_ids: tuple[jax.Array, jax.Array] | None = None,
                 joint_mask_BxW: jax.Array | None = None) -> jax.Array:
        """Logits ``[B, T, V]`` at the target slots; dropout only when ``dropout_key`` is given;
        ``abacus_ids``: the source's ``[B, S]`` and the target slots' ``[B, T]``;
        ``joint_mask``: the batch's (``data/batches.py``), whose width W the joint sequence is
        cut to (default S + T)."""
        tokens, positions, real = self.joint_inputs(
            source_BxS, self.target_side(target_input_BxT), source_positions_BxS,
            target_positions_BxT, source_mask_BxS, target_mask_BxT, joint_mask_BxW)
        keys = split_key(dropout_key, 1 + len(self.layers))
        x = self.embed_inputs(tokens, positions, keys[0],
                              self.joint_abacus_ids(abacus_ids, source_mask_BxS,
                                                    tokens.shape[1]))
        visible = packed_mask(real, self.causal)
        layers = list(zip(self.layers, keys[1:], strict=True))
        every_row = layers if self.causal else layers[:-1]
        for layer, layer_key in every_row:
            x = layer(x, positions, visible, self.pe, layer_key)
        count_B, length = jnp.sum(source_mask_BxS, axis=-1), target_input_BxT.shape[1]
        if self.causal:
            return self.logits(target_slots(x, count_B, length))
        slots_BxT = slot_indices(count_B, length, tokens.shape[1])
        last, last_key = layers[-1]
        return self.logits(last.at_rows(x, slots_BxT, positions,
                                        packed_mask(real, False, slots_BxT), self.pe, last_key))

    def run_cached(self, tokens_BxL: jax.Array, positions_BxL: jax.Array,
                   visible_BxLxW: jax.Array | PrefixMask, cache: list[dict[str, jax.Array]],
                   read_B: jax.Array | None = None, abacus_ids_BxL: jax.Array | None = None,
                   ) -> tuple[jax.Array, list[dict[str, jax.Array]]]:
        """Decoder-only: L new tokens through the stack with the cache; logits ``[B, V]`` of
        the last, or of each row's token ``read_B`` of the L."""
        x = self.embed_inputs(tokens_BxL, positions_BxL, None, abacus_ids_BxL)
        new_cache = []
        for layer, layer_cache in zip(self.layers, cache, strict=True):
            layer_cache = dict(layer_cache)  # updated in place by the layer
            x = layer(x, positions_BxL, visible_BxLxW, self.pe, None, cache=layer_cache)
            new_cache.append(layer_cache)
        if read_B is None:
            read_B = jnp.full(x.shape[:1], x.shape[1] - 1)
        return self.logits(target_slots(x, read_B, 1))[:, 0], new_cache
