"""Forgetting Transformer, FoX (Lin et al. 2025, "Forgetting Transformer: Softmax Attention with a
Forget Gate", ICLR): a data-dependent decay of the attention logits.

Each head has a forget gate per token, f_t = sigmoid(w_h . x_t + b_h), and in causal
self-attention
    bias[h, i, j] = sum_{l = j+1 .. i} log f_l = c_i - c_j,   c_t = sum_{l <= t} log f_l,
computed with a cumulative sum over the keys, never a loop. With f constant this is ALiBi with
slope -log f; a learned, input-dependent f lets a head keep or drop the past.

Defaults follow the authors' code (zhixuan-lin/forgetting-transformer,
src/forgetting_transformer/model/forgetting_transformer/modeling_forgetting_transformer.py,
``fgate_type='full'``): one gate projection with bias per layer, weight N(0, 0.02), bias 0, no
other positional encoding (NoPE). One difference: the gate reads the layer input through the key
projection, w_h . (W_k x_t) with all heads' keys concatenated, so that it is a function of the
key alone. With a square W_k (d_model = heads x head size) that spans the same gates as
w_h . x_t. The query/key transform appends each key's log f_t to it as two more channels (the
queries get zeros there, so q . k is unchanged): the decoding cache, which stores transformed
keys, then holds every gate, computed once per token instead of for the whole cache at every
step.

Each row's real keys are contiguous and a query's last visible key is itself, so for every
visible key the bias is c at the query's last visible key minus c_j, exactly the sum above:
padding (before the tokens in a single-stack model, after them otherwise) and the empty slots of
a decoding cache never enter, not even as a constant per row. Attention is written out
(``explicit_attention.attention``: the keys are two channels wider than the values). Acts in:
decoder self-attention only (it is causal); an encoder-only model has none and is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from pe_research.positional.base import DECODER_SELF, PositionalScheme, require
from pe_research.positional.explicit_attention import attention, own_slots


def forget_bias(log_forget_BxSxH: jax.Array, mask_BxTxS: jax.Array) -> jax.Array:
    """``bias[b, h, i, j] = sum_{l = j+1 .. i} log f_l`` for visible keys j, float32
    ``[B, H, T, S]`` (other entries are masked and arbitrary).

    Keys are in causal order along S, each row's real keys are contiguous, and query i's last
    visible key is i itself.
    """
    through_key = jnp.cumsum(log_forget_BxSxH.astype(jnp.float32), axis=1)  # c_j  [B, S, H]
    last = own_slots(mask_BxTxS)  # [B, T]
    through_query = jnp.take_along_axis(through_key, last[..., None], axis=1)  # [B, T, H]
    return (jnp.moveaxis(through_query, -1, 1)[..., None]
            - jnp.moveaxis(through_key, -1, 1)[:, :, None, :])


class Fox(PositionalScheme):
    """A forget-gate projection per decoder layer; the decay bias in causal self-attention."""

    name = "fox"
    acts_in = frozenset({DECODER_SELF})
    relative = True  # the bias depends on the order of tokens, never on position values
    shared_across_layers = False
    consumes_positions = False
    transform_carries_key_state = True
    extra_logit_terms = {"forget_decay": "FoX's decay: sum of log forget gates between key and "
                                         "query (c_i - c_j)"}

    def __init__(self, pe: Mapping[str, Any], *, d_model: int, num_heads: int, rngs: nnx.Rngs):
        super().__init__(pe, d_model=d_model, num_heads=num_heads, rngs=rngs)
        self.gate = nnx.Linear(
            num_heads * self.head_dim, num_heads,
            kernel_init=nnx.initializers.normal(stddev=float(pe["gate_init_std"])),
            bias_init=nnx.initializers.constant(float(pe["gate_bias_init"])), rngs=rngs)

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {"gate_init_std": 0.02, "gate_bias_init": 0.0}

    @classmethod
    def check_config(cls, pe: Mapping[str, Any], *, d_model: int, num_heads: int) -> None:
        require(pe["gate_init_std"] >= 0, "model.pe.gate_init_std", pe["gate_init_std"], ">= 0")

    def log_forget(self, k_BxSxHxD: jax.Array) -> jax.Array:
        """``log f`` per key and head, ``[B, S, H]`` (float32)."""
        flat = k_BxSxHxD.reshape(*k_BxSxHxD.shape[:2], -1).astype(jnp.float32)
        return jax.nn.log_sigmoid(self.gate(flat))

    def transform_qk(self, q_BxTxHxD, k_BxSxHxD, q_positions_BxT, k_positions_BxS, kind):
        """Each key carries its ``log f`` as two more channels, the queries zeros there: a
        high and a low part in the keys' dtype, so a bfloat16 model keeps the float32 gate to
        about 16 bits (a float32 model's low part is 0)."""
        log_f = self.log_forget(k_BxSxHxD)[..., None]  # [B, S, H, 1] float32
        high = log_f.astype(k_BxSxHxD.dtype)
        low = (log_f - high.astype(jnp.float32)).astype(k_BxSxHxD.dtype)
        return (jnp.pad(q_BxTxHxD, ((0, 0), (0, 0), (0, 0), (0, 2))),
                jnp.concatenate([k_BxSxHxD, high, low], axis=-1))

    def extra_logits(self, q_BxTxHxD, k_BxSxHxD, bias_BxHxTxS, mask_BxTxS, q_positions_BxT,
                     k_positions_BxS, kind):
        """The decay ``c_i - c_j`` from the log f channels of the transformed keys."""
        log_f = k_BxSxHxD[..., -2].astype(jnp.float32) + k_BxSxHxD[..., -1].astype(jnp.float32)
        return {"forget_decay": forget_bias(log_f, mask_BxTxS)}

    def explicit_attention(self, q_BxTxHxD, k_BxSxHxD, v_BxSxHxD, bias_BxHxTxS, mask_BxTxS,
                           q_positions_BxT, k_positions_BxS, kind):
        bias = self.extra_logits(q_BxTxHxD, k_BxSxHxD, bias_BxHxTxS, mask_BxTxS, q_positions_BxT,
                                 k_positions_BxS, kind)["forget_decay"]
        if bias_BxHxTxS is not None:
            bias = bias + bias_BxHxTxS
        return attention(q_BxTxHxD, k_BxSxHxD, v_BxSxHxD, bias, mask_BxTxS)
