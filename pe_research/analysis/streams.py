"""Run the model layer by layer, carrying every residual-stream tensor as content + position.

The split is exact (the two parts always add up to what the model computes):

* input: ``x0 = token + position`` (``vectors.input_parts``);
* residual add ``x + f(.)``: the sublayer output joins the content part; the position part is the
  position vectors carried unchanged along the residual path;
* LayerNorm ``LN(x) = g * (x - mean x) / sigma + b``: mean and sigma are computed from the whole
  ``x`` (as the model does), after which LN is affine: the position part becomes
  ``g * (p - mean p) / sigma``, the content part ``g * (c - mean c) / sigma + b`` (bias to content).

So at layer 0 (pre-LN: after its LayerNorm) the content part is exactly the token embedding's
contribution; at deeper layers it also holds every earlier sublayer's output, which may itself
carry positional information. The position part is the direct path of the position vectors.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from pe_research.analysis.vectors import input_parts
from pe_research.model import Seq2SeqTransformer, TokenModel
from pe_research.model.attention import MultiHeadAttention
from pe_research.model.masks import cross_mask, decoder_self_mask, encoder_self_mask
from pe_research.positional.base import PositionalScheme


@dataclasses.dataclass(frozen=True)
class Split:
    """A ``[B, T, D]`` tensor as ``content + position`` (position None: no position part)."""

    content: jax.Array
    position: jax.Array | None

    @property
    def total(self) -> jax.Array:
        return self.content if self.position is None else self.content + self.position

    def add_to_content(self, update_BxTxD: jax.Array) -> Split:
        return Split(self.content + update_BxTxD, self.position)


@dataclasses.dataclass(frozen=True)
class AttentionSite:
    """One self-attention layer: what its queries/keys see, split, and how it is masked."""

    stack: str  # "encoder" or "decoder"
    layer: int
    attention: MultiHeadAttention
    scheme: PositionalScheme
    seen: Split  # the attention's input (after the LayerNorm in pre-LN)
    positions: jax.Array  # [B, T]
    mask: jax.Array  # [B, T, T], True where query t may see key s

    @property
    def name(self) -> str:
        return f"{self.stack}_self/layer_{self.layer}"


def split_layer_norm(norm: Any, split: Split) -> Split:
    """``norm(split.total)`` as content + position, with mean/sigma from the whole input."""
    x = split.total.astype(jnp.float32)
    mean = jnp.mean(x, axis=-1, keepdims=True)
    variance = jnp.maximum(jnp.mean(x * x, axis=-1, keepdims=True) - mean**2, 0.0)
    inverse_sigma = jax.lax.rsqrt(variance + norm.epsilon)
    scale = 1.0 if norm.scale is None else norm.scale[...]
    bias = 0.0 if norm.bias is None else norm.bias[...]

    def centred(v):
        return v - jnp.mean(v, axis=-1, keepdims=True)

    content = scale * centred(split.content) * inverse_sigma + bias
    if split.position is None:
        return Split(content, None)
    return Split(content, scale * centred(split.position) * inverse_sigma)


def residual(block: Any, split: Split, function) -> tuple[Split, Split]:
    """One residual sublayer (pre- or post-LN): (the split the function sees, the split after)."""
    seen = split_layer_norm(block.norm, split) if block.pre_norm else split
    after = split.add_to_content(function(seen.total))
    return seen, (after if block.pre_norm else split_layer_norm(block.norm, after))


def trace_self_attention_layers(layers: Any, default_pe: PositionalScheme, split: Split,
                                positions_BxT: jax.Array, mask_BxTxT: jax.Array, stack: str,
                                ) -> tuple[list[AttentionSite], Split]:
    """Self-attention + feed-forward layers over one sequence: their sites and the split after."""
    sites = []
    for index, layer in enumerate(layers):
        pe = layer.own_pe or default_pe

        def attend(h, layer=layer, pe=pe):
            return layer.self_attention(h, h, positions_BxT, positions_BxT, mask_BxTxT, pe)

        seen, split = residual(layer.attention_block, split, attend)
        sites.append(AttentionSite(stack, index, layer.self_attention, pe, seen, positions_BxT,
                                   mask_BxTxT))
        _, split = residual(layer.feed_forward_block, split,
                            lambda h, layer=layer: layer.feed_forward(h, None))
    return sites, split


def trace_encoder(model: Seq2SeqTransformer, source_BxS: jax.Array,
                  source_positions_BxS: jax.Array, source_mask_BxS: jax.Array,
                  ) -> tuple[list[AttentionSite], Split]:
    """Encoder self-attention sites and the encoder output (after the final LN), split."""
    sites, split = trace_self_attention_layers(
        model.encoder_layers, model.pe,
        Split(*input_parts(model, source_BxS, source_positions_BxS)), source_positions_BxS,
        encoder_self_mask(source_mask_BxS), "encoder")
    if model.encoder_norm is not None:
        split = split_layer_norm(model.encoder_norm, split)
    return sites, split


def trace_stack(model: TokenModel, tokens_BxW: jax.Array, positions_BxW: jax.Array,
                mask_BxWxW: jax.Array, stack: str) -> list[AttentionSite]:
    """The self-attention sites of a single-stack model over its joint sequence."""
    sites, _ = trace_self_attention_layers(
        model.layers, model.pe, Split(*input_parts(model, tokens_BxW, positions_BxW)),
        positions_BxW, mask_BxWxW, stack)
    return sites


def trace_decoder(model: Seq2SeqTransformer, target_input_BxT: jax.Array,
                  target_positions_BxT: jax.Array, encoded_BxSxD: jax.Array,
                  source_positions_BxS: jax.Array, source_mask_BxS: jax.Array,
                  target_mask_BxT: jax.Array) -> tuple[list[AttentionSite], Split]:
    """Decoder self-attention sites (causal) and the last decoder stream (before the final LN)."""
    self_mask = decoder_self_mask(target_mask_BxT)
    source_mask = cross_mask(target_mask_BxT, source_mask_BxS)
    split = Split(*input_parts(model, target_input_BxT, target_positions_BxT))
    sites = []
    for index, layer in enumerate(model.decoder_layers):
        pe = layer.own_pe or model.pe

        def self_attend(h, layer=layer, pe=pe):
            return layer.self_attention(h, h, target_positions_BxT, target_positions_BxT,
                                        self_mask, pe)

        def cross_attend(h, layer=layer, pe=pe):
            return layer.cross_attention(h, encoded_BxSxD, target_positions_BxT,
                                         source_positions_BxS, source_mask, pe)

        seen, split = residual(layer.self_block, split, self_attend)
        sites.append(AttentionSite("decoder", index, layer.self_attention, pe, seen,
                                   target_positions_BxT, self_mask))
        _, split = residual(layer.cross_block, split, cross_attend)
        _, split = residual(layer.feed_forward_block, split,
                            lambda h, layer=layer: layer.feed_forward(h, None))
    return sites, split

