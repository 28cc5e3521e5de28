"""Rotary position embedding, RoPE (Su et al. 2021): rotate each query/key pair of channels.

For head channel pairs (d_i, d_{i + D/2}), i < D/2, and position p:
    angle_i(p) = (p / scale) / max_wavelength^(2i/D)
    [x_i, x_{i+D/2}] -> [x_i cos - x_{i+D/2} sin,  x_{i+D/2} cos + x_i sin]
so q_m . k_n depends on m - n only. Acts in: encoder self and decoder self attention.

``model.pe.scaling`` selects a test-time frequency scaling (PI, NTK-aware, YaRN) for evaluating
beyond the trained length; see ``rope_scaling`` for the formulas. The default is ``none``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from pe_research.positional.base import SELF_ATTENTION, PositionalScheme, require
from pe_research.positional.rope_scaling import (
    DEFAULT_SCALING,
    RopeScaling,
    attention_scale,
    scaled_inverse_wavelengths,
)


def rope_angles(
    positions: jax.Array, head_dim: int, max_wavelength: float = 10_000.0, scale: float = 1.0
) -> jax.Array:
    """Rotation angles ``[..., T, D/2]`` for positions ``[..., T]`` (float32)."""
    fraction = 2.0 * jnp.arange(head_dim // 2, dtype=jnp.float32) / head_dim
    inverse_wavelength = max_wavelength ** (-fraction)
    return (jnp.asarray(positions, jnp.float32)[..., None] / scale) * inverse_wavelength


def rotate(x: jax.Array, angles: jax.Array) -> jax.Array:
    """Rotate channel pairs of ``x [..., T, H, D]`` by ``angles [..., T, D/2]``."""
    first, second = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    cos = jnp.cos(angles)[..., None, :]  # broadcast over heads
    sin = jnp.sin(angles)[..., None, :]
    rotated = jnp.concatenate([first * cos - second * sin, second * cos + first * sin], axis=-1)
    return rotated.astype(x.dtype)


def apply_rope(
    x: jax.Array, positions: jax.Array, max_wavelength: float = 10_000.0, scale: float = 1.0
) -> jax.Array:
    """RoPE on ``x [..., T, H, D]`` at ``positions [..., T]``; ``scale`` divides positions (PI)."""
    return rotate(x, rope_angles(positions, x.shape[-1], max_wavelength, scale))


class RoPE(PositionalScheme):
    """Rotates queries and keys in self-attention; cross-attention is left untouched."""

    name = "rope"
    acts_in = SELF_ATTENTION

    def __init__(self, pe: Mapping[str, Any], *, d_model: int, num_heads: int, rngs: nnx.Rngs):
        super().__init__(pe, d_model=d_model, num_heads=num_heads, rngs=rngs)
        self.max_wavelength = float(pe["max_wavelength"])
        self.scaling = RopeScaling.from_mapping(pe.get("scaling"))

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {"max_wavelength": 10_000.0, "scaling": dict(DEFAULT_SCALING)}

    @classmethod
    def check_config(cls, pe: Mapping[str, Any], *, d_model: int, num_heads: int) -> None:
        head_dim = d_model // num_heads
        require(
            head_dim % 2 == 0,
            "model.d_model",
            d_model,
            f"rope rotates channel pairs, so d_model / num_heads must be even "
            f"(got head dim {head_dim} = {d_model} / {num_heads})",
        )
        require(pe["max_wavelength"] > 0, "model.pe.max_wavelength", pe["max_wavelength"], "> 0")
        RopeScaling.from_mapping(pe.get("scaling"))

    def rotation_angles(self, positions: jax.Array) -> jax.Array:
        """Angles ``[B, T, D/2]`` from the (possibly scaled) frequencies."""
        if self.scaling.type == "none":
            return rope_angles(positions, self.head_dim, self.max_wavelength)
        theta = scaled_inverse_wavelengths(self.head_dim, self.max_wavelength, self.scaling)
        return jnp.asarray(positions, jnp.float32)[..., None] * theta

    def transform_qk(self, q_BxTxHxD, k_BxSxHxD, q_positions_BxT, k_positions_BxS, kind):
        q = rotate(q_BxTxHxD, self.rotation_angles(q_positions_BxT))
        k = rotate(k_BxSxHxD, self.rotation_angles(k_positions_BxS))
        scale = attention_scale(self.scaling)  # YaRN's temperature: logits grow by scale^2
        if scale != 1.0:
            q, k = (q * scale).astype(q.dtype), (k * scale).astype(k.dtype)
        return q, k
