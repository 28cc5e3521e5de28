"""Scaled sinusoidal positions (Hua et al. 2022, "Transformer Quality in Linear Time", sec. 2):
the sinusoidal table times one learned scalar, so training sets how loud positions are.

PE(p) = s * sinusoidal(p),  s initialised to d_model^-1/2 (x-transformers'
``ScaledSinusoidalEmbedding``, x_transformers/x_transformers.py). The table is
``sinusoidal.sinusoidal`` (interleaved sin/cos; the order of channels does not matter to the
model). Acts in: the input only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from pe_research.positional.sinusoidal import Sinusoidal, sinusoidal


class ScaledSinusoidal(Sinusoidal):
    """Sinusoidal vectors times a learned scalar ``scale`` (one per model)."""

    name = "scaled_sinusoidal"

    def __init__(self, pe: Mapping[str, Any], *, d_model: int, num_heads: int, rngs: nnx.Rngs):
        super().__init__(pe, d_model=d_model, num_heads=num_heads, rngs=rngs)
        self.scale = nnx.Param(jnp.full((), d_model ** -0.5, jnp.float32))

    def input_vectors(self, positions_BxT: jax.Array) -> jax.Array:
        return self.scale[...] * sinusoidal(positions_BxT, self.d_model, self.max_wavelength)
