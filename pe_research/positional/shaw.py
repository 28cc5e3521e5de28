"""Relative position representations (Shaw et al. 2018): learned vectors per clipped distance.

With r_ij = clip(p_j - p_i, -k, k) and learned tables w^K, w^V of 2k + 1 vectors of head size
(shared by the heads, as in the paper):
    e_ij = q_i . (k_j + w^K[r_ij]) / sqrt(D)           (logit bias: q_i . w^K[r_ij] / sqrt(D))
    z_i  = sum_j a_ij (v_j + w^V[r_ij])                 (only with ``value_embeddings``)
The value term needs the attention weights, so with value embeddings attention is computed
explicitly (``explicit_attention``); without them the fused kernel is kept. The paper uses both
by default; its ablation finds keys alone about as good, at lower cost.

The bidirectional encoder uses both signs of r; the causal decoder only sees r <= 0. One pair of
tables per layer, as in the paper's implementation. Defaults from the paper: k = 16.
Acts in: encoder self and decoder self attention.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from pe_research.positional.base import SELF_ATTENTION, PositionalScheme, require
from pe_research.positional.explicit_attention import (
    masked_softmax,
    scaled_logits,
    weighted_values,
)
from pe_research.positional.row_lookup import sum_into_rows, take_from_rows


def shaw_relative_index(q_positions_BxT: jax.Array, k_positions_BxS: jax.Array,
                        max_relative_position: int) -> jax.Array:
    """Table row ``clip(p_j - p_i, -k, k) + k`` in ``[0, 2k]``, int32 ``[B, T, S]``."""
    relative = k_positions_BxS[:, None, :] - q_positions_BxT[:, :, None]
    clipped = jnp.clip(relative, -max_relative_position, max_relative_position)
    return (clipped + max_relative_position).astype(jnp.int32)


def shaw_logit_bias(q_BxTxHxD: jax.Array, key_table_RxD: jax.Array,
                    index_BxTxS: jax.Array) -> jax.Array:
    """``q_i . w^K[r_ij] / sqrt(D)`` as float32 ``[B, H, T, S]``."""
    scale = 1.0 / np.sqrt(q_BxTxHxD.shape[-1])
    # Score every table row once, then gather: [B, T, H, R] is far smaller than [B, T, S, D].
    scores_BxTxHxR = jnp.einsum("bthd,rd->bthr", q_BxTxHxD.astype(jnp.float32), key_table_RxD)
    gathered_BxTxHxS = take_from_rows(scores_BxTxHxR, index_BxTxS[:, :, None, :])
    return jnp.transpose(gathered_BxTxHxS, (0, 2, 1, 3)) * scale


def shaw_value_term(probs_BxHxTxS: jax.Array, value_table_RxD: jax.Array,
                    index_BxTxS: jax.Array) -> jax.Array:
    """``sum_j a_ij w^V[r_ij]`` as float32 ``[B, T, H, D]``."""
    # The weight on each table row, summed per query, [B, H, T, R]: no [B, H, T, S, R] one-hot.
    weights_BxHxTxR = sum_into_rows(probs_BxHxTxS, index_BxTxS[:, None],
                                    value_table_RxD.shape[0])
    return jnp.einsum("bhtr,rd->bthd", weights_BxHxTxR, value_table_RxD)


class Shaw(PositionalScheme):
    """Learned key (and value) vectors for clipped relative distances; one pair per layer."""

    name = "shaw"
    acts_in = SELF_ATTENTION
    relative = True
    shared_across_layers = False

    @property
    def adds_value_term(self) -> bool:  # type: ignore[override]
        """With value embeddings the output gains sum_j a_ij w^V[r_ij]."""
        return self.value_table is not None

    @property
    def uses_fused_attention(self) -> bool:
        """Keys alone keep the fused kernel; the value term needs the weights."""
        return self.value_table is None

    def __init__(self, pe: Mapping[str, Any], *, d_model: int, num_heads: int, rngs: nnx.Rngs):
        super().__init__(pe, d_model=d_model, num_heads=num_heads, rngs=rngs)
        self.max_relative_position = int(pe["max_relative_position"])
        init = nnx.initializers.normal(stddev=float(pe["init_std"]))
        shape = (2 * self.max_relative_position + 1, self.head_dim)
        self.key_table = nnx.Param(init(rngs.params(), shape, jnp.float32))
        self.value_table = (nnx.Param(init(rngs.params(), shape, jnp.float32))
                            if pe["value_embeddings"] else None)

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {"max_relative_position": 16, "value_embeddings": True, "init_std": 0.02}

    @classmethod
    def check_config(cls, pe: Mapping[str, Any], *, d_model: int, num_heads: int) -> None:
        k = pe["max_relative_position"]
        require(isinstance(k, int) and k >= 1, "model.pe.max_relative_position", k,
                "an integer clipping distance >= 1")
        require(isinstance(pe["value_embeddings"], bool), "model.pe.value_embeddings",
                pe["value_embeddings"], "True or False")
        require(pe["init_std"] > 0, "model.pe.init_std", pe["init_std"], "> 0")

    def relative_index(self, q_positions_BxT, k_positions_BxS) -> jax.Array:
        return shaw_relative_index(q_positions_BxT, k_positions_BxS, self.max_relative_position)

    def logit_bias(self, q_BxTxHxD, k_BxSxHxD, q_positions_BxT, k_positions_BxS, kind):
        index = self.relative_index(q_positions_BxT, k_positions_BxS)
        return shaw_logit_bias(q_BxTxHxD, self.key_table[...], index)

    def explicit_attention(self, q_BxTxHxD, k_BxSxHxD, v_BxSxHxD, bias_BxHxTxS, mask_BxTxS,
                           q_positions_BxT, k_positions_BxS, kind):
        if self.value_table is None:
            return None
        probs = masked_softmax(scaled_logits(q_BxTxHxD, k_BxSxHxD) + bias_BxHxTxS, mask_BxTxS)
        index = self.relative_index(q_positions_BxT, k_positions_BxS)
        encoded = (weighted_values(probs, v_BxSxHxD)
                   + shaw_value_term(probs, self.value_table[...], index))
        return encoded.astype(q_BxTxHxD.dtype)
