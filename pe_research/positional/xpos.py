"""xPos (Sun et al. 2022, "A Length-Extrapolatable Transformer"): RoPE with an exponential decay.

For channel pair i of a head of size D (pairs as in ``rope``: channels i and i + D/2):
    zeta_i = (i / (D/2) + gamma) / (1 + gamma),   gamma = 0.4,   i = 0 .. D/2 - 1
    q_n -> RoPE(q_n, n) * zeta^(n / B),    k_m -> RoPE(k_m, m) * zeta^(-m / B),   B = scale_base
so q_n . k_m depends on n - m only and every pair's contribution is scaled by zeta_i^((n-m)/B)
<= 1: fast-rotating pairs (small zeta) fade with distance, slow ones keep their reach.

The decay is defined for causal attention (n >= m). In the bidirectional encoder a key after the
query would be scaled by zeta^((n-m)/B) > 1, growing without bound with distance, so the encoder
gets plain RoPE and the decay acts in the causal decoder only. Positions are not re-centred (the
paper's code centres them to postpone overflow): the product stays exact, and float32 covers
zeta_min^(+-p/B) for p up to ~3.6e4 at the defaults.
Acts in: encoder self and decoder self attention.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from pe_research.positional.base import (
    DECODER_SELF,
    SELF_ATTENTION,
    PositionalScheme,
    require,
)
from pe_research.positional.rope import rope_angles, rotate


def xpos_zeta(head_dim: int, gamma: float = 0.4) -> jax.Array:
    """Per-pair decay base ``zeta_i = (i / (D/2) + gamma) / (1 + gamma)``, ``[D/2]``."""
    pair = jnp.arange(head_dim // 2, dtype=jnp.float32)
    return (pair / (head_dim // 2) + gamma) / (1.0 + gamma)


def xpos_scale(positions: jax.Array, head_dim: int, scale_base: float = 512.0,
               gamma: float = 0.4) -> jax.Array:
    """``zeta_i ^ (p / scale_base)`` for positions ``[..., T]`` -> ``[..., T, D/2]`` (float32)."""
    exponent = jnp.asarray(positions, jnp.float32)[..., None] / scale_base
    return xpos_zeta(head_dim, gamma) ** exponent


def apply_xpos(x: jax.Array, positions: jax.Array, *, downscale: bool,
               max_wavelength: float = 10_000.0, scale_base: float = 512.0,
               gamma: float = 0.4) -> jax.Array:
    """RoPE then the xPos scale on ``x [..., T, H, D]``; keys use ``downscale=True`` (zeta^-p)."""
    head_dim = x.shape[-1]
    rotated = rotate(x, rope_angles(positions, head_dim, max_wavelength)).astype(jnp.float32)
    scale = xpos_scale(-positions if downscale else positions, head_dim, scale_base, gamma)
    scale = jnp.concatenate([scale, scale], axis=-1)[..., None, :]  # both channels of a pair
    return (rotated * scale).astype(x.dtype)


class XPos(PositionalScheme):
    """RoPE everywhere in self-attention, plus the decay in the causal decoder."""

    name = "xpos"
    acts_in = SELF_ATTENTION
    relative = True

    def __init__(self, pe: Mapping[str, Any], *, d_model: int, num_heads: int, rngs: nnx.Rngs):
        super().__init__(pe, d_model=d_model, num_heads=num_heads, rngs=rngs)
        self.max_wavelength = float(pe["max_wavelength"])
        self.scale_base = float(pe["scale_base"])
        self.gamma = float(pe["gamma"])

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {"max_wavelength": 10_000.0, "scale_base": 512.0, "gamma": 0.4}

    @classmethod
    def check_config(cls, pe: Mapping[str, Any], *, d_model: int, num_heads: int) -> None:
        head_dim = d_model // num_heads
        require(head_dim % 2 == 0, "model.d_model", d_model,
                f"xpos rotates channel pairs, so d_model / num_heads must be even "
                f"(got head dim {head_dim} = {d_model} / {num_heads})")
        require(pe["max_wavelength"] > 0, "model.pe.max_wavelength", pe["max_wavelength"], "> 0")
        require(pe["scale_base"] > 0, "model.pe.scale_base", pe["scale_base"], "> 0")
        require(pe["gamma"] > 0, "model.pe.gamma", pe["gamma"], "> 0 (zeta_0 = gamma/(1+gamma))")

    def transform_qk(self, q_BxTxHxD, k_BxSxHxD, q_positions_BxT, k_positions_BxS, kind):
        if kind is not DECODER_SELF:  # plain RoPE: the decay would grow for keys after the query
            return (rotate(q_BxTxHxD, rope_angles(q_positions_BxT, self.head_dim,
                                                  self.max_wavelength)),
                    rotate(k_BxSxHxD, rope_angles(k_positions_BxS, self.head_dim,
                                                  self.max_wavelength)))
        xpos = {"max_wavelength": self.max_wavelength, "scale_base": self.scale_base,
                "gamma": self.gamma}
        return (apply_xpos(q_BxTxHxD, q_positions_BxT, downscale=False, **xpos),
                apply_xpos(k_BxSxHxD, k_positions_BxS, downscale=True, **xpos))
