"""The vectors analysed: the token part and the position part of the model's input, split exactly.

With ``combine=add`` the input is ``token + position`` with ``token = embed(t) * sqrt(D)`` (when
``scale_embedding``) and ``position = scheme.input_vectors(p)``. With ``combine=concat`` the input
is ``W [token; position] + b = (W_token token + b) + W_position position``, so the position part
is the position vector after its half of the projection and the bias stays with the token part.
With ``combine=split`` the input is ``[token; position]``, each half as wide: the token part is
``[token; 0]`` and the position part ``[0; position]`` (exactly orthogonal by construction).
Every way, ``token_part + position_part`` equals ``model.embed_inputs`` (without dropout).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from pe_research.model import TokenModel

HIGHEST = jax.lax.Precision.HIGHEST


def input_parts(model: TokenModel, tokens_BxT: jax.Array, positions_BxT: jax.Array,
                ) -> tuple[jax.Array, jax.Array | None]:
    """Token part ``[B, T, D]`` and position part ``[B, T, D]`` (None: the scheme adds none)."""
    token = model.embed(tokens_BxT).astype(jnp.float32)
    if model.config.scale_embedding:
        token = token * jnp.sqrt(float(model.config.token_width))
    vectors = model.pe.input_vectors(positions_BxT)
    if vectors is None:
        return token, None
    position = vectors.astype(jnp.float32)
    if model.config.split_input:  # [token; 0] + [0; position]: each lives in its own half
        return (jnp.concatenate([token, jnp.zeros_like(position)], axis=-1),
                jnp.concatenate([jnp.zeros_like(token), position], axis=-1))
    projection = model.input_projection
    if projection is None:
        return token, position
    kernel_2DxD = projection.kernel[...]
    d_model = model.config.d_model
    token = jnp.matmul(token, kernel_2DxD[:d_model], precision=HIGHEST)
    if projection.bias is not None:
        token = token + projection.bias[...]
    return token, jnp.matmul(position, kernel_2DxD[d_model:], precision=HIGHEST)


def token_table(model: TokenModel) -> jax.Array:
    """Every token's part of the input, ``[V, D]`` (position-independent by construction)."""
    tokens_1xV = jnp.arange(model.config.vocab_size)[None]
    token, _ = input_parts(model, tokens_1xV, jnp.zeros_like(tokens_1xV))
    return token[0]


def position_table(model: TokenModel, num_positions: int) -> jax.Array | None:
    """The position part of the input at positions ``0 .. P-1``, ``[P, D]``; None if none."""
    positions_1xP = jnp.arange(num_positions)[None]
    _, position = input_parts(model, jnp.zeros_like(positions_1xP), positions_1xP)
    return None if position is None else position[0]


def stack_name(model: TokenModel) -> str:
    """'encoder' or 'decoder': what a single-stack model's one stack is called in reports."""
    return "decoder" if model.config.architecture == "decoder_only" else "encoder"


def first_layer_norms(model: TokenModel) -> dict[str, nnx.LayerNorm]:
    """The LayerNorm that first sees the input in each stack (pre-LN only; post-LN has none)."""
    if model.config.norm != "pre":
        return {}
    if model.config.single_stack:
        return {stack_name(model): model.layers[0].attention_block.norm}
    norms = {}
    if len(model.encoder_layers):
        norms["encoder"] = model.encoder_layers[0].attention_block.norm
    if len(model.decoder_layers):
        norms["decoder"] = model.decoder_layers[0].self_block.norm
    return norms


def fold_layer_norm_scale(vectors_NxD: jax.Array, norm: nnx.LayerNorm) -> jax.Array:
    """``g * (v - mean_d v)``: what the LayerNorm passes on of ``v``, up to its common 1/sigma.

    LN(x) = g * (x - mean x) / sigma(x) + b. For x = token + position the centring splits over
    the two parts, and 1/sigma(x) is one scalar per input row shared by both parts, so the
    position's share of what attention sees is this vector times 1/sigma.
    """
    centred = vectors_NxD - jnp.mean(vectors_NxD, axis=-1, keepdims=True)
    scale = 1.0 if norm.scale is None else norm.scale[...]
    return scale * centred
