"""The encoder-decoder Transformer; positions are explicit inputs, the scheme fills the hooks.

``TokenModel`` holds what every architecture shares (token embedding combined with the scheme's
input vectors, the output projection, the empty decoding cache); ``single_stack.py`` builds the
encoder-only and decoder-only models on it.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
from flax import nnx

from pe_research.model.config import ModelConfig
from pe_research.model.layers import DecoderLayer, EncoderLayer, dropout, split_key
from pe_research.model.masks import cache_mask, prefix_masks
from pe_research.positional.abacus import AbacusTable, uses_abacus
from pe_research.positional.base import PositionalScheme
from pe_research.positional.nope import NoPE
from pe_research.positional.registry import build_scheme, scheme_class


def shared_scheme(config: ModelConfig, rngs: nnx.Rngs) -> PositionalScheme:
    """The model-level scheme instance: input vectors and the shared attention hooks.

    A per-layer scheme without input vectors lives only in its layers; a parameter-free NoPE
    stands in here so that no parameter exists that nothing uses.
    """
    scheme = scheme_class(config.pe["type"])
    if not scheme.shared_across_layers and not scheme.adds_input_vectors:
        return NoPE(config.pe, d_model=config.d_model, num_heads=config.num_heads, rngs=rngs)
    width = config.d_model - config.token_width if config.split_input else config.d_model
    return build_scheme(config.pe, d_model=width, num_heads=config.num_heads, rngs=rngs)


def input_modules(config: ModelConfig, rngs: nnx.Rngs) -> tuple[PositionalScheme, nnx.Embed,
                                                                  nnx.Linear | None]:
    """The shared scheme, the token embedding and (for combine=concat) the input projection."""
    pe = shared_scheme(config, rngs)
    embed = nnx.Embed(config.vocab_size, config.token_width, dtype=config.compute_dtype,
                      param_dtype=jnp.float32, rngs=rngs)
    concat = type(pe).adds_input_vectors and config.pe.get("combine", "add") == "concat"
    projection = (nnx.Linear(2 * config.d_model, config.d_model, dtype=config.compute_dtype,
                             param_dtype=jnp.float32, rngs=rngs) if concat else None)
    return pe, embed, projection


def abacus_table(config: ModelConfig, rngs: nnx.Rngs) -> AbacusTable | None:
    """The Abacus table added to the token embedding (``model.pe.abacus``), or None."""
    return (AbacusTable(config.pe, config.token_width, config.compute_dtype, rngs)
            if uses_abacus(config.pe) else None)


def stack_norm(config: ModelConfig, rngs: nnx.Rngs) -> nnx.LayerNorm | None:
    """The LayerNorm after a stack of a pre-LN model (None for post-LN)."""
    return nnx.LayerNorm(config.d_model, dtype=config.compute_dtype, param_dtype=jnp.float32,
                         rngs=rngs) if config.norm == "pre" else None


def output_projection(config: ModelConfig, rngs: nnx.Rngs) -> nnx.Linear | None:
    """The untied output projection, or None when the output reuses the token embedding."""
    return None if config.tie_output else nnx.Linear(
        config.d_model, config.vocab_size, dtype=config.compute_dtype, param_dtype=jnp.float32,
        rngs=rngs)


class TokenModel(nnx.Module):
    """Token embedding with positional input, output projection: shared by every architecture.

    Subclasses set ``config``, ``dropout_rate``, ``pe``, ``embed``, ``input_projection``,
    ``output_projection``, ``abacus`` (the Abacus table or None) and ``final_norm`` (the
    LayerNorm before the output; None for post-LN).
    """

    config: ModelConfig
    dropout_rate: float | jax.Array
    final_norm: nnx.LayerNorm | None
    abacus: AbacusTable | None

    @jax.named_scope("embed")
    def embed_inputs(self, tokens_BxT: jax.Array, positions_BxT: jax.Array,
                     key: jax.Array | None, abacus_ids_BxT: jax.Array | None = None,
                     ) -> jax.Array:
        """Token embeddings (plus the Abacus rows of ``abacus_ids``) combined (add, concat +
        projection, or split) with the scheme's vectors; ``[B, T, D]``."""
        # The lookup reads the float32 table and casts after it, so the gradient's scatter-add
        # runs in float32: on a GPU the bfloat16 scatter-add into a small vocabulary's rows
        # serialises on the few rows it writes.
        x = jnp.take(self.embed.embedding[...], tokens_BxT, axis=0).astype(self.embed.dtype)
        if self.config.scale_embedding:  # by the square root of the embedding's own width
            x = x * jnp.sqrt(float(self.config.token_width)).astype(x.dtype)
        if self.abacus is not None:
            if abacus_ids_BxT is None:
                raise ValueError("model.pe.abacus needs the task's abacus IDs (abacus_ids)")
            x = x + self.abacus(abacus_ids_BxT)
        vectors = self.pe.input_vectors(positions_BxT)
        if vectors is not None:  # [1, T, D] when the rows share their positions
            vectors = jnp.broadcast_to(vectors.astype(x.dtype), x.shape[:2] + vectors.shape[2:])
            if self.config.split_input:
                x = jnp.concatenate([x, vectors], axis=-1)
            elif self.input_projection is None:
                x = x + vectors
            else:
                x = self.input_projection(jnp.concatenate([x, vectors], axis=-1))
        return dropout(x, self.dropout_rate, key)

    @jax.named_scope("output")
    def logits(self, y_BxTxD: jax.Array) -> jax.Array:
        """Final norm and (tied or separate) output projection, in float32."""
        if self.final_norm is not None:
            y_BxTxD = self.final_norm(y_BxTxD)
        if self.output_projection is None:
            return self.embed.attend(y_BxTxD).astype(jnp.float32)
        return self.output_projection(y_BxTxD).astype(jnp.float32)

    def empty_cache(self, batch_size: int, positions_RxW: jax.Array,
                    layers: Sequence[nnx.Module]) -> list[dict[str, jax.Array]]:
        """Zeroed keys and values ``[B, H, ·, W]`` for W tokens, one dict per layer (each with
        a ``self_attention`` and its ``own_pe``), holding every slot's position from the start:
        ``positions_RxW``, one row when every row shares its positions (then each step's bias
        is computed once), else the batch's. Fixed positions let XLA compute a scheme's
        per-key position terms once per decoding loop instead of at every step. Keys are
        stored as the scheme transforms them, so their width is the transform's (PoPE's is
        twice the head size)."""
        width = positions_RxW.shape[1]
        heads, head_dim = self.config.num_heads, self.config.head_dim
        probe = jax.ShapeDtypeStruct((1, 1, heads, head_dim), self.config.compute_dtype)
        one_position = jnp.zeros((1, 1), jnp.int32)
        cache = []
        for layer in layers:
            pe = layer.own_pe or self.pe
            key = jax.eval_shape(lambda k, layer=layer, pe=pe: layer.self_attention.positioned(
                k, k, one_position, one_position, pe)[1], probe)
            cache.append({
                "k": jnp.zeros((batch_size, heads, key.shape[-1], width), key.dtype),
                "v": jnp.zeros((batch_size, heads, head_dim, width), self.config.compute_dtype),
                "positions": positions_RxW.astype(jnp.int32),
                "index": jnp.zeros((), jnp.int32)})
        return cache


