"""Encoder and decoder layers: attention + feed-forward, residuals, pre- or post-LayerNorm."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax import nnx

from pe_research.model.ablation import SINGLE_STACK_SITE
from pe_research.model.attention import MultiHeadAttention
from pe_research.model.config import ModelConfig
from pe_research.model.masks import PrefixMask
from pe_research.positional.base import CROSS, DECODER_SELF, ENCODER_SELF, AttentionKind
from pe_research.positional.length_scaling import SSMAX_INIT
from pe_research.positional.registry import (
    build_scheme,
    default_pe_config,
    layer_blocks,
    scheme_class,
)

ACTIVATION_FUNCTIONS = {"gelu": jax.nn.gelu, "relu": jax.nn.relu}
DRAWS = 1 << 16  # the values a 16-bit dropout draw takes


def dropout(x: jax.Array, rate: float | jax.Array, key: jax.Array | None) -> jax.Array:
    """Inverted dropout; the identity when ``key`` is None (evaluation) or ``rate`` is 0.

    An element is dropped when its 16-bit draw is below ``round(rate * 2^16)``, so the rate is
    applied to 1/65,536 (0.1 drops 6,554 / 65,536 = 0.100006) and kept values are scaled by the
    inverse of that exact keep fraction (the expectation stays x). A traced ``rate`` (an
    ensemble member's own) draws the same mask as that rate given as a number; at 0 it keeps
    every value as it is.
    """
    if key is None:
        return x
    if isinstance(rate, jax.Array):
        dropped = jnp.where(rate > 0, jnp.clip(jnp.round(rate * DRAWS), 1, DRAWS - 1), 0)
        scale = jnp.float32(DRAWS) / (DRAWS - dropped.astype(jnp.float32))
        keep = keep_mask(key, x.shape, dropped.astype(jnp.uint32))
        return jnp.where(keep, x * scale.astype(x.dtype), 0).astype(x.dtype)
    if rate == 0.0:
        return x
    dropped = min(max(round(rate * DRAWS), 1), DRAWS - 1)
    keep = keep_mask(key, x.shape, dropped)
    return jnp.where(keep, x * (DRAWS / (DRAWS - dropped)), 0).astype(x.dtype)


def keep_mask(key: jax.Array, shape: tuple[int, ...], dropped: int | jax.Array) -> jax.Array:
    """Bool ``shape``: True where a uniform 16-bit draw is >= ``dropped`` (of 2^16).

    Each random 32-bit word gives two draws, its low and high halves (elements 2i and 2i + 1
    of the last axis): half the random-number work of ``jax.random.bernoulli``, which on
    XLA-CPU is a loop over arrays this large.
    """
    *lead, last = shape
    words = jax.random.bits(key, (*lead, (last + 1) // 2), jnp.uint32)
    keep = jnp.stack([(words & 0xFFFF) >= dropped, (words >> 16) >= dropped], axis=-1)
    return keep.reshape(*lead, -1)[..., :last]


def split_key(key: jax.Array | None, count: int) -> list[jax.Array | None]:
    """``count`` independent keys, or ``count`` Nones when there is no dropout."""
    return [None] * count if key is None else list(jax.random.split(key, count))


class FeedForward(nnx.Module):
    """Dense(d_ff) -> activation -> dropout -> Dense(d_model)."""

    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
        dense = functools.partial(nnx.Linear, dtype=config.compute_dtype,
                                  param_dtype=jnp.float32, rngs=rngs)
        self.hidden = dense(config.d_model, config.d_ff)
        self.out = dense(config.d_ff, config.d_model)
        self.activation = ACTIVATION_FUNCTIONS[config.activation]
        self.dropout_rate = config.dropout_rate

    @jax.named_scope("feed_forward")
    def __call__(self, x_BxTxD: jax.Array, key: jax.Array | None) -> jax.Array:
        return self.out(dropout(self.activation(self.hidden(x_BxTxD)), self.dropout_rate, key))


class Sublayer(nnx.Module):
    """Residual wrapper: pre-LN ``x + f(LN(x))`` or post-LN ``LN(x + f(x))``, with dropout."""

    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
        self.norm = nnx.LayerNorm(config.d_model, dtype=config.compute_dtype,
                                  param_dtype=jnp.float32, rngs=rngs)
        self.pre_norm = config.norm == "pre"
        self.dropout_rate = config.dropout_rate

    def function_input(self, x: jax.Array) -> jax.Array:
        """What ``function`` reads of ``x``: ``LN(x)`` (pre-LN) or ``x`` itself (post-LN)."""
        return layer_norm(self.norm, x) if self.pre_norm else x

    def __call__(self, x: jax.Array, function, key: jax.Array | None) -> jax.Array:
        if self.pre_norm:
            return x + dropout(function(layer_norm(self.norm, x)), self.dropout_rate, key)
        return layer_norm(self.norm, x + dropout(function(x), self.dropout_rate, key))


@jax.named_scope("layer_norm")
def layer_norm(norm: nnx.LayerNorm, x: jax.Array) -> jax.Array:
    """``norm(x)``, under its own name in profiles."""
    return norm(x)


def make_attention(config: ModelConfig, kind: AttentionKind, rngs: nnx.Rngs, site: str,
                   index: int) -> MultiHeadAttention:
    """Multi-head attention of ``kind`` with the model's width, heads, dtype and kernel, and the
    heads ``model.ablated_heads`` zeroes at ``site`` in layer ``index``."""
    return MultiHeadAttention(config.d_model, config.num_heads, kind, dtype=config.compute_dtype,
                              implementation=config.attention_implementation, rngs=rngs,
                              ablated=config.ablated_by_site().get((site, index), ()),
                              logit_scaling=config.pe.get("logit_scaling", "none"),
                              ssmax_init=float(config.pe.get("ssmax_init", SSMAX_INIT)))


def layer_scheme(config: ModelConfig, kinds: frozenset[AttentionKind], rngs: nnx.Rngs,
                 index: int = 0):
    """Layer ``index``'s own scheme instance, or None for the model's shared instance.

    With ``model.pe.layers`` every layer gets its own instance of its pattern entry (NoPE where
    that scheme does not act in ``kinds``); otherwise only per-layer schemes that act here do.
    """
    if config.pe.get("layers"):
        blocks = layer_blocks(config.pe)
        block = blocks[index % len(blocks)]
        if not scheme_class(block["type"]).acts_in & kinds:
            block = default_pe_config("none")
        return build_scheme(block, d_model=config.d_model, num_heads=config.num_heads, rngs=rngs)
    scheme = scheme_class(config.pe["type"])
    if scheme.shared_across_layers or not scheme.acts_in & kinds:
        return None
    return build_scheme(config.pe, d_model=config.d_model, num_heads=config.num_heads, rngs=rngs)


def self_attend(attention: MultiHeadAttention, h_BxTxD: jax.Array, positions_BxT: jax.Array,
                mask_BxTxS: jax.Array, pe, cache: dict | None) -> jax.Array:
    """Self-attention of ``h``; with ``cache`` (updated in place) the new keys, transformed by
    the scheme once, are written to it and the queries attend over everything cached so far."""
    if cache is None:
        return attention(h_BxTxD, h_BxTxD, positions_BxT, positions_BxT, mask_BxTxS, pe)
    k, v = attention.project_kv(h_BxTxD)
    q, k = attention.positioned(attention.query(h_BxTxD), k, positions_BxT, positions_BxT, pe)
    cache.update(write_cache(cache, k, v))
    return attention.attend_positioned(q, attention_layout(cache["k"]),
                                       attention_layout(cache["v"]), positions_BxT,
                                       cache["positions"], mask_BxTxS, pe)


class EncoderLayer(nnx.Module):
    """Self-attention then feed-forward: bidirectional (ENCODER_SELF), or causal (DECODER_SELF,
    the layer of a decoder-only model, which may run with a key/value cache)."""

    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs,
                 kind: AttentionKind = ENCODER_SELF, index: int = 0):
        site = SINGLE_STACK_SITE if config.single_stack else "encoder"
        self.self_attention = make_attention(config, kind, rngs, site, index)
        self.feed_forward = FeedForward(config, rngs=rngs)
        self.attention_block = Sublayer(config, rngs=rngs)
        self.feed_forward_block = Sublayer(config, rngs=rngs)
        self.own_pe = layer_scheme(config, frozenset({kind}), rngs, index)

    def __call__(self, x_BxSxD, positions_BxS, mask_BxSxS, pe, key, cache=None):
        pe = self.own_pe or pe
        keys = split_key(key, 3)
        x = self.attention_block(
            x_BxSxD,
            lambda h: self_attend(self.self_attention, h, positions_BxS, mask_BxSxS, pe, cache),
            keys[0])
        return self.feed_forward_block(x, lambda h: self.feed_forward(h, keys[1]), keys[2])

    def at_rows(self, x_BxSxD: jax.Array, rows_BxT: jax.Array, positions_BxS: jax.Array,
                mask_BxTxS: jax.Array | PrefixMask, pe, key: jax.Array | None) -> jax.Array:
        """The layer's output at rows ``rows`` (indices into S) alone, ``[B, T, D]``: those
        rows' queries (``mask``: their rows of the mask) over every row's keys and values.
        Attention is row-local (model/query_blocks.py), so these are the rows of
        ``__call__``'s output."""
        pe = self.own_pe or pe
        keys = split_key(key, 3)
        positions_BxS = jnp.broadcast_to(positions_BxS, x_BxSxD.shape[:2])
        context_BxSxD = self.attention_block.function_input(x_BxSxD)
        x = self.attention_block(
            jnp.take_along_axis(x_BxSxD, rows_BxT[:, :, None], axis=1),
            lambda h: self.self_attention(h, context_BxSxD,
                                          jnp.take_along_axis(positions_BxS, rows_BxT, axis=1),
                                          positions_BxS, mask_BxTxS, pe),
            keys[0])
        return self.feed_forward_block(x, lambda h: self.feed_forward(h, keys[1]), keys[2])


class DecoderLayer(nnx.Module):
    """Causal self-attention, cross-attention to the encoder, feed-forward."""

    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs, index: int = 0):
        self.self_attention = make_attention(config, DECODER_SELF, rngs, "decoder", index)
        self.cross_attention = make_attention(config, CROSS, rngs, "cross", index)
        self.feed_forward = FeedForward(config, rngs=rngs)
        self.self_block = Sublayer(config, rngs=rngs)
        self.cross_block = Sublayer(config, rngs=rngs)
        self.feed_forward_block = Sublayer(config, rngs=rngs)
        self.own_pe = layer_scheme(config, frozenset({DECODER_SELF, CROSS}), rngs, index)

    def __call__(self, y_BxTxD, encoded_BxSxD, positions_BxT, source_positions_BxS,
                 self_mask_BxTxT, cross_mask_BxTxS, pe, key, cache=None):
        """One layer; with ``cache`` (this layer's dict of ``init_cache``, updated in place) the
        self-attention keys and cross-attention's keys and values come from it (``encoded``
        unused)."""
        pe = self.own_pe or pe
        keys = split_key(key, 4)

        def cross_attend(h_BxTxD):
            if cache is None:
                return self.cross_attention(h_BxTxD, encoded_BxSxD, positions_BxT,
                                            source_positions_BxS, cross_mask_BxTxS, pe)
            return self.cross_attention.attend(
                h_BxTxD, attention_layout(cache["cross_k"]), attention_layout(cache["cross_v"]),
                positions_BxT, source_positions_BxS, cross_mask_BxTxS, pe)

        y = self.self_block(
            y_BxTxD,
            lambda h: self_attend(self.self_attention, h, positions_BxT, self_mask_BxTxT, pe,
                                  cache),
            keys[0])
        y = self.cross_block(y, cross_attend, keys[1])
        return self.feed_forward_block(y, lambda h: self.feed_forward(h, keys[2]), keys[3])

    def cross_cache(self, encoded_BxSxD: jax.Array) -> dict[str, jax.Array]:
        """Cross-attention's keys and values of the encoder output, projected once for a
        whole decoding, in the cache's layout ``[B, H, Dh, S]``: handed to the decoding loop as
        they are needed at every step, XLA copied them to another layout at every step."""
        k, v = self.cross_attention.project_kv(encoded_BxSxD)
        # The barrier keeps the copy made here: without it XLA moves the transpose
        # into the loop again, where it runs at every step.
        k, v = jax.lax.optimization_barrier((cache_layout(k), cache_layout(v)))
        return {"cross_k": k, "cross_v": v}


