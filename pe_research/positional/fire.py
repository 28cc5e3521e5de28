"""FIRE (Li et al. 2023): a learned function of the progressively normalised distance.

    bias[h, i, j] = f_h( psi(p_i - p_j) / psi(max(L, p_i)) ),   psi(x) = log(|c| x + 1)
f is an MLP 1 -> width -> ReLU -> H; c and the threshold L = |l * L0| are learned (l starts at
1, L0 = ``init_threshold``), as in the paper's reference code; its eps keeps psi(.) > 0 in the
denominator. Defaults (``mlp_width`` 32, ``init_c`` 0.1, ``init_threshold`` 512, ``eps`` 1e-6)
are that code's (the paper's appendix, as reproduced in mcleish7/arithmetic,
cramming/architectures/embeddings.py, class FIRE). Normalising by the query position makes the
input lie in [0, 1] for every length, so longer sequences interpolate instead of extrapolating;
below L the bias is relative.

Bidirectional encoder (the paper is decoder-only): the input is signed and normalised by the
larger of the two positions,
    x_ij = sign(p_i - p_j) psi(|p_i - p_j|) / psi(max(L, p_i, p_j))     in [-1, 1],
so keys after the query have their own half of f and the input stays in range. In the causal
decoder only p_j <= p_i is visible, where this is exactly the paper's formula. Each layer has its
own f, c and L. Acts in: encoder self and decoder self attention.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from pe_research.positional.base import SELF_ATTENTION, PositionalScheme, require


def fire_log_transform(x: jax.Array, c: jax.Array) -> jax.Array:
    """``psi(x) = log(|c| x + 1)`` for ``x >= 0``."""
    return jnp.log(jnp.abs(c) * x + 1.0)


def fire_normalized_distance(q_positions_BxT: jax.Array, k_positions_BxS: jax.Array,
                             c: jax.Array, threshold: jax.Array, eps: float = 1e-6) -> jax.Array:
    """``sign(p_i - p_j) psi(|p_i - p_j|) / (psi(max(L, p_i, p_j)) + eps)``, ``[B, T, S]``."""
    q = q_positions_BxT.astype(jnp.float32)[:, :, None]
    k = k_positions_BxS.astype(jnp.float32)[:, None, :]
    normalizer = fire_log_transform(jnp.maximum(jnp.maximum(q, k), threshold), c) + eps
    return jnp.sign(q - k) * fire_log_transform(jnp.abs(q - k), c) / normalizer


class FireFunction(nnx.Module):
    """The MLP f: scalar input -> ``num_heads`` outputs (width hidden units, ReLU)."""

    def __init__(self, width: int, num_heads: int, *, rngs: nnx.Rngs):
        self.hidden = nnx.Linear(1, width, rngs=rngs)
        self.out = nnx.Linear(width, num_heads, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        """``[...]`` -> ``[..., H]``; the ``[..., width]`` hidden layer is recomputed in the
        backward pass rather than stored (at T = S = 1024 it is 128 MiB per layer)."""
        return _mlp(x, self.hidden.kernel[...], self.hidden.bias[...], self.out.kernel[...],
                    self.out.bias[...])


@jax.checkpoint
def _mlp(x: jax.Array, w1_1xW, b1_W, w2_WxH, b2_H) -> jax.Array:
    # A K = 1 product, not the broadcast x[..., None] * w1[0]: on XLA-CPU that form keeps a
    # [B, H, T, S, W] temporary for the backward.
    return jax.nn.relu(x[..., None] @ w1_1xW + b1_W) @ w2_WxH + b2_H


class Fire(PositionalScheme):
    """f, c and l per layer; the bias ``f(x_ij)`` for every head."""

    name = "fire"
    acts_in = SELF_ATTENTION
    relative = True  # below the learned threshold L, where the normaliser is constant
    shared_across_layers = False

    def __init__(self, pe: Mapping[str, Any], *, d_model: int, num_heads: int, rngs: nnx.Rngs):
        super().__init__(pe, d_model=d_model, num_heads=num_heads, rngs=rngs)
        self.function = FireFunction(int(pe["mlp_width"]), num_heads, rngs=rngs)
        self.c = nnx.Param(jnp.asarray(float(pe["init_c"]), jnp.float32))
        self.threshold_multiplier = nnx.Param(jnp.asarray(1.0, jnp.float32))
        self.init_threshold = float(pe["init_threshold"])
        self.eps = float(pe["eps"])

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {"mlp_width": 32, "init_c": 0.1, "init_threshold": 512.0, "eps": 1e-6}

    @classmethod
    def check_config(cls, pe: Mapping[str, Any], *, d_model: int, num_heads: int) -> None:
        require(isinstance(pe["mlp_width"], int) and pe["mlp_width"] >= 1, "model.pe.mlp_width",
                pe["mlp_width"], "an integer >= 1")
        require(pe["init_c"] > 0, "model.pe.init_c", pe["init_c"], "> 0")
        require(pe["init_threshold"] > 0, "model.pe.init_threshold", pe["init_threshold"], "> 0")
        require(pe["eps"] > 0, "model.pe.eps", pe["eps"], "> 0")

    def threshold(self) -> jax.Array:
        """The learned threshold ``L = |l * L0|``."""
        return jnp.abs(self.threshold_multiplier[...] * self.init_threshold)

    def logit_bias(self, q_BxTxHxD, k_BxSxHxD, q_positions_BxT, k_positions_BxS, kind):
        x_BxTxS = fire_normalized_distance(q_positions_BxT, k_positions_BxS, self.c[...],
                                           self.threshold(), self.eps)
        return jnp.moveaxis(self.function(x_BxTxS), -1, 1).astype(jnp.float32)
