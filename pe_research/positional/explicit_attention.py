"""Softmax attention written out: the xla implementation's kernel, and its steps for the few
schemes that act on the mask or the weights.

``attention`` is what ``jax.nn.dot_product_attention``'s XLA path computes, with its backward
written out (``_attention_backward``): the model's attention on ``attention_implementation=xla``
and the kernel of schemes whose queries and keys are wider than their values (PoPE, FoX). The
steps (``scaled_logits``, ``masked_softmax``, ``weighted_values``) let a scheme change one of
them (CoPE adds a term that needs the mask; Shaw adds a value term that needs the weights); they
run in float32 and cast the output to the query dtype.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

# The value dot_product_attention puts on masked logits (large but finite, so no NaN on rows
# where every key is masked: they get uniform weights, exactly as on the fused path).
MASKED_LOGIT = -0.7 * float(np.finfo(np.float32).max)


def heads_first_product(weights_BxHxTxS: jax.Array, rows_BxSxHxD: jax.Array) -> jax.Array:
    """``sum_j weights[i, j] rows[j]`` ``[B, T, H, D]``, computed heads first.

    Written as ``bhts,bshd->bthd``, XLA-CPU multiplies the rows' transpose by the weights'
    transpose (``[D, S] x [T, S]^T`` per head, packing every ``[T, S]`` block), much slower at
    small head sizes than the ``[T, S] x [S, D]`` that a heads-first output makes it choose."""
    return _heads_first(jnp.einsum("bhts,bhsd->bhtd", weights_BxHxTxS, _heads_first(rows_BxSxHxD)))


def own_slots(mask_BxTxS: jax.Array) -> jax.Array:
    """Each query's own key slot ``[B, T]``: its last visible key (causal attention, each row's
    real keys contiguous, so a query's last visible key is itself)."""
    return jnp.max(jnp.where(mask_BxTxS, jnp.arange(mask_BxTxS.shape[-1]), 0), axis=-1)


def scaled_logits(q_BxTxHxD: jax.Array, k_BxSxHxD: jax.Array) -> jax.Array:
    """``q . k / sqrt(D)`` as float32 ``[B, H, T, S]``."""
    scale = 1.0 / np.sqrt(q_BxTxHxD.shape[-1])
    return jnp.einsum("bthd,bshd->bhts", q_BxTxHxD.astype(jnp.float32),
                      k_BxSxHxD.astype(jnp.float32)) * scale


def masked_softmax(logits_BxHxTxS: jax.Array, mask_BxTxS: jax.Array) -> jax.Array:
    """Attention weights ``[B, H, T, S]``: softmax over keys where ``mask`` is True."""
    logits = jnp.where(mask_BxTxS[:, None, :, :], logits_BxHxTxS, MASKED_LOGIT)
    return jax.nn.softmax(logits.astype(jnp.float32), axis=-1)


def weighted_values(probs_BxHxTxS: jax.Array, v_BxSxHxD: jax.Array) -> jax.Array:
    """``sum_j probs[i, j] v[j]`` as float32 ``[B, T, H, D]``."""
    return heads_first_product(probs_BxHxTxS, v_BxSxHxD.astype(jnp.float32))


def with_bias(term_BxHxTxS: jax.Array, bias_BxHxTxS: jax.Array | None) -> jax.Array:
    """A scheme's logit term plus the bias, if any (both in softmax units)."""
    return term_BxHxTxS if bias_BxHxTxS is None else term_BxHxTxS + bias_BxHxTxS


def softmax_attention(q_BxTxHxD: jax.Array, k_BxSxHxD: jax.Array, v_BxSxHxD: jax.Array,
                      bias_BxHxTxS: jax.Array | None, mask_BxTxS: jax.Array) -> jax.Array:
    """The plain attention output ``[B, T, H, D]`` (reference for the fused path)."""
    logits = scaled_logits(q_BxTxHxD, k_BxSxHxD)
    if bias_BxHxTxS is not None:
        logits = logits + bias_BxHxTxS
    probs = masked_softmax(logits, mask_BxTxS)
    return weighted_values(probs, v_BxSxHxD).astype(q_BxTxHxD.dtype)