def cache_layout(x_BxSxHxD: jax.Array) -> jax.Array:
    """Keys or values as the decoding cache keeps them, ``[B, H, D, S]``: a step's products
    ``[1, D] x [D, S]`` and ``[1, S] x [S, D]`` then read rows of S slots, which XLA-CPU runs
    faster than over ``[B, H, S, D]``.
    ``attention_layout`` turns them back, and XLA folds the two transposes into the products
    instead of copying the cache at every step."""
    return jnp.transpose(x_BxSxHxD, (0, 2, 3, 1))


def attention_layout(cache_BxHxDxS: jax.Array) -> jax.Array:
    """A cache's keys or values as attention takes them, ``[B, S, H, D]``."""
    return jnp.transpose(cache_BxHxDxS, (0, 3, 1, 2))


def write_cache(cache: dict, k_BxTxHxD, v_BxTxHxD) -> dict:
    """Write new keys/values at ``cache['index']``: the same slot for every example, or with an
    index per row ``[B]`` (packed single-stack rows) each row's own. The cache holds every
    slot's position from the start (``TokenModel.empty_cache``)."""
    index = cache["index"]

    def update(cached_BxHxDxW, new_BxTxHxD):
        new_BxHxDxT = cache_layout(new_BxTxHxD).astype(cached_BxHxDxW.dtype)
        if index.ndim:
            write = functools.partial(jax.lax.dynamic_update_slice_in_dim, axis=2)
            return jax.vmap(write)(cached_BxHxDxW, new_BxHxDxT, index)
        return jax.lax.dynamic_update_slice_in_dim(cached_BxHxDxW, new_BxHxDxT, index, axis=3)

    return {**cache, "k": update(cache["k"], k_BxTxHxD), "v": update(cache["v"], v_BxTxHxD),
            "index": index + k_BxTxHxD.shape[1]}
