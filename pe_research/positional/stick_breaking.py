"""Stick-breaking attention (Tan et al. 2024, "Scaling Stick-Breaking Attention: An Efficient
Implementation and In-depth Study", arXiv 2410.17980): attention weights without softmax and
without position vectors.

Query i breaks a unit stick over its earlier keys, nearest first: key j takes
``beta_ij = sigmoid(z_ij)`` of what the keys between it and i left,

    A_ij = beta_ij * prod_{j < l < i} (1 - beta_il),      z_ij = q_i . k_j / sqrt(D),

and what no key took, ``1 - sum_j A_ij``, goes to the query's own value. Computed in log space as
the authors' reference does (shawntan/stickbreaking-attention, ``stickbreaking_attention/
sb_ref.py``: ``log A = logsigmoid(z) + sum_{l > j} logsigmoid(-z_il)`` over visible keys, the
leftover weight added to ``v_i`` as its tests do); O(T^2) memory per head, a reference, not a
kernel. ``attend_current`` (default false, the reference's default) lets key i itself take a
share of the stick first.

The order is all that matters (``relative``; positions are not read), so randomized positions are
refused. Acts in decoder self-attention only (it is causal); an encoder-only model has none and
is refused. Each row's real keys are contiguous and a query's last visible key is itself (as for
FoX), which is how a decoding cache's step finds its own slot.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from pe_research.positional.base import DECODER_SELF, PositionalScheme, require
from pe_research.positional.explicit_attention import (
    heads_first_product,
    own_slots,
    scaled_logits,
)

MASKED_LOG = -1e5  # the reference's log weight of an invisible key: exp() of it is 0


def stick_breaking_weights(logits_BxHxTxS: jax.Array, mask_BxTxS: jax.Array,
                           attend_current: bool = False) -> tuple[jax.Array, jax.Array]:
    """(``A`` ``[B, H, T, S]``, the leftover ``1 - sum_j A_ij`` ``[B, H, T]``) for keys in
    causal order along S; query i's own slot is its last visible key."""
    keys = jnp.arange(mask_BxTxS.shape[-1])
    own = own_slots(mask_BxTxS)
    visible = mask_BxTxS if attend_current else mask_BxTxS & (keys < own[..., None])
    visible = visible[:, None]  # [B, 1, T, S]
    logits = logits_BxHxTxS.astype(jnp.float32)
    log_take = jnp.where(visible, jax.nn.log_sigmoid(logits), MASKED_LOG)
    log_leave = jnp.where(visible, jax.nn.log_sigmoid(-logits), 0.0)
    # sum_{l > j} log(1 - beta_il): an exclusive cumulative sum from the right.
    from_right = jnp.flip(jnp.cumsum(jnp.flip(log_leave, -1), axis=-1), -1)
    later = jnp.concatenate([from_right[..., 1:], jnp.zeros_like(from_right[..., :1])], -1)
    weights = jnp.exp(log_take + later)
    return weights, 1.0 - jnp.sum(weights, axis=-1)


def stick_breaking_attention(q_BxTxHxD: jax.Array, k_BxSxHxD: jax.Array, v_BxSxHxD: jax.Array,
                             bias_BxHxTxS: jax.Array | None, mask_BxTxS: jax.Array,
                             attend_current: bool = False) -> jax.Array:
    """``sum_j A_ij v_j + (1 - sum_j A_ij) v_i`` ``[B, T, H, D]`` in the query dtype."""
    logits = scaled_logits(q_BxTxHxD, k_BxSxHxD)
    if bias_BxHxTxS is not None:
        logits = logits + bias_BxHxTxS
    weights, leftover = stick_breaking_weights(logits, mask_BxTxS, attend_current)
    values = v_BxSxHxD.astype(jnp.float32)
    own_value = jnp.take_along_axis(values, own_slots(mask_BxTxS)[:, :, None, None],
                                    axis=1)  # [B, T, H, D]
    out = heads_first_product(weights, values) + jnp.moveaxis(leftover, 1, 2)[..., None] * own_value
    return out.astype(q_BxTxHxD.dtype)


class StickBreaking(PositionalScheme):
    """Stick-breaking weights in causal self-attention; no parameters, no position values."""

    name = "stick_breaking"
    acts_in = frozenset({DECODER_SELF})
    relative = True
    consumes_positions = False
    adds_value_term = True  # the leftover weight on the query's own value

    def __init__(self, pe: Mapping[str, Any], *, d_model: int, num_heads: int, rngs: Any):
        super().__init__(pe, d_model=d_model, num_heads=num_heads, rngs=rngs)
        self.attend_current = bool(pe["attend_current"])

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {"attend_current": False}

    @classmethod
    def check_config(cls, pe: Mapping[str, Any], *, d_model: int, num_heads: int) -> None:
        require(isinstance(pe["attend_current"], bool), "model.pe.attend_current",
                pe["attend_current"], "true or false")

    def attention_weights(self, logits_BxHxTxS, mask_BxTxS, kind):
        """Stick-breaking weights where it acts (the leftover is the value term), else softmax."""
        if kind not in self.acts_in:
            return super().attention_weights(logits_BxHxTxS, mask_BxTxS, kind)
        return stick_breaking_weights(logits_BxHxTxS, mask_BxTxS, self.attend_current)[0]

    def explicit_attention(self, q_BxTxHxD, k_BxSxHxD, v_BxSxHxD, bias_BxHxTxS, mask_BxTxS,
                           q_positions_BxT, k_positions_BxS, kind):
        return stick_breaking_attention(q_BxTxHxD, k_BxSxHxD, v_BxSxHxD, bias_BxHxTxS,
                                        mask_BxTxS, self.attend_current)
