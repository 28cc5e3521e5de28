"""PoPE, polar coordinate positional embeddings (Gopalakrishnan, Csordás, Schmidhuber and Mozer
2025, "Decoupling the 'What' and 'Where' With Polar Coordinate Positional Embeddings",
arXiv 2509.10534): every channel of a query or key becomes a complex number whose magnitude is
content and whose phase is position.

For head size D, channel c and position t, with theta_c = base^(-c / D) (D frequencies, one per
channel, not D/2 pairs as in RoPE):
    q'_c = softplus(q_c) exp(i theta_c t_q),   k'_c = softplus(k_c) exp(i (theta_c t_k + delta_c))
    logit = Re(sum_c q'_c conj(k'_c)) / sqrt(D)
          = sum_c softplus(q_c) softplus(k_c) cos(theta_c (t_q - t_k) - delta_c) / sqrt(D)
so position enters only through t_q - t_k and content only through the magnitudes. delta is a
learned phase per head and channel, clamped to [-2 pi, 0], starting at 0 (or uniform in that
range with ``bias_init='uniform'``). Defaults and layout follow x-transformers (its
``PolarEmbedding`` and ``apply_polar_pos_emb``, x_transformers/x_transformers.py): the real and
imaginary parts are concatenated, so q' and k' are 2D wide, and the logit keeps the 1/sqrt(D)
of the D-wide head. One delta table serves all layers, as there.

Acts in: encoder self and decoder self attention. Because q' and k' are twice as wide as the
values, attention is computed explicitly (the fused kernel needs equal widths).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from pe_research.positional.base import SELF_ATTENTION, PositionalScheme, require
from pe_research.positional.explicit_attention import attention


def polar(x_BxTxHxD: jax.Array, positions_BxT: jax.Array, base: float,
          phase_HxD: jax.Array | None = None) -> jax.Array:
    """``[softplus(x) cos(theta t + delta), softplus(x) sin(theta t + delta)]``, float32
    ``[B, T, H, 2D]`` with ``theta_c = base^(-c / D)``."""
    head_dim = x_BxTxHxD.shape[-1]
    theta = base ** (-jnp.arange(head_dim, dtype=jnp.float32) / head_dim)
    angle = jnp.asarray(positions_BxT, jnp.float32)[:, :, None, None] * theta  # [B, T, 1, D]
    if phase_HxD is not None:
        angle = angle + phase_HxD
    magnitude = jax.nn.softplus(x_BxTxHxD.astype(jnp.float32))
    return jnp.concatenate([magnitude * jnp.cos(angle), magnitude * jnp.sin(angle)], axis=-1)


class PoPE(PositionalScheme):
    """Polar queries and keys; a learned key phase per head and channel, shared by all layers."""

    name = "pope"
    acts_in = SELF_ATTENTION
    relative = True

    def __init__(self, pe: Mapping[str, Any], *, d_model: int, num_heads: int, rngs: nnx.Rngs):
        super().__init__(pe, d_model=d_model, num_heads=num_heads, rngs=rngs)
        self.max_wavelength = float(pe["max_wavelength"])
        shape = (num_heads, self.head_dim)
        phase = (jax.random.uniform(rngs.params(), shape, jnp.float32, -2 * math.pi, 0.0)
                 if pe["bias_init"] == "uniform" else jnp.zeros(shape, jnp.float32))
        self.phase = nnx.Param(phase)

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {"max_wavelength": 10_000.0, "bias_init": "zeros"}

    @classmethod
    def check_config(cls, pe: Mapping[str, Any], *, d_model: int, num_heads: int) -> None:
        require(pe["max_wavelength"] > 0, "model.pe.max_wavelength", pe["max_wavelength"], "> 0")
        require(pe["bias_init"] in ("zeros", "uniform"), "model.pe.bias_init", pe["bias_init"],
                "'zeros' or 'uniform' (the key phase's start, in [-2 pi, 0])")

    def transform_qk(self, q_BxTxHxD, k_BxSxHxD, q_positions_BxT, k_positions_BxS, kind):
        phase = jnp.clip(self.phase[...], -2 * math.pi, 0.0)
        q = polar(q_BxTxHxD, q_positions_BxT, self.max_wavelength)
        k = polar(k_BxSxHxD, k_positions_BxS, self.max_wavelength, phase)
        return q.astype(q_BxTxHxD.dtype), k.astype(k_BxSxHxD.dtype)

    def explicit_attention(self, q_BxTxHxD, k_BxSxHxD, v_BxSxHxD, bias_BxHxTxS, mask_BxTxS,
                           q_positions_BxT, k_positions_BxS, kind):
        # Written out rather than the fused kernel over values padded to 2D with zeros: the
        # padding copied the whole decoding cache at every step.
        return attention(q_BxTxHxD, k_BxSxHxD, v_BxSxHxD, bias_BxHxTxS, mask_BxTxS)
