"""Multi-head attention with three positional slots: q/k transform, logit bias, mask.

The positional scheme fills the slots; attention itself never branches on which scheme it is.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from pe_research.model.masks import PrefixMask, dense_mask
from pe_research.model.query_blocks import in_query_blocks
from pe_research.positional.base import AttentionKind, PositionalScheme
from pe_research.positional.explicit_attention import attention
from pe_research.positional.length_scaling import (
    SSMAX_INIT,
    logit_scale,
    scale_logits,
    visible_keys,
)

log = logging.getLogger(__name__)


@functools.cache
def _warn_once(message: str) -> None:
    log.warning(message)


def resolve_implementation(requested: str, dtype: Any, head_dim: int) -> str:
    """``cudnn`` where backend, dtype and head size allow it, else ``xla`` (warned once)."""
    if requested != "cudnn":
        return requested
    reasons = []
    if jax.default_backend() != "gpu":
        reasons.append(f"backend is {jax.default_backend()}")
    if jnp.dtype(dtype) not in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16)):
        reasons.append(f"dtype {jnp.dtype(dtype).name} is not bfloat16/float16")
    if head_dim % 8 or head_dim > 128:
        reasons.append(f"head dim {head_dim} is not a multiple of 8 up to 128")
    if reasons:
        _warn_once(f"attention_implementation=cudnn unavailable ({'; '.join(reasons)}); using xla")
        return "xla"
    return "cudnn"


def _pad_axis(x: jax.Array, axis: int, mode: str = "constant") -> jax.Array:
    """``x`` with one more entry at the end of ``axis`` (zeros, or a copy of the last)."""
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, 1)
    return jnp.pad(x, widths, mode=mode)


def fused_attention(q_BxTxHxD: jax.Array, k_BxSxHxD: jax.Array, v_BxSxHxD: jax.Array,
                    bias: jax.Array | None, mask: jax.Array | PrefixMask, implementation: str,
                    pad_to_even: bool | None = None, by_lengths: bool | None = None,
                    ) -> jax.Array:
    """``jax.nn.dot_product_attention`` with ``mask`` (``[B, T, S]``, True where a query sees a
    key, or a ``PrefixMask``); ``[B, T, H, D]``. On ``xla`` with the dense mask (the default
    there) the same attention comes from ``explicit_attention.attention``, whose written-out
    backward is shorter (docs/performance.md).

    A ``PrefixMask`` goes to cuDNN (``by_lengths`` None) as key lengths and a causal flag, so no
    mask tensor is built or read, and a batch-1 bias stays batch 1 (a mask tensor would be added
    to it), which saves time and, for long biased sequences, most of the step's memory. cuDNN's
    backward in jax has no odd query or key length (``check_is_flash_
    attention``; jax 0.11 refuses them with key lengths too), and odd lengths are the rule here
    (a bucket plus EOS). So for cuDNN (``pad_to_even`` None) an odd T gets one extra query, a
    copy of the last row's mask, whose output is dropped, and an odd S one zero key that no
    query sees (masked, or beyond every key length): the result is the unpadded attention's.

    For cuDNN the bias takes q's dtype. jax hands cuDNN a float32 bias beside bfloat16 q, k, v
    as it is; on an H200 the outputs were right, but the gradients of T5's and FIRE's float32
    biases were 64-211 % off and Transformer-XL's NaN, while a bfloat16 bias's passed, and
    with this cast the models' do (tests/test_cudnn_gpu.py; jax issue 32242: NaN with a float32
    bias).
    """
    T, S = q_BxTxHxD.shape[1], k_BxSxHxD.shape[1]
    if implementation == "cudnn" and bias is not None:
        bias = bias.astype(q_BxTxHxD.dtype)
    if by_lengths is None:
        by_lengths = implementation == "cudnn"
    prefix = mask if by_lengths and isinstance(mask, PrefixMask) else None
    mask_BxTxS = None if prefix is not None else dense_mask(mask)  # by lengths: no mask tensor
    if pad_to_even is None:
        pad_to_even = implementation == "cudnn"
    if pad_to_even and T % 2:
        q_BxTxHxD = _pad_axis(q_BxTxHxD, 1)
        if mask_BxTxS is not None and mask_BxTxS.shape[1] > 1:
            mask_BxTxS = _pad_axis(mask_BxTxS, 1, "edge")
        bias = bias if bias is None or bias.shape[2] == 1 else _pad_axis(bias, 2)
    if pad_to_even and S % 2:
        k_BxSxHxD, v_BxSxHxD = _pad_axis(k_BxSxHxD, 1), _pad_axis(v_BxSxHxD, 1)
        if mask_BxTxS is not None:
            mask_BxTxS = _pad_axis(mask_BxTxS, 2)  # False: the extra key is seen by no query
        bias = bias if bias is None or bias.shape[3] == 1 else _pad_axis(bias, 3)
    if implementation == "xla" and prefix is None:
        encoded = attention(q_BxTxHxD, k_BxSxHxD, v_BxSxHxD, bias, mask_BxTxS)
    elif prefix is not None:
        # A row with no visible key (a batch-padding row) sees key 0 instead: its output is
        # never scored, and no key at all would make its softmax 0 / 0.
        encoded = jax.nn.dot_product_attention(
            q_BxTxHxD, k_BxSxHxD, v_BxSxHxD, bias=bias, is_causal=prefix.causal,
            key_value_seq_lengths=jnp.maximum(prefix.key_lengths, 1),
            implementation=implementation)
    else:
        encoded = jax.nn.dot_product_attention(q_BxTxHxD, k_BxSxHxD, v_BxSxHxD, bias=bias,
                                               mask=mask_BxTxS[:, None, :, :],
                                               implementation=implementation)
    return encoded[:, :T]


def set_query_block(model: nnx.Module, rows: int) -> nnx.Module:
    """``model`` with every attention attending ``rows`` queries at a time (0: all at once)."""
    model.set_attributes(MultiHeadAttention, query_block=int(rows), raise_if_not_found=False)
    return model


class MultiHeadAttention(nnx.Module):
    """Projections to H heads, positional hooks, ``jax.nn.dot_product_attention``, output.

    ``ablated``: heads whose output is zeroed before the output projection (model/ablation.py).
    ``query_block``: queries attended at a time on ``xla``, 0 for all at once (training);
    evaluation sets it (``eval.query_block``, model/query_blocks.py).
    ``logit_scaling``: ``none``, ``log_n_scaling`` or ``ssmax`` (its s per head starting at
    ``ssmax_init``): logits sharpened with the number of keys (positional/length_scaling.py); a
    stacked program's member sets its own ``none`` or ``log_n_scaling`` as a traced index.
    """

    def __init__(self, d_model: int, num_heads: int, kind: AttentionKind, *, dtype: Any,
                 implementation: str, rngs: nnx.Rngs, ablated: tuple[int, ...] = (),
                 logit_scaling: str = "none", ssmax_init: float = SSMAX_INIT):
        self.kind = kind
        self.logit_scaling = logit_scaling
        self.ssmax_s = (nnx.Param(jnp.full((num_heads,), ssmax_init, jnp.float32))
                        if logit_scaling == "ssmax" else None)
        self.num_heads = num_heads
        self.ablated = tuple(ablated)
        self.query_block = 0
        self.head_dim = d_model // num_heads
        self.implementation = resolve_implementation(implementation, dtype, self.head_dim)
        dense = functools.partial(nnx.LinearGeneral, dtype=dtype, param_dtype=jnp.float32,
                                  use_bias=False, rngs=rngs)
        self.query = dense(d_model, (num_heads, self.head_dim))
        self.key = dense(d_model, (num_heads, self.head_dim))
        self.value = dense(d_model, (num_heads, self.head_dim))
        self.output = dense((num_heads, self.head_dim), d_model, axis=(-2, -1))

    @jax.named_scope("attention")
    def project_kv(self, x_BxSxD: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Keys and values ``[B, S, H, Dh]`` before any positional transform."""
        return self.key(x_BxSxD), self.value(x_BxSxD)

    def __call__(
        self,
        x_BxTxD: jax.Array,
        context_BxSxD: jax.Array,
        q_positions_BxT: jax.Array,
        k_positions_BxS: jax.Array,
        mask_BxTxS: jax.Array,
        pe: PositionalScheme,
    ) -> jax.Array:
        """Attend from ``x`` to ``context``; mask is True where a query may see a key."""
        k, v = self.project_kv(context_BxSxD)
        return self.attend(x_BxTxD, k, v, q_positions_BxT, k_positions_BxS, mask_BxTxS, pe)

    @jax.named_scope("attention")
    def attend(self, x_BxTxD, k_BxSxHxD, v_BxSxHxD, q_positions_BxT, k_positions_BxS,
               mask: jax.Array | PrefixMask, pe: PositionalScheme) -> jax.Array:
        """Attention over already-projected keys/values; ``mask`` ``[B, T, S]`` or a
        ``PrefixMask`` (the schemes see its dense form)."""
        q, k = self.positioned(self.query(x_BxTxD), k_BxSxHxD, q_positions_BxT, k_positions_BxS,
                               pe)
        return self.attend_positioned(q, k, v_BxSxHxD, q_positions_BxT, k_positions_BxS, mask,
                                      pe)

    def positioned(self, q_BxTxHxD, k_BxSxHxD, q_positions_BxT, k_positions_BxS,
                   pe: PositionalScheme) -> tuple[jax.Array, jax.Array]:
        """Queries and keys after the scheme's transform (RoPE's rotation, ...), where it acts."""
        if self.kind not in pe.acts_in:
            return q_BxTxHxD, k_BxSxHxD
        with jax.named_scope("positional"):
            return pe.transform_qk(q_BxTxHxD, k_BxSxHxD, q_positions_BxT, k_positions_BxS,
                                   self.kind)

    @jax.named_scope("attention")
    def attend_positioned(self, q_BxTxHxD, k_BxSxHxD, v_BxSxHxD, q_positions_BxT,
                          k_positions_BxS, mask: jax.Array | PrefixMask,
                          pe: PositionalScheme) -> jax.Array:
        """Attention of transformed queries over transformed keys (``positioned``'s): the
        scheme's bias or its own attention, else the fused kernel; ``[B, T, D]``. With
        ``query_block`` set (inference on ``xla``), ``query_block`` queries at a time."""
        rows = self.query_block
        if rows and q_BxTxHxD.shape[1] > rows and self.implementation == "xla":
            encoded = in_query_blocks(
                lambda q, q_positions, mask_block: self.attend_rows(
                    q, k_BxSxHxD, v_BxSxHxD, q_positions, k_positions_BxS, mask_block, pe),
                rows, q_BxTxHxD, q_positions_BxT, dense_mask(mask))
        else:
            encoded = self.attend_rows(q_BxTxHxD, k_BxSxHxD, v_BxSxHxD, q_positions_BxT,
                                       k_positions_BxS, mask, pe)
        if self.ablated:
            kept_H = jnp.ones(self.num_heads, encoded.dtype).at[jnp.array(self.ablated)].set(0)
            encoded = encoded * kept_H[:, None]  # [B, T, H, Dh]
        return self.output(encoded)

    def attend_rows(self, q_BxTxHxD, k_BxSxHxD, v_BxSxHxD, q_positions_BxT, k_positions_BxS,
                    mask: jax.Array | PrefixMask, pe: PositionalScheme) -> jax.Array:
        """The heads' outputs ``[B, T, H, Dh]`` of these query rows, before the projection."""
        bias = encoded = None
        if self.kind in pe.acts_in:
            with jax.named_scope("positional"):
                bias = pe.logit_bias(q_BxTxHxD, k_BxSxHxD, q_positions_BxT, k_positions_BxS,
                                     self.kind)
        if not isinstance(self.logit_scaling, str) or self.logit_scaling != "none":
            scale = logit_scale(visible_keys(dense_mask(mask)),
                                None if self.ssmax_s is None else self.ssmax_s[...],
                                self.logit_scaling)
            q_BxTxHxD, bias = scale_logits(q_BxTxHxD, bias, scale)
        if self.kind in pe.acts_in:
            with jax.named_scope("positional"):
                encoded = pe.explicit_attention(q_BxTxHxD, k_BxSxHxD, v_BxSxHxD, bias,
                                                dense_mask(mask), q_positions_BxT,
                                                k_positions_BxS, self.kind)
        if encoded is None:  # the usual case: the fused kernel
            encoded = fused_attention(q_BxTxHxD, k_BxSxHxD, v_BxSxHxD, bias, mask,
                                      self.implementation)
        return encoded
