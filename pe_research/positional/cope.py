"""Contextual position encoding, CoPE (Golovneva et al. 2024): positions counted by gates.

In causal self-attention, for query i and visible key j:
    g_it = sigmoid(q_i . k_t / sqrt(D))              gate: does token t count?
    p_ij = sum_{t = j .. i} g_it                      a fractional, context-dependent position
    e[p] = (p - floor p) e[ceil p] + (ceil p - p) e[floor p]     (p clamped to npos_max - 1)
    logit_ij = (q_i . k_j + q_i . e[p_ij]) / sqrt(D)
with a learned table e of ``npos_max`` vectors of head size, shared by the heads, initialised to
zero, one table per layer: all as in the authors' code (facebookresearch/RAM,
projects/cope/src/cope/context_position.py, default flags: the position logit is divided by
sqrt(D) together with the content logit). There ``npos`` defaults to the context size + 1, so
no count is ever clamped; ``npos_max`` = 64 here counts up to 63 and clamps beyond (set it to
the longest sequence + 1 to match). The sum over t needs the attention mask
(only visible keys count, also in the decoding cache), so attention is computed explicitly.

Acts in: decoder self-attention only (the paper's setting; the count runs over the causal past).
The encoder gets no positional information at all (it is permutation-equivariant, like NoPE),
and cross-attention none. CoPE ignores the position arrays, so ``model.pe.randomize`` is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
from flax import nnx

from pe_research.core.errors import ConfigError
from pe_research.positional.base import DECODER_SELF, AttentionKind, PositionalScheme, require
from pe_research.positional.explicit_attention import (
    scaled_logits,
    softmax_attention,
    with_bias,
)
from pe_research.positional.row_lookup import take_from_rows


def cope_positions(logits_BxHxTxS: jax.Array, mask_BxTxS: jax.Array, npos_max: int) -> jax.Array:
    """``p_ij = sum_{t >= j, visible} sigmoid(logit_it)``, clamped to ``npos_max - 1``."""
    gates = jnp.where(mask_BxTxS[:, None], jax.nn.sigmoid(logits_BxHxTxS), 0.0)
    counts = jax.lax.cumsum(gates, axis=gates.ndim - 1, reverse=True)  # sum over t = j .. S-1
    return jnp.minimum(counts, npos_max - 1)


def cope_logits(q_BxTxHxD: jax.Array, table_DxP: jax.Array,
                positions_BxHxTxS: jax.Array) -> jax.Array:
    """``q_i . e[p_ij]``, e interpolated between integer positions, float32 ``[B, H, T, S]``."""
    per_integer_BxHxTxP = jnp.einsum("bthd,dp->bhtp", q_BxTxHxD.astype(jnp.float32), table_DxP)
    # Each integer position next to its successor, so one lookup fetches both ends:
    # [B, H, T, P, 2] (the last position's successor is itself; it is read only at weight 0).
    successor = jnp.concatenate([per_integer_BxHxTxP[..., 1:], per_integer_BxHxTxP[..., -1:]],
                                axis=-1)
    floor = jnp.floor(positions_BxHxTxS)
    ends = take_from_rows(jnp.stack([per_integer_BxHxTxP, successor], axis=-1),
                          floor.astype(jnp.int32))
    weight = positions_BxHxTxS - floor  # carries the gradient to the gates
    at_floor = ends[..., 0]
    # At an integer position ceil = floor: the authors read the same entry twice, so no slope.
    at_ceil = jnp.where(weight > 0, ends[..., 1], at_floor)
    return at_ceil * weight + at_floor * (1.0 - weight)


class CoPE(PositionalScheme):
    """A zero-initialised ``[head_dim, npos_max]`` table per decoder layer."""

    name = "cope"
    acts_in = frozenset({DECODER_SELF})
    relative = True
    shared_across_layers = False
    consumes_positions: ClassVar[bool] = False
    extra_logit_terms: ClassVar[dict[str, str]] = {
        "cope_position": "CoPE's position logit q_i . e[p_ij] / sqrt(D), p_ij counted by gates"}

    def __init__(self, pe: Mapping[str, Any], *, d_model: int, num_heads: int, rngs: nnx.Rngs):
        super().__init__(pe, d_model=d_model, num_heads=num_heads, rngs=rngs)
        self.npos_max = int(pe["npos_max"])
        self.table = nnx.Param(jnp.zeros((self.head_dim, self.npos_max), jnp.float32))

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {"npos_max": 64}

    @classmethod
    def check_config(cls, pe: Mapping[str, Any], *, d_model: int, num_heads: int) -> None:
        require(isinstance(pe["npos_max"], int) and pe["npos_max"] >= 2, "model.pe.npos_max",
                pe["npos_max"], "an integer >= 2 (the largest counted position + 1)")

    def extra_logits(self, q_BxTxHxD, k_BxSxHxD, bias_BxHxTxS, mask_BxTxS, q_positions_BxT,
                     k_positions_BxS, kind):
        positions = cope_positions(scaled_logits(q_BxTxHxD, k_BxSxHxD), mask_BxTxS, self.npos_max)
        scale = self.head_dim ** -0.5  # the authors divide the position logit by sqrt(D) too
        return {"cope_position": scale * cope_logits(q_BxTxHxD, self.table[...], positions)}

    def explicit_attention(self, q_BxTxHxD, k_BxSxHxD, v_BxSxHxD, bias_BxHxTxS, mask_BxTxS,
                           q_positions_BxT, k_positions_BxS, kind: AttentionKind):
        if kind is not DECODER_SELF:
            raise ConfigError("model.pe.type", self.name,
                              f"cope acts only in causal decoder self-attention, not {kind.value}")
        term = self.extra_logits(q_BxTxHxD, k_BxSxHxD, bias_BxHxTxS, mask_BxTxS, q_positions_BxT,
                                 k_positions_BxS, kind)["cope_position"]
        return softmax_attention(q_BxTxHxD, k_BxSxHxD, v_BxSxHxD, with_bias(term, bias_BxHxTxS),
                                 mask_BxTxS)
