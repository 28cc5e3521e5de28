"""Sinusoidal absolute positions (Vaswani et al. 2017), added to (or concatenated with) tokens.

PE(p, 2i) = sin(p / base^(2i/d)),  PE(p, 2i+1) = cos(p / base^(2i/d)),  base = max_wavelength.
Acts in: the input only (encoder and decoder inputs); no attention hook.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from pe_research.positional.base import PositionalScheme, require


def sinusoidal(positions: jax.Array, dim: int, max_wavelength: float = 10_000.0) -> jax.Array:
    """Interleaved sin/cos table: positions ``[...]`` -> ``[..., dim]`` (float32)."""
    if dim % 2:
        raise ValueError(f"sinusoidal dim must be even, got {dim}")
    pair_index = jnp.arange(dim // 2, dtype=jnp.float32)
    inverse_wavelength = max_wavelength ** (-2.0 * pair_index / dim)  # [dim/2]
    angles = jnp.asarray(positions, jnp.float32)[..., None] * inverse_wavelength
    interleaved = jnp.stack([jnp.sin(angles), jnp.cos(angles)], axis=-1)  # [..., dim/2, 2]
    return interleaved.reshape(*angles.shape[:-1], dim)


class Sinusoidal(PositionalScheme):
    """Fixed sinusoidal vectors of width d_model; no parameters."""

    name = "sinusoidal"
    adds_input_vectors = True

    def __init__(self, pe: Mapping[str, Any], *, d_model: int, num_heads: int, rngs: nnx.Rngs):
        super().__init__(pe, d_model=d_model, num_heads=num_heads, rngs=rngs)
        self.max_wavelength = float(pe["max_wavelength"])

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {"max_wavelength": 10_000.0}

    @classmethod
    def check_config(cls, pe: Mapping[str, Any], *, d_model: int, num_heads: int) -> None:
        require(d_model % 2 == 0, "model.d_model", d_model, "sinusoidal needs an even d_model")
        require(pe["max_wavelength"] > 0, "model.pe.max_wavelength", pe["max_wavelength"], "> 0")

    def input_vectors(self, positions_BxT: jax.Array) -> jax.Array:
        return sinusoidal(positions_BxT, self.d_model, self.max_wavelength)
