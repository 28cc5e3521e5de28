"""Attention whose sharpness grows with the number of keys: log-n scaling and Scalable-Softmax.

``model.pe.logit_scaling`` composes with any scheme on the fused attention path (NoPE, RoPE,
ALiBi, ...): every attention logit of a query that sees n keys (its mask row's count: the
sequence for bidirectional attention, i + 1 for causal query i, cached decoding alike) is
multiplied by

* ``log_n_scaling``: log n (Chiang & Cholak 2022, "Overcoming a theoretical limitation of
  self-attention", ndnlp/parity ``encoder.py``, ``ScaledTransformerEncoderLayer``, which scales
  the queries' input by ``math.log(len(src))``);
* ``ssmax``: s log n, with s learned per layer and head (Nakanishi 2025, "Scalable-Softmax Is
  Superior for Attention", arXiv 2501.19399: SSMax(z)_i = n^(s z_i) / sum_j n^(s z_j)), s
  starting at ``model.pe.ssmax_init`` (0.43, the value of the paper's Figure 1);
* ``none``: 1.

The logit is ``q.k / sqrt(D) + bias``, so the scale multiplies the queries (after the scheme's
transform) and the scheme's bias. Schemes that compute their own attention
(``explicit_attention``: CoPE, DAPE, FoX, PoPE, Shaw) put terms into it that a query scale does
not reach, so they refuse a scaling in one line.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from pe_research.core.errors import ConfigError, check_choice
from pe_research.positional.base import PositionalScheme

LOGIT_SCALINGS = ("none", "log_n_scaling", "ssmax")
SSMAX_INIT = 0.43


def check_logit_scaling(pe: Mapping[str, Any], schemes: list[type[PositionalScheme]]) -> None:
    """ConfigError for an unknown ``model.pe.logit_scaling``, a non-positive ``ssmax_init``, or
    a scaling beside a scheme (of ``schemes``: the model's and its layers') that computes its
    own attention."""
    scaling = pe.get("logit_scaling", "none")
    check_choice("model.pe.logit_scaling", scaling, LOGIT_SCALINGS)
    init = pe.get("ssmax_init", SSMAX_INIT)
    if isinstance(init, bool) or not isinstance(init, int | float) or init <= 0:
        raise ConfigError("model.pe.ssmax_init", init, "a positive number (the paper's 0.43)")
    if scaling == "none":
        return
    for cls in schemes:
        if (cls.explicit_attention is not PositionalScheme.explicit_attention
                and not cls.own_attention_is_q_dot_k):
            raise ConfigError("model.pe.logit_scaling", scaling,
                              f"scheme {cls.name!r} computes its own attention, which a "
                              "logit scaling does not reach; use it with a scheme on the fused "
                              "path (none, rope, alibi, t5, ...) or set it to 'none'")


def visible_keys(mask_BxTxS: jax.Array) -> jax.Array:
    """n: the keys each query sees, float32 ``[B, T]`` (at least 1)."""
    return jnp.maximum(jnp.sum(mask_BxTxS, axis=-1), 1).astype(jnp.float32)


def logit_scale(n_BxT: jax.Array, s_H: jax.Array | None = None,
                scaling: str | jax.Array = "log_n_scaling") -> jax.Array:
    """The factor on each query's logits: log n ``[B, T, 1]``, or s log n ``[B, T, H]``; a
    traced ``scaling`` (a stacked member's index into ``LOGIT_SCALINGS``: ``none`` or
    ``log_n_scaling``) gives 1 where it is ``none``."""
    log_n = jnp.log(n_BxT)[..., None]
    if not isinstance(scaling, str):
        return jnp.where(jnp.asarray(scaling) == LOGIT_SCALINGS.index("none"), 1.0, log_n)
    return log_n if s_H is None else log_n * s_H.astype(jnp.float32)


def scale_logits(q_BxTxHxD: jax.Array, bias: jax.Array | None,
                 scale_BxTxH: jax.Array) -> tuple[jax.Array, jax.Array | None]:
    """Queries and bias (``[B|1, H, T, S]``) with every logit multiplied by ``scale``."""
    q = (q_BxTxHxD.astype(jnp.float32) * scale_BxTxH[..., None]).astype(q_BxTxHxD.dtype)
    if bias is not None:
        bias = bias * jnp.transpose(scale_BxTxH, (0, 2, 1))[..., None].astype(bias.dtype)
    return q, bias