class Seq2SeqTransformer(TokenModel):
    """Token embedding (+ positional input), encoder stack, decoder stack, output projection."""

    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
        self.config, self.dropout_rate = config, config.dropout_rate
        self.pe, self.embed, self.input_projection = input_modules(config, rngs)
        self.encoder_layers = nnx.List(
            [EncoderLayer(config, rngs=rngs, index=i) for i in range(config.num_encoder_layers)])
        self.decoder_layers = nnx.List(
            [DecoderLayer(config, rngs=rngs, index=i) for i in range(config.num_decoder_layers)])
        self.encoder_norm = stack_norm(config, rngs)
        self.decoder_norm = stack_norm(config, rngs)
        self.output_projection = output_projection(config, rngs)
        self.abacus = abacus_table(config, rngs)

    @property
    def final_norm(self) -> nnx.LayerNorm | None:
        """The decoder's final LayerNorm (its parameters keep the name ``decoder_norm``)."""
        return self.decoder_norm

    def encode(self, source_BxS: jax.Array, source_positions_BxS: jax.Array,
               source_mask_BxS: jax.Array, key: jax.Array | None = None,
               abacus_ids_BxS: jax.Array | None = None) -> jax.Array:
        """Encoder output ``[B, S, D]``; padded keys are masked out."""
        keys = split_key(key, 1 + len(self.encoder_layers))
        x = self.embed_inputs(source_BxS, source_positions_BxS, keys[0], abacus_ids_BxS)
        (mask_BxSxS,) = prefix_masks(source_mask_BxS)
        for layer, layer_key in zip(self.encoder_layers, keys[1:], strict=True):
            x = layer(x, source_positions_BxS, mask_BxSxS, self.pe, layer_key)
        return x if self.encoder_norm is None else self.encoder_norm(x)

    def decode(self, target_input_BxT: jax.Array, target_positions_BxT: jax.Array,
               encoded_BxSxD: jax.Array, source_positions_BxS: jax.Array,
               source_mask_BxS: jax.Array, target_mask_BxT: jax.Array,
               key: jax.Array | None = None, abacus_ids_BxT: jax.Array | None = None,
               ) -> jax.Array:
        """Teacher-forced logits ``[B, T, V]`` (float32) under a causal mask."""
        self_mask, source_mask = prefix_masks(source_mask_BxS, target_mask_BxT)
        keys = split_key(key, 1 + len(self.decoder_layers))
        y = self.embed_inputs(target_input_BxT, target_positions_BxT, keys[0], abacus_ids_BxT)
        for layer, layer_key in zip(self.decoder_layers, keys[1:], strict=True):
            y = layer(y, encoded_BxSxD, target_positions_BxT, source_positions_BxS, self_mask,
                      source_mask, self.pe, layer_key)
        return self.logits(y)

    def __call__(self, source_BxS: jax.Array, target_input_BxT: jax.Array,
                 source_positions_BxS: jax.Array, target_positions_BxT: jax.Array,
                 source_mask_BxS: jax.Array, target_mask_BxT: jax.Array,
                 dropout_key: jax.Array | None = None,
                 abacus_ids: tuple[jax.Array, jax.Array] | None = None) -> jax.Array:
        """Teacher-forced logits ``[B, T, V]``; dropout only when ``dropout_key`` is given;
        ``abacus_ids``: the source's ``[B, S]`` and the target slots' ``[B, T]``."""
        keys = split_key(dropout_key, 2)
        source_ids, target_ids = abacus_ids or (None, None)
        encoded = self.encode(source_BxS, source_positions_BxS, source_mask_BxS, keys[0],
                              source_ids)
        return self.decode(target_input_BxT, target_positions_BxT, encoded, source_positions_BxS,
                           source_mask_BxS, target_mask_BxT, keys[1], target_ids)

    def init_cache(self, target_positions_RxT: jax.Array, encoded_BxSxD: jax.Array,
                   ) -> list[dict[str, jax.Array]]:
        """A decoding cache per decoder layer: empty self-attention keys and values for T target
        tokens at these positions (``[1 or B, T]``; slots beyond the tokens decoded are never
        seen), and cross-attention's keys and values of ``encoded``, projected once."""
        empty = self.empty_cache(encoded_BxSxD.shape[0], target_positions_RxT,
                                 self.decoder_layers)
        return [{**layer_cache, **layer.cross_cache(encoded_BxSxD)}
                for layer, layer_cache in zip(self.decoder_layers, empty, strict=True)]

    def decode_step(self, tokens_Bx1: jax.Array, positions_Bx1: jax.Array,
                    source_positions_BxS: jax.Array, source_mask_BxS: jax.Array,
                    cache: list[dict[str, jax.Array]], abacus_ids_Bx1: jax.Array | None = None,
                    ) -> tuple[jax.Array, list[dict[str, jax.Array]]]:
        """Logits ``[B, V]`` for one new token per sequence, and the updated cache
        (``init_cache``'s, which holds what the step needs of the encoder output)."""
        batch, max_length = cache[0]["k"].shape[0], cache[0]["k"].shape[-1]
        self_mask = cache_mask(cache[0]["index"], batch, max_length)
        _, source_mask = prefix_masks(source_mask_BxS, jnp.ones((batch, 1), bool))
        y = self.embed_inputs(tokens_Bx1, positions_Bx1, None, abacus_ids_Bx1)
        new_cache = []
        for layer, layer_cache in zip(self.decoder_layers, cache, strict=True):
            layer_cache = dict(layer_cache)  # updated in place by the layer
            y = layer(y, None, positions_Bx1, source_positions_BxS, self_mask, source_mask,
                      self.pe, None, cache=layer_cache)
            new_cache.append(layer_cache)
        return self.logits(y)[:, 0], new_cache