@jax.custom_vjp
def attention(q_BxTxHxE: jax.Array, k_BxSxHxE: jax.Array, v_BxSxHxD: jax.Array,
              bias: jax.Array | None, mask_BxTxS: jax.Array) -> jax.Array:
    """``softmax(q . k / sqrt(D) + bias, where mask) v`` ``[B, T, H, D]``; queries and keys may
    be wider than the values (E >= D: PoPE, FoX; the fused kernel needs E = D); ``bias``
    broadcasts to ``[B, H, T, S]`` (batch 1: shared by every row), ``mask`` to ``[B, T, S]``.

    As ``jax.nn.dot_product_attention``'s XLA path computes it: products in the inputs' dtype
    with float32 logits and softmax, masked logits ``MASKED_LOGIT`` (a row that sees no key
    weighs every key alike). The backward is written out: the weights are the only
    ``[B, H, T, S]`` residual, and a batch-1 bias's gradient sums the rows as a product with ones
    (XLA-CPU's reduction over the leading axis is far slower).
    """
    return _attention_forward(q_BxTxHxE, k_BxSxHxE, v_BxSxHxD, bias, mask_BxTxS)[0]


def _scale(v_BxSxHxD: jax.Array) -> float:
    """``1 / sqrt(D)``, D the values' width."""
    return 1.0 / np.sqrt(v_BxSxHxD.shape[-1])


def _attention_forward(q_BxTxHxE, k_BxSxHxE, v_BxSxHxD, bias, mask_BxTxS):
    """The output and the weights ``[B, H, T, S]`` (float32)."""
    logits = jnp.einsum("bthe,bshe->bhts", q_BxTxHxE, k_BxSxHxE,
                        preferred_element_type=jnp.float32) * _scale(v_BxSxHxD)
    if bias is not None:
        logits = logits + bias
    probs = masked_softmax(logits, jnp.broadcast_to(mask_BxTxS, (logits.shape[0],
                                                                 *logits.shape[2:])))
    return heads_first_product(probs.astype(v_BxSxHxD.dtype), v_BxSxHxD), probs


def _attention_residuals(q_BxTxHxE, k_BxSxHxE, v_BxSxHxD, bias, mask_BxTxS):
    out, probs = _attention_forward(q_BxTxHxE, k_BxSxHxE, v_BxSxHxD, bias, mask_BxTxS)
    return out, (q_BxTxHxE, k_BxSxHxE, v_BxSxHxD, bias, mask_BxTxS, probs)


def _attention_backward(residuals, dout_BxTxHxD):
    q, k, v, bias, mask_BxTxS, probs = residuals
    scale = _scale(v)
    dv = jnp.einsum("bhts,bthd->bshd", probs.astype(v.dtype), dout_BxTxHxD)
    # In float32: XLA-CPU has no bfloat16 x bfloat16 -> float32 product for this one.
    dprobs = jnp.einsum("bthd,bshd->bhts", dout_BxTxHxD.astype(jnp.float32),
                        v.astype(jnp.float32))
    # The softmax's backward as jax's: sum_j p_j dp_j over the weights (not dout . out, equal in
    # exact arithmetic), so a saturated row's gradient cancels to exactly 0 as under autodiff.
    # Masked logits are constants: no gradient, not even in a row that sees no key.
    row_sums = jnp.sum(probs * dprobs, axis=-1, keepdims=True)
    dlogits = jnp.where(mask_BxTxS[:, None], probs * (dprobs - row_sums), 0.0)
    dlogits_in = dlogits.astype(q.dtype)  # products in the inputs' dtype, as the forward's
    dq = heads_first_product(dlogits_in, k) * jnp.asarray(scale, q.dtype)
    dk = jnp.einsum("bhts,bthe->bshe", dlogits_in, q) * jnp.asarray(scale, k.dtype)
    return (dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype),
            None if bias is None else _summed_to(dlogits, bias), None)


def _heads_first(x_BxLxHxD: jax.Array) -> jax.Array:
    """``[B, L, H, D]`` -> ``[B, H, L, D]`` (and back)."""
    return jnp.transpose(x_BxLxHxD, (0, 2, 1, 3))


def _summed_to(grad_BxHxTxS: jax.Array, bias: jax.Array) -> jax.Array:
    """The gradient of a bias that broadcast to ``grad``'s shape: summed over its broadcast
    axes, the batch's as a product with ones."""
    grad = grad_BxHxTxS
    if bias.shape[0] == 1 < grad.shape[0]:
        grad = jnp.einsum("b,bhts->hts", jnp.ones(grad.shape[0], grad.dtype), grad)[None]
    axes = tuple(a for a in range(1, grad.ndim) if bias.shape[a] == 1 < grad.shape[a])
    return jnp.sum(grad, axis=axes, keepdims=True).astype(bias.dtype)


attention.defvjp(_attention_residuals, _attention_backward)
