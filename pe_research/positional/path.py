"""PaTH attention (Yang et al. 2025, "PaTH Attention: Position Encoding via Accumulating
Householder Transformations", arXiv 2505.16381): position as a product of data-dependent
Householder-like transforms between key and query.

Each token t has a unit vector w_t and a gain beta_t in (0, 2) per head, and in causal
self-attention

    logit_ij = q_i^T H_i H_{i-1} ... H_{j+1} k_j / sqrt(D),      H_s = I - beta_s w_s w_s^T,

so a key is carried to its query by the transforms of the tokens between them (none for j = i).
Defaults follow the authors' code (fla-org/flash-linear-attention, ``fla/layers/path_attn.py``,
``PaTHAttention`` with ``use_low_rank_w=True, use_w_shortconv=True, conv_size=3``, and
``fla/models/path_attn``'s init): w = l2norm(silu(causal depthwise conv, width 3, of a rank-32
projection)) per head, beta = 2 sigmoid(linear + bias), weights N(0, 0.02), biases 0, no forget
gate, no other positional encoding. One difference, as for FoX: w and beta read the layer input
through the key projection (all heads' keys concatenated), so that they are functions of the
keys; with a square W_k that spans the same maps.

The logits are computed by a scan over the keys from the last to the first that carries each
query back through one transform per key, O(T S D) per head (the transformed queries are
``q^T H_i ... H_{s+1}``; the authors' decoding updates the stored keys instead, the same
products). The transforms are recomputed from the keys at every call, so a decoding cache holds
plain keys and cached decoding equals teacher forcing. Each row's real keys are contiguous and a
query's last visible key is itself (as for FoX); keys no query sees (padding) feed the
convolution zeros. Positions are not read (``relative``), so randomized positions are refused.
Acts in decoder self-attention only; an encoder-only model has none and is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from pe_research.positional.base import DECODER_SELF, PositionalScheme, require
from pe_research.positional.explicit_attention import (
    own_slots,
    scaled_logits,
    softmax_attention,
    with_bias,
)


def path_logits(q_BxTxHxD: jax.Array, k_BxSxHxD: jax.Array, w_BxSxHxD: jax.Array,
                beta_BxSxH: jax.Array, mask_BxTxS: jax.Array) -> jax.Array:
    """``q_i^T H_{o_i} ... H_{j+1} k_j / sqrt(D)`` float32 ``[B, H, T, S]``, ``o_i`` query i's
    own slot; entries of invisible keys are arbitrary (the mask removes them)."""
    own = own_slots(mask_BxTxS)  # [B, T]
    key_steps = (jnp.moveaxis(k_BxSxHxD.astype(jnp.float32), 1, 0),
                 jnp.moveaxis(w_BxSxHxD.astype(jnp.float32), 1, 0),
                 jnp.moveaxis(beta_BxSxH.astype(jnp.float32), 1, 0),
                 jnp.arange(k_BxSxHxD.shape[1]))

    def through_key(queries_BxTxHxD, step):
        key_BxHxD, w_BxHxD, beta_BxH, slot = step
        column = jnp.einsum("bthd,bhd->bht", queries_BxTxHxD, key_BxHxD)
        # Key ``slot - 1`` and every earlier one sit behind H_slot for queries at or after it.
        along_w = jnp.einsum("bthd,bhd->bth", queries_BxTxHxD, w_BxHxD) * beta_BxH[:, None]
        behind = (slot <= own)[..., None, None]
        queries = queries_BxTxHxD - jnp.where(behind, along_w[..., None] * w_BxHxD[:, None], 0.0)
        return queries, column

    _, columns_SxBxHxT = jax.lax.scan(through_key, q_BxTxHxD.astype(jnp.float32), key_steps,
                                      reverse=True)
    return jnp.transpose(columns_SxBxHxT, (1, 2, 3, 0)) / np.sqrt(q_BxTxHxD.shape[-1])


class PaTH(PositionalScheme):
    """Per decoder layer: the w and beta projections; Householder-carried logits in causal
    self-attention."""

    name = "path"
    acts_in = frozenset({DECODER_SELF})
    relative = True
    consumes_positions = False
    shared_across_layers = False
    extra_logit_terms = {"householder": "PaTH's transforms between key and query: "
                                        "q^T (H_i ... H_{j+1} - I) k / sqrt(D)"}

    def __init__(self, pe: Mapping[str, Any], *, d_model: int, num_heads: int, rngs: nnx.Rngs):
        super().__init__(pe, d_model=d_model, num_heads=num_heads, rngs=rngs)
        width = num_heads * self.head_dim
        init = nnx.initializers.normal(stddev=float(pe["init_std"]))
        rank = int(pe["w_rank"]) or width  # 0: one full-width projection
        self.w_down = nnx.Linear(width, rank, use_bias=False, kernel_init=init, rngs=rngs)
        self.w_up = (nnx.Linear(rank, width, use_bias=False, kernel_init=init, rngs=rngs)
                     if pe["w_rank"] else None)
        self.w_conv = (nnx.Param(init(rngs.params(), (int(pe["w_conv_size"]), width)))
                       if pe["w_conv_size"] else None)
        self.beta_proj = nnx.Linear(width, num_heads, kernel_init=init,
                                    bias_init=nnx.initializers.zeros_init(), rngs=rngs)

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {"w_rank": 32, "w_conv_size": 3, "init_std": 0.02}

    @classmethod
    def check_config(cls, pe: Mapping[str, Any], *, d_model: int, num_heads: int) -> None:
        for key in ("w_rank", "w_conv_size"):
            require(isinstance(pe[key], int) and not isinstance(pe[key], bool) and pe[key] >= 0,
                    f"model.pe.{key}", pe[key], "an integer >= 0 (0: none)")
        require(pe["init_std"] >= 0, "model.pe.init_std", pe["init_std"], ">= 0")

    def householder_vectors(self, k_BxSxHxD: jax.Array,
                            mask_BxTxS: jax.Array) -> tuple[jax.Array, jax.Array]:
        """(w ``[B, S, H, D]`` unit per head, beta ``[B, S, H]`` in (0, 2)), float32."""
        keys = k_BxSxHxD.reshape(*k_BxSxHxD.shape[:2], -1).astype(jnp.float32)
        w = self.w_down(keys)
        if self.w_up is not None:
            w = self.w_up(w)
        if self.w_conv is not None:
            seen = jnp.any(mask_BxTxS, axis=1)[..., None]  # [B, S, 1]: padding feeds zeros
            w = jax.nn.silu(causal_depthwise_conv(jnp.where(seen, w, 0.0), self.w_conv[...]))
        w = w.reshape(k_BxSxHxD.shape)
        w = w / jnp.sqrt(jnp.maximum(jnp.sum(w * w, axis=-1, keepdims=True), 1e-12))
        return w, 2.0 * jax.nn.sigmoid(self.beta_proj(keys))

    def extra_logits(self, q_BxTxHxD, k_BxSxHxD, bias_BxHxTxS, mask_BxTxS, q_positions_BxT,
                     k_positions_BxS, kind):
        """The transforms' part of the logits (PaTH's logits minus ``q.k / sqrt(D)``)."""
        w, beta = self.householder_vectors(k_BxSxHxD, mask_BxTxS)
        carried = path_logits(q_BxTxHxD, k_BxSxHxD, w, beta, mask_BxTxS)
        return {"householder": carried - scaled_logits(q_BxTxHxD, k_BxSxHxD)}

    def explicit_attention(self, q_BxTxHxD, k_BxSxHxD, v_BxSxHxD, bias_BxHxTxS, mask_BxTxS,
                           q_positions_BxT, k_positions_BxS, kind):
        carried = self.extra_logits(q_BxTxHxD, k_BxSxHxD, bias_BxHxTxS, mask_BxTxS,
                                    q_positions_BxT, k_positions_BxS, kind)["householder"]
        return softmax_attention(q_BxTxHxD, k_BxSxHxD, v_BxSxHxD, with_bias(carried, bias_BxHxTxS),
                                 mask_BxTxS)


def causal_depthwise_conv(x_BxSxC: jax.Array, kernel_KxC: jax.Array) -> jax.Array:
    """``y_t = sum_k kernel[k] x_{t - K + 1 + k}`` ``[B, S, C]`` (zeros before the start)."""
    width = kernel_KxC.shape[0]
    padded = jnp.pad(x_BxSxC, ((0, 0), (width - 1, 0), (0, 0)))
    return sum(kernel_KxC[k] * padded[:, k:k + x_BxSxC.shape[1]] for k in range(width))
